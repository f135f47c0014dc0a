# The sandboxd section of tools/bench/run (sourced by it; uses its row,
# verdict, fail, field, free_port, TMP and STARTED).
#
# Figures: create_from_pool with a warm pool (p50/p99); cold create to a
# healthy agent beside a bare `docker run` of the same image to a healthy
# agent, alternated in the same run; run_shell_command through sandboxd
# (proxy and call_tool) against straight to the agent; sandboxd's RSS with
# BENCH_LIVE live minimal sandboxes.
#
# Knobs: BENCH_POOL warm sandboxes taken (30), BENCH_COLD cold creates and
# bare runs (10), BENCH_LIVE live sandboxes for RSS (100), BENCH_ROUNDS
# turns of the direct / through-sandboxd comparison (5).
# Needs a Docker daemon (run it under tools/with-dockerd on a fresh machine).

SANDBOXD=supervisor/sandboxd
SBXD_HELPER=tools/bench/sandboxd_bench.py
BENCH_POOL=${BENCH_POOL:-30}
BENCH_COLD=${BENCH_COLD:-10}
BENCH_LIVE=${BENCH_LIVE:-100}
SBXD_PID=
SBXD_PORT=
SBXD_URL=

# sbxd_start NAME VAR=VALUE...: a sandboxd with its own state directory.
sbxd_start() {
	local name=$1 dir i bin
	shift
	bin="$(pwd)/$SANDBOXD"
	dir="$TMP/$name"
	mkdir -p "$dir"
	SBXD_PORT=$(free_port)
	SBXD_URL="http://127.0.0.1:$SBXD_PORT"
	(cd "$dir" && exec env -i PATH="$PATH" RUNTIME_SANDBOX_IMAGE_TAG="$SBXD_TAG" \
		DEFAULT_SANDBOX_TYPE=minimal SANDBOXD_STATE_DIR="$dir/st" "$@" \
		"$bin" --port "$SBXD_PORT" >>"$dir/log" 2>&1) &
	SBXD_PID=$!
	STARTED+=("$SBXD_PID")
	for i in $(seq 1 500); do
		if "$HTTPLAT" -n 1 -w 0 127.0.0.1 "$SBXD_PORT" /health \
			>/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$SBXD_PID" 2>/dev/null || break
		sleep 0.02
	done
	cat "$dir/log" >&2
	echo "bench: sandboxd did not start" >&2
	exit 1
}

# Stop it; with AUTO_CLEANUP it removes its sandboxes first.
sbxd_stop() {
	kill -TERM "$SBXD_PID" 2>/dev/null || true
	wait "$SBXD_PID" 2>/dev/null || true
}

sbxd_cleanup() {
	local ids
	ids=$(docker ps -aq --filter label=io.agentscope.sandboxd.bench=1 2>/dev/null)
	if [ -n "$ids" ]; then
		docker rm -f $ids >/dev/null 2>&1 || true
	fi
}

# The minimal image of this tree's agent, tagged by the agent's hash (as
# the tests do), built when missing.
sbxd_image() {
	local sha have
	sha=$(sha256sum "$AGENT" | cut -d' ' -f1)
	SBXD_TAG="t-${sha:0:16}"
	SBXD_IMAGE="agentscope/runtime-sandbox-minimal:$SBXD_TAG"
	have=$(docker image inspect --format \
		'{{index .Config.Labels "io.agentscope.sandboxd.agent-sha256"}}' \
		"$SBXD_IMAGE" 2>/dev/null || true)
	if [ "$have" != "$sha" ]; then
		tools/build-image --tag "$SBXD_TAG" minimal >&2
	fi
}

