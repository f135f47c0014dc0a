/* jsonx: what we add to jansson, whose json_ prefix is its own. Reading
 * typed fields of request objects with clear 400 errors (a JSON null
 * counts as absent), and escaping long strings as they are written. */
#ifndef JSONX_H
#define JSONX_H

#include <jansson.h>

#include "error.h"

/* *out points into obj (borrowed); NULL when absent and not required. */
int jsonx_get_string(json_t *obj, const char *key, int required,
    const char **out, struct error *err);
int jsonx_get_bool(json_t *obj, const char *key, int def, int *out,
    struct error *err);
int jsonx_get_number(json_t *obj, const char *key, double def, double *out,
    struct error *err);
/* Borrowed; NULL when absent and not required. */
int jsonx_get_object(json_t *obj, const char *key, int required, json_t **out,
    struct error *err);
int jsonx_get_array(json_t *obj, const char *key, int required, json_t **out,
    struct error *err);

/* zod's name for the type of a JSON value ("string", "number", ...), as
 * the MCP SDK's argument errors say what they received. */
const char *jsonx_zod_type(json_t *v);

struct evbuffer;

/* Append s (valid UTF-8) as the inside of a JSON string literal, escaped as
 * jansson would: for writing large strings without building them in memory. */
void jsonx_escape_append(struct evbuffer *out, const char *s, size_t len);

#endif
