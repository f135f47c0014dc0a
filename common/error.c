#include "error.h"

#include <stdio.h>
#include <string.h>

void
error_vset(struct error *err, int status, const char *fmt, va_list ap)
{
	if (err == NULL)
		return;
	err->status = status;
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
}

void
error_set(struct error *err, int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	error_vset(err, status, fmt, ap);
	va_end(ap);
}

void
error_set_errno(struct error *err, int status, int errnum, const char *fmt, ...)
{
	char buf[128];
	va_list ap;
	size_t len;

	if (err == NULL)
		return;
	va_start(ap, fmt);
	error_vset(err, status, fmt, ap);
	va_end(ap);
	len = strlen(err->msg);
	/* Worker threads (git, native tools) fail too: strerror_r. */
	snprintf(err->msg + len, sizeof err->msg - len, ": %s",
	    strerror_r(errnum, buf, sizeof buf));
}

void
error_prefix(struct error *err, const char *fmt, ...)
{
	char old[ERROR_MSG_MAX];
	va_list ap;
	size_t len;

	if (err == NULL)
		return;
	memcpy(old, err->msg, sizeof old);
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	len = strlen(err->msg);
	snprintf(err->msg + len, sizeof err->msg - len, ": %s", old);
}
