/*
 * FILE_SYSTEM=oss on the loop (oss.h): the settings, the check at start,
 * and transfers as jobs of a work pool. A job runs on a worker thread
 * (oss_upload.c, oss_download.c), its files OSS_PARALLEL at a time on
 * threads of its own (oss_parallel); its outcome comes back to the loop,
 * which logs one line per transfer, counts it for /metrics and calls the
 * caller back. Shutdown gives up what still runs (oss_abort) and says
 * which.
 *
 * The keys stay in this process: never logged (libcurl's verbose output
 * is off; messages name the endpoint and bucket only), never in a
 * sandbox's environment, never in Redis; sandboxd's own environment
 * loses OSS_ACCESS_KEY_SECRET once read, so no child process inherits it.
 */
#include "sandboxd.h"

#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "log.h"
#include "oss_internal.h"
#include "work_pool.h"
#include "xmalloc.h"

/* Workspaces transferred at once; more wait for a thread. */
#define OSS_JOBS 16

static struct s3_config s3cfg;
static char *folder;			/* STORAGE_FOLDER as a key prefix */
static int enabled;
static long parallel;
static struct event_base *base;
static char *tmpdir;			/* for temporary files of ours */
static struct work_pool *pool;
static struct oss_job *jobs;		/* under way */
static size_t njobs;

/* For /metrics. */
static uint64_t transfers[2][2];	/* [upload][failed] */
static uint64_t files_sent, files_unchanged, files_deleted, files_received;
static uint64_t bytes_sent, bytes_received;

const struct s3_config *
oss_s3_config(void)
{
	return &s3cfg;
}

int
oss_enabled(void)
{
	return enabled;
}

/* A storage_path or STORAGE_FOLDER as a key prefix: parts of UTF-8
 * without control characters, none empty, ".", ".." or ending in
 * OSS_META_SUFFIX (the store's own), the whole at most 512 bytes. */
static int
valid_prefix(const char *s)
{
	size_t n = strlen(s), suffix = strlen(OSS_META_SUFFIX);
	const char *p = s;

	if (n == 0 || n > 512 || !oss_valid_path(s) || !oss_plain_key("", s))
		return 0;
	while (*p != '\0') {
		size_t part = strcspn(p, "/");

		if (part >= suffix && strncmp(p + part - suffix,
		    OSS_META_SUFFIX, suffix) == 0)
			return 0;
		p += part + (p[part] == '/');
	}
	return 1;
}

static int
valid_bucket(const char *b)
{
	size_t n = strlen(b);

	return n >= 3 && n <= 255 && isalnum((unsigned char)b[0]) &&
	    strspn(b, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "0123456789.-_") == n;
}

/* Path style but for the clouds that want the bucket in the host name. */
static int
virtual_by_default(const char *host)
{
	static const char *const clouds[] = {
		".amazonaws.com", ".aliyuncs.com",
	};
	size_t n = strcspn(host, ":");

	for (size_t i = 0; i < sizeof clouds / sizeof clouds[0]; i++) {
		size_t k = strlen(clouds[i]);

		if (n > k && strncasecmp(host + n - k, clouds[i], k) == 0)
			return 1;
	}
	return 0;
}

static int
required(const char *value, const char *key, struct error *err)
{
	if (value != NULL && value[0] != '\0')
		return 0;
	error_set(err, 400, "%s: required with FILE_SYSTEM=oss", key);
	return -1;
}

