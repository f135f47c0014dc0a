/*
 * What the workspace store's files share: the job a transfer is (oss.c
 * runs it on a worker thread), the workspace's entries (oss_walk.c), the
 * layout of a stored workspace (oss_manifest.c), the object operations
 * (oss_objects.c) and the two transfers (oss_upload.c, oss_download.c).
 *
 * Layout under a storage_path P:
 *   P/<path>                    a file whose path can be its own key
 *                               (valid UTF-8, no control character, the
 *                               key at most 1024 bytes), as S3 tools and
 *                               the reference lay a folder out
 *   P.sandboxd/raw/<md5(path)>  a file whose path cannot
 *   P.sandboxd/manifest.jsonl   every entry (files, directories, symlinks)
 *                               with its mode, size and ETag: written
 *                               last, so a cut upload is never taken for
 *                               a whole one
 * A prefix without a manifest (filled by other S3 tools) restores from its
 * listing: keys ending in '/' as directories, the rest as files.
 */
#ifndef OSS_INTERNAL_H
#define OSS_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "oss.h"
#include "s3.h"

/* Files of this size and up go as multipart uploads, in parts of
 * oss_part_size(size), so an ETag can be foretold from the file alone. */
#define OSS_PART_SIZE (8u << 20)
#define OSS_MAX_PARTS 10000
/* A workspace with more entries is refused: each costs memory here. */
#define OSS_MAX_ENTRIES 1000000
/* S3's longest key. */
#define OSS_MAX_KEY 1024
#define OSS_META_SUFFIX ".sandboxd"
#define OSS_ETAG_MAX 80

enum oss_kind {
	OSS_FILE,
	OSS_DIR,
	OSS_LINK,
};

/* One entry of a workspace; owned by its tree. */
struct oss_entry {
	char *path;			/* relative, as the bytes on disk */
	char *key;			/* a listed file's object; NULL: by path */
	char *target;			/* a symlink's */
	enum oss_kind kind;
	unsigned mode;			/* permission bits */
	uint64_t size;
	char etag[OSS_ETAG_MAX];	/* of its object, once known */
	/* An upload's view of the store: */
	int stored;			/* an object of its key is listed */
	uint64_t stored_size;
	char stored_etag[OSS_ETAG_MAX];
};

/* Entries sorted by path (a parent before what it holds). */
struct oss_tree {
	struct oss_entry *v;
	size_t n, cap;
};

/* Counted by every thread of a transfer. */
struct oss_stats {
	atomic_ullong files_sent, bytes_sent, unchanged, deleted;
	atomic_ullong files_received, bytes_received;
	atomic_ullong skipped;		/* not a file, directory or symlink */
};

/* Why a job's transfers stop: given up from outside (job->why says
 * why), or stopped by one of its own failures. */
#define OSS_ABORTED 1
#define OSS_STOPPED 2

/* One upload or download; made and freed on the loop, run on a worker. */
struct oss_job {
	int upload;			/* else a download */
	char *name;			/* the sandbox's, for logs */
	char *dir;			/* the workspace on this host */
	char *prefix;			/* the storage_path */
	char *tmpdir;			/* for temporary files of ours */
	int chown;			/* give restored entries to uid:gid */
	uid_t uid;
	gid_t gid;
	oss_done_cb done;
	void *arg;
	atomic_int cancel;		/* OSS_ABORTED or OSS_STOPPED */
	char why[160];			/* the abort's reason, set before it */
	struct error err;		/* the outcome: failed, err */
	int failed;
	struct oss_stats stats;
	double started;			/* monotonic seconds */
	struct oss_job *next;		/* oss.c's list of jobs */
};

/* oss.c */
const struct s3_config *oss_s3_config(void);
/* Run fn(job, s3, i, arg, err) for i in [0, n) on up to OSS_PARALLEL
 * threads, each with its own client; the first failure stops the others
 * (they stop between items and in their transfers). 0, or -1 with err
 * (the first failure's, or why the job was given up). */
