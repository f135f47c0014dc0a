/* Internals shared by fstools_glob.c (matching) and fstools_glob_brace.c (brace
 * expansion). */
#ifndef FSTOOLS_GLOB_H
#define FSTOOLS_GLOB_H

#include <stddef.h>

/* brace-expansion caps its output; so do we. */
#define FSTOOLS_GLOB_MAX_EXPANSIONS 10000

/* A list of strings; the owner frees it with fstools_glob_strv_free. */
struct strv {
	char **v;
	size_t n;
};

/* Append s, taking it over. */
void fstools_glob_strv_add(struct strv *sv, char *s);
void fstools_glob_strv_free(struct strv *sv);

/* minimatch's braceExpand: the patterns "a{b,c}d" or "x{1..3}" stand for,
 * by the rules of the brace-expansion package (bash's). */
void fstools_glob_brace_expand(const char *pattern, struct strv *out);

#endif
