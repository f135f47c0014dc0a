# The backend section of tools/bench/run (sourced by it; uses its heading,
# row, verdict, fail, field, TMP and sandboxd.sh's sbxd_start/sbxd_stop):
# the Docker backend and the crun backend side by side, in one run.
#
#   cold create through sandboxd to a healthy agent, and removal, of a
#   minimal and a base sandbox (network none) and of a bridge type (the
#   agent's port published), BENCH_BACKEND_CYCLES (20) of each, the two
#   sandboxd taking turns in blocks of five so that the machine's load
#   weighs on both alike (tools/bench/backend_bench.py);
#   BENCH_BACKEND_N (1000) minimal sandboxes made by 16 callers and all
#   removed by SIGTERM (tools/scale.py), none left; host memory per idle
#   minimal sandbox. Docker's many-sandbox run takes BENCH_BACKEND_DOCKER_N
#   (250): at 1000 it takes about nine minutes here (see the scale
#   section's figures).
#
# Targets are the crun backend's (issue 25). Needs root, crun, the CNI
# plugins and a Docker daemon (it builds the images; tools/with-dockerd).

BACKEND_HELPER=tools/bench/backend_bench.py
BENCH_BACKEND_CYCLES=${BENCH_BACKEND_CYCLES:-20}
BENCH_BACKEND_N=${BENCH_BACKEND_N:-1000}
BENCH_BACKEND_DOCKER_N=${BENCH_BACKEND_DOCKER_N:-250}

# backend_pair: a Docker sandboxd and a crun one, each with the bridge
# type; sets DOCKER_URL, CRUN_URL, DOCKER_SBXD, CRUN_SBXD.
backend_pair() {
	local types="$TMP/backend-types.json"
	printf '{"types": {"minimal-net": {"from": "minimal", "network": "bridge"}}}\n' \
		>"$types"
	sbxd_start backend-docker POOL_SIZE=0 CONTAINER_DEPLOYMENT=docker \
		SANDBOXD_TYPES="$types" HEARTBEAT_TIMEOUT=0
	DOCKER_URL=$SBXD_URL DOCKER_SBXD=$SBXD_PID
	sbxd_start backend-crun POOL_SIZE=0 CONTAINER_DEPLOYMENT=crun \
		SANDBOXD_TYPES="$types" HEARTBEAT_TIMEOUT=0
	CRUN_URL=$SBXD_URL CRUN_SBXD=$SBXD_PID
}

# backend_rows TYPE LABEL CREATE_TARGET REMOVE_TARGET
backend_rows() {
	local out d c
	if ! out=$(/usr/bin/python3 "$BACKEND_HELPER" cycles "$1" \
		"$BENCH_BACKEND_CYCLES" docker="$DOCKER_URL" crun="$CRUN_URL"); then
		row "$2" "error"
		fail "backend $1: $out"
		return
	fi
	d=$(field docker_create_p50_ms "$out")
	c=$(field crun_create_p50_ms "$out")
	row "$2: create, crun (p50 / p90)" "$c / $(field crun_create_p90_ms "$out") ms" \
		"<= $3 ms" "$(verdict "$c" '<=' "$3")"
	row "  Docker (p50 / p90)" "$d / $(field docker_create_p90_ms "$out") ms"
	d=$(field docker_remove_p50_ms "$out")
	c=$(field crun_remove_p50_ms "$out")
	row "$2: removal, crun (p50 / p90)" "$c / $(field crun_remove_p90_ms "$out") ms" \
		"<= $4 ms" "$(verdict "$c" '<=' "$4")"
	row "  Docker (p50 / p90)" "$d / $(field docker_remove_p90_ms "$out") ms"
}

# backend_scale BACKEND N: tools/scale.py's line (its progress to the log).
backend_scale() {
	/usr/bin/python3 tools/scale.py run "$2" --backend "$1" --marks "" \
		--no-calls --no-health --prefix "sbxbench-$1-" \
		2>>"$TMP/backend-scale.log"
}

section_backend() {
	local out n
	if ! docker version >/dev/null 2>&1 || ! crun --version >/dev/null 2>&1 ||
		[ "$(id -u)" -ne 0 ]; then
		heading "backend"
		row "Docker, crun, root" "missing" "all three" "MISSED"
		fail "backend: needs root, crun and a Docker daemon (tools/with-dockerd)"
		return
	fi
	make -s -j2 supervisor/sandboxd
	sbxd_image
	tools/build-image --tag "$SBXD_TAG" base >>"$TMP/backend-build.log" 2>&1 ||
		{ fail "backend: building base failed (see $TMP/backend-build.log)"; return; }
	heading "backend (docker and crun in one run, $BENCH_BACKEND_CYCLES of each, taking turns)"
	backend_pair
	backend_rows minimal "minimal, network none" 40 25
	backend_rows base "base, network none" 50 25
	backend_rows minimal-net "minimal, bridge + port" 70 60
	SBXD_PID=$DOCKER_SBXD sbxd_stop
	SBXD_PID=$CRUN_SBXD sbxd_stop

	n=$BENCH_BACKEND_N
	if out=$(backend_scale crun "$n"); then
		row "crun: $n minimal up (16 callers)" "$(field create_all_s "$out") s" \
			"<= 40 s" "$(verdict "$(field create_all_s "$out")" '<=' 40)"
		row "crun: $n down (SIGTERM)" \
			"$(field shutdown_s "$out") s, $(field left_after_shutdown "$out") left" \
			"<= 20 s, none left" "$(verdict "$(field shutdown_s "$out")" '<=' 20)"
		row "crun: host memory per idle minimal sandbox" \
			"$(field host_mem_per_sandbox_mib "$out") MiB" "<= 1.5 MiB" \
			"$(verdict "$(field host_mem_per_sandbox_mib "$out")" '<=' 1.5)"
	else
		row "crun: $n sandboxes" "error"
		fail "backend crun scale: $out"
	fi
	n=$BENCH_BACKEND_DOCKER_N
	if out=$(backend_scale docker "$n"); then
		row "Docker: $n minimal up (16 callers)" "$(field create_all_s "$out") s"
		row "Docker: $n down (SIGTERM)" \
			"$(field shutdown_s "$out") s, $(field left_after_shutdown "$out") left"
		row "Docker: host memory per idle minimal sandbox" \
			"$(field host_mem_per_sandbox_mib "$out") MiB"
	else
		row "Docker: $n sandboxes" "error"
		fail "backend docker scale: $out"
	fi
}
