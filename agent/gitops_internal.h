/*
 * Between gitops.c (the /watcher routes), gitops_diff.c (libgit2 diffs as
 * the wire protocol's JSON) and gitops_log.c (the history as JSON). The worker
 * thread uses these; they touch no event loop, only the evbuffer they are
 * given.
 */
#ifndef GITOPS_INTERNAL_H
#define GITOPS_INTERNAL_H

#include <stddef.h>

#include <git2.h>

#include "error.h"

struct evbuffer;

/* The options of every diff we answer: 3 lines of context as diff -u, no
 * rename detection (a rename is a delete and an add, as git shows it
 * without -M), a file that became a symlink stays one entry. */
void gitops_diff_options_default(git_diff_options *opts);

/* Append the JSON object {"<path>": "<unified diff text>", ...} of every
 * change in diff. Each text starts with "--- a/<path>" and "+++ b/<path>",
 * lines joined by "\n" with none after the last, hunks as diff -u prints
 * them (no function names after @@), "\ No newline at end of file" where
 * diff -u says it, binary files as "Binary files a/<path> and b/<path>
 * differ"; invalid UTF-8 becomes U+FFFD. With max > 0, once out holds
 * more than max bytes the append stops: -1 with err 413. */
int gitops_diff_append_json(struct evbuffer *out, git_diff *diff, size_t max,
    struct error *err);

/* Append s as a JSON string literal, invalid UTF-8 replaced by U+FFFD. */
void gitops_append_string(struct evbuffer *out, const char *s, size_t len);

/* Fill err from libgit2's last error of this thread, after a call that
 * returned rc: 409 for locks, conflicts and a HEAD that moved meanwhile,
 * 500 otherwise. */
void gitops_error(struct error *err, int rc, const char *what);

/* Append {"logs": [...]}: at most limit commits from HEAD, newest first,
 * after skipping offset of them, each with its diff against its first
 * parent. The answer is bounded whatever the history holds: see
 * gitops_log.c. */
int gitops_log_append_json(struct evbuffer *out, git_repository *repo,
    unsigned long limit, unsigned long offset, struct error *err);

#endif
