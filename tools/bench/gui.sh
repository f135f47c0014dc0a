# The gui section of tools/bench/run (sourced by it; uses its row, verdict,
# fail, field, latency, free_port, agent_start, TMP and STARTED, and
# sandboxd.sh's sbxd_start).
#
# Figures: the computer tool of an agent with --desktop (its own Xvnc on a
# free display, an xterm on it) over POST /mcp/call_tool: get_screenshot,
# and mouse_move + get_cursor_position; the same for npm's computer-use-mcp
# on the same display, run by a second agent as its MCP server, and the
# ratios. Then the gui image: its size, a cold create through sandboxd to
# a healthy agent (its desktop drawn), the same to the first screenshot
# that shows the desktop, a screenshot through sandboxd's /call_tool, and
# the memory of an idle gui sandbox, all its processes. The images are
# RUNTIME_SANDBOX_IMAGE_TAG's (latest).
#
# Knobs: BENCH_GUI_N requests (or pairs) per figure (500), BENCH_GUI_REF_N
# screenshots of computer-use-mcp (each waits a second first: 10),
# BENCH_GUI_IDLE seconds a sandbox idles before its memory is read (10).

GUI_HELPER=tools/bench/gui_bench.py
GUI_N=${BENCH_GUI_N:-500}
GUI_REF_N=${BENCH_GUI_REF_N:-10}
GUI_IDLE=${BENCH_GUI_IDLE:-10}
CUMCP=tests/node_modules/computer-use-mcp/dist/main.js
SHOT_CALL='{"tool_name": "computer", "arguments": {"action": "get_screenshot"}}'

gui_display() {	# a display number nothing uses
	local n
	for n in $(shuf -i 200-899 -n 100); do
		if [ ! -e "/tmp/.X11-unix/X$n" ] && [ ! -e "/tmp/.X$n-lock" ]; then
			echo "$n"
			return
		fi
	done
	return 1
}

# gui_pair LABEL PORT N: mouse_move + get_cursor_position p50; sets PAIR_P50
gui_pair() {
	local out
	PAIR_P50=
	if ! out=$(/usr/bin/python3 "$GUI_HELPER" pair "http://127.0.0.1:$2" \
		"$TOKEN" "$3" 2>&1); then
		row "$1" "error"
		fail "$1: $out"
		return
	fi
	PAIR_P50=$(field p50_us "$out")
}

# gui_shot LABEL PORT N: get_screenshot p50 (microseconds); sets SHOT_P50
gui_shot() {
	local out
	SHOT_P50=
	if ! out=$("$HTTPLAT" -n "$3" -w 2 -H "$AUTH" -m POST \
		-c application/json -d "$SHOT_CALL" 127.0.0.1 "$2" /mcp/call_tool \
		2>&1); then
		row "$1" "error"
		fail "$1: $out"
		return
	fi
	SHOT_P50=$(field p50_us "$out")
}

ms() { awk -v us="$1" 'BEGIN { printf "%.1f", us / 1000 }'; }

section_gui_tool() {
	local dir display port ref ours_shot ours_pair user=()
	dir="$TMP/gui"
	mkdir -p "$dir/ws"
	if ! command -v Xvnc >/dev/null || ! command -v xterm >/dev/null; then
		row "computer tool" "not available (no Xvnc or xterm here)"
		return
	fi
	display=$(gui_display)
	# Desktop programs never run as root.
	if [ "$(id -u)" -eq 0 ]; then
		user=(--run-as 65534:65534)
		chown -R 65534:65534 "$dir"
		chmod o+x "$TMP"
	fi
	cat >"$dir/desktop.json" <<EOF
{"display": ":$display", "vnc_socket": "$dir/vnc.sock",
 "server": {"command": ["$(command -v Xvnc)", ":$display",
   "-geometry", "1280x800", "-depth", "24", "-rfbunixpath", "$dir/vnc.sock",
   "-rfbport", "-1", "-SecurityTypes", "None", "-nolisten", "tcp",
   "-nolisten", "local", "-AlwaysShared"]},
 "programs": [{"command": ["$(command -v xterm)", "-geometry", "100x40+50+50",
   "-e", "sh", "-c", "ls -l /usr/bin | head -60; exec sleep 100000"]}]}
EOF
	heading "computer tool (agent --desktop: its own Xvnc 1280x800, an xterm; POST /mcp/call_tool)"
	port=$(free_port)
	agent_start "$port" "$dir/ws" "${user[@]}" --tools computer \
		--desktop "$dir/desktop.json"
	sleep 1		# the xterm drawn
	gui_shot "get_screenshot" "$port" "$GUI_N"
	ours_shot=$SHOT_P50
	gui_pair "mouse_move + get_cursor_position" "$port" "$GUI_N"
	ours_pair=$PAIR_P50
	[ -n "$ours_shot" ] && row "get_screenshot (1280x800 PNG)" \
		"p50 $(ms "$ours_shot") ms" "p50 <= 25 ms" \
		"$(verdict "$ours_shot" '<=' 25000)"
	[ -n "$ours_pair" ] && row "mouse_move + get_cursor_position" \
		"p50 $(ms "$ours_pair") ms" "p50 <= 2 ms" \
		"$(verdict "$ours_pair" '<=' 2000)"

	if ! command -v node >/dev/null || [ ! -f "$CUMCP" ]; then
		row "computer-use-mcp (npm)" "not available (no node or tests/node_modules)"
		agent_stop
		return
	fi
	printf '{"mcpServers": {"computer-use": {"command": "%s", "args": ["%s"], "env": {"DISPLAY": ":%s"}}}}\n' \
		"$(command -v node)" "$PWD/$CUMCP" "$display" >"$dir/mcp.json"
	ref=$AGENT_PID
	port=$(free_port)
	agent_start "$port" "$dir/ws" "${user[@]}" --mcp-config "$dir/mcp.json"
	gui_shot "computer-use-mcp get_screenshot" "$port" "$GUI_REF_N"
	gui_pair "computer-use-mcp mouse_move + get_cursor_position" "$port" \
		"$GUI_N"
	agent_stop
	AGENT_PID=$ref
	agent_stop
	if [ -n "$SHOT_P50" ] && [ -n "$ours_shot" ]; then
		row "  computer-use-mcp, same display (p50 of $GUI_REF_N)" \
			"$(ms "$SHOT_P50") ms"
		row "  speed-up of ours" "$(awk -v r="$SHOT_P50" -v o="$ours_shot" \
			'BEGIN { printf "%.0fx", r / o }')" ">= 5x" \
			"$(verdict "$(awk -v r="$SHOT_P50" -v o="$ours_shot" \
			'BEGIN { print r / o }')" '>=' 5)"
	fi
	if [ -n "$PAIR_P50" ] && [ -n "$ours_pair" ]; then
		row "  computer-use-mcp, same display" \
			"$(ms "$PAIR_P50") ms"
		row "  speed-up of ours (pair)" "$(awk -v r="$PAIR_P50" \
			-v o="$ours_pair" 'BEGIN { printf "%.1fx", r / o }')" ">= 5x" \
			"$(verdict "$(awk -v r="$PAIR_P50" -v o="$ours_pair" \
			'BEGIN { print r / o }')" '>=' 5)"
	fi
}

