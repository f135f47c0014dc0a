/*
 * Brace expansion as minimatch does it through the brace-expansion
 * package: {a,b} sets (nested, empty members), {1..5} / {a..e} / {01..10..2}
 * sequences, "\\{" escapes, a leading "{}" kept, "${...}" left alone and
 * empty results dropped at the top level, and bash's "{a},b}" quirk (a
 * group that is no set gives up its "}" to a comma set after it).
 */
#include "fstools_glob.h"

#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

/* Placeholders for escaped \\ \{ \} \, \. while braces expand. */
enum { ESC_SLASH = 1, ESC_OPEN, ESC_CLOSE, ESC_COMMA, ESC_PERIOD };

/* The leftmost outermost balanced {...} of s, unmatched "{" being
 * literal: *open and *close index it. 0 when there is none. */
static int
find_group(const char *s, size_t *open, size_t *close)
{
	size_t len = strlen(s), depth = 0, *stack = xmalloc((len + 1) *
	    sizeof *stack);
	int found = 0;

	for (size_t i = 0; i < len; i++) {
		if (s[i] == '{') {
			stack[depth++] = i;
		} else if (s[i] == '}' && depth > 0) {
			size_t o = stack[--depth];

			if (!found || o < *open) {
				*open = o;
				*close = i;
				found = 1;
			}
		}
	}
	free(stack);
	return found;
}

