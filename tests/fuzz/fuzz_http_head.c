/*
 * Fuzz target: the request target (path, percent-encoding, query) and the
 * header lines, inside an otherwise well-formed request to the real HTTP
 * server, so the fuzzer spends its time on what parse_target, parse_query,
 * auth and the header checks read rather than on the framing.
 *
 * Input: one byte choosing the method, the target up to the first newline,
 * then header lines, one per line (each sent with CRLF). The request gets
 * "Host" and, unless the input's second byte is odd, the right token.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_routes.h"
#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const methods[] = {
	"GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "PROPFIND",
};

static void
add(char **buf, size_t *len, const void *p, size_t n)
{
	*buf = realloc(*buf, *len + n);
	memcpy(*buf + *len, p, n);
	*len += n;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *method, *p, *end, *nl;
	const struct http_route *routes;
	size_t len = 0, nroutes;
	char *buf = NULL, *decoded;
	int auth, mismatch;

	if (size < 2)
		return 0;
	fuzz_routes_start();
	method = methods[data[0] % (sizeof methods / sizeof methods[0])];
	auth = !(data[1] & 1);
	p = (const char *)data + 2;
	end = (const char *)data + size;
	nl = memchr(p, '\n', (size_t)(end - p));
	if (nl == NULL)
		nl = end;

	/* The pure helpers on the target itself. */
	if (http_percent_decode(p, (size_t)(nl - p), 1, &decoded) == 0) {
		routes = fuzz_routes(&nroutes);
		http_route_find(routes, nroutes, HTTP_METHOD_GET, decoded,
		    &mismatch);
		free(decoded);
	}

	add(&buf, &len, method, strlen(method));
	add(&buf, &len, " ", 1);
	add(&buf, &len, p, (size_t)(nl - p));
	add(&buf, &len, " HTTP/1.1\r\nHost: fuzz\r\n", 23);
	if (auth)
		add(&buf, &len, "Authorization: Bearer " FUZZ_TOKEN "\r\n",
		    24 + strlen(FUZZ_TOKEN));
	for (p = nl < end ? nl + 1 : end; p < end; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL)
			nl = end;
		add(&buf, &len, p, (size_t)(nl - p));
		add(&buf, &len, "\r\n", 2);
		if (nl == end)
			break;
	}
	add(&buf, &len, "Content-Length: 0\r\n\r\n", 21);
	harness_exchange((const uint8_t *)buf, len, 0);
	free(buf);
	return 0;
}
