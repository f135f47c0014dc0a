/*
 * The workspace entry routes: GET /workspace/list, GET /workspace/exists,
 * DELETE /workspace/entry, POST /workspace/move, POST /workspace/mkdir.
 *
 * A listing streams: directories are read one at a time, sorted by name,
 * and their entries written as the client takes them, so a tree of any
 * size costs the memory of the directories on one path from the top.
 */
#include "agent.h"
#include "files_ops.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jsonx.h"
#include "log.h"
#include "work_pool.h"
#include "xmalloc.h"

#define LIST_HIGH	(256 * 1024)	/* reply bytes queued before we wait */

static int
query_path(struct agent *agent, struct http_request *req, const char *def,
    char **rel, struct error *err)
{
	const char *path = http_request_query(req, "path");

	if (def != NULL && (path == NULL || path[0] == '\0'))
		path = def;
	if (path == NULL) {
		error_set(err, 400, "query parameter 'path' is required");
		return -1;
	}
	return path_normalize(&agent->ws, path, rel, err);
}

static char *
join(const char *dir, const char *name)
{
	return dir[0] != '\0' ? xasprintf("%s/%s", dir, name) : xstrdup(name);
}

/* Listing. */

struct dir_entry {
	char *name;
	struct stat st;		/* lstat */
};

/* One directory of the listing; its entries sit at depth. */
struct level {
	char *rel;
	struct dir_entry *ents;
	size_t n, next;
	int depth;
};

/* One listing; freed when its reply ends or its client leaves. */
struct listing {
	struct agent *agent;
	struct level *stack;
	size_t n, cap;
	int max_depth;
	int written;		/* entries written so far */
};

static int
entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dir_entry *)a)->name,
	    ((const struct dir_entry *)b)->name);
}

static void
level_clear(struct level *lv)
{
	for (size_t i = 0; i < lv->n; i++)
		free(lv->ents[i].name);
	free(lv->ents);
	free(lv->rel);
}

/* Read directory rel whole. Below the top, nofollow: a symlink swapped in
 * for a directory since it was listed is not followed. */
static int
read_level(struct agent *agent, const char *rel, int nofollow, int depth,
    struct level *lv, struct error *err)
{
	struct dirent *de;
	size_t cap = 0;
	DIR *dir;
	int fd;

	memset(lv, 0, sizeof *lv);
	fd = path_open(&agent->ws, rel, O_RDONLY | O_DIRECTORY |
	    (nofollow ? O_NOFOLLOW : 0), 0, err);
	if (fd < 0)
		return -1;
	if ((dir = fdopendir(fd)) == NULL) {
		path_error(err, errno, "list", rel);
		close(fd);
		return -1;
	}
	lv->rel = xstrdup(rel);
	lv->depth = depth;
	while ((de = readdir(dir)) != NULL) {
		struct dir_entry *e;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (lv->n == cap) {
			cap = cap ? cap * 2 : 16;
			lv->ents = xreallocarray(lv->ents, cap, sizeof *lv->ents);
		}
		e = &lv->ents[lv->n];
		/* Gone since readdir: not listed. */
		if (fstatat(dirfd(dir), de->d_name, &e->st,
		    AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		e->name = xstrdup(de->d_name);
		lv->n++;
	}
	closedir(dir);
	if (lv->n > 1)
		qsort(lv->ents, lv->n, sizeof *lv->ents, entry_cmp);
	return 0;
}

static void
listing_free(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++)
		level_clear(&l->stack[i]);
	free(l->stack);
	free(l);
}

static void
listing_push(struct listing *l, const struct level *lv)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 8;
		l->stack = xreallocarray(l->stack, l->cap, sizeof *l->stack);
	}
	l->stack[l->n++] = *lv;
}

