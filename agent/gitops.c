/*
 * The /watcher routes: git commit, diff and log of the workspace, through
 * libgit2.
 *
 *   POST /watcher/commit_changes {"commit_message"?}
 *   POST /watcher/generate_diff {"commit_a"?, "commit_b"?}
 *   GET  /watcher/git_logs[?limit=N][&offset=M]
 *
 * This file holds the routes, the commit and the diff; gitops_diff.c writes
 * diffs as JSON, gitops_log.c the history. The prefix is gitops_, not git_:
 * git_ is libgit2's, and ours must not collide with or pass for its names.
 *
 * The workspace root itself is the repository (no search upwards, so a
 * workspace inside some other checkout never commits into it); when it is
 * not one yet, the first git request initialises it. Every operation runs
 * on one worker thread (work_queue.c), so a commit of a large tree does
 * not stall /healthz or the shell, and operations on the repository happen
 * one at a time, in the order they came. The repository is opened afresh
 * for each operation: shell commands may run git between two requests.
 */
#include "agent.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <git2.h>

#include "files_staged.h"
#include "gitops_internal.h"
#include "jsonx.h"
#include "log.h"
#include "work_queue.h"
#include "xmalloc.h"

#define DEFAULT_MESSAGE "Automated commit"
#define LOGS_DEFAULT	100	/* commits a log answer holds unless asked */
#define LOGS_MAX	1000	/* and at most */
#define FALLBACK_NAME "User"
#define FALLBACK_EMAIL "user@example.com"

struct git_job;
typedef int (*git_job_fn)(struct git_job *job, git_repository *repo,
    struct error *err);

/* One request's git work: made by its handler, filled in by the worker,
 * answered and freed on the loop by job_done. */
struct git_job {
	struct agent *agent;
	struct http_request *req;
	git_job_fn fn;
	char *message;			/* commit */
	char *rev_a, *rev_b;		/* diff; both NULL: worktree vs HEAD */
	unsigned long limit, offset;	/* logs */
	struct evbuffer *answer;	/* the JSON answer */
	struct error err;
	int failed;
};

/* The one queue of the workspace repository; lives until shutdown. */
static struct work_queue *git_queue;
/* Set at shutdown: queued jobs are answered 503 instead of run. */
static atomic_int git_stopping;

/* libgit2 finds the global and XDG configuration through $HOME, which is
 * root's: under --run-as the worker, with the user's file-system ids,
 * cannot even stat root's ~/.gitconfig (every route failed on it), and
 * root's settings must not apply to the user's repository anyway. The
 * run-as user's own home instead, or none when it is unknown. */
static void
config_search_paths(struct agent *agent)
{
	const char *home = agent->run_as_home != NULL ? agent->run_as_home : "";
	char *xdg = home[0] != '\0' ? xasprintf("%s/.config/git", home) :
	    xstrdup("");

	if (git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, GIT_CONFIG_LEVEL_GLOBAL,
	    home) < 0 || git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH,
	    GIT_CONFIG_LEVEL_XDG, xdg) < 0)
		log_warn("git: cannot point the configuration at the run-as "
		    "user's home: %s", git_error_last() != NULL ?
		    git_error_last()->message : "libgit2 error");
	free(xdg);
}

void
gitops_routes_init(struct agent *agent)
{
	git_libgit2_init();
	if (agent->drop_ids)
		config_search_paths(agent);
	/* The workspace is often a host directory mounted with the host
	 * user's ids, and the agent is its only git user, so libgit2's
	 * safe.directory ownership check would only refuse good requests. */
	git_libgit2_opts(GIT_OPT_SET_OWNER_VALIDATION, 0);
	/* libgit2 sets up a fresh zlib stream (a few hundred KiB) for every
	 * file it stages; with glibc's default trim threshold each free gives
	 * the pages back and the next file faults them in again, which made
	 * staging 20k files three times slower than git add. */
	mallopt(M_TRIM_THRESHOLD, 8 * 1024 * 1024);
	git_queue = work_queue_new(agent->base);
	if (git_queue == NULL)
		log_error("git routes disabled: no worker thread");
}

/* A commit cut off by exit could leave index.lock behind and block every
 * later git command in the workspace, so the running operation is let
 * finish; the queued ones are not started. */
void
gitops_routes_shutdown(void)
{
	atomic_store(&git_stopping, 1);
	work_queue_free(git_queue);
	git_queue = NULL;
	git_libgit2_shutdown();
}

