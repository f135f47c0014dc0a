/*
 * A streaming parser of multipart/form-data bodies (RFC 7578, RFC 2046):
 * feed it the body in pieces of any size as they arrive and it calls back
 * at each part's headers, with each piece of a part's data, and at each
 * part's end. It never holds more than one part's headers and a delimiter's
 * length of data, so a part of any size streams through in constant memory.
 *
 * No Debian C library parses multipart incrementally (libmicrohttpd's
 * post processor is tied to its server), hence this one.
 */
#ifndef MULTIPART_H
#define MULTIPART_H

#include <stddef.h>

#include "error.h"

#define MULTIPART_MAX_BOUNDARY	70	/* RFC 2046 */
#define MULTIPART_MAX_HEADERS	(16 * 1024)	/* bytes of one part's headers */

/* What a part's headers say; strings valid during part_begin only. */
struct multipart_part {
	const char *name;		/* Content-Disposition name; never NULL */
	const char *filename;		/* NULL when the part has none */
	const char *content_type;	/* NULL when absent */
};

/* Each callback returns 0, or -1 with err set to stop the parser. */
struct multipart_callbacks {
	int (*part_begin)(const struct multipart_part *part, void *arg,
	    struct error *err);
	int (*part_data)(const char *data, size_t len, void *arg,
	    struct error *err);
	int (*part_end)(void *arg, struct error *err);
};

struct multipart;

/* The boundary of a Content-Type header value. 400 unless it is
 * multipart/form-data with a usable boundary. Caller frees. */
char *multipart_boundary(const char *content_type, struct error *err);

/* cb is not copied and must outlive the parser. Freed by multipart_free. */
struct multipart *multipart_new(const char *boundary,
    const struct multipart_callbacks *cb, void *arg);
/* Parse the next piece of the body. -1 with err (400 for malformed input,
 * or what a callback set); once failed, every later call fails. */
int multipart_feed(struct multipart *mp, const char *data, size_t len,
    struct error *err);
/* The body is complete: 400 if the closing boundary was not seen. */
int multipart_finish(struct multipart *mp, struct error *err);
void multipart_free(struct multipart *mp);

#endif