int
oss_config_validate(struct sandboxd_config *c, struct error *err)
{
	const char *style = c->oss_addressing;

	s3_config_free(&s3cfg);
	free(folder);
	folder = NULL;
	enabled = 0;
	if (strcmp(c->file_system, "oss") != 0)
		return 0;
	if (required(c->oss_endpoint, "OSS_ENDPOINT", err) < 0 ||
	    required(c->oss_bucket, "OSS_BUCKET_NAME", err) < 0 ||
	    required(c->oss_access_key_id, "OSS_ACCESS_KEY_ID", err) < 0 ||
	    required(c->oss_access_key_secret, "OSS_ACCESS_KEY_SECRET",
	    err) < 0 || s3_config_endpoint(&s3cfg, c->oss_endpoint, err) < 0)
		return -1;
	if (!valid_bucket(c->oss_bucket)) {
		error_set(err, 400, "OSS_BUCKET_NAME: '%s' is not a bucket name",
		    c->oss_bucket);
		return -1;
	}
	if (c->oss_region[0] == '\0' || strlen(c->oss_region) > 64 ||
	    strspn(c->oss_region, "abcdefghijklmnopqrstuvwxyz0123456789-_") !=
	    strlen(c->oss_region)) {
		error_set(err, 400, "OSS_REGION: '%s' is not a region name",
		    c->oss_region);
		return -1;
	}
	/* With oss, STORAGE_FOLDER is where default storage paths go in the
	 * bucket (the reference joins the two), not a local folder. */
	if (c->storage_folder != NULL && c->storage_folder[0] != '\0') {
		char *f = c->storage_folder;
		size_t n;

		while (*f == '/')
			f++;
		folder = xstrdup(f);
		n = strlen(folder);
		while (n > 0 && folder[n - 1] == '/')
			folder[--n] = '\0';
		if (!valid_prefix(folder)) {
			error_set(err, 400, "STORAGE_FOLDER: '%s' is not a key "
			    "prefix (with FILE_SYSTEM=oss it names a place in "
			    "the bucket)", c->storage_folder);
			return -1;
		}
	}
	free(c->storage_folder);
	c->storage_folder = NULL;
	s3cfg.bucket = xstrdup(c->oss_bucket);
	s3cfg.region = xstrdup(c->oss_region);
	s3cfg.service = xstrdup("s3");
	s3cfg.access_key = xstrdup(c->oss_access_key_id);
	s3cfg.secret_key = xstrdup(c->oss_access_key_secret);
	s3cfg.virtual_host = strcmp(style, "auto") != 0 ?
	    strcmp(style, "virtual") == 0 : virtual_by_default(s3cfg.host);
	parallel = c->oss_parallel;
	enabled = 1;
	return 0;
}

int
oss_check(struct error *err)
{
	struct s3_param p[] = { { "list-type", "2" }, { "max-keys", "1" } };
	struct s3_request r;
	struct s3_response resp;
	struct s3 s3;
	int rc = 0;

	char *secret = getenv("OSS_ACCESS_KEY_SECRET");

	/* The configuration has its copy. No child of ours needs it, and
	 * children inherit the environment; wiped in place, it is gone
	 * from /proc/PID/environ too. */
	if (secret != NULL)
		explicit_bzero(secret, strlen(secret));
	unsetenv("OSS_ACCESS_KEY_SECRET");
	if (!enabled)
		return 0;
	s3_global_init();
	s3_open(&s3, &s3cfg, NULL);
	s3_request_init(&r, "GET");
	r.params = p;
	r.nparams = 2;
	r.payload_hash = S3_EMPTY_SHA256;
	if (s3_perform(&s3, &r, &resp, err) < 0) {
		error_prefix(err, "OSS_ENDPOINT");
		rc = -1;
	} else if (resp.status != 200) {
		s3_answer_error(&s3, &resp, "LIST", err);
		rc = -1;
	}
	s3_response_free(&resp);
	s3_close(&s3);
	return rc;
}

int
oss_storage_path(const char *given, const char *id, char **out,
    struct error *err)
{
	if (given == NULL) {
		*out = folder != NULL ? xasprintf("%s/%s", folder, id) :
		    xstrdup(id);
		return 0;
	}
	if (!valid_prefix(given)) {
		error_set(err, 400, "storage_path: with FILE_SYSTEM=oss it is a "
		    "key prefix in the bucket: parts of UTF-8 without control "
		    "characters, none empty, '.', '..' or ending in "
		    OSS_META_SUFFIX ", at most 512 bytes");
		return -1;
	}
	*out = xstrdup(given);
	return 0;
}

void
oss_init(struct event_base *loop, const char *state_dir)
{
	struct error err;

	if (!enabled)
		return;
	base = loop;
	tmpdir = xstrdup(state_dir);
	if ((pool = work_pool_new(base, OSS_JOBS, &err)) == NULL)
		fatal("object storage: %s", err.msg);
}

size_t
oss_busy(void)
{
	return njobs;
}

int
oss_cancelled(struct oss_job *job, struct error *err)
{
	int why = atomic_load(&job->cancel);

	if (why == 0)
		return 0;
	if (why == OSS_ABORTED)
		error_set(err, 503, "given up: %s", job->why);
	else
		error_set(err, 503, "stopped");
	return -1;
}

/* oss_parallel's shared state. */
struct parallel {
	struct oss_job *job;
	size_t n;
	atomic_size_t next;
	oss_task_fn fn;
	void *arg;
	pthread_mutex_t lock;
	int failed;
	struct error err;		/* the first failure */
};

