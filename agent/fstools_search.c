/*
 * search_files and directory_tree: recursive walks in byte order, with
 * the npm server's glob rules (minimatch with dot: true; directory_tree
 * also excludes by bare names at any depth) and its output shapes.
 */
#include "fstools.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

struct search {
	const struct workspace *ws;
	struct fs_glob *pattern;
	struct fs_glob **excludes;
	size_t nexcludes;
	struct fs_buf out;
	size_t matches;
};

static int
excluded(struct fs_glob **globs, size_t n, const char *rel)
{
	for (size_t i = 0; i < n; i++)
		if (fs_glob_match(globs[i], rel))
			return 1;
	return 0;
}

/* The server validates every entry it meets; for anything but a symlink
 * that cannot fail, for a symlink it means the target resolves inside. */
static int
entry_valid(const struct workspace *ws, const char *full,
    const struct fs_entry *e)
{
	struct fs_path p;
	char *msg = NULL;

	if (e->type != DT_LNK)
		return 1;
	if (fs_path_resolve(ws, full, &p, &msg) < 0) {
		free(msg);
		return 0;
	}
	fs_path_free(&p);
	return 1;
}

/* Pre-order, as the server walks: an entry, then what is under it. A
 * directory that cannot be read below the top is skipped silently. */
static void
search_dir(struct search *s, const char *dir_rel, const char *dir_real,
    const char *prefix, struct fs_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char *full = xasprintf("%s/%s", strcmp(dir_real, "/") == 0 ?
		    "" : dir_real, v[i].name);
		char *rel = prefix[0] != '\0' ? xasprintf("%s/%s", prefix,
		    v[i].name) : xstrdup(v[i].name);

		if (entry_valid(s->ws, full, &v[i]) &&
		    !excluded(s->excludes, s->nexcludes, rel)) {
			if (fs_glob_match(s->pattern, rel)) {
				if (s->matches++ > 0)
					fs_buf_str(&s->out, "\n");
				fs_buf_str(&s->out, full);
			}
			if (v[i].type == DT_DIR) {
				char *sub_rel = dir_rel[0] != '\0' ?
				    xasprintf("%s/%s", dir_rel, v[i].name) :
				    xstrdup(v[i].name);
				struct fs_entry *sv;
				size_t sn;
				char *msg = NULL;

				if (fs_list_dir(s->ws, sub_rel, full, &sv, &sn,
				    &msg) == 0) {
					search_dir(s, sub_rel, full, rel, sv,
					    sn);
					fs_entries_free(sv, sn);
				}
				free(msg);
				free(sub_rel);
			}
		}
		free(full);
		free(rel);
	}
}

static struct fs_glob **
compile_list(json_t *patterns, size_t *n)
{
	struct fs_glob **v = xcalloc(json_array_size(patterns) + 1, sizeof *v);
	size_t i;
	json_t *p;

	*n = 0;
	json_array_foreach(patterns, i, p)
		v[(*n)++] = fs_glob_compile(json_string_value(p));
	return v;
}

static void
free_list(struct fs_glob **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fs_glob_free(v[i]);
	free(v);
}

json_t *
fs_tool_search_files(const struct workspace *ws, json_t *args)
{
	struct search s = { .ws = ws };
	struct fs_path p;
	struct fs_entry *v;
	size_t n;
	char *msg = NULL;
	json_t *result;

	if (fs_path_resolve(ws, fs_arg_string(args, "path"), &p, &msg) < 0)
		return fs_result_error_free(msg);
	if (fs_list_dir(ws, p.rel, p.real, &v, &n, &msg) < 0) {
		fs_path_free(&p);
		return fs_result_error_free(msg);
	}
	s.pattern = fs_glob_compile(fs_arg_string(args, "pattern"));
	s.excludes = compile_list(json_object_get(args, "excludePatterns"),
	    &s.nexcludes);
	search_dir(&s, p.rel, p.real, "", v, n);
	fs_entries_free(v, n);
	fs_path_free(&p);
	fs_glob_free(s.pattern);
	free_list(s.excludes, s.nexcludes);
	if (s.matches == 0)
		result = fs_result_text("No matches found", 16);
	else
		result = fs_result_text(s.out.s, s.out.len);
	free(s.out.s);
	return result;
}

/* directory_tree's exclusion: a pattern with a "*" as minimatch has it,
 * any other also as a name at any depth and as a directory's contents. */
struct tree {
	const struct workspace *ws;
	struct fs_glob **excludes;
	size_t nexcludes;
	struct fs_buf out;
};

