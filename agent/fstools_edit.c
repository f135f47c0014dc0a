/*
 * edit_file: the npm server's applyFileEdits. Each edit replaces the first
 * exact occurrence of oldText; failing that, the first run of lines equal
 * to oldText's lines up to surrounding whitespace, re-indented as the
 * server does. The answer is the unified diff in a ``` fence; unless
 * dryRun, the file is replaced atomically with its mode kept.
 */
#include "fstools.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xmalloc.h"

/* A slice of a string. */
struct span {
	const char *s;
	size_t len;
};

/* CRLF folded to LF, as normalizeLineEndings (one pass, left to right). */
static char *
fold_crlf(const char *s, size_t len, size_t *outlen)
{
	char *out = xmalloc(len + 1), *o = out;

	for (size_t i = 0; i < len; i++) {
		if (s[i] == '\r' && i + 1 < len && s[i + 1] == '\n')
			continue;
		*o++ = s[i];
	}
	*o = '\0';
	*outlen = (size_t)(o - out);
	return out;
}

/* Bytes of the JavaScript white space character (\s) at s, or 0. */
static size_t
js_space(const unsigned char *s, size_t len)
{
	unsigned cp;

	if (len == 0)
		return 0;
	if (s[0] == ' ' || (s[0] >= 0x09 && s[0] <= 0x0d))
		return 1;
	if (len >= 2 && s[0] == 0xc2 && s[1] == 0xa0)
		return 2;
	if (len < 3 || (s[0] & 0xf0) != 0xe0)
		return 0;
	cp = (unsigned)(s[0] & 0x0f) << 12 | (unsigned)(s[1] & 0x3f) << 6 |
	    (s[2] & 0x3f);
	if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
	    cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000 ||
	    cp == 0xfeff)
		return 3;
	return 0;
}

/* Leading white space: its bytes, and its length in characters. */
static size_t
indent_of(struct span l, size_t *chars)
{
	size_t i = 0, k;

	*chars = 0;
	while ((k = js_space((const unsigned char *)l.s + i, l.len - i)) > 0) {
		i += k;
		(*chars)++;
	}
	return i;
}

/* String.prototype.trim. */
static struct span
trim(struct span l)
{
	size_t chars, lead = indent_of(l, &chars);

	l.s += lead;
	l.len -= lead;
	while (l.len > 0) {
		size_t back = 0;

		/* The last character: step back over continuation bytes. */
		for (size_t k = 1; k <= 3 && k <= l.len; k++) {
			if (((unsigned char)l.s[l.len - k] & 0xc0) != 0x80) {
				back = k;
				break;
			}
		}
		if (back == 0 || js_space((const unsigned char *)l.s +
		    l.len - back, back) != back)
			break;
		l.len -= back;
	}
	return l;
}

static struct span *
split_lines(const char *s, size_t len, size_t *n)
{
	struct span *v = NULL;
	size_t i = 0;

	*n = 0;
	for (;;) {
		const char *nl = memchr(s + i, '\n', len - i);
		size_t l = nl != NULL ? (size_t)(nl - (s + i)) : len - i;

		v = xreallocarray(v, *n + 1, sizeof *v);
		v[*n].s = s + i;
		v[*n].len = l;
		(*n)++;
		if (nl == NULL)
			return v;
		i += l + 1;
	}
}

static int
span_eq(struct span a, struct span b)
{
	return a.len == b.len && memcmp(a.s, b.s, a.len) == 0;
}

/* The whitespace-flexible fallback; a new content, or NULL if no run of
 * lines matches. */
static char *
replace_lines(const char *content, size_t clen, const char *old,
    size_t olen, const char *new, size_t nlen, size_t *outlen)
{
	size_t nc, no, nn, at, first_chars;
	struct span *cl = split_lines(content, clen, &nc);
	struct span *ol = split_lines(old, olen, &no);
	struct span *nl, orig_indent;
	struct fstools_buf b = { 0 };
	int found = 0;

	for (at = 0; !found && no <= nc && at <= nc - no; at++) {
		found = 1;
		for (size_t j = 0; j < no && found; j++)
			found = span_eq(trim(ol[j]), trim(cl[at + j]));
	}
	if (!found) {
		free(cl);
		free(ol);
		return NULL;
	}
	at--;
	orig_indent.s = cl[at].s;
	orig_indent.len = indent_of(cl[at], &first_chars);
	nl = split_lines(new, nlen, &nn);
	for (size_t i = 0; i < at; i++) {
		fstools_buf_add(&b, cl[i].s, cl[i].len);
		fstools_buf_str(&b, "\n");
	}
	for (size_t j = 0; j < nn; j++) {
		size_t old_chars = 0, new_chars, lead;
		size_t old_lead = j < no ? indent_of(ol[j], &old_chars) : 0;

		if (j > 0)
			fstools_buf_str(&b, "\n");
		lead = indent_of(nl[j], &new_chars);
		if (j == 0) {
			fstools_buf_add(&b, orig_indent.s, orig_indent.len);
			fstools_buf_add(&b, nl[j].s + lead, nl[j].len - lead);
		} else if (old_lead > 0 && lead > 0) {
			fstools_buf_add(&b, orig_indent.s, orig_indent.len);
			for (size_t k = old_chars; k < new_chars; k++)
				fstools_buf_str(&b, " ");
			fstools_buf_add(&b, nl[j].s + lead, nl[j].len - lead);
		} else {
			fstools_buf_add(&b, nl[j].s, nl[j].len);
		}
	}
	for (size_t i = at + no; i < nc; i++) {
		fstools_buf_str(&b, "\n");
		fstools_buf_add(&b, cl[i].s, cl[i].len);
	}
	free(cl);
	free(ol);
	free(nl);
	return fstools_buf_take(&b, outlen);
}

