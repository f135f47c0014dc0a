# The s3 section of tools/bench/run (sourced by it, after sandboxd.sh,
# whose sbxd_* helpers it uses): workspaces kept in object storage
# (FILE_SYSTEM=oss), by tools/bench/s3_bench.py: a workspace of
# BENCH_S3_FILES files (1000) and BENCH_S3_MIB MiB (100) uploaded by a
# release, downloaded by a create with its storage_path, and uploaded
# again unchanged (only the listings and the manifest's GET should go),
# against Ceph's RADOS gateway on a one-node cluster on 127.0.0.1 (started
# and stopped here, about 12 s and 225 MB).

S3_HELPER=tools/bench/s3_bench.py

section_s3() {
	local out
	if ! docker version >/dev/null 2>&1 || ! command -v radosgw >/dev/null; then
		heading "workspaces in object storage"
		row "Docker and radosgw" "not reachable" "both" "MISSED"
		fail "s3: needs a Docker daemon and radosgw (tools/install-deps)"
		return
	fi
	make -s -j2 "$SANDBOXD"
	trap 'sbxd_cleanup; cleanup' EXIT
	sbxd_image
	heading "workspaces in object storage (FILE_SYSTEM=oss; radosgw $(radosgw --version | awk '{print $3}') on 127.0.0.1, image $SBXD_IMAGE)"
	if ! out=$(/usr/bin/python3 "$S3_HELPER" "$(pwd)/$SANDBOXD" "$SBXD_TAG" \
		"${BENCH_S3_FILES:-1000}" "${BENCH_S3_MIB:-100}" "$TMP/s3" 2>&1); then
		row "upload and download" "error"
		fail "s3: $out"
		return
	fi
	row "upload, ${BENCH_S3_FILES:-1000} files, ${BENCH_S3_MIB:-100} MiB (release)" \
		"$(field upload_s "$out") s, $(field upload_mibs "$out") MiB/s"
	row "  the release as the client sees it" "$(field release_s "$out") s"
	row "  CPU meanwhile: sandboxd / the store" \
		"$(field upload_cpu_sandboxd_s "$out") s / $(field upload_cpu_store_s "$out") s"
	row "download (create with storage_path)" \
		"$(field download_s "$out") s, $(field download_mibs "$out") MiB/s"
	row "  the create as the client sees it" "$(field create_s "$out") s"
	row "upload again, unchanged" "$(field unchanged_s "$out") s"
	row "  its requests to the store" \
		"$(field unchanged_requests "$out") ($(field unchanged_puts "$out") PUT)" \
		"no PUT" "$(verdict "$(field unchanged_puts "$out")" '<=' 0)"
	row "sandboxd peak RSS growth, upload + download" \
		"$(awk -v k="$(field rss_growth_kib "$out")" 'BEGIN { printf "%.1f MiB", k / 1024 }')"
}