static int
all_digits(const char *s, const char *end)
{
	if (s < end && *s == '-')
		s++;
	if (s == end)
		return 0;
	for (; s < end; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

/* "1..5", "-3..3..2", "a..e", "a..z..3": the parts, or 0. */
static int
sequence_parts(const char *body, const char *part[3], size_t len[3],
    int *alpha)
{
	const char *p = body;
	size_t n = 0;

	while (n < 3) {
		const char *dots = strstr(p, "..");

		part[n] = p;
		len[n] = dots != NULL ? (size_t)(dots - p) : strlen(p);
		n++;
		if (dots == NULL)
			break;
		p = dots + 2;
	}
	if (n < 2 || (n == 3 && strstr(part[2], "..") != NULL))
		return 0;
	if (n == 3 && !all_digits(part[2], part[2] + len[2]))
		return 0;
	*alpha = len[0] == 1 && len[1] == 1 &&
	    ((part[0][0] | 0x20) >= 'a' && (part[0][0] | 0x20) <= 'z') &&
	    ((part[1][0] | 0x20) >= 'a' && (part[1][0] | 0x20) <= 'z');
	if (*alpha)
		return (int)n;
	if (!all_digits(part[0], part[0] + len[0]) ||
	    !all_digits(part[1], part[1] + len[1]))
		return 0;
	return (int)n;
}

static int
padded(const char *s, size_t len)
{
	if (len > 0 && *s == '-') {
		s++;
		len--;
	}
	return len >= 2 && s[0] == '0' && s[1] >= '0' && s[1] <= '9';
}

static void
expand_sequence(const char *body, struct strv *out)
{
	const char *part[3];
	size_t len[3];
	int alpha, n = sequence_parts(body, part, len, &alpha), pad = 0;
	long long x, y, incr = 1;
	size_t width = len[0] > len[1] ? len[0] : len[1];

	for (int i = 0; i < n; i++)
		pad |= padded(part[i], len[i]);
	x = alpha ? (unsigned char)part[0][0] : strtoll(part[0], NULL, 10);
	y = alpha ? (unsigned char)part[1][0] : strtoll(part[1], NULL, 10);
	if (n == 3) {
		incr = llabs(strtoll(part[2], NULL, 10));
		if (incr < 1)
			incr = 1;
	}
	if (y < x)
		incr = -incr;
	for (long long i = x; incr > 0 ? i <= y : i >= y; i += incr) {
		if (out->n >= FSTOOLS_GLOB_MAX_EXPANSIONS)
			break;
		if (alpha) {
			fstools_glob_strv_add(out, i == '\\' ? xstrdup("") :
			    xasprintf("%c", (char)i));
		} else {
			char *num = xasprintf("%lld", i);
			size_t len_num = strlen(num);

			if (pad && width > len_num) {
				size_t need = width - len_num;
				char *z = xmalloc(need + 1);

				memset(z, '0', need);
				z[need] = '\0';
				fstools_glob_strv_add(out, i < 0 ?
				    xasprintf("-%s%s", z, num + 1) :
				    xasprintf("%s%s", z, num));
				free(z);
				free(num);
			} else {
				fstools_glob_strv_add(out, num);
			}
		}
	}
}
static void expand(const char *s, int top, struct strv *out);

/* Split a set's body at its top-level commas. */
static void
comma_parts(const char *body, struct strv *out)
{
	size_t depth = 0;
	const char *start = body;

	for (const char *p = body;; p++) {
		if (*p == '{') {
			depth++;
		} else if (*p == '}' && depth > 0) {
			depth--;
		} else if ((*p == ',' && depth == 0) || *p == '\0') {
			fstools_glob_strv_add(out, xstrndup(start,
			    (size_t)(p - start)));
			if (*p == '\0')
				break;
			start = p + 1;
		}
	}
}

static void
combine(struct strv *acc, const char *pre, size_t prelen,
    const struct strv *values, int drop_empties)
{
	struct strv next = { 0 };

	for (size_t a = 0; a < acc->n; a++) {
		int empty_prefix = acc->v[a][0] == '\0' && prelen == 0;

		for (size_t v = 0; v < values->n; v++) {
			if (next.n >= FSTOOLS_GLOB_MAX_EXPANSIONS)
				break;
			if (drop_empties && empty_prefix &&
			    values->v[v][0] == '\0')
				continue;
			fstools_glob_strv_add(&next, xasprintf("%s%.*s%s",
			    acc->v[a],
			    (int)prelen, pre, values->v[v]));
		}
	}
	fstools_glob_strv_free(acc);
	*acc = next;
}

/* Whether a "," (not followed by another) has a "}" after it on its line:
 * the condition of the "{a},b}" rewrite. */
static int
comma_set_follows(const char *s)
{
	int close = 0;

	for (size_t i = strlen(s); i-- > 0;) {
		if (s[i] == '}')
			close = 1;
		else if (s[i] == '\n' || s[i] == '\r')
			close = 0;
		else if (s[i] == ',' && close && s[i + 1] != ',')
			return 1;
	}
	return 0;
}

static void
expand(const char *s, int top, struct strv *out)
{
	int rewrites = 0;
	struct strv acc = { 0 }, empty = { 0 };
	int drop = 0, first = 1;
	char *str = xstrdup(s);

	fstools_glob_strv_add(&acc, xstrdup(""));
	fstools_glob_strv_add(&empty, xstrdup(""));
	for (;;) {
		size_t open = 0, close = 0;
		struct strv values = { 0 };
		const char *body, *post;
		char *b;
		int seq_alpha, is_seq;
		const char *parts[3];
		size_t lens[3];

		if (!find_group(str, &open, &close)) {
			combine(&acc, str, strlen(str), &empty, drop);
			break;
		}
		b = xstrndup(str + open + 1, close - open - 1);
		body = b;
		post = str + close + 1;
		is_seq = sequence_parts(body, parts, lens, &seq_alpha) > 0;
		if ((open > 0 && str[open - 1] == '$') ||
		    (!is_seq && strchr(body, ',') == NULL)) {
			/* Not a set: literal, and so is the rest after a
			 * non-set (bash only expands "${...}" later on). */
			int dollar = open > 0 && str[open - 1] == '$';

			if (!dollar && rewrites < 1000 &&
			    comma_set_follows(post)) {
				rewrites++;
				str[close] = ESC_CLOSE;
				top = 1;
				free(b);
				continue;
			}
			combine(&acc, str, dollar ? close + 1 : strlen(str),
			    &empty, drop && (!dollar || *post == '\0'));
			free(b);
			if (!dollar || *post == '\0')
				break;
			memmove(str, post, strlen(post) + 1);
			first = 0;
			continue;
		}
		if (first) {
			drop = top && !is_seq;
			first = 0;
		}
		if (is_seq) {
			expand_sequence(body, &values);
		} else {
			struct strv parts_v = { 0 };

			comma_parts(body, &parts_v);
			if (parts_v.n == 1) {
				/* x{{a,b}}y is x{a}y x{b}y */
				expand(parts_v.v[0], 0, &values);
				for (size_t j = 0; j < values.n; j++) {
					char *w = xasprintf("{%s}",
					    values.v[j]);

					free(values.v[j]);
					values.v[j] = w;
				}
			} else {
				for (size_t j = 0; j < parts_v.n; j++)
					expand(parts_v.v[j], 0, &values);
			}
			fstools_glob_strv_free(&parts_v);
		}
		combine(&acc, str, open, &values, drop && *post == '\0');
		fstools_glob_strv_free(&values);
		free(b);
		if (*post == '\0')
			break;
		memmove(str, post, strlen(post) + 1);
	}
	for (size_t i = 0; i < acc.n; i++) {
		if (out->n < FSTOOLS_GLOB_MAX_EXPANSIONS)
			fstools_glob_strv_add(out, acc.v[i]);
		else
			free(acc.v[i]);
	}
	free(acc.v);
	fstools_glob_strv_free(&empty);
	free(str);
}

/* minimatch only expands when a "{" is followed by a "}" with no "{" in
 * between. */
static int
has_braces(const char *p)
{
	const char *open = NULL;

	for (; *p != '\0'; p++) {
		if (*p == '{')
			open = p;
		else if (*p == '}' && open != NULL)
			return 1;
		else if (*p == '\n' || *p == '\r')
			open = NULL;
	}
	return 0;
}

void
fstools_glob_brace_expand(const char *pattern, struct strv *out)
{
	char *esc, *o;

	if (!has_braces(pattern)) {
		fstools_glob_strv_add(out, xstrdup(pattern));
		return;
	}
	esc = xmalloc(strlen(pattern) + 3);
	o = esc;
	if (strncmp(pattern, "{}", 2) == 0) {
		*o++ = ESC_OPEN;
		*o++ = ESC_CLOSE;
		pattern += 2;
	}
	for (const char *p = pattern; *p != '\0'; p++) {
		if (*p == '\\' && p[1] != '\0' && strchr("\\{},.", p[1])) {
			*o++ = (char)(ESC_SLASH + (strchr("\\{},.", p[1]) -
			    "\\{},."));
			p++;
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
	expand(esc, 1, out);
	free(esc);
	for (size_t i = 0; i < out->n; i++)
		for (char *c = out->v[i]; *c != '\0'; c++)
			if (*c >= ESC_SLASH && *c <= ESC_PERIOD)
				*c = "\\{},."[*c - ESC_SLASH];
}

