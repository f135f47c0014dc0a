# The e2b section of tools/bench/run (sourced by it, after sandboxd.sh,
# whose sbxd_* helpers it uses): issue 24's figures for E2B's SDKs
# against sandboxd, side by side in one run, through tools/bench/
# e2b_bench.mjs (the npm SDKs of tests/node_modules):
#   Sandbox.create from a warm pool (minimal), and cold beside a bare
#   `docker run --rm true` of the same image (Docker's floor);
#   commands.run('true') beside AgentScope's run_shell_command
#   (/call_tool) on the same base sandbox, one call of each in turn;
#   runCode('1+1') in a code interpreter sandbox.
# Beside each, its floor: the same client against a server that replays
# sandboxd's recorded answer at once (e2b_bench.mjs floor), what the
# client itself takes.
#
# Knobs: BENCH_E2B_CREATES warm creates (20), BENCH_COLD cold creates
# (10), BENCH_E2B_CALLS calls per path (500).

E2B_HELPER=tools/bench/e2b_bench.mjs

# e2b_helper MODE ARGS...: the helper's "k=v" line, or "" after fail.
e2b_helper() {
	local out
	if out=$(node "$E2B_HELPER" "$1" "$SBXD_URL" "$E2B_KEY" "${@:2}" 2>&1); then
		echo "$out"
	else
		fail "e2b $1: $out"
	fi
}

section_e2b() {
	local out types ci=""
	if ! docker version >/dev/null 2>&1 || ! command -v node >/dev/null; then
		heading "E2B's SDKs"
		row "Docker and node" "not reachable" "both" "MISSED"
		fail "e2b: needs a Docker daemon and node"
		return
	fi
	make -s -j2 "$SANDBOXD"
	trap 'sbxd_cleanup; cleanup' EXIT
	sbxd_image
	types="minimal,base"
	# The code interpreter's image, where this tree has the type.
	if tools/build-image --tag "$SBXD_TAG" base code-interpreter \
		>"$TMP/e2b-build.log" 2>&1; then
		types="$types,code-interpreter"
		ci=1
	elif ! tools/build-image --tag "$SBXD_TAG" base >>"$TMP/e2b-build.log" 2>&1; then
		tail -n 20 "$TMP/e2b-build.log" >&2
		fail "e2b: tools/build-image base failed"
		return
	fi
	E2B_KEY="e2b_$(od -An -tx1 -N20 /dev/urandom | tr -d ' \n')"
	heading "E2B's SDKs (npm e2b, @e2b/code-interpreter) through $SANDBOXD, image tag $SBXD_TAG"

	sbxd_start e2b POOL_SIZE=1 DEFAULT_SANDBOX_TYPE="$types" \
		BEARER_TOKEN="$E2B_KEY" AUTO_CLEANUP=true
	out=$(e2b_helper create minimal "${BENCH_E2B_CREATES:-20}")
	if [ -n "$out" ]; then
		row "Sandbox.create, warm pool (p50 of ${BENCH_E2B_CREATES:-20})" \
			"$(field create_p50_ms "$out") ms (max $(field create_max_ms "$out"))" \
			"p50 <= 5 ms" "$(verdict "$(field create_p50_ms "$out")" '<=' 5)"
		row "  the same route by a plain fetch (p50)" \
			"$(field fetch_p50_ms "$out") ms"
		row "  floor: the SDK, answer replayed (p50)" \
			"$(field floor_p50_ms "$out") ms"
		row "  floor: a plain fetch, answer replayed" \
			"$(field floor_fetch_p50_ms "$out") ms"
	fi
	out=$(e2b_helper run base "${BENCH_E2B_CALLS:-500}" "$TMP/e2b/st")
	if [ -n "$out" ]; then
		row "run_shell_command \"true\", AgentScope /call_tool" \
			"p50 $(field agentscope_p50_us "$out") us"
		row "  commands.run('true'), E2B's SDK" \
			"p50 $(field e2b_p50_us "$out") us" "+ <= 300 us" \
			"$(verdict "$(field overhead_us "$out")" '<=' 300) (+$(field overhead_us "$out") us)"
		row "  its Start RPC, plain fetch, routed" \
			"p50 $(field routed_p50_us "$out") us"
		row "  the same straight to the agent" \
			"p50 $(field direct_p50_us "$out") us"
		row "    without bash -l (bash -c true)" \
			"p50 $(field direct_nologin_p50_us "$out") us"
		row "  run_shell_command straight to the agent" \
			"p50 $(field shell_direct_p50_us "$out") us"
		row "  floor: commands.run, answer replayed" \
			"p50 $(field e2b_floor_p50_us "$out") us"
		row "  floor: /call_tool by fetch, replayed" \
			"p50 $(field agentscope_floor_p50_us "$out") us"
	fi
	if [ -n "$ci" ]; then
		out=$(e2b_helper runcode "${BENCH_E2B_CALLS:-500}" "$TMP/e2b/st")
		if [ -n "$out" ]; then
			row "runCode('1+1') (code-interpreter-v1)" \
				"p50 $(field runcode_p50_us "$out") us, p99 $(field runcode_p99_us "$out") us" \
				"p50 <= 2000 us" \
				"$(verdict "$(field runcode_p50_us "$out")" '<=' 2000)"
			row "  /execute, plain fetch, routed" \
				"p50 $(field routed_p50_us "$out") us"
			row "  the same straight to the agent" \
				"p50 $(field direct_p50_us "$out") us"
			row "  floor: runCode, answer replayed" \
				"p50 $(field runcode_floor_p50_us "$out") us"
			row "  floor: a plain fetch, replayed" \
				"p50 $(field fetch_floor_p50_us "$out") us"
		fi
	else
		row "runCode('1+1')" "not available (no code-interpreter type)"
	fi
	sbxd_stop

	sbxd_start e2b-cold POOL_SIZE=0 BEARER_TOKEN="$E2B_KEY" AUTO_CLEANUP=true
	out=$(e2b_helper cold minimal "$SBXD_IMAGE" /bin/true "$BENCH_COLD")
	if [ -n "$out" ]; then
		row "Sandbox.create, cold (p50 of $BENCH_COLD)" \
			"$(field create_p50_ms "$out") ms" \
			"<= 1.5 x docker run true" \
			"$(verdict "$(field ratio "$out")" '<=' 1.5)"
		row "  bare docker run --rm true, alternated (p50)" \
			"$(field true_p50_ms "$out") ms (ratio $(field ratio "$out"))"
	fi
	sbxd_stop
}