static void *
parallel_main(void *arg)
{
	struct parallel *p = arg;
	struct oss_job *job = p->job;
	struct s3 s3;
	size_t i;

	s3_open(&s3, &s3cfg, &job->cancel);
	while ((i = atomic_fetch_add(&p->next, 1)) < p->n) {
		struct error e;
		int none = 0;

		if (oss_cancelled(job, &e) == 0 && p->fn(job, &s3, i, p->arg,
		    &e) == 0)
			continue;
		pthread_mutex_lock(&p->lock);
		if (!p->failed) {
			p->failed = 1;
			p->err = e;
		}
		pthread_mutex_unlock(&p->lock);
		/* The others stop too, their transfers at once. */
		atomic_compare_exchange_strong(&job->cancel, &none,
		    OSS_STOPPED);
		break;
	}
	s3_close(&s3);
	return NULL;
}

int
oss_parallel(struct oss_job *job, size_t n, oss_task_fn fn, void *arg,
    struct error *err)
{
	struct parallel p = { .job = job, .n = n, .fn = fn, .arg = arg };
	size_t want = n < (size_t)parallel ? n : (size_t)parallel, started = 0;
	pthread_t *threads = xcalloc(want + 1, sizeof *threads);
	sigset_t all, old;

	pthread_mutex_init(&p.lock, NULL);
	atomic_init(&p.next, 0);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	/* This thread is one of them; fewer when no more can start. */
	while (started + 1 < want && pthread_create(&threads[started], NULL,
	    parallel_main, &p) == 0)
		started++;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	parallel_main(&p);
	for (size_t i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	free(threads);
	pthread_mutex_destroy(&p.lock);
	if (!p.failed)
		return 0;
	*err = p.err;
	/* Given up from outside: say so, not what it broke. */
	if (atomic_load(&job->cancel) == OSS_ABORTED)
		oss_cancelled(job, err);
	return -1;
}

static void
job_run(void *arg)
{
	struct oss_job *job = arg;

	if (job->upload)
		oss_upload_run(job);
	else
		oss_download_run(job);
	if (job->failed && atomic_load(&job->cancel) == OSS_ABORTED)
		oss_cancelled(job, &job->err);
}

static void
job_free(struct oss_job *job)
{
	free(job->name);
	free(job->dir);
	free(job->prefix);
	free(job->tmpdir);
	free(job);
}

static void
count(struct oss_job *job)
{
	struct oss_stats *s = &job->stats;

	transfers[job->upload][job->failed]++;
	files_sent += atomic_load(&s->files_sent);
	files_unchanged += atomic_load(&s->unchanged);
	files_deleted += atomic_load(&s->deleted);
	files_received += atomic_load(&s->files_received);
	bytes_sent += atomic_load(&s->bytes_sent);
	bytes_received += atomic_load(&s->bytes_received);
}

static void
report(struct oss_job *job)
{
	struct oss_stats *s = &job->stats;
	double took = timing_monotonic() - job->started;
	unsigned long long skipped = atomic_load(&s->skipped);

	if (job->failed) {
		log_error("sandbox %s: workspace %s %s of bucket %s failed after "
		    "%.2f s: %s", job->name, job->upload ? "upload to" :
		    "download from", job->prefix, s3cfg.bucket, took,
		    job->err.msg);
	} else if (job->upload) {
		log_info("sandbox %s: workspace uploaded to %s of bucket %s in "
		    "%.2f s: %llu files sent (%llu bytes), %llu unchanged, %llu "
		    "deleted%s", job->name, job->prefix, s3cfg.bucket, took,
		    atomic_load(&s->files_sent), atomic_load(&s->bytes_sent),
		    atomic_load(&s->unchanged), atomic_load(&s->deleted),
		    skipped > 0 ? ", special files left out" : "");
	} else {
		log_info("sandbox %s: workspace downloaded from %s of bucket %s "
		    "in %.2f s: %llu files (%llu bytes)", job->name, job->prefix,
		    s3cfg.bucket, took, atomic_load(&s->files_received),
		    atomic_load(&s->bytes_received));
	}
}

static void
unlist(struct oss_job *job)
{
	for (struct oss_job **p = &jobs; *p != NULL; p = &(*p)->next) {
		if (*p == job) {
			*p = job->next;
			njobs--;
			return;
		}
	}
}

static void
job_done(void *arg)
{
	struct oss_job *job = arg;

	unlist(job);
	report(job);
	count(job);
	job->done(job->failed ? &job->err : NULL, job->arg);
	job_free(job);
}

/* A job that never ran: its answer from the loop. */
static void
job_refused_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	job_done(arg);
}