typedef int (*oss_task_fn)(struct oss_job *job, struct s3 *s3, size_t i,
    void *arg, struct error *err);
int oss_parallel(struct oss_job *job, size_t n, oss_task_fn fn, void *arg,
    struct error *err);
/* err when the job was cancelled: why. 0, or -1. */
int oss_cancelled(struct oss_job *job, struct error *err);

/* oss_walk.c */
/* openat2 beneath dirfd, never through a symlink. -1 with errno. */
int oss_open_beneath(int dirfd, const char *path, int flags, mode_t mode);
/* Every file, directory and symlink under rootfd (not the root itself),
 * sorted by path; nothing followed. 0, or -1 with err. */
int oss_walk(int rootfd, struct oss_tree *t, struct oss_job *job,
    struct error *err);
struct oss_entry *oss_tree_add(struct oss_tree *t, const char *path,
    enum oss_kind kind);
void oss_tree_sort(struct oss_tree *t);
struct oss_entry *oss_tree_find(const struct oss_tree *t, const char *path);
void oss_tree_free(struct oss_tree *t);
/* path in printable ASCII for messages and logs (escapes, cut). */
void oss_printable(char *buf, size_t size, const char *path);

/* oss_manifest.c */
/* The key of a file's object, and of the manifest. Caller frees. */
char *oss_file_key(const char *prefix, const char *path);
char *oss_manifest_key(const char *prefix);
/* Whether path may be stored as "<prefix>/<path>". */
int oss_plain_key(const char *prefix, const char *path);
/* A relative path from the store: non-empty, no empty, "." or ".."
 * part, no leading '/', at most PATH_MAX. */
int oss_valid_path(const char *path);
/* The multipart part size for a file of size bytes (0: one PUT). */
uint64_t oss_part_size(uint64_t size);
/* Write tree (complete), or an incomplete marker naming the paths of
 * tree and of also (the files an interrupted upload may have left), to
 * fd. 0, or -1 with err. */
int oss_manifest_write(int fd, const struct oss_tree *tree, int complete,
    const struct oss_tree *also, struct error *err);
/* Read a manifest from fd into tree (sorted, paths checked); *complete
 * says whether the upload that wrote it finished. 0, or -1 with err. */
int oss_manifest_read(int fd, struct oss_tree *tree, int *complete,
    struct error *err);

/* oss_objects.c */
/* S3's ETag for size bytes of fd: the MD5, or for a multipart size the
 * MD5 of the parts' MD5s and "-<parts>". 0, or -1 with err. */
int oss_etag_fd(struct oss_job *job, int fd, uint64_t size, char *etag,
    struct error *err);
/* PUT size bytes of fd as key (multipart from OSS_PART_SIZE), checking
 * the server's ETag against what was sent; etag (may be NULL) gets it. */
int oss_put_fd(struct s3 *s3, const char *key, int fd, uint64_t size,
    char *etag, struct error *err);
/* GET key into fd: exactly size bytes, and for a one-part ETag the same
 * MD5. */
int oss_get_fd(struct s3 *s3, const char *key, int fd, uint64_t size,
    const char *etag, struct error *err);
/* 1 when key is missing (404), 0 when fetched into fd, -1 with err. */
int oss_get_optional(struct s3 *s3, const char *key, int fd, uint64_t max,
    struct error *err);
/* cb(key, size, etag) for every object under prefix, in pages; cb's -1
 * stops with its err. */
typedef int (*oss_list_cb)(const char *key, uint64_t size, const char *etag,
    void *arg, struct error *err);
int oss_list(struct s3 *s3, const char *prefix, oss_list_cb cb, void *arg,
    struct error *err);
/* Delete keys, up to 1000 a request. */
int oss_delete(struct s3 *s3, char **keys, size_t n, struct error *err);

/* oss_upload.c, oss_download.c: on the job's worker thread. */
void oss_upload_run(struct oss_job *job);
void oss_download_run(struct oss_job *job);

#endif
