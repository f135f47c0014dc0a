/*
 * The unified diff edit_file answers with, as the `diff` npm package's
 * createTwoFilesPatch (v8) writes it: its Myers variant with the same
 * choices between equally short edit scripts, hunks with 4 lines of
 * context, "\ No newline at end of file" markers and the Index/===
 * header.
 */
#include "fstools.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

#define CONTEXT 4
#define UNDERLINE "=================================="			\
	"================================="

struct token {
	const char *s;
	size_t len;
	unsigned long hash;
};

/* A run of the edit script. Components are shared between the paths the
 * search keeps, so they are reference counted; the last holder frees. */
struct comp {
	size_t count;
	int added, removed;
	unsigned refs;
	struct comp *prev;
};

struct dpath {
	long old_pos;
	struct comp *last;
	int set;
};

/* Lines with their newline; a last line without one is a token too. */
static struct token *
tokenize(const char *s, size_t len, size_t *n)
{
	struct token *v = NULL;
	size_t cap = 0;

	*n = 0;
	for (size_t i = 0; i < len;) {
		const char *nl = memchr(s + i, '\n', len - i);
		size_t l = nl != NULL ? (size_t)(nl - (s + i)) + 1 : len - i;
		unsigned long h = 5381;

		for (size_t k = 0; k < l; k++)
			h = h * 33 + (unsigned char)s[i + k];
		if (*n == cap) {
			cap = cap ? cap * 2 : 64;
			v = xreallocarray(v, cap, sizeof *v);
		}
		v[*n].s = s + i;
		v[*n].len = l;
		v[*n].hash = h;
		(*n)++;
		i += l;
	}
	return v;
}

static int
token_eq(const struct token *a, const struct token *b)
{
	return a->hash == b->hash && a->len == b->len &&
	    memcmp(a->s, b->s, a->len) == 0;
}

static struct comp *
comp_new(size_t count, int added, int removed, struct comp *prev)
{
	struct comp *c = xmalloc(sizeof *c);

	c->count = count;
	c->added = added;
	c->removed = removed;
	c->refs = 1;
	c->prev = prev;
	return c;
}

static struct comp *
comp_ref(struct comp *c)
{
	if (c != NULL)
		c->refs++;
	return c;
}

static void
comp_release(struct comp *c)
{
	while (c != NULL && --c->refs == 0) {
		struct comp *prev = c->prev;

		free(c);
		c = prev;
	}
}

static void
dpath_clear(struct dpath *p)
{
	if (p->set)
		comp_release(p->last);
	memset(p, 0, sizeof *p);
}

struct tokens {
	struct token *old, *new;
	long old_len, new_len;
};

/* Follow the diagonal while lines agree; returns the new position. */
static long
extract_common(const struct tokens *t, struct dpath *base, long diagonal)
{
	long old_pos = base->old_pos, new_pos = old_pos - diagonal;
	size_t common = 0;

	while (new_pos + 1 < t->new_len && old_pos + 1 < t->old_len &&
	    token_eq(&t->old[old_pos + 1], &t->new[new_pos + 1])) {
		new_pos++;
		old_pos++;
		common++;
	}
	if (common > 0)
		base->last = comp_new(common, 0, 0, base->last);
	base->old_pos = old_pos;
	return new_pos;
}

static struct dpath
add_to_path(const struct dpath *p, int added, int removed, long inc)
{
	struct dpath out = { p->old_pos + inc, NULL, 1 };
	struct comp *last = p->last;

	if (last != NULL && last->added == added && last->removed == removed)
		out.last = comp_new(last->count + 1, added, removed,
		    comp_ref(last->prev));
	else
		out.last = comp_new(1, added, removed, comp_ref(last));
	return out;
}

/* The edit script's last component (a reference the caller releases). */
static struct comp *
myers(const struct tokens *t)
{
	long max_edit = t->old_len + t->new_len, new_pos;
	long min_diag = LONG_MIN, max_diag = LONG_MAX;
	struct dpath *best = xcalloc((size_t)(2 * max_edit + 3), sizeof *best);
	struct dpath *bp = best + max_edit + 1;
	struct comp *result = NULL;

	bp[0].old_pos = -1;
	bp[0].set = 1;
	new_pos = extract_common(t, &bp[0], 0);
	if (bp[0].old_pos + 1 >= t->old_len && new_pos + 1 >= t->new_len) {
		result = comp_ref(bp[0].last);
		goto out;
	}
	for (long e = 1; e <= max_edit; e++) {
		long lo = min_diag > -e ? min_diag : -e;
		long hi = max_diag < e ? max_diag : e;

		for (long d = lo; d <= hi; d += 2) {
			struct dpath rem = { 0 }, base;
			struct dpath *add = bp[d + 1].set ? &bp[d + 1] : NULL;
			int can_add = 0, can_remove;

			if (bp[d - 1].set) {
				rem = bp[d - 1];
				memset(&bp[d - 1], 0, sizeof bp[d - 1]);
			}
			if (add != NULL) {
				long add_new = add->old_pos - d;

				can_add = add_new >= 0 && add_new < t->new_len;
			}
			can_remove = rem.set && rem.old_pos + 1 < t->old_len;
			if (!can_add && !can_remove) {
				dpath_clear(&bp[d]);
				dpath_clear(&rem);
				continue;
			}
			if (!can_remove ||
			    (can_add && rem.old_pos < add->old_pos))
				base = add_to_path(add, 1, 0, 0);
			else
				base = add_to_path(&rem, 0, 1, 1);
			dpath_clear(&rem);
			new_pos = extract_common(t, &base, d);
			if (base.old_pos + 1 >= t->old_len &&
			    new_pos + 1 >= t->new_len) {
				result = base.last;
				goto out;
			}
			dpath_clear(&bp[d]);
			bp[d] = base;
			if (base.old_pos + 1 >= t->old_len && d - 1 < max_diag)
				max_diag = d - 1;
			if (new_pos + 1 >= t->new_len && d + 1 > min_diag)
				min_diag = d + 1;
		}
	}
out:
	for (long i = 0; i < 2 * max_edit + 3; i++)
		dpath_clear(&best[i]);
	free(best);
	return result;
}

