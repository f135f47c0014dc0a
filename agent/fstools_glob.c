/*
 * Glob matching as minimatch(path, pattern, {dot: true}) does it, for the
 * pattern syntax people use: leading "!" negation, "#" comments, brace
 * expansion (bash rules, as the brace-expansion package), "**" path
 * segments, and within a segment *, ?, [...] classes (ranges, negation,
 * POSIX classes) and backslash escapes. Extglobs are not supported: their
 * characters match literally.
 */
#include "fstools.h"
#include "fstools_glob.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

enum tok_kind { TOK_LIT, TOK_ANY, TOK_STAR, TOK_CLASS };

struct class_item {
	uint32_t lo, hi;
	const char *posix;	/* a POSIX class name instead of a range */
};

/* A [...] class: matches c when (c in ranges) != negate, or, with
 * negated POSIX classes present, when (c in negs) == negate. */
struct char_class {
	int negate;
	struct class_item *ranges, *negs;
	size_t nranges, nnegs;
};

struct tok {
	enum tok_kind kind;
	uint32_t cp;
	struct char_class *cls;
};

/* minimatch tests the commonest segment shapes without its regex, and
 * those tests take the text after the stars or question marks literally,
 * backslashes included; the same shortcuts are kept here for the same
 * answers. */
enum fast {
	FAST_NONE,
	FAST_STAR,		/* "*": any name */
	FAST_STAR_EXT,		/* "*.txt": ends with ".txt" */
	FAST_QMARKS,		/* "??.c": as long as the pattern, same end */
	FAST_STAR_DOT_STAR,	/* "*.*": contains a dot */
	FAST_DOT_STAR,		/* ".*": starts with a dot */
};

struct segment {
	int globstar;
	enum fast fast;
	char *ext;		/* FAST_STAR_EXT, FAST_QMARKS */
	size_t qlen;		/* FAST_QMARKS: the pattern's UTF-16 length */
	struct tok *toks;
	size_t ntoks;
};

struct alternative {
	struct segment *segs;
	size_t nsegs;
};

/* Owned by its creator; fstools_glob_free releases everything. */
struct fstools_glob {
	int negate, comment, empty;
	struct alternative *alts;
	size_t nalts;
};

/* Decode one UTF-8 character; invalid bytes decode to U+FFFD. */
static uint32_t
next_cp(const char **sp)
{
	const unsigned char *s = (const unsigned char *)*sp;
	uint32_t cp;
	int n;

	if (s[0] < 0x80) {
		*sp += 1;
		return s[0];
	}
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 1;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 2;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 3;
		cp = s[0] & 0x07;
	} else {
		*sp += 1;
		return 0xfffd;
	}
	for (int i = 1; i <= n; i++) {
		if ((s[i] & 0xc0) != 0x80) {
			*sp += 1;
			return 0xfffd;
		}
		cp = cp << 6 | (s[i] & 0x3f);
	}
	*sp += n + 1;
	return cp;
}

static const char *const posix_names[] = { "alnum", "alpha", "ascii",
    "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space",
    "upper", "word", "xdigit" };

