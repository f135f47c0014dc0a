/*
 * The bridge network of crun sandboxes, through the CNI plugins Debian
 * ships (containernetworking-plugins): a network namespace sandboxd makes
 * for the sandbox (its loopback up), the `bridge` plugin giving it a veth
 * on the host's bridge with an address from `host-local`. The plugin is a
 * child process of the job runner, given the network configuration on its
 * stdin as the CNI specification (1.0.0) says.
 *
 * NAT and forwarding are the bridge's, not each sandbox's: rules for the
 * subnet, made once (the first time a bridge sandbox is made) and kept,
 * as Docker keeps docker0's: outgoing traffic masqueraded, and forwarded
 * where the host's FORWARD policy drops (Docker sets it so), after the
 * jump to DOCKER-USER so that an operator's rules there hold for these
 * sandboxes as for Docker's containers. With a
 * router of the operator's on the bridge (SANDBOXD_BRIDGE_GATEWAY) the
 * host is no gateway: frames only cross the bridge. Per sandbox,
 * ipMasq's chain and portmap's rules cost a dozen iptables runs to add and
 * as many to remove; the published port is sandboxd's own relay
 * (backend_crun_publish.c).
 *
 * sandboxd holds a descriptor of the namespace for the sandbox's life:
 * crun joins it by /proc/<sandboxd>/fd/<n>, and the bridge plugin's DEL
 * needs it to find the address whose NAT rules it removes. After a
 * restart a running sandbox's namespace is found through its first
 * process.
 *
 * sandboxd's egress policy (egress.c) is put in that namespace, which
 * the backend's netns operation hands out, before the sandbox is.
 */
#include "backend_crun.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "xmalloc.h"

#define CNI_VERSION "1.0.0"
#define NETWORK_NAME "sandboxd"
#define IFNAME "eth0"

/* Owned by its sandbox (crun_box); crun_net_free frees it. */
struct crun_net {
	char *name;			/* CNI's container id */
	int ns_fd;			/* -1: not ours (any more) */
	char *ns_path;
	char *ip;
	json_t *result;			/* the bridge plugin's ADD answer */
	int added;			/* ADD done: DEL to undo */
};

/* One plugin call in flight. */
struct call {
	struct crun_jobs *q;
	const struct crun_net_config *cfg;
	struct crun_net *n;
	int del;
	crun_net_done_cb done;
	void *arg;
	TAILQ_ENTRY(call) entry;	/* waiting for the bridge's rules */
};

static int
bring_lo_up(void)
{
	struct ifreq ifr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = -1;

	if (s < 0)
		return -1;
	memset(&ifr, 0, sizeof ifr);
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP;
		rc = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	close(s);
	return rc;
}

static void
set_ns(struct crun_net *n, int fd)
{
	n->ns_fd = fd;
	free(n->ns_path);
	n->ns_path = fd >= 0 ? xasprintf("/proc/%d/fd/%d", (int)getpid(), fd) :
	    NULL;
}

struct crun_net *
crun_net_new(const char *name, struct error *err)
{
	int fd = crun_host_new_ns(CLONE_NEWNET, bring_lo_up);
	struct crun_net *n;

	if (fd < 0) {
		error_set_errno(err, 500, errno, "crun: cannot make the "
		    "sandbox's network namespace");
		return NULL;
	}
	n = xcalloc(1, sizeof *n);
	n->name = xstrdup(name);
	set_ns(n, fd);
	return n;
}

void
crun_net_free(struct crun_net *n)
{
	if (n == NULL)
		return;
	if (n->ns_fd >= 0)
		close(n->ns_fd);
	free(n->name);
	free(n->ns_path);
	free(n->ip);
	json_decref(n->result);
	free(n);
}

const char *
crun_net_ns_path(const struct crun_net *n)
{
	return n->ns_path;
}

const char *
crun_net_ip(const struct crun_net *n)
{
	return n->ip;
}

int
crun_net_ns_dup(const struct crun_net *n)
{
	return n->ns_fd < 0 ? -1 : fcntl(n->ns_fd, F_DUPFD_CLOEXEC, 3);
}

void
crun_net_adopt_ns(struct crun_net *n, pid_t pid)
{
	char path[64];

	snprintf(path, sizeof path, "/proc/%d/ns/net", (int)pid);
	if (n->ns_fd < 0)
		set_ns(n, open(path, O_RDONLY | O_CLOEXEC));
}

json_t *
crun_net_save(const struct crun_net *n)
{
	return json_pack("{s:s,s:s?,s:O?,s:b}", "name", n->name, "ip", n->ip,
	    "result", n->result, "added", n->added);
}

