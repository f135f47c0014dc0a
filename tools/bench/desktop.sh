# The desktop section of tools/bench/run (sourced by it; uses its row,
# verdict, fail, field, free_port, agent_start, agent_stop, heading, TMP,
# and sandboxd.sh's sbxd_start, sbxd_stop, sbxd_cleanup, sbxd_median).
#
# Figures: the desktop's WebSocket relay, measured by a C viewer
# (tools/bench/wsbench.c) that speaks RFB inside the WebSocket, raw
# encoding only. First an agent with --desktop on the host (its own Xvnc):
# full screens (4 MiB each) asked for one after the other, straight from
# the VNC server's unix socket and through the agent's /websockify on
# 127.0.0.1 (and on a unix socket, as sandboxd reaches agents); then the
# latency of a small update (64x64). Then a
# filesystem sandbox (the smallest image with a desktop) through sandboxd:
# the small update straight to the agent's WebSocket (its unix socket in
# sandboxd's state directory, with its token) and through sandboxd's
# /desktop/{id} (on 127.0.0.1, the token as password), the paths taking
# turns over BENCH_ROUNDS rounds as sandboxd.sh's comparisons do.
#
# Knobs: BENCH_DESKTOP_SCREENS full screens per throughput figure (100),
# BENCH_DESKTOP_N small updates per latency figure (2000).

WSBENCH=build/bench/wsbench
DESKTOP_SCREENS=${BENCH_DESKTOP_SCREENS:-100}
DESKTOP_N=${BENCH_DESKTOP_N:-2000}

# desktop_run LABEL ARGS...: wsbench's line, or fail and print nothing
desktop_run() {
	local label=$1 out
	shift
	if ! out=$("$WSBENCH" "$@" 2>&1); then
		fail "$label: $out"
		return 1
	fi
	echo "$out"
}

section_desktop_relay() {
	local dir display port direct relayed lat
	dir="$TMP/desktop"
	mkdir -p "$dir/ws"
	if ! command -v Xvnc >/dev/null; then
		row "desktop relay" "not available (no Xvnc here)"
		return
	fi
	display=$(gui_display)
	local user=()
	if [ "$(id -u)" -eq 0 ]; then
		user=(--run-as 65534:65534)
		chown -R 65534:65534 "$dir"
		chmod o+x "$TMP"
	fi
	cat >"$dir/desktop.json" <<EOF
{"display": ":$display", "vnc_socket": "$dir/vnc.sock",
 "server": {"command": ["$(command -v Xvnc)", ":$display",
   "-geometry", "1280x800", "-depth", "24", "-rfbunixpath", "$dir/vnc.sock",
   "-rfbport", "-1", "-SecurityTypes", "None", "-UseBlacklist=0",
   "-nolisten", "tcp", "-nolisten", "local", "-AlwaysShared"]}}
EOF
	heading "desktop relay (agent --desktop: its own Xvnc 1280x800; raw full screens of 4 MiB)"
	port=$(free_port)
	agent_start "$port" "$dir/ws" "${user[@]}" --desktop "$dir/desktop.json" \
		--listen "unix:$dir/agent.sock"
	direct=$(desktop_run "VNC server direct" -r -u "$dir/vnc.sock" \
		throughput "$DESKTOP_SCREENS") &&
		row "VNC server, straight to its socket" \
			"$(field mib_s "$direct") MiB/s"
	relayed=$(desktop_run "through /websockify" -t "127.0.0.1:$port" \
		-a "$TOKEN" throughput "$DESKTOP_SCREENS") &&
		row "through the agent's /websockify (TCP)" \
			"$(field mib_s "$relayed") MiB/s" ">= 200 MiB/s" \
			"$(verdict "$(field mib_s "$relayed")" '>=' 200)"
	relayed=$(desktop_run "through /websockify, unix" -u "$dir/agent.sock" \
		-a "$TOKEN" throughput "$DESKTOP_SCREENS") &&
		row "  the same on the agent's unix socket" \
			"$(field mib_s "$relayed") MiB/s"
	lat=$(desktop_run "small update" -t "127.0.0.1:$port" -a "$TOKEN" \
		latency "$DESKTOP_N") &&
		row "64x64 update through /websockify" \
			"p50 $(field p50_us "$lat") us, p99 $(field p99_us "$lat") us"
	agent_stop
}

section_desktop_sandboxd() {
	local name token id sock rounds=${BENCH_ROUNDS:-5} r out d s
	local got_d="" got_s="" p50d p50s
	BENCH_CONTAINERS=1
	heading "desktop through sandboxd (a filesystem sandbox; 64x64 updates)"
	if ! tools/build-image filesystem >"$TMP/build-filesystem.log" 2>&1; then
		tail -n 20 "$TMP/build-filesystem.log" >&2
		row "filesystem image" "build failed"
		fail "tools/build-image filesystem failed"
		return
	fi
	SBXD_TAG=${RUNTIME_SANDBOX_IMAGE_TAG:-latest}
	trap 'sbxd_cleanup; cleanup' EXIT
	sbxd_start desktop-sbxd POOL_SIZE=0
	if ! name=$(/usr/bin/python3 -c 'import json, sys, urllib.request
r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/create",
    data=b"{\"sandbox_type\": \"filesystem\"}",
    headers={"Content-Type": "application/json"}), timeout=600)
print(json.load(r)["data"])' "$SBXD_URL") || [ "$name" = None ]; then
		fail "cannot create a filesystem sandbox"
		sbxd_stop
		return
	fi
	token=$(/usr/bin/python3 -c 'import json, sys, urllib.request
r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/get_info",
    data=json.dumps({"identity": sys.argv[2]}).encode(),
    headers={"Content-Type": "application/json"}), timeout=60)
print(json.load(r)["data"]["runtime_token"])' "$SBXD_URL" "$name")
	id=${name##*-}
	sock="$TMP/desktop-sbxd/st/run/$id/agent.sock"
	for r in $(seq 1 "$rounds"); do
		d=$(desktop_run "straight to the agent" -u "$sock" -a "$token" \
			latency $((DESKTOP_N / rounds))) || break
		s=$(desktop_run "through sandboxd" -t "127.0.0.1:$SBXD_PORT" \
			-p "/desktop/$name?password=$token" \
			latency $((DESKTOP_N / rounds))) || break
		got_d+="$(field p50_us "$d") "
		got_s+="$(field p50_us "$s") "
	done
	if [ -n "$got_s" ]; then
		p50d=$(tr ' ' '\n' <<<"$got_d" | grep . | sbxd_median)
		p50s=$(tr ' ' '\n' <<<"$got_s" | grep . | sbxd_median)
		row "64x64 update, straight to the agent" "p50 $p50d us"
		row "  through sandboxd /desktop/{id}" "p50 $p50s us" \
			"+ <= 1000 us" \
			"$(verdict "$((p50s - p50d))" '<=' 1000) (+$((p50s - p50d)) us)"
	fi
	if out=$(desktop_run "sandboxd throughput" -t "127.0.0.1:$SBXD_PORT" \
		-p "/desktop/$name?password=$token" throughput \
		"$DESKTOP_SCREENS"); then
		row "raw full screens through sandboxd" "$(field mib_s "$out") MiB/s"
	fi
	sbxd_stop
}

section_desktop() {
	TOKEN=bench-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')
	AUTH="Authorization: Bearer $TOKEN"
	section_desktop_relay
	section_desktop_sandboxd
}
