# The redis section of tools/bench/run (sourced by it, after sandboxd.sh
# whose sbxd_* helpers it uses): two sandboxd on one redis-server (Debian's,
# started here on a loopback port, stopped by pid) and one Docker.
#
# Figures: create_from_pool from the shared pool, beside the same takes from
# a sandboxd without Redis; a call on a sandbox through the instance that
# owns it and through the other one (which relays to its agent); sandboxd's
# RSS with BENCH_RECORDS records of another instance in Redis (synthetic:
# written straight to Redis as a third instance would, signed with the
# instances' secret, no containers).
#
# Knobs: BENCH_POOL warm sandboxes taken (30, half per instance),
# BENCH_RECORDS (1000).

BENCH_RECORDS=${BENCH_RECORDS:-1000}

redis_llen() {
	redis-cli -p "$REDIS_BENCH_PORT" LLEN "$1" 2>/dev/null || echo 0
}

# wait until the shared pool list KEY holds N names
redis_wait_pool() {
	local i
	for i in $(seq 1 3000); do
		[ "$(redis_llen "$1")" -ge "$2" ] && return 0
		sleep 0.2
	done
	fail "shared pool $1 did not reach $2"
	return 1
}

# The instances' secret (SANDBOXD_REDIS_SECRET), which the synthetic
# records below are signed with too.
REDIS_BENCH_SECRET=bench-secret-0123456789abcdef-0123456789abcdef

# Records of an instance that does not run: what a third host would write,
# signed and with its lease (good for an hour), so the instances take them.
redis_synthetic_records() {
	local n=$1 prefix=$2
	/usr/bin/python3 - "$n" "$prefix" "$REDIS_BENCH_SECRET" <<'PY' | redis-cli -p "$REDIS_BENCH_PORT" >/dev/null
import os, shlex, sys, time
sys.path.insert(0, "tests/integration")
sys.path.insert(0, "tests/integration/helpers")
from redis_sign import Signer
n, p, sign = int(sys.argv[1]), sys.argv[2], Signer(sys.argv[3])
owner = os.urandom(16).hex()
now = int(time.time() * 1000)
lease = sign.lease(f"{p}instance:{owner}", 1, "", "", 49152, 59152,
                   "/nonexistent/run", now + 3600 * 1000)
print(f"HSET {p}instances {owner} {shlex.quote(f'{now} 3600000 {lease}')}")
for i in range(n):
    name, key = f"synthetic-{i:016x}", f"{p}sb:synthetic-{i:016x}"
    rec = {"id": f"{i:016x}", "owner": owner, "type": "minimal",
           "image": "agentscope/runtime-sandbox-minimal:latest",
           "token": sign.seal(os.urandom(16).hex(), key),
           "agent": f"unix:/nonexistent/run/{i:016x}/agent.sock",
           "port": "0", "state": "running", "session": f"synthetic-{i % 100}",
           "meta": "{}", "container_id": os.urandom(32).hex(),
           "mount_dir": f"/nonexistent/{i}", "storage_path": "",
           "timeout": "300", "created_at": "1", "updated_at": "1"}
    rec = sign.sign_record(key, rec)
    print(f"HSET {key} " + " ".join(f"{k} {shlex.quote(v)}"
                                    for k, v in rec.items()))
    print(f"SADD {p}sandboxes {name}")
PY
}

