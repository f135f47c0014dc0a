# The egress section of tools/bench/run (sourced by it, after sandboxd.sh,
# whose sbxd_* helpers it uses): issue 26's figures. What policing a new
# sandbox adds to its create (p50, from sandboxd's log) and the
# throughput of a bulk download from a server in the test's own network
# world with and without the policy (goal: within 5 %); see
# tools/bench/egress_bench.py.
#
# Knobs: BENCH_EGRESS_CREATES (10), BENCH_EGRESS_BYTES (268435456),
# BENCH_EGRESS_ROUNDS (5).

EGRESS_HELPER=tools/bench/egress_bench.py

section_egress() {
	local out
	heading "egress policy ($SANDBOXD, in a network world of its own)"
	if ! docker version >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
		row "Docker, root" "missing" "both" "MISSED"
		fail "egress: needs root (network namespaces) and a Docker daemon"
		return
	fi
	make -s -j2 "$SANDBOXD"
	sbxd_image
	tools/build-image --tag "$SBXD_TAG" base >/dev/null
	if ! out=$(/usr/bin/python3 "$EGRESS_HELPER" "$(pwd)/$SANDBOXD" \
		"$SBXD_TAG" "${BENCH_EGRESS_CREATES:-10}" \
		"${BENCH_EGRESS_BYTES:-268435456}" \
		"${BENCH_EGRESS_ROUNDS:-5}" 2>&1); then
		fail "egress: $out"
		return
	fi
	row "policing a new sandbox (namespace, rules, resolver)" \
		"p50 $(field police_p50_ms "$out") ms" "-" ""
	row "  its whole create, bridge type, no pool" \
		"p50 $(field create_p50_ms "$out") ms" "-" ""
	row "bulk download, under the policy" \
		"$(field bulk_with_mbs "$out") MB/s" "-" ""
	local pct
	pct=$(field bulk_ratio_pct "$out")
	row "  without it (a plain container)" \
		"$(field bulk_without_mbs "$out") MB/s (ours $pct %)" ">= 95 %" \
		"$(awk -v p="$pct" 'BEGIN { print (p >= 95) ? "ok" : "MISSED" }')"
}