static void
listing_pump(struct http_request *req, void *arg)
{
	struct listing *l = arg;

	while (http_reply_pending(req) < LIST_HIGH) {
		struct level *top, child;
		struct dir_entry *e;
		struct error err;
		char *rel, *text;
		json_t *info;
		int depth;

		if (l->n == 0) {
			http_reply_write(req, "]", 1);
			http_reply_end(req);
			listing_free(l);
			return;
		}
		top = &l->stack[l->n - 1];
		if (top->next == top->n) {
			level_clear(top);
			l->n--;
			continue;
		}
		e = &top->ents[top->next++];
		depth = top->depth;
		rel = join(top->rel, e->name);
		info = files_ops_entry_json(l->agent, rel, &e->st);
		text = json_dumps(info, JSON_COMPACT);
		json_decref(info);
		if (l->written++ > 0)
			http_reply_write(req, ",", 1);
		http_reply_write(req, text, strlen(text));
		free(text);
		/* A symlink to a directory is an entry, never descended. */
		if (S_ISDIR(e->st.st_mode) && depth < l->max_depth) {
			if (read_level(l->agent, rel, 1, depth + 1, &child,
			    &err) == 0)
				listing_push(l, &child);
			else
				log_debug("list: skipping %s: %s", rel, err.msg);
		}
		free(rel);
	}
}

static void
listing_gone(struct http_request *req, void *arg)
{
	http_reply_end(req);
	listing_free(arg);
}

static int
query_depth(struct http_request *req, int *depth, struct error *err)
{
	const char *s = http_request_query(req, "depth");
	char *end;
	long v;

	*depth = 1;
	if (s == NULL)
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	if (end == s || *end != '\0' || v < 1) {
		error_set(err, 400, "depth must be an integer >= 1");
		return -1;
	}
	*depth = errno == ERANGE || v > INT_MAX ? INT_MAX : (int)v;
	return 0;
}

void
files_entries_route_list(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct error err = { 0 };
	struct listing *l;
	struct level top;
	char *rel = NULL;
	int depth;

	if (query_depth(req, &depth, &err) < 0 ||
	    query_path(agent, req, ".", &rel, &err) < 0 ||
	    read_level(agent, rel, 0, 1, &top, &err) < 0) {
		free(rel);
		http_reply_err(req, &err);
		return;
	}
	free(rel);
	http_reply_start(req, 200, "application/json", -1);
	if (http_request_method(req) == HTTP_METHOD_HEAD) {
		level_clear(&top);
		http_reply_end(req);
		return;
	}
	l = xcalloc(1, sizeof *l);
	l->agent = agent;
	l->max_depth = depth;
	listing_push(l, &top);
	http_request_on_drain(req, listing_pump, l);
	http_request_on_close(req, listing_gone, l);
	http_reply_write(req, "[", 1);
	listing_pump(req, l);
}

/* Exists, delete, move, mkdir. */

void
files_entries_route_exists(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct error err = { 0 };
	char *rel;
	json_t *answer;
	int fd;

	if (query_path(agent, req, NULL, &rel, &err) < 0) {
		http_reply_err(req, &err);
		return;
	}
	/* Followed as os.path.exists does, but beneath the root: a link
	 * that leads outside is refused like any other way out. */
	fd = path_open(&agent->ws, rel, O_PATH, 0, &err);
	free(rel);
	if (fd < 0 && err.status != 404) {
		http_reply_err(req, &err);
		return;
	}
	if (fd >= 0)
		close(fd);
	answer = json_object();
	json_object_set_new(answer, "exists", json_boolean(fd >= 0));
	http_reply_json(req, 200, answer);
}

/* A delete runs on the I/O pool: a huge tree holds up only its own
 * request. Made by the route, answered and freed by removal_done. */
struct removal {
	struct agent *agent;
	struct http_request *req;
	char *rel;
	struct error err;
	int failed;
};

/* On a worker. The entry itself goes, a symlink included; only its
 * parents are resolved, beneath the root. */
static void
removal_run(void *arg)
{
	struct removal *r = arg;
	const char *base;
	int fd;

	fd = path_open_parent(&r->agent->ws, r->rel, 0, &base, &r->err);
	if (fd < 0) {
		r->failed = r->err.status != 404;
		return;
	}
	r->failed = files_ops_remove(fd, base, r->rel, &r->err) < 0;
	close(fd);
}

static void
removal_done(void *arg)
{
	struct removal *r = arg;

	if (r->failed)
		http_reply_err(r->req, &r->err);
	else
		http_reply_empty(r->req, 204);
	free(r->rel);
	free(r);
}

