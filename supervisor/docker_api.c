/*
 * Docker Engine API requests. Paths are unversioned so the daemon speaks its
 * own current version; every field we send exists since API 1.25. Every
 * call answers through its callback from the loop, after it returned, also
 * one refused at once (a bad id, a request that cannot start), as all of
 * sandboxd's callbacks do (defer.c).
 */
#include "docker_api.h"

#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "http.h"
#include "http_client.h"
#include "log.h"
#include "xmalloc.h"

/* Seconds without progress before a Docker call fails: once a call is
 * sent (queued ones wait without a clock), the daemon answers in seconds. */
#define DOCKER_TIMEOUT 120

/* One call, queued or in flight; freed when its callback has run. */
struct call {
	TAILQ_ENTRY(call) entry;
	struct docker *docker;
	char *method;
	char *target;
	json_t *body;		/* or NULL */
	int raw;		/* answer read as bytes (logs), not JSON */
	docker_cb done;
	docker_raw_cb raw_done;
	void *arg;
	char *what;		/* "create container x", for messages */
	struct error err;	/* refused before an answer: why */
	int launched;		/* counted in inflight, on launched */
	void *req;		/* its HTTP request while launched */
	int new_work;		/* a create: waits behind everything else */
	int ends;		/* stops or removes a container: its lane */
	docker_sent_cb sent;	/* told when the call goes to the daemon */
};

/* Owned by the backend. Calls beyond max wait in a queue: fifty creates
 * at once would otherwise make a small machine's daemon time them out.
 * Creates wait in a queue of their own, served only when no other call
 * waits: what finishes work under way (a created container's start, a
 * starting one's status, a removal) must not sit behind a hundred new
 * containers, or a sandbox's readiness check would wait for them.
 * Calls that end a container (stop, remove) have a lane of their own,
 * max_ends wide, served first: dockerd 20.10.24 (Debian 12) deadlocks in
 * libnetwork when the network teardowns of two exiting containers overlap
 * (moby/moby#46661, fixed in 20.10.27), and then answers nothing more. */
struct docker {
	struct event_base *base;
	char *addr;
	size_t inflight;
	size_t max;
	size_t ends_inflight;
	size_t max_ends;
	TAILQ_HEAD(call_queue, call) queue;
	struct call_queue creates;
	struct call_queue ends;
	struct call_queue launched;	/* sent, not yet answered */
};

/* The next call to launch, taken off its queue, or NULL. */
static struct call *
dequeue(struct docker *d)
{
	struct call *c;

	if (d->ends_inflight < d->max_ends &&
	    (c = TAILQ_FIRST(&d->ends)) != NULL) {
		TAILQ_REMOVE(&d->ends, c, entry);
	} else if ((c = TAILQ_FIRST(&d->queue)) != NULL) {
		TAILQ_REMOVE(&d->queue, c, entry);
	} else if ((c = TAILQ_FIRST(&d->creates)) != NULL) {
		TAILQ_REMOVE(&d->creates, c, entry);
	}
	return c;
}

static void launch(struct call *c);

struct docker *
docker_new(struct event_base *base, const char *addr, size_t max_inflight,
    size_t max_ends)
{
	struct docker *d = xcalloc(1, sizeof *d);

	d->base = base;
	d->addr = xstrdup(addr);
	d->max = max_inflight > 0 ? max_inflight : 1;
	d->max_ends = max_ends > 0 ? max_ends : 1;
	TAILQ_INIT(&d->queue);
	TAILQ_INIT(&d->creates);
	TAILQ_INIT(&d->ends);
	TAILQ_INIT(&d->launched);
	return d;
}

void
docker_set_max_inflight(struct docker *d, size_t max_inflight,
    size_t max_ends)
{
	struct call *c;

	d->max = max_inflight > 0 ? max_inflight : 1;
	d->max_ends = max_ends > 0 ? max_ends : 1;
	while (d->inflight < d->max && (c = dequeue(d)) != NULL)
		launch(c);
}

static void
call_free(struct call *c)
{
	free(c->method);
	free(c->target);
	json_decref(c->body);
	free(c->what);
	free(c);
}

void
docker_free(struct docker *d)
{
	struct call *c;

	if (d == NULL)
		return;
	d->max_ends = (size_t)-1;	/* dequeue hands out every queue */
	while ((c = dequeue(d)) != NULL)
		call_free(c);
	free(d->addr);
	free(d);
}

