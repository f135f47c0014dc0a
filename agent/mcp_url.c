/*
 * The urls of remote MCP servers: http:// with a numeric host or
 * localhost, split into what common/http_client wants.
 */
#include "mcp.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "xmalloc.h"

/* Visible ASCII only (and spaces where allowed): what goes into a request
 * line or header must mean to the server what it means to us. */
int
mcp_url_visible(const char *s, size_t len, int spaces)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c >= 0x7f || (c == ' ' && !spaces))
			return 0;
	}
	return 1;
}

void
mcp_url_clear(struct mcp_url *u)
{
	free(u->addr);
	free(u->host);
	free(u->target);
	memset(u, 0, sizeof *u);
}

int
mcp_url_parse(const char *url, struct mcp_url *u, struct error *err)
{
	const char *auth, *rest, *colon;
	char *host = NULL, buf[16];
	size_t alen;
	long port = 80;

	memset(u, 0, sizeof *u);
	if (!mcp_url_visible(url, strlen(url), 0)) {
		error_set(err, 400, "url %s: spaces and other characters "
		    "outside visible ASCII must be percent-encoded", url);
		return -1;
	}
	if (strncasecmp(url, "https://", 8) == 0) {
		error_set(err, 400, "url %s: https is not supported", url);
		return -1;
	}
	if (strncasecmp(url, "http://", 7) != 0) {
		error_set(err, 400, "url %s: want http://HOST:PORT/PATH", url);
		return -1;
	}
	auth = url + 7;
	alen = strcspn(auth, "/?#");
	rest = auth + alen;
	if (alen == 0 || memchr(auth, '@', alen) != NULL) {
		error_set(err, 400, "url %s: want http://HOST:PORT/PATH (no "
		    "user name; send credentials in \"headers\")", url);
		return -1;
	}
	if (auth[0] == '[') {
		const char *end = memchr(auth, ']', alen);

		if (end == NULL)
			goto bad_host;
		host = xstrndup(auth + 1, (size_t)(end - auth - 1));
		colon = end + 1 < rest && end[1] == ':' ? end + 1 : NULL;
		if (end + 1 != rest && colon == NULL)
			goto bad_host;
		if (inet_pton(AF_INET6, host, buf) != 1)
			goto bad_host;
	} else {
		colon = memchr(auth, ':', alen);
		host = xstrndup(auth, colon != NULL ? (size_t)(colon - auth) :
		    alen);
		if (strcasecmp(host, "localhost") == 0) {
			free(host);
			host = xstrdup("127.0.0.1");
		}
		if (inet_pton(AF_INET, host, buf) != 1)
			goto bad_host;
	}
	if (colon != NULL) {
		char *end;

		port = strtol(colon + 1, &end, 10);
		if (end != rest || end == colon + 1 || port < 1 || port > 65535) {
			error_set(err, 400, "url %s: bad port", url);
			free(host);
			return -1;
		}
	}
	u->addr = strchr(host, ':') != NULL ?
	    xasprintf("[%s]:%ld", host, port) : xasprintf("%s:%ld", host, port);
	u->host = xstrndup(auth, alen);
	u->target = xasprintf("%s%.*s", *rest == '/' ? "" : "/",
	    (int)strcspn(rest, "#"), rest);
	free(host);
	return 0;
bad_host:
	error_set(err, 400, "url %s: the host must be an IP address or "
	    "localhost (the agent resolves no names)", url);
	free(host);
	return -1;
}