struct crun_net *
crun_net_load(json_t *saved)
{
	const char *name = json_string_value(json_object_get(saved, "name"));
	const char *s;
	struct crun_net *n;

	if (name == NULL)
		return NULL;
	n = xcalloc(1, sizeof *n);
	n->name = xstrdup(name);
	n->ns_fd = -1;
	if ((s = json_string_value(json_object_get(saved, "ip"))) != NULL)
		n->ip = xstrdup(s);
	n->result = json_incref(json_object_get(saved, "result"));
	n->added = json_is_true(json_object_get(saved, "added"));
	return n;
}

/* The bridge plugin's network configuration: the host the gateway (the
 * bridge's address, the subnet's first), or a router on the bridge. */
static char *
plugin_config(const struct crun_net_config *cfg)
{
	json_t *c = json_pack("{s:s,s:s,s:s,s:s,s:b,s:b,s:b,s:{s:s,s:[[{s:s,"
	    "s:s*}]],s:[{s:s,s:s*}]}}", "cniVersion", CNI_VERSION, "name",
	    NETWORK_NAME, "type", "bridge", "bridge", cfg->bridge, "isGateway",
	    cfg->gateway == NULL, "ipMasq", 0, "hairpinMode", 1, "ipam", "type",
	    "host-local", "ranges", "subnet", cfg->subnet, "gateway",
	    cfg->gateway, "routes", "dst", "0.0.0.0/0", "gw", cfg->gateway);
	char *text = json_dumps(c, JSON_COMPACT);

	json_decref(c);
	return text;
}

static void plugin_done_cb(int status, const char *out, const char *errtext,
    const struct error *fail, void *arg);

static void
run_plugin(struct call *call, const char *command)
{
	struct crun_job_spec spec = { 0 };
	char *path = xasprintf("%s/bridge", call->cfg->cni_path);
	char *env[7], *input = plugin_config(call->cfg);
	const char *argv[] = { path, NULL };

	env[0] = xasprintf("CNI_COMMAND=%s", command);
	env[1] = xasprintf("CNI_CONTAINERID=%s", call->n->name);
	env[2] = xasprintf("CNI_NETNS=%s", call->n->ns_path != NULL ?
	    call->n->ns_path : "");
	env[3] = xstrdup("CNI_IFNAME=" IFNAME);
	env[4] = xasprintf("CNI_PATH=%s", call->cfg->cni_path);
	/* The plugin runs sysctl and the like by name. */
	env[5] = xstrdup("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:"
	    "/usr/bin:/sbin:/bin");
	env[6] = NULL;
	spec.argv = argv;
	spec.envp = (const char *const *)env;
	spec.input = input;
	spec.out_fd = -1;
	spec.urgent = call->del;
	crun_jobs_run(call->q, &spec, plugin_done_cb, call);
	for (int i = 0; env[i] != NULL; i++)
		free(env[i]);
	free(input);
	free(path);
}

static void
call_end(struct call *call, const struct error *err)
{
	call->done(err, call->arg);
	free(call);
}

/* CNI's error answer ({"code", "msg", "details"}), else what it wrote. */
static void
plugin_error(struct error *e, const char *what, int status, const char *out,
    const char *errtext)
{
	json_t *j = json_loads(out, 0, NULL);
	const char *msg = json_string_value(json_object_get(j, "msg"));
	const char *details = json_string_value(json_object_get(j, "details"));

	error_set(e, 500, "CNI %s failed (status %d): %.300s%s%.300s", what,
	    WIFEXITED(status) ? WEXITSTATUS(status) : -1, msg != NULL ? msg :
	    *errtext != '\0' ? errtext : out, details != NULL ? ": " : "",
	    details != NULL ? details : "");
	json_decref(j);
}

static void
plugin_done_cb(int status, const char *out, const char *errtext,
    const struct error *fail, void *arg)
{
	struct call *call = arg;
	struct crun_net *n = call->n;
	json_t *res;
	const char *addr;
	struct error e;

	if (fail != NULL) {
		call_end(call, fail);
		return;
	}
	if (status != 0) {
		plugin_error(&e, call->del ? "bridge DEL" : "bridge ADD", status,
		    out, errtext);
		call_end(call, &e);
		return;
	}
	if (call->del) {
		n->added = 0;
		if (n->ns_fd >= 0)
			close(n->ns_fd);
		set_ns(n, -1);
		call_end(call, NULL);
		return;
	}
	n->added = 1;
	res = json_loads(out, 0, NULL);
	addr = json_string_value(json_object_get(json_array_get(
	    json_object_get(res, "ips"), 0), "address"));
	if (addr == NULL) {
		error_set(&e, 500, "CNI bridge ADD answered no address");
		json_decref(res);
		call_end(call, &e);
		return;
	}
	n->result = res;
	n->ip = xstrndup(addr, strcspn(addr, "/"));
	call_end(call, NULL);
}