static int
is_space_cp(uint32_t c)
{
	return c == ' ' || (c >= 0x09 && c <= 0x0d) || c == 0xa0 ||
	    c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
	    c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* The Unicode properties minimatch maps POSIX classes to, exact for
 * ASCII; other characters count as letters unless they are spaces. */
static int
posix_match(const char *name, uint32_t c)
{
	int ascii_alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
	int letter = ascii_alpha || (c >= 0xa0 && !is_space_cp(c));
	int digit = c >= '0' && c <= '9';
	int control = c < 0x20 || (c >= 0x7f && c < 0xa0);

	if (strcmp(name, "alnum") == 0)
		return letter || digit;
	if (strcmp(name, "alpha") == 0)
		return letter;
	if (strcmp(name, "ascii") == 0)
		return c < 0x80;
	if (strcmp(name, "blank") == 0)
		return c == ' ' || c == '\t' || (is_space_cp(c) && c > 0x7f &&
		    c != 0x2028 && c != 0x2029);
	if (strcmp(name, "cntrl") == 0 || strcmp(name, "print") == 0)
		return control;
	if (strcmp(name, "digit") == 0)
		return digit;
	if (strcmp(name, "graph") == 0)
		return is_space_cp(c) || control;
	if (strcmp(name, "lower") == 0)
		return c >= 'a' && c <= 'z';
	if (strcmp(name, "punct") == 0)
		return c != 0 && c < 0x80 &&
		    strchr("!\"#%&'()*,-./:;?@[\\]_{}", (int)c) != NULL;
	if (strcmp(name, "space") == 0)
		return is_space_cp(c);
	if (strcmp(name, "upper") == 0)
		return c >= 'A' && c <= 'Z';
	if (strcmp(name, "word") == 0)
		return letter || digit || c == '_';
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
	    (c >= 'A' && c <= 'F');
}

static int
items_match(const struct class_item *v, size_t n, uint32_t c)
{
	for (size_t i = 0; i < n; i++) {
		if (v[i].posix != NULL ? posix_match(v[i].posix, c) :
		    c >= v[i].lo && c <= v[i].hi)
			return 1;
	}
	return 0;
}

static int
class_match(const struct char_class *k, uint32_t c)
{
	int r = k->nranges > 0 &&
	    items_match(k->ranges, k->nranges, c) != k->negate;
	int n = k->nnegs > 0 &&
	    items_match(k->negs, k->nnegs, c) == k->negate;

	return r || n;
}

static void
add_item(struct class_item **v, size_t *n, uint32_t lo, uint32_t hi,
    const char *posix)
{
	*v = xreallocarray(*v, *n + 1, sizeof **v);
	(*v)[*n].lo = lo;
	(*v)[*n].hi = hi;
	(*v)[*n].posix = posix;
	(*n)++;
}

static void
class_free(struct char_class *k)
{
	if (k == NULL)
		return;
	free(k->ranges);
	free(k->negs);
	free(k);
}

/* minimatch's parseClass from the "[" at *sp. NULL when the class does not
 * close (the "[" is then a literal); *never when it can match nothing. */
static struct char_class *
parse_class(const char **sp, int *never)
{
	const char *p = *sp + 1;
	struct char_class *k = xcalloc(1, sizeof *k);
	int saw = 0, have_start = 0;
	uint32_t start = 0;

	*never = 0;
	if (*p == '!' || *p == '^') {
		k->negate = 1;
		p++;
	}
	for (;;) {
		uint32_t c;

		if (*p == '\0') {
			class_free(k);
			return NULL;
		}
		if (*p == ']' && saw) {
			p++;
			break;
		}
		saw = 1;
		if (*p == '\\' && p[1] != '\0') {
			p++;
		} else if (*p == '[' && p[1] == ':') {
			size_t i, nnames = sizeof posix_names /
			    sizeof *posix_names;

			for (i = 0; i < nnames; i++) {
				size_t len = strlen(posix_names[i]);

				if (strncmp(p + 2, posix_names[i], len) == 0 &&
				    strncmp(p + 2 + len, ":]", 2) == 0)
					break;
			}
			if (i < nnames) {
				if (have_start) {
					*never = 1;
					*sp += strlen(*sp);
					return k;
				}
				if (strcmp(posix_names[i], "graph") == 0)
					add_item(&k->negs, &k->nnegs, 0, 0,
					    posix_names[i]);
				else
					add_item(&k->ranges, &k->nranges, 0, 0,
					    posix_names[i]);
				p += 2 + strlen(posix_names[i]) + 2;
				continue;
			}
		}
		c = next_cp(&p);
		if (have_start) {
			if (c >= start)
				add_item(&k->ranges, &k->nranges, start, c,
				    NULL);
			have_start = 0;
		} else if (p[0] == '-' && p[1] == ']') {
			add_item(&k->ranges, &k->nranges, c, c, NULL);
			add_item(&k->ranges, &k->nranges, '-', '-', NULL);
			p++;
		} else if (p[0] == '-') {
			start = c;
			have_start = 1;
			p++;
		} else {
			add_item(&k->ranges, &k->nranges, c, c, NULL);
		}
	}
	if (k->nranges == 0 && k->nnegs == 0)
		*never = 1;
	*sp = p;
	return k;
}

static void
add_tok(struct segment *s, enum tok_kind kind, uint32_t cp,
    struct char_class *cls)
{
	s->toks = xreallocarray(s->toks, s->ntoks + 1, sizeof *s->toks);
	s->toks[s->ntoks].kind = kind;
	s->toks[s->ntoks].cp = cp;
	s->toks[s->ntoks].cls = cls;
	s->ntoks++;
}

static size_t
utf16_len(const char *s)
{
	size_t n = 0;

	for (const unsigned char *c = (const unsigned char *)s; *c; c++)
		n += ((*c & 0xc0) != 0x80) + (*c >= 0xf0);
	return n;
}

static void
classify_fast(struct segment *s, const char *p)
{
	size_t stars = strspn(p, "*"), qmarks = strspn(p, "?");
	const char *rest;

	if (stars > 0) {
		rest = p + stars;
		if (*rest == '\0') {
			s->fast = FAST_STAR;
		} else if (strpbrk(rest, "+@!?*[(") == NULL) {
			s->fast = FAST_STAR_EXT;
			s->ext = xstrdup(rest);
		} else if (*rest == '.' && rest[1] == '*' &&
		    rest[1 + strspn(rest + 1, "*")] == '\0') {
			s->fast = FAST_STAR_DOT_STAR;
		}
	} else if (qmarks > 0 && strpbrk(p + qmarks, "+@!?*[(") == NULL) {
		s->fast = FAST_QMARKS;
		s->ext = xstrdup(p + qmarks);
		s->qlen = utf16_len(p);
	} else if (p[0] == '.' && p[1] == '*' &&
	    p[1 + strspn(p + 1, "*")] == '\0') {
		s->fast = FAST_DOT_STAR;
	}
}

static int
ends_with(const char *s, const char *end)
{
	size_t a = strlen(s), b = strlen(end);

	return a >= b && memcmp(s + a - b, end, b) == 0;
}

/* The shortcut tests, dot: true flavour; -1 when there is none. */
static int
fast_match(const struct segment *s, const char *f)
{
	int dots = strcmp(f, ".") == 0 || strcmp(f, "..") == 0;

	switch (s->fast) {
	case FAST_STAR:
		return f[0] != '\0' && !dots;
	case FAST_STAR_EXT:
		return ends_with(f, s->ext);
	case FAST_QMARKS:
		return utf16_len(f) == s->qlen && !dots && ends_with(f, s->ext);
	case FAST_STAR_DOT_STAR:
		return !dots && strchr(f, '.') != NULL;
	case FAST_DOT_STAR:
		return !dots && f[0] == '.';
	default:
		return -1;
	}
}

/* One path segment of a pattern; 0 when it can never match. */
static int
parse_segment(struct segment *s, const char *p)
{
	memset(s, 0, sizeof *s);
	if (strcmp(p, "**") == 0) {
		s->globstar = 1;
		return 1;
	}
	classify_fast(s, p);
	while (*p != '\0') {
		if (*p == '*') {
			while (*p == '*')
				p++;
			add_tok(s, TOK_STAR, 0, NULL);
		} else if (*p == '?') {
			p++;
			add_tok(s, TOK_ANY, 0, NULL);
		} else if (*p == '[') {
			int never;
			struct char_class *k = parse_class(&p, &never);

			if (k == NULL) {
				p++;
				add_tok(s, TOK_LIT, '[', NULL);
			} else if (never) {
				class_free(k);
				return 0;
			} else {
				add_tok(s, TOK_CLASS, 0, k);
			}
		} else {
			if (*p == '\\' && p[1] != '\0')
				p++;
			add_tok(s, TOK_LIT, next_cp(&p), NULL);
		}
	}
	return 1;
}

static void
segment_free(struct segment *s)
{
	free(s->ext);
	for (size_t i = 0; i < s->ntoks; i++)
		class_free(s->toks[i].cls);
	free(s->toks);
}

static int
tok_match(const struct tok *t, uint32_t c)
{
	switch (t->kind) {
	case TOK_LIT:
		return t->cp == c;
	case TOK_ANY:
		return 1;
	case TOK_CLASS:
		return class_match(t->cls, c);
	default:
		return 0;
	}
}

/* Wildcard matching with backtracking to the last star. */
static int
segment_match(const struct segment *s, const uint32_t *c, size_t n)
{
	size_t i = 0, j = 0, mark = 0, star = SIZE_MAX;

	if (n == 0)
		return s->ntoks == 0;
	while (i < n) {
		if (j < s->ntoks && s->toks[j].kind == TOK_STAR) {
			star = j++;
			mark = i;
		} else if (j < s->ntoks && tok_match(&s->toks[j], c[i])) {
			i++;
			j++;
		} else if (star != SIZE_MAX) {
			j = star + 1;
			i = ++mark;
		} else {
			return 0;
		}
	}
	while (j < s->ntoks && s->toks[j].kind == TOK_STAR)
		j++;
	return j == s->ntoks;
}

struct path_segs {
	char **names;
	uint32_t **cps;
	size_t *lens;
	size_t n;
};

/* Segments against segments; a "**" takes zero or more path segments, at
 * least one when it ends the pattern. seen memoises failed states. */
static int
parts_match(const struct alternative *a, const struct path_segs *f,
    size_t fi, size_t pi, unsigned char *seen)
{
	unsigned char *mark = &seen[fi * (a->nsegs + 1) + pi];
	int hit;

	if (*mark)
		return 0;
	*mark = 1;
	if (pi == a->nsegs)
		return fi == f->n;
	if (a->segs[pi].globstar) {
		if (pi + 1 == a->nsegs)
			return fi < f->n;
		for (size_t k = fi; k <= f->n; k++)
			if (parts_match(a, f, k, pi + 1, seen))
				return 1;
		return 0;
	}
	if (fi == f->n)
		return 0;
	hit = fast_match(&a->segs[pi], f->names[fi]);
	if (hit < 0)
		hit = segment_match(&a->segs[pi], f->cps[fi], f->lens[fi]);
	return hit && parts_match(a, f, fi + 1, pi + 1, seen);
}

void
fstools_glob_strv_add(struct strv *sv, char *s)
{
	sv->v = xreallocarray(sv->v, sv->n + 1, sizeof *sv->v);
	sv->v[sv->n++] = s;
}

void
fstools_glob_strv_free(struct strv *sv)
{
	for (size_t i = 0; i < sv->n; i++)
		free(sv->v[i]);
	free(sv->v);
	memset(sv, 0, sizeof *sv);
}

/* Split at runs of "/", fold "x/.." and repeated "**" (minimatch's
 * level-one optimisation) and compile the segments. 0 if it can never
 * match. */
static int
compile_alternative(struct alternative *a, const char *pattern)
{
	struct strv parts = { 0 }, kept = { 0 };
	const char *p = pattern;
	int ok = 1;

	for (;;) {
		size_t len = strcspn(p, "/");

		fstools_glob_strv_add(&parts, xstrndup(p, len));
		p += len;
		if (*p == '\0')
			break;
		while (*p == '/')
			p++;
		if (*p == '\0') {
			fstools_glob_strv_add(&parts, xstrdup(""));
			break;
		}
	}
	for (size_t i = 0; i < parts.n; i++) {
		const char *prev = kept.n > 0 ? kept.v[kept.n - 1] : NULL;

		if (strcmp(parts.v[i], "**") == 0 && prev != NULL &&
		    strcmp(prev, "**") == 0)
			continue;
		if (strcmp(parts.v[i], "..") == 0 && prev != NULL &&
		    strcmp(prev, "..") != 0 && strcmp(prev, ".") != 0 &&
		    strcmp(prev, "**") != 0) {
			free(kept.v[--kept.n]);
			continue;
		}
		fstools_glob_strv_add(&kept, xstrdup(parts.v[i]));
	}
	if (kept.n == 0)
		fstools_glob_strv_add(&kept, xstrdup(""));
	a->segs = xcalloc(kept.n, sizeof *a->segs);
	a->nsegs = kept.n;
	for (size_t i = 0; i < kept.n && ok; i++)
		ok = parse_segment(&a->segs[i], kept.v[i]);
	fstools_glob_strv_free(&parts);
	fstools_glob_strv_free(&kept);
	return ok;
}

static void
alternative_free(struct alternative *a)
{
	for (size_t i = 0; i < a->nsegs; i++)
		segment_free(&a->segs[i]);
	free(a->segs);
}

struct fstools_glob *
fstools_glob_compile(const char *pattern)
{
	struct fstools_glob *g = xcalloc(1, sizeof *g);
	struct strv set = { 0 };

	if (pattern[0] == '#') {
		g->comment = 1;
		return g;
	}
	if (pattern[0] == '\0') {
		g->empty = 1;
		return g;
	}
	while (*pattern == '!') {
		g->negate = !g->negate;
		pattern++;
	}
	fstools_glob_brace_expand(pattern, &set);
	g->alts = xcalloc(set.n + 1, sizeof *g->alts);
	for (size_t i = 0; i < set.n; i++) {
		size_t j;

		for (j = 0; j < i && strcmp(set.v[j], set.v[i]) != 0; j++)
			;
		if (j < i)
			continue;
		if (compile_alternative(&g->alts[g->nalts], set.v[i]))
			g->nalts++;
		else
			alternative_free(&g->alts[g->nalts]);
	}
	fstools_glob_strv_free(&set);
	return g;
}

/* The path's segments, split at runs of "/" as minimatch splits. */
static void
split_path(const char *p, struct path_segs *f)
{
	for (;;) {
		size_t len = strcspn(p, "/"), n = 0;
		const char *q = p;

		f->names = xreallocarray(f->names, f->n + 1, sizeof *f->names);
		f->cps = xreallocarray(f->cps, f->n + 1, sizeof *f->cps);
		f->lens = xreallocarray(f->lens, f->n + 1, sizeof *f->lens);
		f->names[f->n] = xstrndup(p, len);
		f->cps[f->n] = xreallocarray(NULL, len + 1, sizeof **f->cps);
		while (q < p + len)
			f->cps[f->n][n++] = next_cp(&q);
		f->lens[f->n++] = n;
		p += len;
		if (*p == '\0')
			return;
		while (*p == '/')
			p++;
		if (*p == '\0') {
			/* A trailing slash makes an empty last segment. */
			split_path("", f);
			return;
		}
	}
}

int
fstools_glob_match(const struct fstools_glob *g, const char *path)
{
	struct path_segs f = { 0 };
	int hit = 0;

	if (g->comment)
		return 0;
	if (g->empty)
		return path[0] == '\0';
	split_path(path, &f);
	for (size_t i = 0; i < g->nalts && !hit; i++) {
		unsigned char *seen = xcalloc((f.n + 1) *
		    (g->alts[i].nsegs + 1), 1);

		hit = parts_match(&g->alts[i], &f, 0, 0, seen);
		free(seen);
	}
	for (size_t i = 0; i < f.n; i++) {
		free(f.names[i]);
		free(f.cps[i]);
	}
	free(f.names);
	free(f.cps);
	free(f.lens);
	return hit != g->negate;
}

void
fstools_glob_free(struct fstools_glob *g)
{
	if (g == NULL)
		return;
	for (size_t i = 0; i < g->nalts; i++)
		alternative_free(&g->alts[i]);
	free(g->alts);
	free(g);
}