/* A component with its lines. */
struct run {
	int added, removed;
	const struct token *lines;
	size_t n;
};

struct pline {
	char prefix;
	const struct token *tok;
};

struct hunk {
	size_t old_start, old_lines, new_start, new_lines;
	size_t first, n;
};

static void
push_line(struct pline **v, size_t *n, char prefix, const struct token *t)
{
	*v = xreallocarray(*v, *n + 1, sizeof **v);
	(*v)[*n].prefix = prefix;
	(*v)[*n].tok = t;
	(*n)++;
}

/* structuredPatch's walk over the runs (the last one an empty sentinel). */
static size_t
make_hunks(const struct run *runs, size_t nruns, struct pline **lines,
    size_t *nlines, struct hunk **hunks)
{
	size_t old_start = 0, new_start = 0, old_line = 1, new_line = 1;
	size_t first = 0, nh = 0;

	*hunks = NULL;
	for (size_t i = 0; i < nruns; i++) {
		const struct run *r = &runs[i];

		if (r->added || r->removed) {
			if (old_start == 0) {
				old_start = old_line;
				new_start = new_line;
				first = *nlines;
				if (i > 0) {
					const struct run *p = &runs[i - 1];
					size_t k = p->n < CONTEXT ? p->n :
					    CONTEXT;

					for (size_t j = p->n - k; j < p->n; j++)
						push_line(lines, nlines, ' ',
						    &p->lines[j]);
					old_start -= k;
					new_start -= k;
				}
			}
			for (size_t j = 0; j < r->n; j++)
				push_line(lines, nlines, r->added ? '+' : '-',
				    &r->lines[j]);
			if (r->added)
				new_line += r->n;
			else
				old_line += r->n;
			continue;
		}
		if (old_start != 0) {
			if (r->n <= CONTEXT * 2 && i + 2 < nruns) {
				for (size_t j = 0; j < r->n; j++)
					push_line(lines, nlines, ' ',
					    &r->lines[j]);
			} else {
				size_t k = r->n < CONTEXT ? r->n : CONTEXT;

				struct hunk *h;

				for (size_t j = 0; j < k; j++)
					push_line(lines, nlines, ' ',
					    &r->lines[j]);
				*hunks = xreallocarray(*hunks, nh + 1,
				    sizeof **hunks);
				h = &(*hunks)[nh++];
				h->old_start = old_start;
				h->old_lines = old_line - old_start + k;
				h->new_start = new_start;
				h->new_lines = new_line - new_start + k;
				h->first = first;
				h->n = *nlines - first;
				old_start = new_start = 0;
			}
		}
		old_line += r->n;
		new_line += r->n;
	}
	return nh;
}

char *
fstools_unified_diff(const char *name, const char *a, size_t alen,
    const char *b,
    size_t blen)
{
	struct tokens t;
	size_t na, nb, nruns = 0, nlines = 0, nh, ai = 0, bi = 0, n = 0;
	struct comp *last, *c;
	struct run *runs;
	struct pline *lines = NULL;
	struct hunk *hunks;
	struct fstools_buf out = { 0 };

	t.old = tokenize(a, alen, &na);
	t.new = tokenize(b, blen, &nb);
	t.old_len = (long)na;
	t.new_len = (long)nb;
	last = myers(&t);
	for (c = last; c != NULL; c = c->prev)
		n++;
	runs = xcalloc(n + 1, sizeof *runs);
	nruns = n + 1;
	for (c = last; c != NULL; c = c->prev) {
		n--;
		runs[n].added = c->added;
		runs[n].removed = c->removed;
		runs[n].n = c->count;
	}
	for (size_t i = 0; i + 1 < nruns; i++) {
		if (runs[i].removed) {
			runs[i].lines = t.old + ai;
			ai += runs[i].n;
		} else {
			runs[i].lines = t.new + bi;
			bi += runs[i].n;
			if (!runs[i].added)
				ai += runs[i].n;
		}
	}
	comp_release(last);
	nh = make_hunks(runs, nruns, &lines, &nlines, &hunks);
	fstools_buf_printf(&out, "Index: %s\n%s\n--- %s\toriginal\n"
	    "+++ %s\tmodified\n", name, UNDERLINE, name, name);
	for (size_t h = 0; h < nh; h++) {
		struct hunk *k = &hunks[h];

		fstools_buf_printf(&out, "@@ -%zu,%zu +%zu,%zu @@\n",
		    k->old_lines == 0 ? k->old_start - 1 : k->old_start,
		    k->old_lines,
		    k->new_lines == 0 ? k->new_start - 1 : k->new_start,
		    k->new_lines);
		for (size_t i = k->first; i < k->first + k->n; i++) {
			const struct token *tok = lines[i].tok;
			int nl = tok->len > 0 && tok->s[tok->len - 1] == '\n';

			fstools_buf_add(&out, &lines[i].prefix, 1);
			fstools_buf_add(&out, tok->s, tok->len - (nl ? 1 : 0));
			fstools_buf_str(&out, nl ? "\n" :
			    "\n\\ No newline at end of file\n");
		}
	}
	free(hunks);
	free(lines);
	free(runs);
	free(t.old);
	free(t.new);
	return fstools_buf_take(&out, NULL);
}