static git_repository *
open_workspace(const char *root, struct error *err)
{
	git_repository *repo;
	int rc;

	rc = git_repository_open_ext(&repo, root,
	    GIT_REPOSITORY_OPEN_NO_SEARCH, NULL);
	if (rc == GIT_ENOTFOUND) {
		rc = git_repository_init(&repo, root, 0);
		if (rc == 0)
			log_info("git: initialised a repository in %s", root);
	}
	if (rc < 0) {
		gitops_error(err, rc, "cannot open the workspace repository");
		return NULL;
	}
	if (git_repository_is_bare(repo)) {
		error_set(err, 409, "the workspace is a bare repository");
		git_repository_free(repo);
		return NULL;
	}
	return repo;
}

/* The hidden files of uploads under way (or of an agent that died
 * mid-upload, until the next one sweeps them) are never staged, whatever
 * .gitignore says. */
static int
skip_staged_uploads(const char *path, const char *matched, void *payload)
{
	const char *base = strrchr(path, '/');

	(void)matched;
	(void)payload;
	return files_staged_is_hidden_name(base != NULL ? base + 1 : path);
}

/* git add -A: new, changed and deleted files, .gitignore honoured (files
 * already tracked stay tracked even when ignored, as with git). The index
 * is written, as the reference's staging leaves it. */
static int
stage_all(git_repository *repo, git_index **out, struct error *err)
{
	git_index *index;
	int rc;

	rc = git_repository_index(&index, repo);
	if (rc < 0) {
		gitops_error(err, rc, "cannot read the index");
		return -1;
	}
	rc = git_index_add_all(index, NULL, GIT_INDEX_ADD_DEFAULT,
	    skip_staged_uploads, NULL);
	if (rc == 0)
		rc = git_index_update_all(index, NULL, skip_staged_uploads, NULL);
	if (rc == 0)
		rc = git_index_write(index);
	if (rc < 0) {
		gitops_error(err, rc, "cannot stage the workspace's changes");
		git_index_free(index);
		return -1;
	}
	*out = index;
	return 0;
}

/* HEAD's commit; *out NULL when HEAD names no commit yet. */
static int
head_commit(git_repository *repo, git_commit **out, struct error *err)
{
	git_oid id;
	int rc;

	*out = NULL;
	rc = git_reference_name_to_id(&id, repo, "HEAD");
	if (rc == GIT_ENOTFOUND || rc == GIT_EUNBORNBRANCH)
		return 0;
	if (rc == 0)
		rc = git_commit_lookup(out, repo, &id);
	if (rc < 0) {
		gitops_error(err, rc, "cannot read HEAD");
		return -1;
	}
	return 0;
}

/* user.name and user.email from the repository's configuration (its own,
 * the user's, the system's), each with the protocol's fallback. */
static int
signature(git_repository *repo, git_signature **out, struct error *err)
{
	const char *name = NULL, *email = NULL;
	git_config *cfg = NULL;
	int rc;

	if (git_repository_config_snapshot(&cfg, repo) == 0) {
		if (git_config_get_string(&name, cfg, "user.name") < 0 ||
		    name[0] == '\0')
			name = NULL;
		if (git_config_get_string(&email, cfg, "user.email") < 0 ||
		    email[0] == '\0')
			email = NULL;
	}
	rc = git_signature_now(out, name != NULL ? name : FALLBACK_NAME,
	    email != NULL ? email : FALLBACK_EMAIL);
	git_config_free(cfg);
	if (rc < 0) {
		gitops_error(err, rc, "cannot make the commit's signature");
		return -1;
	}
	return 0;
}

/*
 * A commit is made even when nothing changed, as the reference's commit
 * does (git commit --allow-empty): the caller asked for a commit with this
 * message, and answering an older commit would name one it did not make.
 */