void
files_entries_route_delete(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct error err = { 0 };
	struct removal *r;
	char *rel = NULL;

	if (query_path(agent, req, NULL, &rel, &err) < 0)
		goto fail;
	if (rel[0] == '\0') {
		error_set(&err, 403, "the workspace root itself cannot be "
		    "deleted");
		goto fail;
	}
	if (agent->io_pool == NULL) {
		error_set(&err, 503, "deletes are unavailable: no worker thread");
		goto fail;
	}
	r = xcalloc(1, sizeof *r);
	r->agent = agent;
	r->req = req;
	r->rel = rel;
	if (work_pool_submit(agent->io_pool, removal_run, removal_done, r,
	    &err) == 0)
		return;
	free(r);
fail:
	free(rel);
	http_reply_err(req, &err);
}

static void
rename_error(struct error *err, int errnum, const char *src, const char *dst)
{
	switch (errnum) {
	case EISDIR:
		error_set(err, 409, "%s is a directory", dst);
		break;
	case ENOTDIR:
		error_set(err, 409, "%s is not a directory, and %s is", dst, src);
		break;
	case ENOTEMPTY:
	case EEXIST:
		error_set(err, 409, "%s is a directory that is not empty", dst);
		break;
	case EINVAL:
		error_set(err, 409, "cannot move %s into itself", src);
		break;
	case EXDEV:
		error_set(err, 409, "%s and %s are on different filesystems",
		    src, dst);
		break;
	default:
		path_error(err, errnum, "move", src);
		break;
	}
}

static int
is_inside(const char *rel, const char *dir)
{
	size_t n = strlen(dir);

	return strncmp(rel, dir, n) == 0 && rel[n] == '/';
}

void
files_entries_route_move(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct created_dirs created = { 0 };
	struct error err = { 0 };
	const char *source, *destination, *sbase, *dbase;
	char *src = NULL, *dst = NULL;
	int sfd = -1, dfd = -1;
	struct stat st;
	json_t *body, *info = NULL;

	if ((body = http_request_json(req, &err)) == NULL ||
	    jsonx_get_string(body, "source", 1, &source, &err) < 0 ||
	    jsonx_get_string(body, "destination", 1, &destination, &err) < 0 ||
	    path_normalize(&agent->ws, source, &src, &err) < 0 ||
	    path_normalize(&agent->ws, destination, &dst, &err) < 0)
		goto done;
	if (src[0] == '\0') {
		error_set(&err, 403, "the workspace root itself cannot be moved");
		goto done;
	}
	if (dst[0] == '\0') {
		error_set(&err, 409, "the destination is the workspace root");
		goto done;
	}
	sfd = path_open_parent(&agent->ws, src, 0, &sbase, &err);
	if (sfd < 0)
		goto done;
	if (fstatat(sfd, sbase, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		path_error(&err, errno, "move", src);
		goto done;
	}
	/* Checked before any directory is made for it inside the source. */
	if (is_inside(dst, src)) {
		error_set(&err, 409, "cannot move %s into itself", src);
		goto done;
	}
	dfd = files_ops_open_parent(agent, dst, &created, &dbase, &err);
	if (dfd < 0)
		goto done;
	if (renameat(sfd, sbase, dfd, dbase) < 0) {
		rename_error(&err, errno, src, dst);
		files_ops_created_undo(agent, &created);
		goto done;
	}
	info = files_ops_entry_info(agent, dfd, dbase, dst, &err);
done:
	if (sfd >= 0)
		close(sfd);
	if (dfd >= 0)
		close(dfd);
	files_ops_created_free(&created);
	json_decref(body);
	free(src);
	free(dst);
	if (info != NULL)
		http_reply_json(req, 200, info);
	else
		http_reply_err(req, &err);
}

void
files_entries_route_mkdir(struct http_request *req, void *arg)
{
	struct agent *agent = arg;
	struct created_dirs created = { 0 };
	struct error err = { 0 };
	const char *path;
	char *rel = NULL;
	json_t *body, *answer;
	int fd = -1;

	if ((body = http_request_json(req, &err)) != NULL &&
	    jsonx_get_string(body, "path", 1, &path, &err) == 0 &&
	    path_normalize(&agent->ws, path, &rel, &err) == 0)
		fd = files_ops_mkdirs(agent, rel, &created, &err);
	json_decref(body);
	free(rel);
	if (fd < 0) {
		files_ops_created_undo(agent, &created);
		files_ops_created_free(&created);
		http_reply_err(req, &err);
		return;
	}
	close(fd);
	answer = json_object();
	json_object_set_new(answer, "created", json_boolean(created.n > 0));
	files_ops_created_free(&created);
	http_reply_json(req, 200, answer);
}
