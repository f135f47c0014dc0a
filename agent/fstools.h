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
struct fs_buf {
	char *s;
	size_t len, cap;
};

void fs_buf_add(struct fs_buf *b, const void *p, size_t n);
void fs_buf_str(struct fs_buf *b, const char *s);
void fs_buf_printf(struct fs_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Hand over the NUL-terminated string; b is empty afterwards. */
char *fs_buf_take(struct fs_buf *b, size_t *len);

/* A client path validated as the npm server validates it. Each string is
 * owned by the struct; fs_path_free releases them. */
struct fs_path {
	char *abs;	/* the request made absolute and normalised */
	char *real;	/* symlinks resolved: what messages and results show */
	char *rel;	/* real, relative to the root ("" is the root) */
};

/* 0, or -1 with *msg (caller frees) the text of the tool error. */
int fs_path_resolve(const struct workspace *ws, const char *requested,
    struct fs_path *p, char **msg);
void fs_path_free(struct fs_path *p);
/* The allowed directories joined by sep. Caller frees. */
char *fs_allowed_dirs(const struct workspace *ws, const char *sep);
/* Whether an absolute, normalised path lies in an allowed directory. */
int fs_path_allowed(const struct workspace *ws, const char *abs);
/* "Access denied - symlink target outside ..." for real. Caller frees. */
char *fs_msg_symlink_out(const struct workspace *ws, const char *real);

/* openat2(RESOLVE_BENEATH) of rel under the root: a descriptor, or -1 with
 * errno (the messages need the errno, which path_open folds away). */
int fs_open(const struct workspace *ws, const char *rel, int flags,
    mode_t mode);
/* fs_open of p->rel, -1 with *msg as Node words a failed syscall on
 * p->real (an escape: "Access denied ..."). */
int fs_open_msg(const struct workspace *ws, const struct fs_path *p,
    int flags, const char *syscall, char **msg);
/* The directory holding rel (not the root) and, in *base, rel's last part;
 * -1 with errno. */
int fs_open_parent(const struct workspace *ws, const char *rel,
    const char **base);
/* A Node fs error message: "ENOENT: no such file or directory, open 'p'"
 * (path and dest may be NULL). Caller frees. */
char *fs_msg_errno(int errnum, const char *syscall, const char *path,
    const char *dest);

/* Read fd to its end; 0 or an errno. *data is NUL-terminated, caller frees. */
int fs_read_fd(int fd, char **data, size_t *len);

enum fs_read_as { FS_READ_TEXT, FS_READ_BASE64 };

/* Read the file p names whole, refusing what Node could not hold as a
 * string (as text, or in base64): -1 with *msg in Node's words. Caller
 * frees *data. */
int fs_read_file(const struct workspace *ws, const struct fs_path *p,
    enum fs_read_as as, char **data, size_t *len, char **msg);
/* Decode as Node's 'utf-8' does: each maximal invalid subpart becomes
 * U+FFFD. Returns s itself when it is valid, else a new string. */
char *fs_utf8_decode(char *s, size_t len, size_t *outlen);
/* Write all of data to a new temporary file beside rel and rename it over
 * rel, as the npm server replaces files. mode < 0: leave the new file's
 * mode as created. 0, or -1 with *msg. */
int fs_replace_file(const struct workspace *ws, const struct fs_path *p,
    const char *data, size_t len, int mode, char **msg);

/* A directory entry; the array owner frees it with fs_entries_free. */
struct fs_entry {
	char *name;
	unsigned char type;	/* DT_DIR, DT_LNK, DT_REG ... (lstat's view) */
};

/* Read an open directory (taking fd over), entries sorted by byte order
 * as libuv's scandir gives them to Node; 0 or an errno. */
int fs_read_dir(int fd, struct fs_entry **out, size_t *n);
void fs_entries_free(struct fs_entry *v, size_t n);
/* fs_read_dir of rel, -1 with *msg ("ENOTDIR: ..., scandir 'real'"). */
int fs_list_dir(const struct workspace *ws, const char *rel,
    const char *real, struct fs_entry **out, size_t *n, char **msg);

/* Results. Successful ones carry the text twice, as content and as
 * structuredContent, as the npm server's do. New references. */
json_t *fs_result_text(const char *text, size_t len);
json_t *fs_result_error(const char *msg);
/* fs_result_error that frees msg. */
json_t *fs_result_error_free(char *msg);

/* Argument accessors; fstools.c has validated the types before a tool
 * runs. */
const char *fs_arg_string(json_t *args, const char *key);
double fs_arg_number(json_t *args, const char *key);

/* One function per tool, arguments validated. New references. */
json_t *fs_tool_read_text_file(const struct workspace *ws, json_t *args);
json_t *fs_tool_read_media_file(const struct workspace *ws, json_t *args);
json_t *fs_tool_read_multiple_files(const struct workspace *ws,
    json_t *args);
json_t *fs_tool_write_file(const struct workspace *ws, json_t *args);
json_t *fs_tool_edit_file(const struct workspace *ws, json_t *args);
json_t *fs_tool_create_directory(const struct workspace *ws, json_t *args);
json_t *fs_tool_list_directory(const struct workspace *ws, json_t *args);
json_t *fs_tool_list_directory_with_sizes(const struct workspace *ws,
    json_t *args);
json_t *fs_tool_directory_tree(const struct workspace *ws, json_t *args);
json_t *fs_tool_move_file(const struct workspace *ws, json_t *args);
json_t *fs_tool_search_files(const struct workspace *ws, json_t *args);
json_t *fs_tool_get_file_info(const struct workspace *ws, json_t *args);
json_t *fs_tool_list_allowed_directories(const struct workspace *ws,
    json_t *args);

/* fstools_diff.c: createTwoFilesPatch(name, name, a, b, "original",
 * "modified") of the diff npm package. Caller frees. */
char *fs_unified_diff(const char *name, const char *a, size_t alen,
    const char *b, size_t blen);

/* fstools_glob.c: minimatch(path, pattern, {dot: true}) for the patterns people
 * write: *, **, ?, [...] classes, {a,b} and {1..3} braces, \ escapes,
 * leading ! negation and # comments. Extglobs (+(a|b) ...) are matched
 * literally. Freed with fs_glob_free. */
struct fs_glob;

struct fs_glob *fs_glob_compile(const char *pattern);
int fs_glob_match(const struct fs_glob *g, const char *path);
void fs_glob_free(struct fs_glob *g);

#endif