static void
submit(struct oss_job *job)
{
	static const struct timeval now = { 0, 0 };

	job->started = timing_monotonic();
	job->tmpdir = xstrdup(tmpdir);
	job->next = jobs;
	jobs = job;
	njobs++;
	if (pool == NULL) {
		error_set(&job->err, 503, "object storage is not available "
		    "now: sandboxd is exiting");
	} else if (work_pool_submit(pool, job_run, job_done, job,
	    &job->err) == 0) {
		return;
	}
	job->failed = 1;
	/* Answered from the loop, after oss_upload / oss_download return. */
	if (event_base_once(base, -1, EV_TIMEOUT, job_refused_cb, job,
	    &now) < 0)
		fatal("cannot defer a callback: out of memory");
}

void
oss_upload(const char *name, const char *dir, const char *prefix,
    oss_done_cb done, void *arg)
{
	struct oss_job *job = xcalloc(1, sizeof *job);

	job->upload = 1;
	job->name = xstrdup(name);
	job->dir = xstrdup(dir);
	job->prefix = xstrdup(prefix);
	job->done = done;
	job->arg = arg;
	submit(job);
}

void
oss_download(const char *name, const char *prefix, const char *dir,
    const char *run_as, oss_done_cb done, void *arg)
{
	struct oss_job *job = xcalloc(1, sizeof *job);
	unsigned uid, gid;

	job->name = xstrdup(name);
	job->dir = xstrdup(dir);
	job->prefix = xstrdup(prefix);
	job->done = done;
	job->arg = arg;
	/* The owner of what is restored, as of the workspace sandboxd made
	 * for the type; not being root, the files stay ours. */
	if (run_as != NULL && geteuid() == 0 &&
	    sscanf(run_as, "%u:%u", &uid, &gid) == 2) {
		job->chown = 1;
		job->uid = (uid_t)uid;
		job->gid = (gid_t)gid;
	}
	submit(job);
}

size_t
oss_abort(const char *why)
{
	size_t n = njobs;

	if (pool == NULL)
		return 0;
	for (struct oss_job *job = jobs; job != NULL; job = job->next) {
		log_warn("sandbox %s: workspace %s %s given up: %s", job->name,
		    job->upload ? "upload to" : "download from", job->prefix,
		    why);
		snprintf(job->why, sizeof job->why, "%s", why);
		atomic_store(&job->cancel, OSS_ABORTED);
	}
	/* Waits for the workers, whose transfers stop within a second, and
	 * runs every done callback here. */
	work_pool_free(pool);
	pool = NULL;
	return n;
}

void
oss_free(void)
{
	work_pool_free(pool);
	pool = NULL;
	if (enabled)
		s3_global_free();
	s3_config_free(&s3cfg);
	free(folder);
	folder = NULL;
	free(tmpdir);
	tmpdir = NULL;
	enabled = 0;
}

void
oss_metrics(struct evbuffer *b)
{
	static const char *const kind[] = { "download", "upload" };

	if (!enabled)
		return;
	evbuffer_add_printf(b, "# HELP sandboxd_oss_transfers_total Workspace "
	    "uploads and downloads to and from object storage.\n# TYPE "
	    "sandboxd_oss_transfers_total counter\n");
	for (int up = 0; up < 2; up++) {
		for (int failed = 0; failed < 2; failed++)
			evbuffer_add_printf(b, "sandboxd_oss_transfers_total{"
			    "kind=\"%s\",result=\"%s\"} %llu\n", kind[up],
			    failed ? "failed" : "ok",
			    (unsigned long long)transfers[up][failed]);
	}
	evbuffer_add_printf(b, "# HELP sandboxd_oss_files_total Files sent, "
	    "found unchanged, deleted and received.\n# TYPE "
	    "sandboxd_oss_files_total counter\n"
	    "sandboxd_oss_files_total{what=\"sent\"} %llu\n"
	    "sandboxd_oss_files_total{what=\"unchanged\"} %llu\n"
	    "sandboxd_oss_files_total{what=\"deleted\"} %llu\n"
	    "sandboxd_oss_files_total{what=\"received\"} %llu\n",
	    (unsigned long long)files_sent, (unsigned long long)files_unchanged,
	    (unsigned long long)files_deleted,
	    (unsigned long long)files_received);
	evbuffer_add_printf(b, "# HELP sandboxd_oss_bytes_total Bytes of files "
	    "sent and received.\n# TYPE sandboxd_oss_bytes_total counter\n"
	    "sandboxd_oss_bytes_total{direction=\"sent\"} %llu\n"
	    "sandboxd_oss_bytes_total{direction=\"received\"} %llu\n"
	    "# HELP sandboxd_oss_transfers_in_progress Workspace transfers "
	    "under way.\n# TYPE sandboxd_oss_transfers_in_progress gauge\n"
	    "sandboxd_oss_transfers_in_progress %zu\n",
	    (unsigned long long)bytes_sent, (unsigned long long)bytes_received,
	    njobs);
}
