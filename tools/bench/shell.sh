# shellcheck shell=bash
# ---- section: shell -------------------------------------------------------
# run_shell_command against the reference it replaces, side by side in one
# run with one client (httplat): tools/bench/ref_shell_server.py (FastAPI on
# uvicorn, asyncio.create_subprocess_shell + communicate(), the same JSON
# answer) and the agent, on the same workspace. Sourced by tools/bench/run.
#
# Knobs: BENCH_SHELL_N requests per figure (1000), BENCH_SHELL_GAP_US the
# pause of the paced client between calls (20000).
#
# CPU time per call: user and system time of the server's process tree
# over the back-to-back "echo hi" figure, from /proc: the server and its
# children alive at the end (the agent's shell template), with what their
# reaped children used (keepers and commands; the reference's shells).

SHELL_N=${BENCH_SHELL_N:-1000}
SHELL_GAP_US=${BENCH_SHELL_GAP_US:-20000}
SHELL_SCRIPT10='x=0
for i in 1 2 3; do x=$((x + i)); done
echo "sum $x"
cd /tmp
ls / | wc -l
date +%s >/dev/null
y=$(echo sub)
echo "$y"
grep -c root /etc/passwd
true'

ref_start() {	# ref_start PORT WORKSPACE: sets REF_PID
	SECRET_TOKEN=$TOKEN /usr/bin/python3 tools/bench/ref_shell_server.py \
		"$1" "$2" >>"$TMP/ref.log" 2>&1 &
	REF_PID=$!
	STARTED+=("$REF_PID")
	local i
	for i in $(seq 1 1500); do
		if "$HTTPLAT" -n 1 -w 0 -H "$AUTH" 127.0.0.1 "$1" /healthz \
			>/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$REF_PID" 2>/dev/null || break
		sleep 0.02
	done
	cat "$TMP/ref.log" >&2
	echo "bench: the reference server did not start" >&2
	exit 1
}

# shell_p PORT BODY [httplat options]: "P50 P99" in us, "" on failure
shell_p() {
	local port=$1 body=$2 out
	shift 2
	out=$("$HTTPLAT" -H "$AUTH" -m POST -c application/json -d "$body" \
		"$@" 127.0.0.1 "$port" /tools/run_shell_command \
		2>"$TMP/httplat.err") || { cat "$TMP/httplat.err" >&2; return 0; }
	echo "$(field p50_us "$out") $(field p99_us "$out")"
}

# tree_ticks PID: clock ticks of PID's process tree, as the note above.
tree_ticks() {
	local p t=0
	for p in "$1" $(pgrep -P "$1"); do
		t=$((t + $(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$p/stat")))
	done
	echo "$t"
}

# shell_pair LABEL TARGET_P50_US BODY [httplat options]: ours, the
# reference, their ratio (the reference's p50 over ours). Each server's
# CPU ticks over its run go to OURS_TICKS and REF_TICKS.
shell_pair() {
	local label=$1 target=$2 body=$3 ours ref ratio t0
	shift 3
	t0=$(tree_ticks "$AGENT_PID")
	ours=$(shell_p "$SHELL_OURS" "$body" "$@")
	OURS_TICKS=$(($(tree_ticks "$AGENT_PID") - t0))
	t0=$(tree_ticks "$REF_PID")
	ref=$(shell_p "$SHELL_REF" "$body" "$@")
	REF_TICKS=$(($(tree_ticks "$REF_PID") - t0))
	if [ -z "$ours" ] || [ -z "$ref" ]; then
		row "$label" "error"
		fail "$label failed"
		return
	fi
	set -- $ours $ref
	ratio=$(awk -v r="$3" -v o="$1" 'BEGIN { printf "%.1f", r / o }')
	if [ -n "$target" ]; then
		row "$label" "p50 $1 us, p99 $2 us" "p50 <= $target us" \
			"$(verdict "$1" '<=' "$target")"
	else
		row "$label" "p50 $1 us, p99 $2 us"
	fi
	row "  reference (FastAPI, /bin/sh)" "p50 $3 us, p99 $4 us"
	if [ -n "$target" ]; then
		row "  speed-up of ours (p50)" "${ratio}x" ">= 3x" \
			"$(verdict "$ratio" '>=' 3)"
	else
		row "  speed-up of ours (p50)" "${ratio}x"
	fi
}

# cpu_rows CALLS: the last pair's CPU time per call, ours and the
# reference's.
cpu_rows() {
	local hz
	hz=$(getconf CLK_TCK)
	row "  CPU time per call, ours (server's tree)" \
		"$(awk -v t="$OURS_TICKS" -v n="$1" -v hz="$hz" \
		'BEGIN { printf "%.0f us", t * 1e6 / hz / n }')"
	row "  CPU time per call, the reference's" \
		"$(awk -v t="$REF_TICKS" -v n="$1" -v hz="$hz" \
		'BEGIN { printf "%.0f us", t * 1e6 / hz / n }')"
}

section_shell() {
	local ws body rss rss_idle kids pss
	TOKEN=bench-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')
	AUTH="Authorization: Bearer $TOKEN"
	ws="$TMP/shell-ws"
	mkdir -p "$ws"
	heading "run_shell_command: the agent (shell template, seccomp on) vs the reference ($SHELL_N calls a figure)"
	SHELL_OURS=$(free_port)
	agent_start "$SHELL_OURS" "$ws"
	SHELL_REF=$(free_port)
	ref_start "$SHELL_REF" "$ws"
	local warm="-w 50 -n $SHELL_N"
	shell_pair '"echo hi", back to back' 500 '{"command": "echo hi"}' $warm
	cpu_rows $((SHELL_N + 50))
	shell_pair "\"echo hi\", paced ($((SHELL_GAP_US / 1000)) ms between calls)" 500 \
		'{"command": "echo hi"}' -w 10 -n $((SHELL_N / 4)) -g "$SHELL_GAP_US"
	body=$(/usr/bin/python3 -c 'import json, sys; print(json.dumps({"command": sys.argv[1]}))' \
		"$SHELL_SCRIPT10")
	shell_pair "10-line script (5 programs run)" "" "$body" $warm
	shell_pair "1 MiB of output" "" \
		'{"command": "head -c 1048576 /dev/zero | tr \"\\\\0\" x"}' \
		-w 10 -n $((SHELL_N / 4))
	shell_pair '"echo hi", 16 callers at once' "" '{"command": "echo hi"}' \
		-w 5 -n "$SHELL_N" -C 16
	cpu_rows $((SHELL_N + 5 * 16))
	# Idle cost of the shell template: the agent's processes but itself
	# (the template and its keepers) and theirs (waiting commands).
	sleep 1
	kids=$(pgrep -P "$AGENT_PID" | tr '\n' ' ')
	rss=0
	pss=0
	for k in $kids $(for k in $kids; do pgrep -P "$k"; done); do
		rss=$((rss + $(awk '/^Rss:/ { print $2 }' "/proc/$k/smaps_rollup")))
		pss=$((pss + $(awk '/^Pss:/ { print $2 }' "/proc/$k/smaps_rollup")))
	done
	row "idle cost of the template (+ waiting pairs): RSS" \
		"$(awk -v k="$rss" 'BEGIN { printf "%.2f MiB", k / 1024 }')"
	row "  the same as PSS (shared pages split)" \
		"$(awk -v k="$pss" 'BEGIN { printf "%.2f MiB", k / 1024 }')"
	agent_stop
	kill "$REF_PID"
	wait "$REF_PID" 2>/dev/null || true
}
