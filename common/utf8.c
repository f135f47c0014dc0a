#include "utf8.h"

#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

/* Length of the valid sequence at s (1-4), 0 if invalid, -1 if truncated. */
static int
sequence_length(const unsigned char *s, size_t len)
{
	unsigned char c = s[0];
	int n;
	unsigned int cp, min;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2; cp = c & 0x1f; min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3; cp = c & 0x0f; min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4; cp = c & 0x07; min = 0x10000;
	} else
		return 0;
	for (int i = 1; i < n; i++) {
		if ((size_t)i >= len)
			return -1;
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates and values past U+10FFFF are invalid. */
	if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return n;
}

size_t
utf8_complete_prefix(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t start = len > 3 ? len - 3 : 0;

	for (size_t i = start; i < len; i++) {
		if ((u[i] & 0xc0) == 0x80)
			continue;
		if (sequence_length(u + i, len - i) == -1)
			return i;
	}
	return len;
}

char *
utf8_sanitize(const char *s, size_t len, size_t *outlen)
{
	const unsigned char *u = (const unsigned char *)s;
	/* Each bad byte becomes 3 bytes at most. */
	char *out = xmalloc(len * 3 + 1);
	size_t o = 0;

	for (size_t i = 0; i < len;) {
		int n = sequence_length(u + i, len - i);

		if (n <= 0) {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
			continue;
		}
		memcpy(out + o, s + i, (size_t)n);
		o += (size_t)n;
		i += (size_t)n;
	}
	out[o] = '\0';
	if (outlen != NULL)
		*outlen = o;
	return out;
}

int
utf8_valid(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;

	for (size_t i = 0; i < len;) {
		int n = sequence_length(u + i, len - i);

		if (n <= 0)
			return 0;
		i += (size_t)n;
	}
	return 1;
}

json_t *
utf8_json_string(const char *s, size_t len)
{
	size_t olen;
	char *clean;
	json_t *j;

	if (s == NULL || len == 0)
		return json_string("");
	if (utf8_valid(s, len))
		return json_stringn_nocheck(s, len);
	clean = utf8_sanitize(s, len, &olen);
	j = json_stringn_nocheck(clean, olen);
	free(clean);
	return j;
}

json_t *
utf8_carry_json(struct utf8_carry *carry, const char *data, size_t len)
{
	char stackbuf[64 * 1024 + sizeof carry->bytes], *buf = stackbuf;
	size_t total = carry->n + len, whole;
	json_t *text = NULL;

	if (total > sizeof stackbuf)
		buf = xmalloc(total);
	memcpy(buf, carry->bytes, carry->n);
	if (len > 0)
		memcpy(buf + carry->n, data, len);
	whole = len > 0 ? utf8_complete_prefix(buf, total) : total;
	carry->n = total - whole;
	memcpy(carry->bytes, buf + whole, carry->n);
	if (whole > 0)
		text = utf8_json_string(buf, whole);
	if (buf != stackbuf)
		free(buf);
	return text;
}
