/*
 * Internals of the filesystem tool group (fstools*.c). The tools answer as
 * @modelcontextprotocol/server-filesystem does (same names, arguments,
 * texts and error messages, Node's error wording included), so a client
 * cannot tell them apart, but every file operation goes through openat2
 * with RESOLVE_BENEATH from the workspace root descriptor.
 */
#ifndef FSTOOLS_H
#define FSTOOLS_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

#include "path.h"

/* A growing byte string; the owner frees s. */
struct fstools_buf {
	char *s;
	size_t len, cap;
};

void fstools_buf_add(struct fstools_buf *b, const void *p, size_t n);
void fstools_buf_str(struct fstools_buf *b, const char *s);
void fstools_buf_printf(struct fstools_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Hand over the NUL-terminated string; b is empty afterwards. */
char *fstools_buf_take(struct fstools_buf *b, size_t *len);

/* A client path validated as the npm server validates it. Each string is
 * owned by the struct; fstools_path_free releases them. */
struct fstools_path {
	char *abs;	/* the request made absolute and normalised */
	char *real;	/* symlinks resolved: what messages and results show */
	char *rel;	/* real, relative to the root ("" is the root) */
};

/* 0, or -1 with *msg (caller frees) the text of the tool error. */
int fstools_path_resolve(const struct workspace *ws, const char *requested,
    struct fstools_path *p, char **msg);
void fstools_path_free(struct fstools_path *p);
/* The allowed directories joined by sep. Caller frees. */
char *fstools_allowed_dirs(const struct workspace *ws, const char *sep);
/* Whether an absolute, normalised path lies in an allowed directory. */
int fstools_path_allowed(const struct workspace *ws, const char *abs);
/* "Access denied - symlink target outside ..." for real. Caller frees. */
char *fstools_msg_symlink_out(const struct workspace *ws, const char *real);

/* openat2(RESOLVE_BENEATH) of rel under the root: a descriptor, or -1 with
 * errno (the messages need the errno, which path_open folds away). */
int fstools_open(const struct workspace *ws, const char *rel, int flags,
    mode_t mode);
/* fstools_open of p->rel, -1 with *msg as Node words a failed syscall on
 * p->real (an escape: "Access denied ..."). */
int fstools_open_msg(const struct workspace *ws, const struct fstools_path *p,
    int flags, const char *syscall, char **msg);
/* The directory holding rel (not the root) and, in *base, rel's last part;
 * -1 with errno. */
int fstools_open_parent(const struct workspace *ws, const char *rel,
    const char **base);
/* A Node fs error message: "ENOENT: no such file or directory, open 'p'"
 * (path and dest may be NULL). Caller frees. */
char *fstools_msg_errno(int errnum, const char *syscall, const char *path,
    const char *dest);

/* Read fd to its end; 0 or an errno. *data is NUL-terminated, caller frees. */
int fstools_read_fd(int fd, char **data, size_t *len);

enum fstools_read_as { FSTOOLS_READ_TEXT, FSTOOLS_READ_BASE64 };

/* Read the file p names whole, refusing what Node could not hold as a
 * string (as text, or in base64): -1 with *msg in Node's words. Caller
 * frees *data. */
int fstools_read_file(const struct workspace *ws, const struct fstools_path *p,
    enum fstools_read_as as, char **data, size_t *len, char **msg);
/* Decode as Node's 'utf-8' does: each maximal invalid subpart becomes
 * U+FFFD. Returns s itself when it is valid, else a new string. */
char *fstools_utf8_decode(char *s, size_t len, size_t *outlen);
/* Write all of data to a new temporary file beside rel and rename it over
 * rel, as the npm server replaces files. mode < 0: leave the new file's
 * mode as created. 0, or -1 with *msg. */
int fstools_replace_file(const struct workspace *ws,
    const struct fstools_path *p,
    const char *data, size_t len, int mode, char **msg);

/* A directory entry; the array owner frees it with fstools_entries_free. */
struct fstools_entry {
	char *name;
	unsigned char type;	/* DT_DIR, DT_LNK, DT_REG ... (lstat's view) */
};

/* Read an open directory (taking fd over), entries sorted by byte order
 * as libuv's scandir gives them to Node; 0 or an errno. */
int fstools_read_dir(int fd, struct fstools_entry **out, size_t *n);
void fstools_entries_free(struct fstools_entry *v, size_t n);
/* fstools_read_dir of rel, -1 with *msg ("ENOTDIR: ..., scandir 'real'"). */
int fstools_list_dir(const struct workspace *ws, const char *rel,
    const char *real, struct fstools_entry **out, size_t *n, char **msg);

/* Results. Successful ones carry the text twice, as content and as
 * structuredContent, as the npm server's do. New references. */
json_t *fstools_result_text(const char *text, size_t len);
json_t *fstools_result_error(const char *msg);
/* fstools_result_error that frees msg. */
json_t *fstools_result_error_free(char *msg);

/* Argument accessors; fstools.c has validated the types before a tool
 * runs. */
const char *fstools_arg_string(json_t *args, const char *key);
double fstools_arg_number(json_t *args, const char *key);

/* One function per tool, arguments validated. New references. */
json_t *fstools_tool_read_text_file(const struct workspace *ws, json_t *args);
json_t *fstools_tool_read_media_file(const struct workspace *ws, json_t *args);
json_t *fstools_tool_read_multiple_files(const struct workspace *ws,
    json_t *args);
json_t *fstools_tool_write_file(const struct workspace *ws, json_t *args);
json_t *fstools_tool_edit_file(const struct workspace *ws, json_t *args);
json_t *fstools_tool_create_directory(const struct workspace *ws, json_t *args);
json_t *fstools_tool_list_directory(const struct workspace *ws, json_t *args);
json_t *fstools_tool_list_directory_with_sizes(const struct workspace *ws,
    json_t *args);
json_t *fstools_tool_directory_tree(const struct workspace *ws, json_t *args);
json_t *fstools_tool_move_file(const struct workspace *ws, json_t *args);
json_t *fstools_tool_search_files(const struct workspace *ws, json_t *args);
json_t *fstools_tool_get_file_info(const struct workspace *ws, json_t *args);
json_t *fstools_tool_list_allowed_directories(const struct workspace *ws,
    json_t *args);

/* fstools_diff.c: createTwoFilesPatch(name, name, a, b, "original",
 * "modified") of the diff npm package. Caller frees. */
char *fstools_unified_diff(const char *name, const char *a, size_t alen,
    const char *b, size_t blen);

/* fstools_glob.c: minimatch(path, pattern, {dot: true}) for the patterns people
 * write: *, **, ?, [...] classes, {a,b} and {1..3} braces, \ escapes,
 * leading ! negation and # comments. Extglobs (+(a|b) ...) are matched
 * literally. Freed with fstools_glob_free. */
struct fstools_glob;

struct fstools_glob *fstools_glob_compile(const char *pattern);
int fstools_glob_match(const struct fstools_glob *g, const char *path);
void fstools_glob_free(struct fstools_glob *g);

#endif
