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
	struct fstools_glob *pattern;
	struct fstools_glob **excludes;
	size_t nexcludes;
	struct fstools_buf out;
	size_t matches;
};

static int
excluded(struct fstools_glob **globs, size_t n, const char *rel)
{
	for (size_t i = 0; i < n; i++)
		if (fstools_glob_match(globs[i], rel))
			return 1;
	return 0;
}

/* The server validates every entry it meets; for anything but a symlink
 * that cannot fail, for a symlink it means the target resolves inside. */
static int
entry_valid(const struct workspace *ws, const char *full,
    const struct fstools_entry *e)
{
	struct fstools_path p;
	char *msg = NULL;

	if (e->type != DT_LNK)
		return 1;
	if (fstools_path_resolve(ws, full, &p, &msg) < 0) {
		free(msg);
		return 0;
	}
	fstools_path_free(&p);
	return 1;
}

/* Pre-order, as the server walks: an entry, then what is under it. A
 * directory that cannot be read below the top is skipped silently. */
static void
search_dir(struct search *s, const char *dir_rel, const char *dir_real,
    const char *prefix, struct fstools_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char *full = xasprintf("%s/%s", strcmp(dir_real, "/") == 0 ?
		    "" : dir_real, v[i].name);
		char *rel = prefix[0] != '\0' ? xasprintf("%s/%s", prefix,
		    v[i].name) : xstrdup(v[i].name);

		if (entry_valid(s->ws, full, &v[i]) &&
		    !excluded(s->excludes, s->nexcludes, rel)) {
			if (fstools_glob_match(s->pattern, rel)) {
				if (s->matches++ > 0)
					fstools_buf_str(&s->out, "\n");
				fstools_buf_str(&s->out, full);
			}
			if (v[i].type == DT_DIR) {
				char *sub_rel = dir_rel[0] != '\0' ?
				    xasprintf("%s/%s", dir_rel, v[i].name) :
				    xstrdup(v[i].name);
				struct fstools_entry *sv;
				size_t sn;
				char *msg = NULL;

				if (fstools_list_dir(s->ws, sub_rel, full, &sv,
				    &sn,
				    &msg) == 0) {
					search_dir(s, sub_rel, full, rel, sv,
					    sn);
					fstools_entries_free(sv, sn);
				}
				free(msg);
				free(sub_rel);
			}
		}
		free(full);
		free(rel);
	}
}

static struct fstools_glob **
compile_list(json_t *patterns, size_t *n)
{
	struct fstools_glob **v = xcalloc(json_array_size(patterns) + 1,
	    sizeof *v);
	size_t i;
	json_t *p;

	*n = 0;
	json_array_foreach(patterns, i, p)
		v[(*n)++] = fstools_glob_compile(json_string_value(p));
	return v;
}

static void
free_list(struct fstools_glob **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fstools_glob_free(v[i]);
	free(v);
}

json_t *
fstools_tool_search_files(const struct workspace *ws, json_t *args)
{
	struct search s = { .ws = ws };
	struct fstools_path p;
	struct fstools_entry *v;
	size_t n;
	char *msg = NULL;
	json_t *result;

	if (fstools_path_resolve(ws, fstools_arg_string(args, "path"), &p,
	    &msg) < 0)
		return fstools_result_error_free(msg);
	if (fstools_list_dir(ws, p.rel, p.real, &v, &n, &msg) < 0) {
		fstools_path_free(&p);
		return fstools_result_error_free(msg);
	}
	s.pattern = fstools_glob_compile(fstools_arg_string(args, "pattern"));
	s.excludes = compile_list(json_object_get(args, "excludePatterns"),
	    &s.nexcludes);
	search_dir(&s, p.rel, p.real, "", v, n);
	fstools_entries_free(v, n);
	fstools_path_free(&p);
	fstools_glob_free(s.pattern);
	free_list(s.excludes, s.nexcludes);
	if (s.matches == 0)
		result = fstools_result_text("No matches found", 16);
	else
		result = fstools_result_text(s.out.s, s.out.len);
	free(s.out.s);
	return result;
}

/* directory_tree's exclusion: a pattern with a "*" as minimatch has it,
 * any other also as a name at any depth and as a directory's contents. */
struct tree {
	const struct workspace *ws;
	struct fstools_glob **excludes;
	size_t nexcludes;
	struct fstools_buf out;
};

