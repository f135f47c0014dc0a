/* Internals shared by fsglob.c (matching) and fsglob_brace.c (brace
 * expansion). */
#ifndef FSGLOB_H
#define FSGLOB_H

#include <stddef.h>

/* brace-expansion caps its output; so do we. */
#define FSGLOB_MAX_EXPANSIONS 10000

/* A list of strings; the owner frees it with fsglob_strv_free. */
struct strv {
	char **v;
	size_t n;
};

/* Append s, taking it over. */
void fsglob_strv_add(struct strv *sv, char *s);
void fsglob_strv_free(struct strv *sv);

/* minimatch's braceExpand: the patterns "a{b,c}d" or "x{1..3}" stand for,
 * by the rules of the brace-expansion package (bash's). */
void fsglob_brace_expand(const char *pattern, struct strv *out);

#endif
