/*
 * The fuzz targets' way into the HTTP server: a real server of ours
 * (common/http_server.c) on a unix socket, in the fuzzer's own process and
 * event loop, and a client socket that sends the input and reads until
 * everything it started is over. Nothing is mocked: the bytes cross a real
 * socket, as a client's would.
 */
#ifndef FUZZ_HARNESS_H
#define FUZZ_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "http.h"

#define FUZZ_TOKEN	"fuzz-token"

/* The loop the server runs on (made on first use). */
struct event_base *harness_base(void);

/* Start the server once, in a new temporary directory; later calls do
 * nothing. cfg is copied; its routes must outlive the process. */
void harness_start(const struct http_server_config *cfg);

/*
 * One connection: send data in pieces of at most piece bytes (0: as fast
 * as the socket takes it), a loop turn between pieces so the server reads
 * them apart; run until the server is idle with nothing in flight; close
 * our sending side and run until the server has closed the connection and
 * freed every request. A server that never gets there within a few seconds
 * is a finding: abort. Returns the bytes the server answered.
 */
size_t harness_exchange(const uint8_t *data, size_t len, size_t piece);

#endif