static int
commit_run(struct git_job *job, git_repository *repo, struct error *err)
{
	git_index *index = NULL;
	git_tree *tree = NULL;
	git_commit *parent = NULL;
	git_signature *sig = NULL;
	git_buf msg = { 0 };
	git_oid tree_id, id;
	char hex[GIT_OID_HEXSZ + 1];
	const git_commit *parents[1];
	int rc, ret = -1;

	if (stage_all(repo, &index, err) < 0)
		return -1;
	rc = git_index_write_tree(&tree_id, index);
	if (rc == 0)
		rc = git_tree_lookup(&tree, repo, &tree_id);
	if (rc < 0) {
		gitops_error(err, rc, "cannot write the tree");
		goto out;
	}
	if (head_commit(repo, &parent, err) < 0 || signature(repo, &sig, err) < 0)
		goto out;
	/* As git commit -m stores it: trailing spaces and blank lines
	 * trimmed, one final newline. */
	rc = git_message_prettify(&msg, job->message, 0, '#');
	if (rc == 0) {
		parents[0] = parent;
		rc = git_commit_create(&id, repo, "HEAD", sig, sig, NULL, msg.ptr,
		    tree, parent != NULL ? 1 : 0, parents);
	}
	if (rc < 0) {
		gitops_error(err, rc, "cannot commit");
		goto out;
	}
	git_oid_tostr(hex, sizeof hex, &id);
	evbuffer_add_printf(job->answer, "{\"commit\":\"%s\",\"message\":", hex);
	gitops_append_string(job->answer, job->message,
	    strlen(job->message));
	evbuffer_add(job->answer, "}", 1);
	ret = 0;
out:
	git_buf_dispose(&msg);
	git_signature_free(sig);
	git_commit_free(parent);
	git_tree_free(tree);
	git_index_free(index);
	return ret;
}

/* The tree of the commit rev names (a sha, a short sha, a branch,
 * HEAD~2 ...). */
static int
resolve_tree(git_repository *repo, const char *rev, git_tree **out,
    struct error *err)
{
	git_object *obj = NULL, *commit = NULL;
	int rc;

	rc = git_revparse_single(&obj, repo, rev);
	if (rc == GIT_ENOTFOUND) {
		error_set(err, 404, "unknown commit: '%.200s'", rev);
		return -1;
	}
	if (rc == GIT_EAMBIGUOUS || rc == GIT_EINVALIDSPEC) {
		const git_error *e = git_error_last();

		error_set(err, 400, "invalid commit '%.200s': %s", rev,
		    e != NULL ? e->message : "ambiguous or malformed");
		return -1;
	}
	if (rc == 0 && git_object_peel(&commit, obj, GIT_OBJECT_COMMIT) < 0) {
		error_set(err, 400, "'%.200s' is not a commit", rev);
		git_object_free(obj);
		return -1;
	}
	if (rc == 0)
		rc = git_commit_tree(out, (git_commit *)commit);
	git_object_free(commit);
	git_object_free(obj);
	if (rc < 0) {
		gitops_error(err, rc, "cannot read a commit");
		return -1;
	}
	return 0;
}

static int
diff_run(struct git_job *job, git_repository *repo, struct error *err)
{
	git_diff_options opts;
	git_index *index = NULL;
	git_commit *head = NULL;
	git_tree *old = NULL, *new = NULL;
	git_diff *diff = NULL;
	int rc, ret = -1;

	gitops_diff_options_default(&opts);
	if (job->rev_a == NULL) {
		if (stage_all(repo, &index, err) < 0 ||
		    head_commit(repo, &head, err) < 0)
			goto out;
		/* No commit yet: against the empty tree (old NULL). */
		rc = head != NULL ? git_commit_tree(&old, head) : 0;
		if (rc == 0)
			rc = git_diff_tree_to_index(&diff, repo, old, index,
			    &opts);
	} else {
		if (resolve_tree(repo, job->rev_a, &old, err) < 0 ||
		    resolve_tree(repo, job->rev_b, &new, err) < 0)
			goto out;
		rc = git_diff_tree_to_tree(&diff, repo, old, new, &opts);
	}
	if (rc < 0) {
		gitops_error(err, rc, "cannot diff");
		goto out;
	}
	evbuffer_add(job->answer, "{\"diffs\":", 9);
	if (gitops_diff_append_json(job->answer, diff, 0, err) < 0)
		goto out;
	evbuffer_add(job->answer, "}", 1);
	ret = 0;
out:
	git_diff_free(diff);
	git_tree_free(new);
	git_tree_free(old);
	git_commit_free(head);
	git_index_free(index);
	return ret;
}

static int
logs_run(struct git_job *job, git_repository *repo, struct error *err)
{
	return gitops_log_append_json(job->answer, repo, job->limit, job->offset,
	    err);
}