sbxd_median() {
	sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# sbxd_compare LABEL HOST PORT TARGET [opts] -- LABEL2 HOST PORT TARGET
# [opts] [-- ...]: the first is straight to the agent, the others through
# sandboxd. The paths take turns, BENCH_ROUNDS rounds of N/ROUNDS requests,
# so that the machine's load drifting during the run weighs on all alike;
# each figure is the median over the rounds. SBXD_CMP_FIRST names the first
# path ("direct to the agent"), SBXD_CMP_TARGET is what the others may add
# to its p50 in us (300).
sbxd_compare() {
	local rounds=${BENCH_ROUNDS:-5} npaths=0 i r p50s p99s direct
	local -a labels specs
	while [ $# -gt 0 ]; do
		labels[npaths]=$1
		shift
		specs[npaths]=""
		while [ $# -gt 0 ] && [ "$1" != "--" ]; do
			specs[npaths]+="$(printf '%q ' "$1")"
			shift
		done
		[ $# -gt 0 ] && shift
		npaths=$((npaths + 1))
	done
	declare -A got50 got99
	for r in $(seq 1 "$rounds"); do
		for i in $(seq 0 $((npaths - 1))); do
			local out
			if ! out=$(eval "\"\$HTTPLAT\" -n $((N / rounds)) -w $((WARMUP / rounds + 1)) $(sbxd_opts "${specs[i]}")" 2>&1); then
				fail "httplat ${labels[i]}: $out"
				return
			fi
			got50[$i]+="$(field p50_us "$out") "
			got99[$i]+="$(field p99_us "$out") "
		done
	done
	for i in $(seq 0 $((npaths - 1))); do
		p50s=$(tr ' ' '\n' <<<"${got50[$i]}" | grep . | sbxd_median)
		p99s=$(tr ' ' '\n' <<<"${got99[$i]}" | grep . | sbxd_median)
		if [ "$i" -eq 0 ]; then
			direct=$p50s
			row "${labels[i]}, ${SBXD_CMP_FIRST:-direct to the agent}" \
				"p50 $p50s us, p99 $p99s us"
		else
			row "  ${labels[i]}" "p50 $p50s us, p99 $p99s us" \
				"+ <= ${SBXD_CMP_TARGET:-300} us" \
				"$(verdict "$((p50s - direct))" '<=' "${SBXD_CMP_TARGET:-300}") (+$((p50s - direct)) us)"
		fi
	done
}

# HOST PORT TARGET [opts] -> httplat's argument order: [opts] HOST PORT TARGET
sbxd_opts() {
	eval "set -- $1"
	local host=$1 port=$2 target=$3
	shift 3
	printf '%q ' "$@" "$host" "$port" "$target"
}

section_sandboxd() {
	local out m takes misses p50 p99 ratio name token ip rss types
	if ! docker version >/dev/null 2>&1; then
		heading "sandboxd"
		row "Docker" "not reachable" "a daemon" "MISSED"
		fail "sandboxd: no Docker daemon answers (use tools/with-dockerd)"
		return
	fi
	make -s -j2 "$SANDBOXD"
	trap 'sbxd_cleanup; cleanup' EXIT
	sbxd_image
	heading "sandboxd ($SANDBOXD, Docker $(docker version --format '{{.Server.Version}}'), image $SBXD_IMAGE)"

	# Pool takes: a full warm pool, taken one request after the other.
	sbxd_start pool POOL_SIZE="$BENCH_POOL" SANDBOXD_POOL_PARALLEL=4
	/usr/bin/python3 "$SBXD_HELPER" wait-pool "$SBXD_URL" minimal "$BENCH_POOL"
	if out=$("$HTTPLAT" -n "$BENCH_POOL" -w 0 -m POST -c application/json \
		-d '{"sandbox_type": "minimal", "meta": {"session_ctx_id": "b"}}' \
		127.0.0.1 "$SBXD_PORT" /create_from_pool 2>&1); then
		m=$(/usr/bin/python3 -c 'import json, sys, urllib.request
t = urllib.request.urlopen(sys.argv[1] + "/metrics").read().decode()
v = {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in t.splitlines() if l and l[0] != "#"}
print(int(v["sandboxd_pool_takes_total{type=\"minimal\"}"]), int(v["sandboxd_pool_misses_total{type=\"minimal\"}"]))' "$SBXD_URL")
		read -r takes misses <<<"$m"
		p50=$(field p50_us "$out")
		p99=$(field p99_us "$out")
		row "create_from_pool, warm pool ($takes takes, $misses misses)" \
			"p50 $p50 us, p99 $p99 us" "p50 <= 2000 us" \
			"$(verdict "$p50" '<=' 2000)"
		[ "$misses" -eq 0 ] || fail "the pool ran dry during the takes"
	else
		row "create_from_pool, warm pool" "error"
		fail "httplat /create_from_pool: $out"
	fi
	sbxd_stop

	types="$TMP/types.json"
	# No CPU quota on the latency sandbox: CFS throttling of a half CPU
	# would measure the quota, not the path.
	echo '{"types": {"minimal-net": {"from": "minimal", "network": "bridge", "cpus": 0}}}' >"$types"
	sbxd_start main POOL_SIZE=0 PORT_RANGE=62400,62420 SANDBOXD_TYPES="$types"

	# Cold creates beside bare docker runs, alternated.
	if out=$(/usr/bin/python3 "$SBXD_HELPER" cold "$SBXD_URL" "$SBXD_IMAGE" \
		"$BENCH_COLD" "$TMP"); then
		ratio=$(field ratio "$out")
		row "cold create to healthy, minimal (p50 of $BENCH_COLD)" \
			"$(field sandboxd_p50_ms "$out") ms" "<= 1.3 x bare" \
			"$(verdict "$ratio" '<=' 1.3)"
		row "  bare docker run to healthy (p50)" \
			"$(field bare_p50_ms "$out") ms (ratio $ratio)"
		row "  bare docker run, CLI alone (p50)" \
			"$(field docker_cli_p50_ms "$out") ms"
	else
		row "cold create to healthy" "error"
		fail "cold: $out"
	fi

	# run_shell_command: straight to the agent (its bridge address) and
	# through sandboxd (the agent's unix socket behind it).
	name=$(/usr/bin/python3 -c 'import json, sys, urllib.request
r = urllib.request.Request(sys.argv[1] + "/create", data=b"{\"sandbox_type\": \"minimal-net\"}")
print(json.load(urllib.request.urlopen(r))["data"])' "$SBXD_URL")
	token=$(/usr/bin/python3 -c 'import json, sys, urllib.request
r = urllib.request.Request(sys.argv[1] + "/get_info", data=json.dumps({"identity": sys.argv[2]}).encode())
print(json.load(urllib.request.urlopen(r))["data"]["runtime_token"])' "$SBXD_URL" "$name")
	ip=$(/usr/bin/python3 "$SBXD_HELPER" bridge-ip "$name")
	local cmd='{"command": "echo hi"}'
	local call="{\"identity\": \"$name\", \"tool_name\": \"run_shell_command\", \"arguments\": $cmd}"
	sbxd_compare "GET /healthz" \
		"$ip" 8000 /healthz -H "Authorization: Bearer $token" -- \
		"through /proxy/{id}/healthz" \
		127.0.0.1 "$SBXD_PORT" "/proxy/$name/healthz"
	sbxd_compare 'run_shell_command "echo hi"' \
		"$ip" 8000 /tools/run_shell_command -m POST -c application/json \
		-d "$cmd" -H "Authorization: Bearer $token" -- \
		"through /proxy/{id}/..." \
		127.0.0.1 "$SBXD_PORT" "/proxy/$name/tools/run_shell_command" \
		-m POST -c application/json -d "$cmd" -- \
		"through /call_tool" \
		127.0.0.1 "$SBXD_PORT" /call_tool -m POST -c application/json \
		-d "$call"
	/usr/bin/python3 -c 'import json, sys, urllib.request
urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/release", data=json.dumps({"identity": sys.argv[2]}).encode()))' "$SBXD_URL" "$name"

	# Memory with many live sandboxes.
	rss=$(rss_kib "$SBXD_PID")
	row "sandboxd RSS, idle" \
		"$(awk -v k="$rss" 'BEGIN { printf "%.2f MiB", k / 1024 }')"
	if out=$(/usr/bin/python3 "$SBXD_HELPER" fill "$SBXD_URL" minimal \
		"$BENCH_LIVE" 8); then
		rss=$(rss_kib "$SBXD_PID")
		row "sandboxd RSS, $BENCH_LIVE live minimal sandboxes" \
			"$(awk -v k="$rss" 'BEGIN { printf "%.2f MiB", k / 1024 }')" \
			"<= 20 MiB" "$(verdict "$rss" '<=' 20480)"
	else
		row "sandboxd RSS, $BENCH_LIVE live sandboxes" "error"
		fail "fill: $out"
	fi
	sbxd_stop
	if [ -n "$(docker ps -aq --filter "label=io.agentscope.sandboxd.instance=$(cat "$TMP/main/st/instance")")" ]; then
		fail "sandboxd left containers behind at shutdown"
	fi
}