section_redis() {
	local out p50 p99 plain_p50 a_port b_port a_pid name call rss half
	if ! docker version >/dev/null 2>&1 || ! command -v redis-server >/dev/null; then
		heading "sandboxd on Redis"
		row "Docker and redis-server" "not reachable" "both" "MISSED"
		fail "redis: needs a Docker daemon and redis-server"
		return
	fi
	make -s -j2 "$SANDBOXD"
	trap 'sbxd_cleanup; cleanup' EXIT
	sbxd_image
	heading "sandboxd on Redis ($(redis-server --version | awk '{print $3}'), two instances, one Docker, image $SBXD_IMAGE)"
	half=$((BENCH_POOL / 2))

	# Without Redis, the same takes, for the side-by-side figure.
	sbxd_start plain POOL_SIZE="$BENCH_POOL" SANDBOXD_POOL_PARALLEL=4
	/usr/bin/python3 "$SBXD_HELPER" wait-pool "$SBXD_URL" minimal "$BENCH_POOL"
	if out=$("$HTTPLAT" -n "$BENCH_POOL" -w 0 -m POST -c application/json \
		-d '{"sandbox_type": "minimal", "meta": {"session_ctx_id": "b"}}' \
		127.0.0.1 "$SBXD_PORT" /create_from_pool 2>&1); then
		plain_p50=$(field p50_us "$out")
		row "create_from_pool, no Redis ($BENCH_POOL takes)" \
			"p50 $plain_p50 us, p99 $(field p99_us "$out") us"
	else
		fail "httplat /create_from_pool (no Redis): $out"
	fi
	sbxd_stop

	mkdir -p "$TMP/redis"
	REDIS_BENCH_PORT=$(free_port)
	redis-server --port "$REDIS_BENCH_PORT" --bind 127.0.0.1 --save '' \
		--appendonly no --dir "$TMP/redis" >"$TMP/redis/log" 2>&1 &
	STARTED+=("$!")
	for _ in $(seq 1 100); do
		redis-cli -p "$REDIS_BENCH_PORT" PING >/dev/null 2>&1 && break
		sleep 0.05
	done
	redis_synthetic_records "$BENCH_RECORDS" "bench:"
	local common=(REDIS_ENABLED=true REDIS_PORT="$REDIS_BENCH_PORT"
		SANDBOXD_REDIS_SECRET="$REDIS_BENCH_SECRET"
		SANDBOXD_REDIS_PREFIX=bench: POOL_SIZE="$half"
		SANDBOXD_POOL_PARALLEL=4)
	sbxd_start ra "${common[@]}" CONTAINER_PREFIX_KEY=bench-a-
	a_pid=$SBXD_PID
	a_port=$SBXD_PORT
	sbxd_start rb "${common[@]}" CONTAINER_PREFIX_KEY=bench-b-
	b_port=$SBXD_PORT
	redis_wait_pool bench:container_pool:minimal "$BENCH_POOL" || return
	if out=$("$HTTPLAT" -n "$BENCH_POOL" -w 0 -m POST -c application/json \
		-d '{"sandbox_type": "minimal", "meta": {"session_ctx_id": "b"}}' \
		127.0.0.1 "$a_port" /create_from_pool 2>&1); then
		p50=$(field p50_us "$out")
		p99=$(field p99_us "$out")
		row "create_from_pool, shared pool ($BENCH_POOL takes from A)" \
			"p50 $p50 us, p99 $p99 us" "p50 <= 3000 us" \
			"$(verdict "$p50" '<=' 3000)"
	else
		row "create_from_pool, shared pool" "error"
		fail "httplat /create_from_pool (Redis): $out"
	fi

	# One sandbox of A's, called through A and through B.
	name=$(/usr/bin/python3 -c 'import json, sys, urllib.request
r = urllib.request.Request(sys.argv[1] + "/create", data=b"{\"sandbox_type\": \"minimal\"}")
print(json.load(urllib.request.urlopen(r))["data"])' "http://127.0.0.1:$a_port")
	local cmd='{"command": "echo hi"}'
	call="{\"identity\": \"$name\", \"tool_name\": \"run_shell_command\", \"arguments\": $cmd}"
	SBXD_CMP_FIRST="through its owner" SBXD_CMP_TARGET=1000 sbxd_compare \
		"GET /proxy/{id}/healthz" \
		127.0.0.1 "$a_port" "/proxy/$name/healthz" -- \
		"through the other instance" \
		127.0.0.1 "$b_port" "/proxy/$name/healthz"
	SBXD_CMP_FIRST="through its owner" SBXD_CMP_TARGET=1000 sbxd_compare \
		'call_tool run_shell_command "echo hi"' \
		127.0.0.1 "$a_port" /call_tool -m POST -c application/json \
		-d "$call" -- \
		"through the other instance" \
		127.0.0.1 "$b_port" /call_tool -m POST -c application/json \
		-d "$call"

	rss=$(rss_kib "$a_pid")
	row "sandboxd RSS, $BENCH_RECORDS records of another instance + its own" \
		"$(awk -v k="$rss" 'BEGIN { printf "%.2f MiB", k / 1024 }')" \
		"<= 30 MiB" "$(verdict "$rss" '<=' 30720)"
	kill -TERM "$a_pid" 2>/dev/null || true
	wait "$a_pid" 2>/dev/null || true
	sbxd_stop
}