/* On the worker thread. */
static void
job_run(void *arg)
{
	struct git_job *job = arg;
	git_repository *repo;

	if (atomic_load(&git_stopping)) {
		error_set(&job->err, 503, "the agent is shutting down");
		job->failed = 1;
		return;
	}
	/* Files the agent writes into .git must belong to the user commands
	 * run as, or that user's own git could no longer write there; the
	 * filesystem ids are per thread, so only this worker changes. */
	run_as_files(job->agent);
	repo = open_workspace(job->agent->ws.real_root, &job->err);
	if (repo == NULL) {
		job->failed = 1;
		return;
	}
	job->answer = evbuffer_new();
	if (job->fn(job, repo, &job->err) < 0)
		job->failed = 1;
	git_repository_free(repo);
}

static void
job_free(struct git_job *job)
{
	if (job->answer != NULL)
		evbuffer_free(job->answer);
	free(job->message);
	free(job->rev_a);
	free(job->rev_b);
	free(job);
}

/* On the loop thread. */
static void
job_done(void *arg)
{
	struct git_job *job = arg;

	if (job->failed)
		http_reply_err(job->req, &job->err);
	else
		http_reply_buffer(job->req, 200, "application/json",
		    job->answer);
	job_free(job);
}

static struct git_job *
job_new(struct agent *agent, struct http_request *req, git_job_fn fn)
{
	struct git_job *job = xcalloc(1, sizeof *job);

	job->agent = agent;
	job->req = req;
	job->fn = fn;
	return job;
}

static void
submit(struct git_job *job)
{
	if (git_queue == NULL) {
		http_reply_error(job->req, 500, "git is unavailable: its worker "
		    "thread could not start");
		job_free(job);
		return;
	}
	work_queue_submit(git_queue, job_run, job_done, job);
}

/* The body as a JSON object; an empty body counts as {} so that every
 * field takes its default, as the reference's optional body does. */
static json_t *
body_object(struct http_request *req, struct error *err)
{
	if (evbuffer_get_length(http_request_body(req)) == 0)
		return json_object();
	return http_request_json(req, err);
}

void
gitops_route_commit(struct http_request *req, void *arg)
{
	struct error err = { 0 };
	struct git_job *job;
	const char *message;
	json_t *body;

	body = body_object(req, &err);
	if (body == NULL ||
	    jsonx_get_string(body, "commit_message", 0, &message, &err) < 0) {
		json_decref(body);
		http_reply_err(req, &err);
		return;
	}
	job = job_new(arg, req, commit_run);
	job->message = xstrdup(message != NULL ? message : DEFAULT_MESSAGE);
	json_decref(body);
	submit(job);
}

void
gitops_route_diff(struct http_request *req, void *arg)
{
	struct error err = { 0 };
	const char *a, *b;
	struct git_job *job;
	json_t *body;

	body = body_object(req, &err);
	if (body == NULL ||
	    jsonx_get_string(body, "commit_a", 0, &a, &err) < 0 ||
	    jsonx_get_string(body, "commit_b", 0, &b, &err) < 0) {
		json_decref(body);
		http_reply_err(req, &err);
		return;
	}
	if ((a == NULL) != (b == NULL)) {
		json_decref(body);
		http_reply_error(req, 400, "give both commit_a and commit_b, or "
		    "neither (the working tree against HEAD)");
		return;
	}
	job = job_new(arg, req, diff_run);
	job->rev_a = a != NULL ? xstrdup(a) : NULL;
	job->rev_b = b != NULL ? xstrdup(b) : NULL;
	json_decref(body);
	submit(job);
}

/* A query parameter as a number in [min, max]; def when absent. */
static int
query_number(struct http_request *req, const char *name, unsigned long def,
    unsigned long min, unsigned long max, unsigned long *out,
    struct error *err)
{
	const char *s = http_request_query(req, name);
	char *end;

	*out = def;
	if (s == NULL)
		return 0;
	errno = 0;
	*out = strtoul(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno == ERANGE ||
	    *out < min || *out > max) {
		error_set(err, 400, "%s must be an integer from %lu to %lu",
		    name, min, max);
		return -1;
	}
	return 0;
}

void
gitops_route_logs(struct http_request *req, void *arg)
{
	unsigned long limit, offset;
	struct error err = { 0 };
	struct git_job *job;

	if (query_number(req, "limit", LOGS_DEFAULT, 1, LOGS_MAX, &limit,
	    &err) < 0 || query_number(req, "offset", 0, 0, ULONG_MAX, &offset,
	    &err) < 0) {
		http_reply_err(req, &err);
		return;
	}
	job = job_new(arg, req, logs_run);
	job->limit = limit;
	job->offset = offset;
	submit(job);
}
