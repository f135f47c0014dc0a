/*
 * Errors travel up as a struct error filled by the function that failed
 * (crun style): the HTTP status the failure implies and a message fit for
 * the client. Route handlers turn it into {"detail": msg}.
 */
#ifndef ERROR_H
#define ERROR_H

#include <stdarg.h>

#define ERROR_MSG_MAX 1024

struct error {
	int status;	/* HTTP status: 400, 403, 404, 409, 413, 500, 504 ... */
	char msg[ERROR_MSG_MAX];
};

void error_set(struct error *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void error_vset(struct error *err, int status, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* error_set with ": strerror(errnum)" appended. */
void error_set_errno(struct error *err, int status, int errnum,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Put context in front of the message: "context: old message". */
void error_prefix(struct error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
