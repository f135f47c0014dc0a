/*
 * Request fields as protobuf's canonical JSON mapping allows a parser to
 * take them: the lowerCamelCase name or the proto field name, null for
 * absent, 32-bit integers as numbers or decimal strings, enums by name or
 * number, bytes as base64 of either alphabet, with or without padding.
 * Base64 is Nettle's.
 */
#include "envd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <nettle/base64.h>

#include "xmalloc.h"

json_t *
envd_json_field(json_t *obj, const char *camel, const char *proto)
{
	json_t *v = json_object_get(obj, camel);

	if ((v == NULL || json_is_null(v)) && proto != NULL)
		v = json_object_get(obj, proto);
	return json_is_null(v) ? NULL : v;
}

static int
wrong_type(const char *camel, const char *want, struct error *err)
{
	error_set(err, 400, "field '%s' must be %s", camel, want);
	return -1;
}

int
envd_json_string(json_t *obj, const char *camel, const char *proto,
    const char **out, struct error *err)
{
	json_t *v = envd_json_field(obj, camel, proto);

	*out = NULL;
	if (v == NULL)
		return 0;
	if (!json_is_string(v))
		return wrong_type(camel, "a string", err);
	if (strlen(json_string_value(v)) != json_string_length(v)) {
		error_set(err, 400, "field '%s' holds a NUL byte", camel);
		return -1;
	}
	*out = json_string_value(v);
	return 0;
}

int
envd_json_bool(json_t *obj, const char *camel, const char *proto, int *out,
    struct error *err)
{
	json_t *v = envd_json_field(obj, camel, proto);

	*out = 0;
	if (v == NULL)
		return 0;
	if (!json_is_boolean(v))
		return wrong_type(camel, "true or false", err);
	*out = json_is_true(v);
	return 0;
}

int
envd_json_uint32(json_t *obj, const char *camel, const char *proto,
    uint32_t *out, int *present, struct error *err)
{
	json_t *v = envd_json_field(obj, camel, proto);
	unsigned long long n;
	const char *s;
	char *end;

	*out = 0;
	*present = 0;
	if (v == NULL)
		return 0;
	if (json_is_integer(v)) {
		if (json_integer_value(v) < 0 ||
		    json_integer_value(v) > UINT32_MAX)
			return wrong_type(camel, "a 32-bit unsigned integer", err);
		*out = (uint32_t)json_integer_value(v);
	} else if (json_is_string(v)) {
		s = json_string_value(v);
		errno = 0;
		n = strtoull(s, &end, 10);
		if (*s < '0' || *s > '9' || *end != '\0' || errno != 0 ||
		    n > UINT32_MAX)
			return wrong_type(camel, "a 32-bit unsigned integer", err);
		*out = (uint32_t)n;
	} else {
		return wrong_type(camel, "a 32-bit unsigned integer", err);
	}
	*present = 1;
	return 0;
}

int
envd_json_object(json_t *obj, const char *camel, const char *proto,
    json_t **out, struct error *err)
{
	json_t *v = envd_json_field(obj, camel, proto);

	*out = NULL;
	if (v == NULL)
		return 0;
	if (!json_is_object(v))
		return wrong_type(camel, "an object", err);
	*out = v;
	return 0;
}

int
envd_json_bytes(json_t *obj, const char *camel, const char *proto,
    char **out, size_t *len, struct error *err)
{
	json_t *v = envd_json_field(obj, camel, proto);
	struct base64_decode_ctx ctx;
	const char *s;
	size_t n, padded, got;
	char *text;
	int ok;

	*out = NULL;
	*len = 0;
	if (v == NULL)
		return 0;
	if (!json_is_string(v))
		return wrong_type(camel, "base64 text", err);
	s = json_string_value(v);
	n = json_string_length(v);
	/* Nettle wants whole groups: the padding a sender may leave out. */
	padded = (n + 3) / 4 * 4;
	text = xmalloc(padded + 1);
	memcpy(text, s, n);
	memset(text + n, '=', padded - n);
	if (strpbrk(s, "-_") != NULL)
		base64url_decode_init(&ctx);
	else
		base64_decode_init(&ctx);
	*out = xmalloc(BASE64_DECODE_LENGTH(padded) + 1);
	got = BASE64_DECODE_LENGTH(padded) + 1;
	ok = strlen(s) == n && base64_decode_update(&ctx, &got,
	    (uint8_t *)*out, padded, text) && base64_decode_final(&ctx);
	free(text);
	if (!ok) {
		free(*out);
		*out = NULL;
		return wrong_type(camel, "base64 text", err);
	}
	*len = got;
	return 0;
}

int
envd_json_enum(json_t *obj, const char *camel, const char *proto,
    const char *const *names, size_t nnames, int *out, struct error *err)
{
	json_t *v = envd_json_field(obj, camel, proto);

	*out = 0;
	if (v == NULL)
		return 0;
	if (json_is_integer(v) && json_integer_value(v) >= 0 &&
	    json_integer_value(v) < (json_int_t)nnames) {
		*out = (int)json_integer_value(v);
		return 0;
	}
	for (size_t i = 0; json_is_string(v) && i < nnames; i++)
		if (names[i] != NULL &&
		    strcmp(names[i], json_string_value(v)) == 0) {
			*out = (int)i;
			return 0;
		}
	error_set(err, 400, "field '%s': unknown value", camel);
	return -1;
}

size_t
envd_base64_encode(char *out, const void *data, size_t len)
{
	size_t n = BASE64_ENCODE_RAW_LENGTH(len);

	base64_encode_raw(out, len, data);
	out[n] = '\0';
	return n;
}

json_t *
envd_json_base64(const void *data, size_t len)
{
	char *text = xmalloc(ENVD_B64_LEN(len) + 1);
	size_t n = envd_base64_encode(text, data, len);
	json_t *s = json_stringn(text, n);

	free(text);
	return s;
}
