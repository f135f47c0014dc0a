# The sandbox_mcp section of tools/bench/run (sourced by it, after
# sandboxd.sh, whose sbxd_* helpers it uses): issue 16's targets for
# sandbox-mcp. tools/call run_shell_command "echo hi" through sandbox-mcp
# against straight to sandboxd's /call_tool (one call of each in turn,
# the median of the pairs' differences), and the first tool call of a new
# session with a warm pool; the same two through sandboxd's own /mcp.
#
# Knobs: BENCH_MCP_FIRST new sessions timed (10), BENCH_MCP_CALLS calls
# per path (1000).

SANDBOX_MCP=sandbox-mcp/sandbox-mcp
MCP_HELPER=tools/bench/sandbox_mcp_bench.py

section_sandbox_mcp() {
	local out
	if ! docker version >/dev/null 2>&1; then
		heading "sandbox-mcp"
		row "Docker" "not reachable" "a daemon" "MISSED"
		fail "sandbox_mcp: no Docker daemon answers (use tools/with-dockerd)"
		return
	fi
	make -s -j2 "$SANDBOXD" "$SANDBOX_MCP"
	trap 'sbxd_cleanup; cleanup' EXIT
	sbxd_image
	heading "sandbox-mcp ($SANDBOX_MCP in front of $SANDBOXD, image $SBXD_IMAGE)"
	sbxd_start mcp POOL_SIZE=1 AUTO_CLEANUP=true
	if out=$(/usr/bin/python3 "$MCP_HELPER" first "$SBXD_URL" \
		"$(pwd)/$SANDBOX_MCP" "${BENCH_MCP_FIRST:-10}" 2>&1); then
		row "first tools/call, new session, warm pool" \
			"$(field first_p50_ms "$out") ms" "<= 20 ms" \
			"$(verdict "$(field first_p50_ms "$out")" '<=' 20)"
	else
		row "first tools/call of a session" "error"
		fail "sandbox_mcp first: $out"
	fi
	if out=$(/usr/bin/python3 "$MCP_HELPER" overhead "$SBXD_URL" \
		"$(pwd)/$SANDBOX_MCP" "${BENCH_MCP_CALLS:-1000}" 2>&1); then
		row 'run_shell_command "echo hi", /call_tool' \
			"p50 $(field direct_p50_us "$out") us"
		row "  through sandbox-mcp" \
			"p50 $(field mcp_p50_us "$out") us" "+ <= 1000 us" \
			"$(verdict "$(field overhead_us "$out")" '<=' 1000) (+$(field overhead_us "$out") us)"
	else
		row "through sandbox-mcp" "error"
		fail "sandbox_mcp overhead: $out"
	fi
	if out=$(/usr/bin/python3 "$MCP_HELPER" http_first "$SBXD_URL" \
		"${BENCH_MCP_FIRST:-10}" 2>&1); then
		row "first tools/call, new /mcp session, warm pool" \
			"$(field first_p50_ms "$out") ms" "<= 20 ms" \
			"$(verdict "$(field first_p50_ms "$out")" '<=' 20)"
	else
		row "first tools/call of an /mcp session" "error"
		fail "sandbox_mcp http_first: $out"
	fi
	if out=$(/usr/bin/python3 "$MCP_HELPER" http_overhead "$SBXD_URL" \
		"${BENCH_MCP_CALLS:-1000}" 2>&1); then
		row 'run_shell_command "echo hi", /call_tool' \
			"p50 $(field direct_p50_us "$out") us"
		row "  through sandboxd's /mcp" \
			"p50 $(field mcp_p50_us "$out") us" "+ <= 1000 us" \
			"$(verdict "$(field overhead_us "$out")" '<=' 1000) (+$(field overhead_us "$out") us)"
	else
		row "through /mcp" "error"
		fail "sandbox_mcp http_overhead: $out"
	fi
	sbxd_stop
	if [ -n "$(docker ps -aq --filter "label=io.agentscope.sandboxd.instance=$(cat "$TMP/mcp/st/instance")")" ]; then
		fail "sandbox_mcp: containers left behind"
	fi
}