/* Apply one edit to *content; 0, or -1 when oldText is nowhere. */
static int
apply_edit(char **content, size_t *len, json_t *edit)
{
	json_t *jold = json_object_get(edit, "oldText");
	json_t *jnew = json_object_get(edit, "newText");
	size_t olen, nlen, outlen;
	char *old = fold_crlf(json_string_value(jold), json_string_length(jold),
	    &olen);
	char *new = fold_crlf(json_string_value(jnew), json_string_length(jnew),
	    &nlen);
	const char *at = olen == 0 ? *content :
	    memmem(*content, *len, old, olen);
	char *out;

	if (at != NULL) {
		struct fstools_buf b = { 0 };
		size_t off = (size_t)(at - *content);

		fstools_buf_add(&b, *content, off);
		fstools_buf_add(&b, new, nlen);
		fstools_buf_add(&b, at + olen, *len - off - olen);
		out = fstools_buf_take(&b, &outlen);
	} else {
		out = replace_lines(*content, *len, old, olen, new, nlen,
		    &outlen);
	}
	free(old);
	free(new);
	if (out == NULL)
		return -1;
	free(*content);
	*content = out;
	*len = outlen;
	return 0;
}

/* The diff in a fence one backtick longer than any run inside it. */
static char *
fence(const char *diff, size_t *len)
{
	size_t ticks = 3, run = 0;
	struct fstools_buf b = { 0 };

	for (const char *p = diff; *p != '\0'; p++) {
		run = *p == '`' ? run + 1 : 0;
		if (run + 1 > ticks)
			ticks = run + 1;
	}
	for (size_t i = 0; i < ticks; i++)
		fstools_buf_str(&b, "`");
	fstools_buf_str(&b, "diff\n");
	fstools_buf_str(&b, diff);
	for (size_t i = 0; i < ticks; i++)
		fstools_buf_str(&b, "`");
	fstools_buf_str(&b, "\n\n");
	return fstools_buf_take(&b, len);
}

static char *
read_content(const struct workspace *ws, const struct fstools_path *p,
    size_t *len, char **msg)
{
	char *data, *text, *folded;
	size_t dlen, tlen;

	if (fstools_read_file(ws, p, FSTOOLS_READ_TEXT, &data, &dlen, msg) < 0)
		return NULL;
	text = fstools_utf8_decode(data, dlen, &tlen);
	folded = fold_crlf(text, tlen, len);
	if (text != data)
		free(text);
	free(data);
	return folded;
}

static int
file_mode(const struct workspace *ws, const struct fstools_path *p, char **msg)
{
	int fd = fstools_open_msg(ws, p, O_PATH, "stat", msg);
	struct stat st;

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0) {
		*msg = fstools_msg_errno(errno, "stat", p->real, NULL);
		close(fd);
		return -1;
	}
	close(fd);
	return (int)(st.st_mode & 0777);
}

json_t *
fstools_tool_edit_file(const struct workspace *ws, json_t *args)
{
	json_t *edits = json_object_get(args, "edits"), *edit;
	int dry_run = json_is_true(json_object_get(args, "dryRun")), mode;
	struct fstools_path p;
	char *msg = NULL, *content, *modified, *diff, *text;
	size_t len, mlen, tlen, i;
	json_t *result;

	if (fstools_path_resolve(ws, fstools_arg_string(args, "path"), &p,
	    &msg) < 0)
		return fstools_result_error_free(msg);
	if ((content = read_content(ws, &p, &len, &msg)) == NULL) {
		fstools_path_free(&p);
		return fstools_result_error_free(msg);
	}
	modified = xmalloc(len + 1);
	memcpy(modified, content, len + 1);
	mlen = len;
	json_array_foreach(edits, i, edit) {
		if (apply_edit(&modified, &mlen, edit) < 0) {
			msg = xasprintf("Could not find exact match for "
			    "edit:\n%s", json_string_value(json_object_get(edit,
			    "oldText")));
			break;
		}
	}
	if (msg == NULL) {
		/* createUnifiedDiff folds line ends once more: a "\r\r\n"
		 * that became "\r\n" shows as "\n" in the diff. */
		size_t alen, blen;
		char *a = fold_crlf(content, len, &alen);
		char *b = fold_crlf(modified, mlen, &blen);

		diff = fstools_unified_diff(p.real, a, alen, b, blen);
		free(a);
		free(b);
		text = fence(diff, &tlen);
		free(diff);
		if (!dry_run && (mode = file_mode(ws, &p, &msg)) >= 0)
			fstools_replace_file(ws, &p, modified, mlen, mode,
			    &msg);
		result = msg == NULL ? fstools_result_text(text, tlen) : NULL;
		free(text);
	}
	if (msg != NULL)
		result = fstools_result_error_free(msg);
	free(content);
	free(modified);
	fstools_path_free(&p);
	return result;
}