/* A call has ended: start the next one waiting. */
static void
call_end(struct call *c)
{
	struct docker *d = c->docker;
	struct call *next;

	if (c->ends)
		d->ends_inflight--;
	if (c->req != NULL)
		TAILQ_REMOVE(&d->launched, c, entry);
	call_free(c);
	d->inflight--;
	/* An ended stop or remove may free a place in both lanes. */
	while (d->inflight < d->max && (next = dequeue(d)) != NULL)
		launch(next);
}

static void
refused_cb(evutil_socket_t fd, short what, void *arg)
{
	struct call *c = arg;

	(void)fd;
	(void)what;
	if (c->raw)
		c->raw_done(NULL, 0, &c->err, c->arg);
	else
		c->done(NULL, &c->err, c->arg);
	if (c->launched)
		call_end(c);
	else
		call_free(c);
}

/* Answer c with c->err from the loop. */
static void
refuse(struct call *c)
{
	static const struct timeval now = { 0, 0 };

	/* It fails only without memory, where xmalloc aborts too. */
	if (event_base_once(c->docker->base, -1, EV_TIMEOUT, refused_cb, c,
	    &now) < 0)
		fatal("docker: cannot defer a callback: out of memory");
}

/* Refuse a call before it is queued. */
static void
refuse_early(struct docker *d, docker_cb done, docker_raw_cb raw_done,
    void *arg, const struct error *err)
{
	struct call *c = xcalloc(1, sizeof *c);

	c->docker = d;
	c->raw = raw_done != NULL;
	c->done = done;
	c->raw_done = raw_done;
	c->arg = arg;
	c->err = *err;
	refuse(c);
}

/* Docker's own words for a failed call, with the status it implies. */
static void
answer_error(struct error *err, int status, json_t *answer, const char *what)
{
	const char *msg = NULL;
	int mapped = 502;

	if (json_is_object(answer))
		msg = json_string_value(json_object_get(answer, "message"));
	if (status == 404 || status == 409)
		mapped = status;
	error_set(err, mapped, "docker: %s: %s (HTTP %d)", what,
	    msg != NULL ? msg : "failed", status);
}

static void
json_done_cb(int status, json_t *answer, const struct error *err, void *arg)
{
	struct call *c = arg;
	struct error e;

	if (err != NULL) {
		e = *err;
		error_prefix(&e, "docker: %s: cannot reach the Docker daemon",
		    c->what);
		c->done(NULL, &e, c->arg);
	} else if ((status < 200 || status > 299) && status != 304) {
		answer_error(&e, status, answer, c->what);
		c->done(NULL, &e, c->arg);
	} else {
		/* 304 Not Modified is the daemon's answer to starting a
		 * running container or stopping a stopped one: it is as
		 * asked. */
		c->done(answer, NULL, c->arg);
	}
	call_end(c);
}

static void raw_done_cb(struct http_client_request *r, const struct error *err,
    void *arg);

static void
launch(struct call *c)
{
	struct docker *d = c->docker;
	void *r;

	d->inflight++;
	if (c->ends)
		d->ends_inflight++;
	c->launched = 1;
	log_debug("docker: %s %s", c->method, c->target);
	if (c->sent != NULL)
		c->sent(c->arg);
	if (c->raw) {
		struct http_client_options opts = { 0 };
		struct http_client_callbacks cb = { 0 };

		opts.addr = d->addr;
		opts.method = c->method;
		opts.target = c->target;
		opts.timeout = DOCKER_TIMEOUT;
		opts.max_response = 1024 * 1024;
		cb.on_done = raw_done_cb;
		r = http_client_start(d->base, &opts, &cb, c, &c->err);
	} else {
		r = http_client_json(d->base, d->addr, c->method, c->target, NULL,
		    c->body, DOCKER_TIMEOUT, json_done_cb, c, &c->err);
	}
	if (r == NULL) {
		error_prefix(&c->err, "docker: %s", c->what);
		refuse(c);
		return;
	}
	c->req = r;
	TAILQ_INSERT_TAIL(&d->launched, c, entry);
}

/* c's done callback with err, now. */
static void
fail_now(struct call *c, const struct error *err)
{
	if (c->raw)
		c->raw_done(NULL, 0, err, c->arg);
	else
		c->done(NULL, err, c->arg);
}

