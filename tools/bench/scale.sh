# The scale section of tools/bench/run (sourced by it; uses its heading,
# row, verdict, fail and field). Many sandboxes through one sandboxd, by
# tools/scale.py (which `make test-scale` runs too):
#
#   create rate with 0, 250 and 500 sandboxes live (BENCH_SCALE_RATE_N
#   sandboxes made, 16 callers; each rate over the next 50 creates);
#   with BENCH_SCALE_N (250) live: GET /v1/sandboxes and list_session_keys,
#   the CPU of a health round, host memory per minimal sandbox, and the
#   SIGTERM with AUTO_CLEANUP that removes them; Docker alone removing as
#   many (Engine API, as many at once as sandboxd's shutdown takes on this
#   engine, right after) for comparison; host memory
#   per base sandbox (BENCH_SCALE_BASE_N, 50).
#
# Containers are named sbxbench-*; any left are removed at the end. Takes
# about ten minutes on 2 CPUs, most of it Docker's.

BENCH_SCALE_RATE_N=${BENCH_SCALE_RATE_N:-550}
BENCH_SCALE_N=${BENCH_SCALE_N:-250}
BENCH_SCALE_BASE_N=${BENCH_SCALE_BASE_N:-50}
SCALE=tools/scale.py

# scale_run ARGS...: tools/scale.py's k=v line (its progress to stderr).
scale_run() {
	/usr/bin/python3 "$SCALE" "$@" --prefix sbxbench- 2>>"$TMP/scale.log"
}

section_scale() {
	local out m
	if ! docker version >/dev/null 2>&1; then
		heading "scale"
		row "Docker" "not reachable" "a daemon" "MISSED"
		fail "scale: no Docker daemon answers (use tools/with-dockerd)"
		return
	fi
	make -s -j2 supervisor/sandboxd
	heading "scale (minimal sandboxes through one sandboxd, 16 callers)"

	if out=$(scale_run run "$BENCH_SCALE_RATE_N" --marks 0,250,500 \
		--no-calls --no-health); then
		for m in 0 250 500; do
			[ -n "$(field "create_rate_at_${m}_per_s" "$out")" ] || continue
			row "create rate, $m live" \
				"$(field "create_rate_at_${m}_per_s" "$out") /s"
		done
		row "  all $BENCH_SCALE_RATE_N" "$(field create_all_s "$out") s" \
			"0 failed" "$(verdict "$(field create_failures "$out")" '<=' 0)"
	else
		row "create rate" "error"
		fail "scale rate: $out"
	fi

	if out=$(scale_run run "$BENCH_SCALE_N" --marks 0 --check --baseline); then
		row "GET /v1/sandboxes, $BENCH_SCALE_N listed (p50)" \
			"$(field list_sandboxes_p50_ms "$out") ms" "<= 10 ms" \
			"$(verdict "$(field list_sandboxes_p50_ms "$out")" '<=' 10)"
		row "list_session_keys, $BENCH_SCALE_N sessions (p50)" \
			"$(field list_session_keys_p50_ms "$out") ms" "<= 10 ms" \
			"$(verdict "$(field list_session_keys_p50_ms "$out")" '<=' 10)"
		row "health round: sandboxd CPU" \
			"$(field health_round_sandboxd_cpu_ms "$out") ms" \
			"<= the sandboxes'" \
			"$(verdict "$(field health_round_sandboxd_cpu_ms "$out")" '<=' \
			"$(field health_round_sandboxes_cpu_ms "$out")")"
		row "  the sandboxes' CPU in that round" \
			"$(field health_round_sandboxes_cpu_ms "$out") ms"
		row "  Docker: list of all ours / of stopped" \
			"$(field docker_list_all_dockerd_cpu_ms "$out") / $(field docker_list_not_running_dockerd_cpu_ms "$out") ms CPU"
		row "host memory per minimal sandbox" \
			"$(field host_mem_per_sandbox_mib "$out") MiB"
		row "SIGTERM, AUTO_CLEANUP, $BENCH_SCALE_N sandboxes" \
			"$(field shutdown_s "$out") s, $(field left_after_shutdown "$out") left" \
			"<= 30 s, none left" \
			"$(verdict "$(field shutdown_s "$out")" '<=' 30)"
		row "  Docker alone: create + start, 16 at once" \
			"$(field docker_run_per_s "$out") /s"
		row "  Docker alone: force remove, $(field docker_rm_parallel "$out") at once" \
			"$(field docker_rm_s "$out") s ($(field docker_rm_per_s "$out") /s)"
		row "  shutdown / Docker alone" "$(field shutdown_vs_docker "$out")x"
	else
		row "$BENCH_SCALE_N sandboxes" "error"
		fail "scale: $out"
	fi

	if out=$(scale_run run "$BENCH_SCALE_BASE_N" --type base --marks "" \
		--no-calls --no-health --no-shutdown); then
		row "host memory per base sandbox ($BENCH_SCALE_BASE_N)" \
			"$(field host_mem_per_sandbox_mib "$out") MiB"
	else
		row "base sandboxes" "error"
		fail "scale base: $out"
	fi
}