static void
indent(struct fs_buf *b, int level)
{
	for (int i = 0; i < level; i++)
		fs_buf_str(b, "  ");
}

/* A string as JSON.stringify writes it. */
static void
json_quote(struct fs_buf *b, const char *s)
{
	fs_buf_str(b, "\"");
	for (; *s != '\0'; s++) {
		switch (*s) {
		case '"':
			fs_buf_str(b, "\\\"");
			break;
		case '\\':
			fs_buf_str(b, "\\\\");
			break;
		case '\b':
			fs_buf_str(b, "\\b");
			break;
		case '\f':
			fs_buf_str(b, "\\f");
			break;
		case '\n':
			fs_buf_str(b, "\\n");
			break;
		case '\r':
			fs_buf_str(b, "\\r");
			break;
		case '\t':
			fs_buf_str(b, "\\t");
			break;
		default:
			if ((unsigned char)*s < 0x20)
				fs_buf_printf(b, "\\u%04x", (unsigned char)*s);
			else
				fs_buf_add(b, s, 1);
		}
	}
	fs_buf_str(b, "\"");
}

/* One directory's array at nesting level (the brackets' indentation);
 * raw is the path as the client would have joined it, validated afresh
 * for each directory as the server does. -1 with *msg. */
static int
tree_dir(struct tree *t, const char *raw, const char *prefix, int level,
    char **msg)
{
	struct fs_path p;
	struct fs_entry *v;
	size_t n, shown = 0;
	int ret = 0;

	if (fs_path_resolve(t->ws, raw, &p, msg) < 0)
		return -1;
	if (fs_list_dir(t->ws, p.rel, p.real, &v, &n, msg) < 0) {
		fs_path_free(&p);
		return -1;
	}
	fs_path_free(&p);
	fs_buf_str(&t->out, "[");
	for (size_t i = 0; i < n && ret == 0; i++) {
		char *rel = prefix[0] != '\0' ? xasprintf("%s/%s", prefix,
		    v[i].name) : xstrdup(v[i].name);
		int is_dir = v[i].type == DT_DIR;

		if (!excluded(t->excludes, t->nexcludes, rel)) {
			fs_buf_str(&t->out, shown++ > 0 ? ",\n" : "\n");
			indent(&t->out, level + 1);
			fs_buf_str(&t->out, "{\n");
			indent(&t->out, level + 2);
			fs_buf_str(&t->out, "\"name\": ");
			json_quote(&t->out, v[i].name);
			fs_buf_str(&t->out, ",\n");
			indent(&t->out, level + 2);
			fs_buf_printf(&t->out, "\"type\": \"%s\"", is_dir ?
			    "directory" : "file");
			if (is_dir) {
				char *sub = raw[0] != '\0' ? xasprintf("%s/%s",
				    raw, v[i].name) : xstrdup(v[i].name);

				fs_buf_str(&t->out, ",\n");
				indent(&t->out, level + 2);
				fs_buf_str(&t->out, "\"children\": ");
				ret = tree_dir(t, sub, rel, level + 2, msg);
				free(sub);
			}
			fs_buf_str(&t->out, "\n");
			indent(&t->out, level + 1);
			fs_buf_str(&t->out, "}");
		}
		free(rel);
	}
	if (shown > 0) {
		fs_buf_str(&t->out, "\n");
		indent(&t->out, level);
	}
	fs_buf_str(&t->out, "]");
	fs_entries_free(v, n);
	return ret;
}

json_t *
fs_tool_directory_tree(const struct workspace *ws, json_t *args)
{
	json_t *patterns = json_object_get(args, "excludePatterns"), *pat;
	struct tree t = { .ws = ws };
	char *msg = NULL;
	size_t i;
	json_t *result;

	t.excludes = xcalloc(3 * json_array_size(patterns) + 1,
	    sizeof *t.excludes);
	json_array_foreach(patterns, i, pat) {
		const char *s = json_string_value(pat);
		char *any, *under;

		t.excludes[t.nexcludes++] = fs_glob_compile(s);
		if (strchr(s, '*') != NULL)
			continue;
		any = xasprintf("**/%s", s);
		under = xasprintf("**/%s/**", s);
		t.excludes[t.nexcludes++] = fs_glob_compile(any);
		t.excludes[t.nexcludes++] = fs_glob_compile(under);
		free(any);
		free(under);
	}
	if (tree_dir(&t, fs_arg_string(args, "path"), "", 0, &msg) < 0)
		result = fs_result_error_free(msg);
	else
		result = fs_result_text(t.out.s, t.out.len);
	free(t.out.s);
	free_list(t.excludes, t.nexcludes);
	return result;
}
