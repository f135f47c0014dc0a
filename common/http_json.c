/*
 * JSON request bodies, parsed at a bounded cost.
 *
 * jansson spends far more on a value than the value's text: an empty array
 * "[]," (3 bytes) becomes about 140 bytes of nodes, an empty object about
 * 230, so a 30 MiB body of "[]," took 1.4 GiB. Before parsing, one pass
 * over the text estimates what jansson will allocate, with weights a little
 * above what it really takes per value (jansson 2.14 on 64 bits; strings'
 * own bytes aside, which are fewer than the body's), and refuses a body
 * whose structure would cost more than STRUCTURE_FACTOR times its size
 * (plus STRUCTURE_BASE, so small bodies are never refused), or more than
 * STRUCTURE_MAX in all. Objects of short strings, as real requests have,
 * take about 11 times their text, hence the factor. Texts of commands,
 * code and files are single strings: they cost their length, and pass at
 * any size the route allows.
 */
#include "http.h"

#include <stdint.h>

#define COST_OBJECT	256	/* json_object_t and its first hash buckets */
#define COST_ARRAY	160	/* json_array_t and its first slots */
#define COST_STRING	96	/* json_string_t, or the pair of a key */
#define COST_MEMBER	32	/* a key's share of its object's hash table */
#define COST_NUMBER	48	/* json_integer_t or json_real_t, and its slot */
#define COST_LITERAL	16	/* true, false, null: shared; only the slot */

#define STRUCTURE_FACTOR	16
#define STRUCTURE_BASE		(1024 * 1024)
#define STRUCTURE_MAX		(64 * 1024 * 1024)

/* What parsing text would allocate besides string bytes; an upper bound for
 * valid JSON (invalid text fails in jansson, having allocated no more). */
static int
in_number(char c)
{
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' ||
	    c == 'e' || c == 'E';
}

static uint64_t
structure_cost(const char *text, size_t len, uint64_t *values)
{
	uint64_t cost = 0, n = 0;

	for (size_t i = 0; i < len; i++) {
		switch (text[i]) {
		case '"':
			cost += COST_STRING;
			n++;
			/* Skip the string; an escape may hide a quote. */
			for (i++; i < len && text[i] != '"'; i++) {
				if (text[i] == '\\')
					i++;
			}
			break;
		case '{':
			cost += COST_OBJECT;
			n++;
			break;
		case '[':
			cost += COST_ARRAY;
			n++;
			break;
		case ':':
			cost += COST_MEMBER;
			break;
		case 't': case 'f': case 'n':
			cost += COST_LITERAL;
			n++;
			while (i + 1 < len && text[i + 1] >= 'a' &&
			    text[i + 1] <= 'z')
				i++;
			break;
		case '-': case '0': case '1': case '2': case '3': case '4':
		case '5': case '6': case '7': case '8': case '9':
			cost += COST_NUMBER;
			n++;
			while (i + 1 < len && in_number(text[i + 1]))
				i++;
			break;
		default:
			break;
		}
	}
	*values = n;
	return cost;
}

json_t *
http_json_parse(const char *text, size_t len, struct error *err)
{
	uint64_t values, cost, limit;
	json_error_t jerr;
	json_t *json;

	if (len == 0) {
		error_set(err, 400, "request body is empty; a JSON object is expected");
		return NULL;
	}
	cost = structure_cost(text, len, &values);
	limit = (uint64_t)len * STRUCTURE_FACTOR + STRUCTURE_BASE;
	if (limit > STRUCTURE_MAX)
		limit = STRUCTURE_MAX;
	if (cost > limit) {
		error_set(err, 413, "JSON body too complex: its %llu values in %zu "
		    "bytes would take about %llu MiB to parse, over the %llu MiB "
		    "allowed for its size", (unsigned long long)values, len,
		    (unsigned long long)(cost >> 20),
		    (unsigned long long)(limit >> 20));
		return NULL;
	}
	json = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (json == NULL) {
		error_set(err, 400, "malformed JSON body: %s (line %d, column %d)",
		    jerr.text, jerr.line, jerr.column);
		return NULL;
	}
	if (!json_is_object(json)) {
		json_decref(json);
		error_set(err, 400, "the JSON body must be an object");
		return NULL;
	}
	return json;
}