/* accept RULE...: the rule in FORWARD after the jump to DOCKER-USER,
 * where an operator's rules for containers are, or first where there is
 * none; one that an earlier sandboxd put ahead of that jump is moved. */
#define ACCEPT_FN \
    "accept() {\n" \
    "  want=\"-A FORWARD $*\"\n" \
    "  pos=$(iptables -w -S FORWARD | { n=0 du=0 at=0\n" \
    "    while read -r l; do\n" \
    "      case $l in \"-A FORWARD \"*) n=$((n + 1)) ;; *) continue ;; esac\n" \
    "      [ \"$l\" = \"-A FORWARD -j DOCKER-USER\" ] && du=$n\n" \
    "      [ $at -eq 0 ] && [ \"$l\" = \"$want\" ] && at=$n\n" \
    "    done\n" \
    "    echo $du $at; })\n" \
    "  du=${pos% *} at=${pos#* }\n" \
    "  [ \"$at\" -gt \"$du\" ] && return 0\n" \
    "  iptables -w -I FORWARD $((du + 1)) \"$@\" || return\n" \
    "  [ \"$at\" -eq 0 ] || iptables -w -D FORWARD \"$at\"\n" \
    "}\n"

/* The bridge's NAT and forwarding rules, made once per sandboxd, with
 * the subnet and bridge as the script's arguments (never in its text).
 * The host routes for the sandboxes: */
static const char nat_rules[] =
    ACCEPT_FN
    "s=$1 b=$2\n"
    "iptables -w -t nat -C POSTROUTING -s \"$s\" ! -o \"$b\" -j MASQUERADE "
    "2>/dev/null || iptables -w -t nat -A POSTROUTING -s \"$s\" ! -o \"$b\" "
    "-j MASQUERADE || exit\n"
    "accept -i \"$b\" -j ACCEPT || exit\n"
    "accept -o \"$b\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n";
/* A router on the bridge does: the host only lets frames cross the bridge
 * (its netfilter sees them when br_netfilter is loaded, as Docker loads
 * it), routing none. */
static const char bridged_rules[] =
    ACCEPT_FN
    "b=$2\n"
    "accept -i \"$b\" -o \"$b\" -j ACCEPT\n";

static struct {
	int made;
	int making;
	TAILQ_HEAD(, call) waiting;
} nat = { 0, 0, TAILQ_HEAD_INITIALIZER(nat.waiting) };

static void
rules_done_cb(int status, const char *out, const char *errtext,
    const struct error *fail, void *arg)
{
	struct call *call;
	struct error e;

	(void)out;
	(void)arg;
	nat.making = 0;
	nat.made = fail == NULL && status == 0;
	if (!nat.made && fail == NULL)
		error_set(&e, 500, "crun: cannot make the bridge's NAT and "
		    "forwarding rules (iptables): %.300s", errtext);
	while ((call = TAILQ_FIRST(&nat.waiting)) != NULL) {
		TAILQ_REMOVE(&nat.waiting, call, entry);
		if (nat.made)
			run_plugin(call, "ADD");
		else
			call_end(call, fail != NULL ? fail : &e);
	}
}

void
crun_net_attach(struct crun_jobs *q, const struct crun_net_config *cfg,
    struct crun_net *n, crun_net_done_cb done, void *arg)
{
	struct call *call = xcalloc(1, sizeof *call);
	const char *argv[] = { "/bin/sh", "-c", cfg->gateway != NULL ?
	    bridged_rules : nat_rules, "sh", cfg->subnet, cfg->bridge, NULL };
	const char *envp[] = { "PATH=/usr/local/sbin:/usr/local/bin:"
	    "/usr/sbin:/usr/bin:/sbin:/bin", NULL };
	struct crun_job_spec spec = { 0 };

	call->q = q;
	call->cfg = cfg;
	call->n = n;
	call->done = done;
	call->arg = arg;
	if (nat.made) {
		run_plugin(call, "ADD");
		return;
	}
	TAILQ_INSERT_TAIL(&nat.waiting, call, entry);
	if (nat.making)
		return;
	nat.making = 1;
	spec.argv = argv;
	spec.envp = envp;
	spec.out_fd = -1;
	spec.urgent = 1;
	crun_jobs_run(q, &spec, rules_done_cb, NULL);
}

void
crun_net_down(struct crun_jobs *q, const struct crun_net_config *cfg,
    struct crun_net *n, crun_net_done_cb done, void *arg)
{
	struct call *call = xcalloc(1, sizeof *call);

	call->q = q;
	call->cfg = cfg;
	call->n = n;
	call->del = 1;
	call->done = done;
	call->arg = arg;
	run_plugin(call, "DEL");
}
