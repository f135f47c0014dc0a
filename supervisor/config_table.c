/*
 * sandboxd's options, one entry each (config.h): the keys of the AgentScope
 * manager (HOST, PORT, POOL_SIZE ...) and our own, with their flags,
 * defaults, bounds and help. config.c reads them and checks what a table
 * cannot say (a value's form, one option against another).
 */
#include "sandboxd.h"

#include "http_options.h"
#include "log.h"

#define OFF(field)	offsetof(struct sandboxd_config, field)
/* Bounds of a count or duration that has no upper one. */
#define AT_LEAST(n)	.min = (n), .max = INFINITY
#define POSITIVE	.min = 0, .max = INFINITY, .flags = CONFIG_ABOVE_MIN

static const char *const file_systems[] = { "local", "oss", NULL };
static const char *const addressing_styles[] = { "auto", "path", "virtual",
    NULL };

const struct config_option sandboxd_options[] = {
	{ "--config", NULL, CONFIG_STRING, OFF(config_file), "FILE",
	    .help = "KEY=VALUE file applied after the environment and ./.env" },
	{ "--host", "HOST", CONFIG_STRING, OFF(host), "HOST",
	    .help = "address to listen on", .def = "127.0.0.1" },
	{ "--port", "PORT", CONFIG_INT, OFF(port), "PORT",
	    .help = "port to listen on", .def = "8000", .min = 0,
	    .max = 65535 },
	{ "--unix-socket", "SANDBOXD_UNIX_SOCKET", CONFIG_STRING,
	    OFF(unix_socket), "PATH", .help = "also listen on this unix "
	    "socket" },
	{ "--workers", "WORKERS", CONFIG_INT, OFF(workers), "N",
	    .help = "accepted for compatibility; sandboxd runs one event loop",
	    .def = "1", AT_LEAST(1) },
	{ "--debug", "DEBUG", CONFIG_BOOL, OFF(debug), "BOOL",
	    .help = "debug logging, whatever --log-level says",
	    .def = "false" },
	{ "--bearer-token", "BEARER_TOKEN", CONFIG_STRING, OFF(bearer_token),
	    "TOKEN", .help = "token every route but /health requires; unset or "
	    "empty: none", .flags = CONFIG_EMPTY_UNSETS | CONFIG_SECRET },
	{ "--default-sandbox-type", "DEFAULT_SANDBOX_TYPE", CONFIG_STRING,
	    OFF(default_type), "TYPES", .help = "type(s) of the warm pools, "
	    "comma separated", .def = "base" },
	{ "--pool-size", "POOL_SIZE", CONFIG_INT, OFF(pool_size), "N",
	    .help = "ready sandboxes kept per pool type", .def = "1", .min = 0,
	    .max = 1000 },
	{ "--auto-cleanup", "AUTO_CLEANUP", CONFIG_BOOL, OFF(auto_cleanup),
	    "BOOL", .help = "remove every sandbox at shutdown", .def = "true" },
	{ "--container-prefix", "CONTAINER_PREFIX_KEY", CONFIG_STRING,
	    OFF(prefix), "PREFIX", .help = "container name prefix",
	    .def = "sandboxd-" },
	{ "--container-deployment", "CONTAINER_DEPLOYMENT", CONFIG_STRING,
	    OFF(deployment), "KIND", .help = "backend: docker (the Docker "
	    "Engine API) or crun (sandboxd runs them with crun, no daemon)",
	    .def = "docker" },
	{ "--mount-dir", "DEFAULT_MOUNT_DIR", CONFIG_STRING, OFF(mount_dir),
	    "DIR", .help = "where workspaces are made; unset: "
	    "STATE_DIR/workspaces" },
	{ "--readonly-mounts", "READONLY_MOUNTS", CONFIG_STRING,
	    OFF(readonly_mounts), "MAP", .help = "host:container,... or a "
	    "JSON object, mounted read-only in every sandbox" },
	{ "--storage-folder", "STORAGE_FOLDER", CONFIG_STRING,
	    OFF(storage_folder), "DIR", .help = "keep released workspaces here "
	    "(with FILE_SYSTEM=oss: a key prefix in the bucket)",
	    .flags = CONFIG_EMPTY_UNSETS },
	{ NULL, "FILE_SYSTEM", CONFIG_CHOICE, OFF(file_system), NULL,
	    .help = "where released workspaces are kept: local "
	    "(STORAGE_FOLDER) or oss (an S3-compatible object store, the OSS_* "
	    "keys)", .def = "local", .choices = file_systems,
	    .flags = CONFIG_EMPTY_UNSETS },
	{ NULL, "OSS_ENDPOINT", CONFIG_STRING, OFF(oss_endpoint), NULL,
	    .help = "the object store: http[s]://host[:port]" },
	{ NULL, "OSS_ACCESS_KEY_ID", CONFIG_STRING, OFF(oss_access_key_id),
	    NULL, .help = "its access key id" },
	{ NULL, "OSS_ACCESS_KEY_SECRET", CONFIG_STRING,
	    OFF(oss_access_key_secret), NULL, .help = "its secret key (never "
	    "logged)", .flags = CONFIG_SECRET },
	{ NULL, "OSS_BUCKET_NAME", CONFIG_STRING, OFF(oss_bucket), NULL,
	    .help = "the bucket workspaces go to" },
	{ "--oss-region", "OSS_REGION", CONFIG_STRING, OFF(oss_region),
	    "REGION", .help = "the region requests are signed for",
	    .def = "us-east-1" },
	{ "--oss-addressing-style", "OSS_ADDRESSING_STYLE", CONFIG_CHOICE,
	    OFF(oss_addressing), "STYLE", .help = "path (host/bucket/key), "
	    "virtual (bucket.host/key) or auto: virtual for *.amazonaws.com "
	    "and *.aliyuncs.com, else path", .def = "auto",
	    .choices = addressing_styles },
	{ "--oss-parallel", "OSS_PARALLEL", CONFIG_INT, OFF(oss_parallel), "N",
	    .help = "files of one workspace transferred at once", .def = "8",
	    .min = 1, .max = 64 },
	{ "--port-range", "PORT_RANGE", CONFIG_STRING, OFF(port_range), "LO,HI",
	    .help = "host ports of bridge sandboxes", .def = "49152,59152" },
	{ "--redis-enabled", "REDIS_ENABLED", CONFIG_BOOL, OFF(redis_enabled),
	    "BOOL", .help = "share sandboxes, sessions and pools with the "
	    "other sandboxd on the same Redis", .def = "false" },
	{ "--redis-server", "REDIS_SERVER", CONFIG_STRING, OFF(redis_server),
	    "HOST", .help = "Redis host (numeric address or name), or "
	    "unix:/path", .def = "127.0.0.1", .flags = CONFIG_EMPTY_UNSETS },
	{ "--redis-port", "REDIS_PORT", CONFIG_INT, OFF(redis_port), "PORT",
	    .help = "Redis port", .def = "6379", .min = 1, .max = 65535 },
	{ "--redis-db", "REDIS_DB", CONFIG_INT, OFF(redis_db), "N",
	    .help = "Redis database number", .def = "0", .min = 0,
	    .max = 100000 },
	{ "--redis-user", "REDIS_USER", CONFIG_STRING, OFF(redis_user), "USER",
	    .help = "Redis 6 ACL user; unset: none, AUTH with the password "
	    "only" },
	{ "--redis-password", "REDIS_PASSWORD", CONFIG_STRING,
	    OFF(redis_password), "PASSWORD", .help = "Redis password; unset: "
	    "none", .flags = CONFIG_SECRET },
	{ "--redis-prefix", "SANDBOXD_REDIS_PREFIX", CONFIG_STRING,
	    OFF(redis_prefix), "PREFIX", .help = "every key sandboxd writes "
	    "starts with this", .def = "sandboxd:" },
	{ "--redis-container-pool-key", "REDIS_CONTAINER_POOL_KEY",
	    CONFIG_STRING, OFF(redis_pool_key), "KEY",
	    .help = "warm-pool lists, one per type: PREFIX KEY:<type>",
	    .def = "container_pool", .flags = CONFIG_EMPTY_UNSETS },
	{ "--redis-port-key", "REDIS_PORT_KEY", CONFIG_STRING,
	    OFF(redis_port_key), "KEY", .help = "set of occupied host ports: "
	    "PREFIX KEY:<advertised address>", .def = "occupied_ports",
	    .flags = CONFIG_EMPTY_UNSETS },
	{ "--advertise-addr", "SANDBOXD_ADVERTISE_ADDR", CONFIG_STRING,
	    OFF(advertise_addr), "ADDR", .help = "with Redis on several hosts: "
	    "the numeric address of this host the other instances reach; "
	    "bridge sandboxes publish their agent port on it, network-none "
	    "ones are reached through our API on it; unset: the instances "
	    "share one host", .flags = CONFIG_EMPTY_UNSETS },
	{ NULL, "SANDBOXD_REDIS_SECRET", CONFIG_STRING, OFF(redis_secret), NULL,
	    .help = "with Redis: the secret every instance signs what it "
	    "writes there and seals tokens with (not on the command line; at "
	    "least 32 characters; required)", .flags = CONFIG_SECRET },
	{ "--redis-secret-file", "SANDBOXD_REDIS_SECRET_FILE", CONFIG_STRING,
	    OFF(redis_secret_file), "FILE", .help = "with Redis: "
	    "SANDBOXD_REDIS_SECRET read from FILE's first line" },
	/* The lease is renewed every second: a shorter one would lapse on
	 * a busy loop's late tick. */
	{ "--redis-lease", "SANDBOXD_REDIS_LEASE", CONFIG_DOUBLE,
	    OFF(redis_lease), "SECONDS", .help = "with Redis: each instance "
	    "renews a lease of this length every second; without it, its warm "
	    "sandboxes are not handed out", .def = "15", .min = 2,
	    .max = 86400 },
	{ "--redis-dead-grace", "SANDBOXD_REDIS_DEAD_GRACE", CONFIG_DOUBLE,
	    OFF(redis_dead_grace), "SECONDS", .help = "with Redis: this long "
	    "after an instance's lease lapsed, its records are removed from "
	    "Redis", .def = "120", .min = 0, .max = 30 * 86400 },
	{ "--max-sandbox-instances", "MAX_SANDBOX_INSTANCES", CONFIG_INT,
	    OFF(max_instances), "N", .help = "cap on live sandboxes; 0: none",
	    .def = "0", AT_LEAST(0) },
	{ "--heartbeat-timeout", "HEARTBEAT_TIMEOUT", CONFIG_DOUBLE,
	    OFF(heartbeat_timeout), "SECONDS", .help = "release a session's "
	    "sandboxes after this idle time; 0: never", .def = "300",
	    AT_LEAST(0) },
	{ NULL, "K8S_NAMESPACE", CONFIG_STRING, OFF(k8s_namespace), NULL,
	    .help = "accepted, for CONTAINER_DEPLOYMENT=k8s (not supported "
	    "yet)" },
	{ NULL, "KUBECONFIG_PATH", CONFIG_STRING, OFF(kubeconfig), NULL,
	    .help = "accepted, for CONTAINER_DEPLOYMENT=k8s (not supported "
	    "yet)" },
	{ NULL, "RUNTIME_SANDBOX_REGISTRY", CONFIG_STRING, OFF(registry), NULL,
	    .help = "image registry; unset: none" },
	{ NULL, "RUNTIME_SANDBOX_IMAGE_NAMESPACE", CONFIG_STRING,
	    OFF(image_namespace), NULL, .help = "image namespace",
	    .def = "agentscope" },
	{ NULL, "RUNTIME_SANDBOX_IMAGE_TAG", CONFIG_STRING, OFF(image_tag),
	    NULL, .help = "image tag", .def = "latest" },
	{ "--state-dir", "SANDBOXD_STATE_DIR", CONFIG_STRING, OFF(state_dir),
	    "DIR", .help = "state file, sockets and workspaces; unset: "
	    "/var/lib/sandboxd as root, else $XDG_STATE_HOME/sandboxd" },
	{ "--types", "SANDBOXD_TYPES", CONFIG_STRING, OFF(types_file), "FILE",
	    .help = "JSON file of more sandbox types {\"types\": {name: "
	    "{...}}}" },
	{ "--docker-host", "DOCKER_HOST", CONFIG_STRING, OFF(docker_host),
	    "ADDR", .help = "the Docker daemon's unix socket, unix:///path",
	    .def = "unix:///var/run/docker.sock" },
	{ "--image-store", "SANDBOXD_IMAGE_STORE", CONFIG_STRING,
	    OFF(image_store), "DIR", .help = "crun: the image store "
	    "tools/image-store fills", .def = "/var/lib/sandboxd/images" },
	{ "--crun", "SANDBOXD_CRUN", CONFIG_STRING, OFF(crun_bin), "PATH",
	    .help = "crun: the crun program; unset: crun on the PATH" },
	{ "--cni-path", "SANDBOXD_CNI_PATH", CONFIG_STRING, OFF(cni_path),
	    "DIR", .help = "crun: the CNI plugins' directory",
	    .def = "/usr/lib/cni" },
	{ "--bridge", "SANDBOXD_BRIDGE", CONFIG_STRING, OFF(bridge), "NAME",
	    .help = "crun: the host bridge of bridge types",
	    .def = "sandboxd0" },
	{ "--bridge-subnet", "SANDBOXD_BRIDGE_SUBNET", CONFIG_STRING,
	    OFF(bridge_subnet), "CIDR", .help = "crun: addresses of bridge "
	    "sandboxes", .def = "10.89.0.0/16" },
	{ "--bridge-gateway", "SANDBOXD_BRIDGE_GATEWAY", CONFIG_STRING,
	    OFF(bridge_gateway), "ADDR", .help = "crun: a router on the "
	    "bridge that bridge sandboxes go out through instead of this host, "
	    "which then gives the bridge no address and no NAT; unset: none" },
	{ "--crun-parallel", "SANDBOXD_CRUN_PARALLEL", CONFIG_INT,
	    OFF(crun_parallel), "N", .help = "crun: crun and CNI calls at "
	    "once; more wait their turn, removals first; 0: twice the CPUs",
	    .def = "0", .min = 0, .max = 1000 },
	{ "--create-timeout", "SANDBOXD_CREATE_TIMEOUT", CONFIG_DOUBLE,
	    OFF(create_timeout), "SECONDS", .help = "a new sandbox's agent "
	    "must answer within this", .def = "60", POSITIVE },
	{ "--health-interval", "SANDBOXD_HEALTH_INTERVAL", CONFIG_DOUBLE,
	    OFF(health_interval), "SECONDS", .help = "between health checks",
	    .def = "10", POSITIVE },
	{ "--proxy-timeout", "SANDBOXD_PROXY_TIMEOUT", CONFIG_DOUBLE,
	    OFF(proxy_timeout), "SECONDS", .help = "an agent call may make no "
	    "progress this long", .def = "3600", POSITIVE },
	{ "--allowed-mount-dirs", "SANDBOXD_ALLOWED_MOUNT_DIRS", CONFIG_STRING,
	    OFF(allowed_mount_dirs), "DIRS", .help = "roots a caller's "
	    "mount_dir may lie in, comma separated; unset: DEFAULT_MOUNT_DIR "
	    "only" },
	{ "--public-url", "SANDBOXD_PUBLIC_URL", CONFIG_STRING, OFF(public_url),
	    "URL", .help = "how clients reach sandboxd, for sandbox urls; "
	    "unset: http://HOST:PORT" },
	{ "--pool-parallel", "SANDBOXD_POOL_PARALLEL", CONFIG_INT,
	    OFF(pool_parallel), "N", .help = "concurrent creates per pool",
	    .def = "2", AT_LEAST(1) },
	{ "--docker-parallel", "SANDBOXD_DOCKER_PARALLEL", CONFIG_INT,
	    OFF(docker_parallel), "N", .help = "Docker Engine API calls at "
	    "once; more wait their turn", .def = "8", .min = 1, .max = 1000 },
	{ "--remove-parallel", "SANDBOXD_REMOVE_PARALLEL", CONFIG_INT,
	    OFF(remove_parallel), "N", .help = "of those, calls that stop or "
	    "remove a container; 0: all of them, but one at a time on a Docker "
	    "before 20.10.27, which can deadlock when two containers exit at "
	    "once", .def = "0", .min = 0, .max = 1000 },
	{ "--shutdown-parallel", "SANDBOXD_SHUTDOWN_PARALLEL", CONFIG_INT,
	    OFF(shutdown_parallel), "N", .help = "removals at once while "
	    "shutdown removes every sandbox (AUTO_CLEANUP); 0: 32, but one at "
	    "a time on a Docker before 20.10.27", .def = "0", .min = 0,
	    .max = 1000 },
	{ "--shutdown-timeout", "SANDBOXD_SHUTDOWN_TIMEOUT", CONFIG_DOUBLE,
	    OFF(shutdown_timeout), "SECONDS", .help = "how long shutdown "
	    "removes sandboxes (AUTO_CLEANUP) before it exits leaving the rest "
	    "for the next start; under systemd's 90 s stop timeout",
	    .def = "80", POSITIVE },
	{ "--network", "SANDBOXD_NETWORK", CONFIG_STRING, OFF(network), "NAME",
	    .help = "the engine's network sandboxes of a bridge type join; "
	    "unset: Docker's bridge" },
	{ "--egress-dns", "SANDBOXD_EGRESS_DNS", CONFIG_STRING, OFF(egress_dns),
	    "ADDRS", .help = "name servers sandboxes' resolvers ask, "
	    "ADDR[:PORT] comma separated; unset: those of /etc/resolv.conf" },
	{ "--egress-allow", "SANDBOXD_EGRESS_ALLOW", CONFIG_STRING,
	    OFF(egress_allow), "LIST", .help = "CIDRs and names every "
	    "sandbox with a network may reach, private ones too" },
	{ "--egress-deny", "SANDBOXD_EGRESS_DENY", CONFIG_STRING,
	    OFF(egress_deny), "LIST", .help = "CIDRs no sandbox may reach, "
	    "on top of the private and reserved ranges; names no resolver "
	    "answers" },
	{ "--log-level", "SANDBOXD_LOG_LEVEL", CONFIG_CHOICE, OFF(log_level),
	    "LEVEL", .help = "what the log says", .def = "info",
	    .choices = log_level_names },
	HTTP_SERVER_OPTIONS("SANDBOXD", struct sandboxd_config),
	{ "--e2b-templates", "SANDBOXD_E2B_TEMPLATES", CONFIG_STRING,
	    OFF(e2b_templates), "MAP", .help = "E2B templates as sandbox "
	    "types, template=type,... on top of base=base, "
	    "code-interpreter-v1=code-interpreter, desktop=gui and every "
	    "type's own name" },
};
const size_t sandboxd_noptions = sizeof sandboxd_options /
    sizeof sandboxd_options[0];
