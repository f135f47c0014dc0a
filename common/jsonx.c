#include "jsonx.h"

#include <stdio.h>

#include <event2/buffer.h>

static json_t *
field(json_t *obj, const char *key, int required, struct error *err)
{
	json_t *v = json_object_get(obj, key);

	if (v != NULL && !json_is_null(v))
		return v;
	if (required)
		error_set(err, 400, "field '%s' is required", key);
	return NULL;
}

int
jsonx_get_string(json_t *obj, const char *key, int required, const char **out,
    struct error *err)
{
	json_t *v = field(obj, key, required, err);

	*out = NULL;
	if (v == NULL)
		return required ? -1 : 0;
	if (!json_is_string(v)) {
		error_set(err, 400, "field '%s' must be a string", key);
		return -1;
	}
	*out = json_string_value(v);
	return 0;
}

int
jsonx_get_bool(json_t *obj, const char *key, int def, int *out,
    struct error *err)
{
	json_t *v = field(obj, key, 0, err);

	*out = def;
	if (v == NULL)
		return 0;
	if (!json_is_boolean(v)) {
		error_set(err, 400, "field '%s' must be true or false", key);
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

int
jsonx_get_number(json_t *obj, const char *key, double def, double *out,
    struct error *err)
{
	json_t *v = field(obj, key, 0, err);

	*out = def;
	if (v == NULL)
		return 0;
	if (!json_is_number(v)) {
		error_set(err, 400, "field '%s' must be a number", key);
		return -1;
	}
	*out = json_number_value(v);
	return 0;
}

int
jsonx_get_object(json_t *obj, const char *key, int required, json_t **out,
    struct error *err)
{
	json_t *v = field(obj, key, required, err);

	*out = NULL;
	if (v == NULL)
		return required ? -1 : 0;
	if (!json_is_object(v)) {
		error_set(err, 400, "field '%s' must be an object", key);
		return -1;
	}
	*out = v;
	return 0;
}

int
jsonx_get_array(json_t *obj, const char *key, int required, json_t **out,
    struct error *err)
{
	json_t *v = field(obj, key, required, err);

	*out = NULL;
	if (v == NULL)
		return required ? -1 : 0;
	if (!json_is_array(v)) {
		error_set(err, 400, "field '%s' must be an array", key);
		return -1;
	}
	*out = v;
	return 0;
}

void
jsonx_escape_append(struct evbuffer *out, const char *s, size_t len)
{
	size_t run = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		evbuffer_add(out, s + run, i - run);
		run = i + 1;
		switch (c) {
		case '"': evbuffer_add(out, "\\\"", 2); break;
		case '\\': evbuffer_add(out, "\\\\", 2); break;
		case '\n': evbuffer_add(out, "\\n", 2); break;
		case '\r': evbuffer_add(out, "\\r", 2); break;
		case '\t': evbuffer_add(out, "\\t", 2); break;
		case '\b': evbuffer_add(out, "\\b", 2); break;
		case '\f': evbuffer_add(out, "\\f", 2); break;
		default:
			snprintf(esc, sizeof esc, "\\u%04X", c);
			evbuffer_add(out, esc, 6);
			break;
		}
	}
	evbuffer_add(out, s + run, len - run);
}

const char *
jsonx_zod_type(json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_STRING:
		return "string";
	case JSON_INTEGER:
	case JSON_REAL:
		return "number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "boolean";
	case JSON_NULL:
		return "null";
	case JSON_ARRAY:
		return "array";
	default:
		return "object";
	}
}
