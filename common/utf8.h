/* Text from processes and files is bytes; JSON wants UTF-8. */
#ifndef UTF8_H
#define UTF8_H

#include <stddef.h>

#include <jansson.h>

/* Length of the longest prefix of s that does not end inside a UTF-8
 * sequence which more bytes could still complete (for streamed output cut
 * at arbitrary points). */
size_t utf8_complete_prefix(const char *s, size_t len);
int utf8_valid(const char *s, size_t len);
/* Copy of s with every invalid sequence replaced by U+FFFD; NUL-terminated,
 * *outlen set when not NULL. Caller frees. */
char *utf8_sanitize(const char *s, size_t len, size_t *outlen);
/* A JSON string of s, invalid sequences replaced. New reference. */
json_t *utf8_json_string(const char *s, size_t len);

/* The unfinished UTF-8 sequence at the end of a byte stream's last piece
 * (a pipe cuts anywhere), held for the next one. Zero it to start. */
struct utf8_carry {
	char bytes[4];
	size_t n;
};
/* The JSON string of what carry held followed by data, without an
 * unfinished sequence at its end, which carry keeps; len 0 lets it out
 * (the stream ended). NULL when there is nothing to send. New reference. */
json_t *utf8_carry_json(struct utf8_carry *carry, const char *data,
    size_t len);

#endif