void
docker_abort(struct docker *d, const char *why)
{
	struct call *c;
	struct error err;

	error_set(&err, 503, "docker: %s", why);
	/* Queued calls first, so that ending a launched one starts none. */
	d->max_ends = (size_t)-1;
	while ((c = dequeue(d)) != NULL) {
		fail_now(c, &err);
		call_free(c);
	}
	while ((c = TAILQ_FIRST(&d->launched)) != NULL) {
		if (c->raw)
			http_client_cancel(c->req);
		else
			http_client_json_cancel(c->req);
		fail_now(c, &err);
		call_end(c);
	}
}

static struct call *
call_new(struct docker *d, const char *method, char *target, json_t *body,
    char *what, int raw, docker_cb done, docker_raw_cb raw_done, void *arg)
{
	struct call *c = xcalloc(1, sizeof *c);

	c->docker = d;
	c->method = xstrdup(method);
	c->target = target;
	c->body = body != NULL ? json_incref(body) : NULL;
	c->what = what;
	c->raw = raw;
	c->done = done;
	c->raw_done = raw_done;
	c->arg = arg;
	return c;
}

static void
submit(struct call *c)
{
	struct docker *d = c->docker;

	if (c->ends && (d->ends_inflight >= d->max_ends ||
	    d->inflight >= d->max))
		TAILQ_INSERT_TAIL(&d->ends, c, entry);
	else if (d->inflight < d->max)
		launch(c);
	else if (c->new_work)
		TAILQ_INSERT_TAIL(&d->creates, c, entry);
	else
		TAILQ_INSERT_TAIL(&d->queue, c, entry);
}

static void
enqueue(struct docker *d, const char *method, char *target, json_t *body,
    char *what, int raw, docker_cb done, docker_raw_cb raw_done, void *arg)
{
	submit(call_new(d, method, target, body, what, raw, done, raw_done,
	    arg));
}

static void
call(struct docker *d, const char *method, const char *target, json_t *body,
    const char *what, int ends, docker_cb done, void *arg)
{
	struct call *c = call_new(d, method, xstrdup(target), body,
	    xstrdup(what), 0, done, NULL, arg);

	c->ends = ends;
	submit(c);
}

/* Path segments we put in targets: ids and names are [a-zA-Z0-9_.-]. */
static int
safe_segment(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s != '\0'; s++) {
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		    (*s >= '0' && *s <= '9') || *s == '_' || *s == '.' ||
		    *s == '-'))
			return 0;
	}
	return 1;
}

static int
check_id(struct docker *d, const char *id, docker_cb done, void *arg)
{
	struct error err;

	if (safe_segment(id))
		return 0;
	error_set(&err, 400, "docker: '%s' is not a container id or name", id);
	refuse_early(d, done, NULL, arg, &err);
	return -1;
}

void
docker_container_create(struct docker *d, const char *name, json_t *body,
    docker_sent_cb sent, docker_cb done, void *arg)
{
	struct call *c;

	if (check_id(d, name, done, arg) < 0)
		return;
	c = call_new(d, "POST", xasprintf("/containers/create?name=%s", name),
	    body, xasprintf("create container %s", name), 0, done, NULL, arg);
	c->new_work = 1;
	c->sent = sent;
	submit(c);
}

static void
simple(struct docker *d, const char *method, const char *id,
    const char *suffix, const char *verb, int ends, docker_cb done, void *arg)
{
	char *target, *what;

	if (check_id(d, id, done, arg) < 0)
		return;
	target = xasprintf("/containers/%s%s", id, suffix);
	what = xasprintf("%s container %.12s", verb, id);
	call(d, method, target, NULL, what, ends, done, arg);
	free(target);
	free(what);
}

void
docker_container_start(struct docker *d, const char *id, docker_cb done,
    void *arg)
{
	simple(d, "POST", id, "/start", "start", 0, done, arg);
}

void
docker_container_stop(struct docker *d, const char *id, int seconds,
    docker_cb done, void *arg)
{
	char suffix[32];

	snprintf(suffix, sizeof suffix, "/stop?t=%d", seconds);
	simple(d, "POST", id, suffix, "stop", 1, done, arg);
}

void
docker_container_remove(struct docker *d, const char *id, docker_cb done,
    void *arg)
{
	simple(d, "DELETE", id, "?force=1&v=1", "remove", 1, done, arg);
}

void
docker_container_inspect(struct docker *d, const char *id, docker_cb done,
    void *arg)
{
	simple(d, "GET", id, "/json", "inspect", 0, done, arg);
}

void
docker_container_pause(struct docker *d, const char *id, docker_cb done,
    void *arg)
{
	simple(d, "POST", id, "/pause", "pause", 0, done, arg);
}