static void
indent(struct fstools_buf *b, int level)
{
	for (int i = 0; i < level; i++)
		fstools_buf_str(b, "  ");
}

/* A string as JSON.stringify writes it. */
static void
json_quote(struct fstools_buf *b, const char *s)
{
	fstools_buf_str(b, "\"");
	for (; *s != '\0'; s++) {
		switch (*s) {
		case '"':
			fstools_buf_str(b, "\\\"");
			break;
		case '\\':
			fstools_buf_str(b, "\\\\");
			break;
		case '\b':
			fstools_buf_str(b, "\\b");
			break;
		case '\f':
			fstools_buf_str(b, "\\f");
			break;
		case '\n':
			fstools_buf_str(b, "\\n");
			break;
		case '\r':
			fstools_buf_str(b, "\\r");
			break;
		case '\t':
			fstools_buf_str(b, "\\t");
			break;
		default:
			if ((unsigned char)*s < 0x20)
				fstools_buf_printf(b, "\\u%04x",
				    (unsigned char)*s);
			else
				fstools_buf_add(b, s, 1);
		}
	}
	fstools_buf_str(b, "\"");
}

/* One directory's array at nesting level (the brackets' indentation);
 * raw is the path as the client would have joined it, validated afresh
 * for each directory as the server does. -1 with *msg. */
static int
tree_dir(struct tree *t, const char *raw, const char *prefix, int level,
    char **msg)
{
	struct fstools_path p;
	struct fstools_entry *v;
	size_t n, shown = 0;
	int ret = 0;

	if (fstools_path_resolve(t->ws, raw, &p, msg) < 0)
		return -1;
	if (fstools_list_dir(t->ws, p.rel, p.real, &v, &n, msg) < 0) {
		fstools_path_free(&p);
		return -1;
	}
	fstools_path_free(&p);
	fstools_buf_str(&t->out, "[");
	for (size_t i = 0; i < n && ret == 0; i++) {
		char *rel = prefix[0] != '\0' ? xasprintf("%s/%s", prefix,
		    v[i].name) : xstrdup(v[i].name);
		int is_dir = v[i].type == DT_DIR;

		if (!excluded(t->excludes, t->nexcludes, rel)) {
			fstools_buf_str(&t->out, shown++ > 0 ? ",\n" : "\n");
			indent(&t->out, level + 1);
			fstools_buf_str(&t->out, "{\n");
			indent(&t->out, level + 2);
			fstools_buf_str(&t->out, "\"name\": ");
			json_quote(&t->out, v[i].name);
			fstools_buf_str(&t->out, ",\n");
			indent(&t->out, level + 2);
			fstools_buf_printf(&t->out, "\"type\": \"%s\"", is_dir ?
			    "directory" : "file");
			if (is_dir) {
				char *sub = raw[0] != '\0' ? xasprintf("%s/%s",
				    raw, v[i].name) : xstrdup(v[i].name);

				fstools_buf_str(&t->out, ",\n");
				indent(&t->out, level + 2);
				fstools_buf_str(&t->out, "\"children\": ");
				ret = tree_dir(t, sub, rel, level + 2, msg);
				free(sub);
			}
			fstools_buf_str(&t->out, "\n");
			indent(&t->out, level + 1);
			fstools_buf_str(&t->out, "}");
		}
		free(rel);
	}
	if (shown > 0) {
		fstools_buf_str(&t->out, "\n");
		indent(&t->out, level);
	}
	fstools_buf_str(&t->out, "]");
	fstools_entries_free(v, n);
	return ret;
}

json_t *
fstools_tool_directory_tree(const struct workspace *ws, json_t *args)
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

		t.excludes[t.nexcludes++] = fstools_glob_compile(s);
		if (strchr(s, '*') != NULL)
			continue;
		any = xasprintf("**/%s", s);
		under = xasprintf("**/%s/**", s);
		t.excludes[t.nexcludes++] = fstools_glob_compile(any);
		t.excludes[t.nexcludes++] = fstools_glob_compile(under);
		free(any);
		free(under);
	}
	if (tree_dir(&t, fstools_arg_string(args, "path"), "", 0, &msg) < 0)
		result = fstools_result_error_free(msg);
	else
		result = fstools_result_text(t.out.s, t.out.len);
	free(t.out.s);
	free_list(t.excludes, t.nexcludes);
	return result;
}
