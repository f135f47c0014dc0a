/*
 * Fuzz target: raw bytes from a client, as they come, into the real HTTP
 * server (request line, headers, chunked and sized bodies, pipelining,
 * everything the routes of routes.c do with them).
 *
 * Input: one byte choosing how the bytes are cut (1-127: pieces of that
 * many bytes, each read by the server on its own; else all at once), then
 * the bytes the client sends.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_routes.h"
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t piece;

	if (size < 1)
		return 0;
	fuzz_routes_start();
	piece = data[0] < 128 ? data[0] : 0;
	harness_exchange(data + 1, size - 1, piece);
	return 0;
}