void
docker_container_unpause(struct docker *d, const char *id, docker_cb done,
    void *arg)
{
	simple(d, "POST", id, "/unpause", "unpause", 0, done, arg);
}

void
docker_container_stats(struct docker *d, const char *id, docker_cb done,
    void *arg)
{
	simple(d, "GET", id, "/stats?stream=false&one-shot=true", "stats", 0,
	    done, arg);
}

void
docker_version(struct docker *d, docker_cb done, void *arg)
{
	call(d, "GET", "/version", NULL, "version", 0, done, arg);
}

int
docker_exits_may_deadlock(const char *version)
{
	int major, minor, patch = 0;

	/* "20.10.24+dfsg1", "24.0.7", "19.03.15": libnetwork took the
	 * fix of moby/moby#46661 in 20.10.27 (23.0 had it from the start). */
	if (version == NULL || sscanf(version, "%d.%d.%d", &major, &minor,
	    &patch) < 2)
		return 1;
	if (major != 20)
		return major < 20;
	return minor < 10 || (minor == 10 && patch < 27);
}

/* Percent-encode everything but unreserved characters. */
static char *
url_encode(const char *s)
{
	struct evbuffer *b = evbuffer_new();
	size_t len;
	char *out;

	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
		    c == '~')
			evbuffer_add(b, s, 1);
		else
			evbuffer_add_printf(b, "%%%02X", c);
	}
	len = evbuffer_get_length(b);
	out = xmalloc(len + 1);
	evbuffer_remove(b, out, len);
	out[len] = '\0';
	evbuffer_free(b);
	return out;
}

void
docker_container_list(struct docker *d, const char *label, const char *value,
    int not_running, docker_cb done, void *arg)
{
	json_t *filters = json_pack("{s:[s++]}", "label", label, "=", value);
	char *text, *enc, *target;

	if (not_running)
		json_object_set_new(filters, "status", json_pack("[ssssss]",
		    "created", "restarting", "removing", "paused", "exited",
		    "dead"));
	text = json_dumps(filters, JSON_COMPACT);

	enc = url_encode(text);
	target = xasprintf("/containers/json?all=1&filters=%s", enc);
	call(d, "GET", target, NULL, "list containers", 0, done, arg);
	free(target);
	free(enc);
	free(text);
	json_decref(filters);
}

static void
raw_done_cb(struct http_client_request *r, const struct error *err,
    void *arg)
{
	struct call *c = arg;
	struct evbuffer *body, *out;
	struct error e;
	int status;

	if (err != NULL) {
		e = *err;
		error_prefix(&e, "docker: %s", c->what);
		c->raw_done(NULL, 0, &e, c->arg);
		call_end(c);
		return;
	}
	status = http_client_status(r);
	body = http_client_body(r);
	if (status < 200 || status > 299) {
		error_set(&e, status == 404 ? 404 : 502, "docker: %s: HTTP %d",
		    c->what, status);
		c->raw_done(NULL, 0, &e, c->arg);
		call_end(c);
		return;
	}
	/* Without a TTY the answer is multiplexed: frames of an 8-byte
	 * header (stream, 0, 0, 0, big-endian length) and the bytes. */
	out = evbuffer_new();
	while (evbuffer_get_length(body) >= 8) {
		unsigned char h[8];
		size_t n;

		evbuffer_copyout(body, h, 8);
		n = (size_t)h[4] << 24 | (size_t)h[5] << 16 |
		    (size_t)h[6] << 8 | h[7];
		if (h[0] > 2 || evbuffer_get_length(body) < 8 + n)
			break;
		evbuffer_drain(body, 8);
		evbuffer_remove_buffer(body, out, n);
	}
	evbuffer_add(out, "", 1);
	c->raw_done((const char *)evbuffer_pullup(out, -1),
	    evbuffer_get_length(out) - 1, NULL, c->arg);
	evbuffer_free(out);
	call_end(c);
}

void
docker_container_logs(struct docker *d, const char *id, int lines,
    docker_raw_cb done, void *arg)
{
	struct error err;

	if (!safe_segment(id)) {
		error_set(&err, 400, "docker: '%s' is not a container id", id);
		refuse_early(d, NULL, done, arg, &err);
		return;
	}
	enqueue(d, "GET", xasprintf("/containers/%s/logs?stdout=1&stderr=1&"
	    "tail=%d", id, lines), NULL, xasprintf("logs of container %.12s",
	    id), 1, NULL, done, arg);
}
