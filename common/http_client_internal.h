/* Shared by the client's files only (http_client*.c). */
#ifndef HTTP_CLIENT_INTERNAL_H
#define HTTP_CLIENT_INTERNAL_H

#include <sys/socket.h>

#include "http_client.h"

/* "unix:/path" or "HOST:PORT" with a numeric host; 400 otherwise. */
int http_client_parse_addr(const char *addr, struct sockaddr_storage *ss,
    socklen_t *sslen, struct error *err);
/* 400 for options that would send something other than the caller meant
 * (control characters, a header without a name ...). */
int http_client_check_options(const struct http_client_options *o,
    const struct http_client_callbacks *cb, struct error *err);
/* Request line, headers and the whole body if there is one. */
void http_client_write_head(const struct http_client_options *o,
    struct evbuffer *out);
/* A non-blocking socket connecting to ss; -1 with errno when the connect
 * failed at once (ENOENT, ECONNREFUSED on a unix socket). */
int http_client_open_socket(const struct sockaddr_storage *ss,
    socklen_t sslen);

#endif