section_gui_image() {
	local out name
	BENCH_CONTAINERS=1
	heading "gui image and sandboxes (docker $(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
	if ! tools/build-image gui >"$TMP/build-gui.log" 2>&1; then
		tail -n 20 "$TMP/build-gui.log" >&2
		row "gui image" "build failed"
		fail "tools/build-image gui failed"
		return
	fi
	image_size_row gui 900
	SBXD_TAG=${RUNTIME_SANDBOX_IMAGE_TAG:-latest}
	trap 'sbxd_cleanup; cleanup' EXIT
	sbxd_start gui POOL_SIZE=0
	if out=$(/usr/bin/python3 "$SBXD_HELPER" versus-true "$SBXD_URL" gui \
		"agentscope/runtime-sandbox-gui:$SBXD_TAG" /usr/bin/true \
		"$CONTAINER_STARTS" 2>&1); then
		row "create through sandboxd to healthy (p50 of $CONTAINER_STARTS)" \
			"$(field sandboxd_p50_ms "$out") ms" "<= 2000 ms" \
			"$(verdict "$(field sandboxd_p50_ms "$out")" '<=' 2000)"
		row "  bare docker run --rm true, alternated (p50)" \
			"$(field true_p50_ms "$out") ms"
	else
		row "create through sandboxd to healthy" "error"
		fail "gui through sandboxd: $out"
	fi
	# Healthy means drawn: the first screenshot shows the desktop.
	if out=$(/usr/bin/python3 "$GUI_HELPER" first-look "$SBXD_URL" \
		"$CONTAINER_STARTS" 2>&1); then
		row "create to a usable desktop (p50 of $CONTAINER_STARTS)" \
			"$(field usable_p50_ms "$out") ms" "<= 2000 ms" \
			"$(verdict "$(field usable_p50_ms "$out")" '<=' 2000)"
		row "  first screenshots not drawn yet" \
			"$(field blank_first_looks "$out") of $CONTAINER_STARTS" "0" \
			"$(verdict "$(field blank_first_looks "$out")" '<=' 0)"
	else
		row "create to a usable desktop" "error"
		fail "gui first look: $out"
	fi
	# A screenshot of the real desktop (jwm), through sandboxd.
	if name=$(/usr/bin/python3 -c 'import json, sys, urllib.request
r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/create",
    data=b"{\"sandbox_type\": \"gui\"}",
    headers={"Content-Type": "application/json"}), timeout=600)
print(json.load(r)["data"])' "$SBXD_URL") && [ "$name" != None ]; then
		out=$("$HTTPLAT" -n "$GUI_N" -w 5 -H "X-Bench: 1" -m POST \
			-c application/json -d "{\"identity\": \"$name\", \"tool_name\":
			\"computer\", \"arguments\": {\"action\": \"get_screenshot\"}}" \
			127.0.0.1 "$SBXD_PORT" /call_tool 2>&1) || fail "screenshot through sandboxd: $out"
		row "get_screenshot through sandboxd /call_tool" \
			"p50 $(ms "$(field p50_us "$out")") ms, p99 $(ms "$(field p99_us "$out")") ms"
		"$HTTPLAT" -n 1 -w 0 -H "X-Bench: 1" -m POST -c application/json \
			-d "{\"identity\": \"$name\"}" 127.0.0.1 "$SBXD_PORT" \
			/release >/dev/null
	else
		fail "cannot create a gui sandbox"
	fi
	if out=$(/usr/bin/python3 "$GUI_HELPER" idle-rss "$SBXD_URL" \
		"$GUI_IDLE" 2>&1); then
		row "idle gui sandbox, all its processes: RSS" \
			"$(field rss_mib "$out") MiB ($(field processes "$out") processes)" \
			"<= 150 MiB" "$(verdict "$(field rss_mib "$out")" '<=' 150)"
		row "  the same as PSS (shared pages split)" "$(field pss_mib "$out") MiB"
	else
		row "idle gui sandbox memory" "error"
		fail "idle gui sandbox: $out"
	fi
	sbxd_stop
}

section_gui() {
	TOKEN=bench-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')
	AUTH="Authorization: Bearer $TOKEN"
	section_gui_tool
	section_gui_image
}
