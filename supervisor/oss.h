/*
 * FILE_SYSTEM=oss: workspaces kept in an S3-compatible object store, so a
 * session's files outlive its sandbox and its host. A release uploads the
 * workspace under the sandbox's storage_path (a key prefix; default the
 * sandbox's id); a create that names a storage_path downloads it into the
 * new workspace before the sandbox is handed out, on whichever sandboxd
 * serves the create.
 *
 * Transfers run on worker threads (work_pool), each workspace's files
 * several at a time; their done callbacks run on the loop, never before
 * oss_upload / oss_download returned (the contract of every callback in
 * sandboxd).
 */
#ifndef OSS_H
#define OSS_H

#include "error.h"

struct sandboxd_config;

/* The OSS_* settings and FILE_SYSTEM, checked; with FILE_SYSTEM=oss,
 * STORAGE_FOLDER is a key prefix (a local folder otherwise). 0, or -1
 * with err naming the key at fault. */
int oss_config_validate(struct sandboxd_config *c, struct error *err);
/* FILE_SYSTEM=oss is on. */
int oss_enabled(void);
/* Before the loop: reach the bucket with the keys (blocking). 0, or -1
 * with err naming the setting at fault. */
int oss_check(struct error *err);
/* Once the loop exists, before the first transfer: transfers answer on
 * loop, their temporary files go in state_dir. */
struct event_base;
void oss_init(struct event_base *loop, const char *state_dir);
/* The key prefix a create stores its workspace under: the caller's
 * storage_path checked (400 for '..', an absolute or empty part, a part
 * ending in ".sandboxd", bytes that are no key's), else
 * [STORAGE_FOLDER/]<id>. Caller frees *out. */
int oss_storage_path(const char *given, const char *id, char **out,
    struct error *err);

typedef void (*oss_done_cb)(const struct error *err, void *arg);
/* Upload the workspace dir of sandbox name under prefix: only what
 * changed since the last upload there, and what was deleted since is
 * deleted from the store. */
void oss_upload(const char *name, const char *dir, const char *prefix,
    oss_done_cb done, void *arg);
/* Download what is stored under prefix into the workspace dir (which
 * must hold none of its top-level names), owned by run_as ("UID:GID", or
 * NULL). All or nothing: on error nothing of it is left in dir. A prefix
 * with nothing stored restores nothing and succeeds. */
void oss_download(const char *name, const char *prefix, const char *dir,
    const char *run_as, oss_done_cb done, void *arg);
/* Transfers under way. */
size_t oss_busy(void);
/* Give up every transfer under way (shutdown): their done callbacks run
 * before this returns, with err saying why. Logs which; returns how
 * many. */
size_t oss_abort(const char *why);
/* After the loop: waits for what still runs, then frees. */
void oss_free(void);
/* The oss lines of GET /metrics. */
struct evbuffer;
void oss_metrics(struct evbuffer *b);

#endif
