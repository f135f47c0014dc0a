/* Small pure helpers of the HTTP layer: routing, decoding, token and
 * cookie checks. */
#include "http.h"

#include <http_parser.h>

#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

static int
route_path_matches(const struct http_route *route, const char *path)
{
	size_t len;

	if (route->match == HTTP_MATCH_HEADER)
		return 0;
	if (route->match == HTTP_MATCH_EXACT)
		return strcmp(route->path, path) == 0;
	len = strlen(route->path);
	if (strncmp(route->path, path, len) != 0)
		return 0;
	/* "/proxy" must not match "/proxyfoo"; a prefix ending in '/'
	 * already marks the boundary. */
	return len > 0 && (route->path[len - 1] == '/' || path[len] == '\0' ||
	    path[len] == '/');
}

const struct http_route *
http_route_find(const struct http_route *routes, size_t nroutes,
    unsigned method, const char *path, int *method_mismatch)
{
	const struct http_route *best = NULL;
	size_t best_len = 0;

	*method_mismatch = 0;
	/* Exact routes win over prefixes; among prefixes the longest wins. */
	for (size_t i = 0; i < nroutes; i++) {
		const struct http_route *r = &routes[i];
		size_t len;

		if (!route_path_matches(r, path))
			continue;
		if ((r->methods & method) == 0) {
			*method_mismatch = 1;
			continue;
		}
		if (r->match == HTTP_MATCH_EXACT)
			return r;
		len = strlen(r->path);
		if (best == NULL || len > best_len) {
			best = r;
			best_len = len;
		}
	}
	if (best != NULL)
		*method_mismatch = 0;
	return best;
}

const struct http_route *
http_route_find_header(const struct http_route *routes, size_t nroutes,
    unsigned method, int (*has)(void *arg, const char *name), void *arg)
{
	for (size_t i = 0; i < nroutes; i++) {
		if (routes[i].match == HTTP_MATCH_HEADER &&
		    (routes[i].methods & method) != 0 && has(arg, routes[i].path))
			return &routes[i];
	}
	return NULL;
}

const char *
http_status_reason(int status)
{
	return http_status_str((enum http_status)status);
}

int
http_token_equal(const char *presented, const char *expected)
{
	size_t plen = strlen(presented), elen = strlen(expected);
	unsigned char diff = (unsigned char)(plen != elen);

	/* Time depends only on the expected token's length, never on where
	 * the first differing byte is. */
	for (size_t i = 0; i < elen; i++) {
		unsigned char p = i < plen ? (unsigned char)presented[i] : 0;

		diff |= (unsigned char)(p ^ (unsigned char)expected[i]);
	}
	return diff == 0;
}

char *
http_cookie_value(const char *header, const char *name)
{
	size_t nlen = strlen(name);

	while (header != NULL && *header != '\0') {
		size_t len;

		header += strspn(header, " \t;");
		len = strcspn(header, ";");
		if (len > nlen && strncmp(header, name, nlen) == 0 &&
		    header[nlen] == '=')
			return xstrndup(header + nlen + 1, len - nlen - 1);
		header += len;
	}
	return NULL;
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int
http_percent_decode(const char *in, size_t len, int plus_space, char **out)
{
	char *buf = xmalloc(len + 1);
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		char c = in[i];

		if (c == '%') {
			int hi, lo;

			if (i + 2 >= len)
				goto bad;
			hi = hexval(in[i + 1]);
			lo = hexval(in[i + 2]);
			if (hi < 0 || lo < 0)
				goto bad;
			c = (char)(hi << 4 | lo);
			i += 2;
		} else if (c == '+' && plus_space)
			c = ' ';
		if (c == '\0')
			goto bad;
		buf[o++] = c;
	}
	buf[o] = '\0';
	*out = buf;
	return 0;
bad:
	free(buf);
	*out = NULL;
	return -1;
}
