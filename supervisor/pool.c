/*
 * Warm pools: POOL_SIZE ready sandboxes of each type in DEFAULT_SANDBOX_TYPE.
 * A take hands out the oldest warm one at once and the pool refills in the
 * background, a few creates at a time (SANDBOXD_POOL_PARALLEL) so a burst
 * does not swamp the machine. A pool whose creates fail backs off before it
 * tries again, so a missing image does not become a busy loop. Every API
 * that hands out a sandbox goes through pool_take_or_create: from the pool
 * when it can (with REDIS_ENABLED every instance's, shared_pool.c), else a
 * new one; a warm one of ours is handed out in one place,
 * pool_handed_out, also when another instance took it. The pools hear of
 * room for creates (a release, a create that failed) through the table's
 * hook, and of Redis coming back through shared_on_up.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "log.h"
#include "shared.h"
#include "xmalloc.h"

#define BACKOFF_FIRST 1.0
#define BACKOFF_MAX 60.0
#define REFILL_AFTER_TAKE 0.01

/* One per pool type; lives until pool_stop. */
struct pool {
	const struct sandbox_type *type;
	double retry_at;	/* no creates before this */
	double backoff;
};

static struct pool *pools;
static size_t npools;
static struct event *refill_ev;
static double refill_due;	/* when refill_ev, if pending, fires */

static struct pool *
find(const char *type_name)
{
	for (size_t i = 0; i < npools; i++) {
		if (strcmp(pools[i].type->name, type_name) == 0)
			return &pools[i];
	}
	return NULL;
}

int
pool_is_pooled(const char *type_name)
{
	return sd.cfg.pool_size > 0 && find(type_name) != NULL;
}

static size_t
creating_for_pool(const char *type_name)
{
	struct sandbox *sb;
	size_t n = 0;

	for (sb = sandbox_first(); sb != NULL; sb = sandbox_next(sb)) {
		if (sb->state == SB_CREATING && sb->for_pool &&
		    strcmp(sb->type_name, type_name) == 0)
			n++;
	}
	return n;
}

static void
schedule(double delay)
{
	struct timeval tv;
	double due = timing_monotonic() + delay;

	if (refill_ev == NULL)
		return;
	tv = timing_timeval(delay);
	/* An earlier run wins over a later one (of another pool, say). */
	if (evtimer_pending(refill_ev, NULL) && refill_due <= due)
		return;
	refill_due = due;
	evtimer_del(refill_ev);
	evtimer_add(refill_ev, &tv);
}

/* A take that found nothing warm. */
static void
miss(const struct sandbox_type *type)
{
	metrics_count(M_POOL_MISSES, type->name);
	pool_refill();
}

static void
created_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct pool *p = find(sb->type_name);

	(void)arg;
	if (p == NULL)
		return;
	if (err != NULL) {
		p->backoff = p->backoff > 0 ? p->backoff * 2 : BACKOFF_FIRST;
		if (p->backoff > BACKOFF_MAX)
			p->backoff = BACKOFF_MAX;
		p->retry_at = timing_monotonic() + p->backoff;
		log_warn("pool %s: create failed, retrying in %.0f s: %s",
		    p->type->name, p->backoff, err->msg);
		schedule(p->backoff);
		return;
	}
	p->backoff = 0;
	p->retry_at = 0;
	schedule(0);
}

static void
fill(struct pool *p)
{
	const char *name = p->type->name;
	size_t warm = sandbox_count(name, SB_WARM);
	size_t creating = creating_for_pool(name);
	struct create_request creq = { 0 };
	struct error err;

	/* Its creates would fail: the connection, once up, refills. */
	if (shared_enabled() && !shared_up())
		return;
	/* The timer runs from the loop's clock, read before this one: it
	 * may fire a little before retry_at, and must then come again. */
	if (timing_monotonic() < p->retry_at) {
		schedule(p->retry_at - timing_monotonic());
		return;
	}
	creq.type = p->type;
	creq.for_pool = 1;
	while (warm + creating < (size_t)sd.cfg.pool_size &&
	    creating < (size_t)sd.cfg.pool_parallel) {
		if (sd.cfg.max_instances > 0 && sandbox_count_live() +
		    (shared_enabled() ? shared_count_live() : 0) >=
		    (size_t)sd.cfg.max_instances)
			return;
		if (lifecycle_create(&creq, created_cb, NULL, &err) == NULL) {
			log_warn("pool %s: %s", name, err.msg);
			p->retry_at = timing_monotonic() + BACKOFF_FIRST;
			schedule(BACKOFF_FIRST);
			return;
		}
		creating++;
	}
}

static void
refill_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (!sd.ready || sd.shutting_down)
		return;
	for (size_t i = 0; i < npools; i++)
		fill(&pools[i]);
}

void
pool_refill(void)
{
	if (sd.cfg.pool_size > 0 && sd.ready && !sd.shutting_down)
		schedule(0);
}

void
pool_handed_out(struct sandbox *sb, json_t *meta, const char *session)
{
	if (meta != NULL)
		json_object_update(sb->meta, meta);
	sandbox_set_state(sb, SB_RUNNING);
	sessions_bind(sb, session);
	metrics_count(M_POOL_TAKES, sb->type_name);
	/* A moment later, so the answer to this take leaves first. */
	if (sd.ready && !sd.shutting_down)
		schedule(REFILL_AFTER_TAKE);
}

/* A warm sandbox of this type of ours, or NULL. */
static struct sandbox *
warm_one(const struct sandbox_type *type)
{
	struct sandbox *sb;

	for (sb = sandbox_first(); sb != NULL; sb = sandbox_next(sb)) {
		if (sb->state == SB_WARM && sb->op == NULL &&
		    strcmp(sb->type_name, type->name) == 0)
			return sb;
	}
	return NULL;
}

/* A take from every instance's pools on its way; owns its copy of the
 * request. */
struct shared_wait {
	struct create_request creq;
	char *session;
	json_t *meta;
	sandbox_done_cb done;
	void *arg;
};

static void
shared_wait_free(struct shared_wait *w)
{
	free(w->session);
	json_decref(w->meta);
	free(w);
}

/* shared_take's answer: ours to hand out, another's taken, or nothing
 * warm anywhere (a new one, as without Redis). */
static void
shared_taken_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	struct shared_wait *w = arg;
	struct error e;

	if (err != NULL) {
		w->done(NULL, err, w->arg);
	} else if (sb == NULL) {
		miss(w->creq.type);
		if (lifecycle_create(&w->creq, w->done, w->arg, &e) == NULL)
			w->done(NULL, &e, w->arg);
	} else {
		if (sb->owner == NULL)
			pool_handed_out(sb, w->meta, w->session);
		else
			sessions_touch(w->session);
		w->done(sb, NULL, w->arg);
	}
	shared_wait_free(w);
}

static int
take_shared(const struct create_request *creq, sandbox_done_cb done,
    void *arg, struct error *err)
{
	struct shared_wait *w = xcalloc(1, sizeof *w);

	w->creq = *creq;
	w->session = creq->session != NULL ? xstrdup(creq->session) : NULL;
	w->meta = creq->meta != NULL ? json_deep_copy(creq->meta) : NULL;
	w->creq.session = w->session;
	w->creq.meta = w->meta;
	w->done = done;
	w->arg = arg;
	if (shared_take(&w->creq, shared_taken_cb, w, err) < 0) {
		shared_wait_free(w);
		return -1;
	}
	return 0;
}

int
pool_take_or_create(const struct create_request *creq, int from_pool,
    struct sandbox **taken, sandbox_done_cb done, void *arg,
    struct error *err)
{
	struct sandbox *sb;

	*taken = NULL;
	if (from_pool && creq->mount_dir == NULL &&
	    creq->storage_path == NULL && creq->environment == NULL &&
	    creq->network == NULL && pool_is_pooled(creq->type->name)) {
		/* Every instance's warm ones, taken atomically in Redis. */
		if (shared_enabled())
			return take_shared(creq, done, arg, err);
		if ((sb = warm_one(creq->type)) != NULL) {
			pool_handed_out(sb, creq->meta, creq->session);
			*taken = sb;
			return 0;
		}
		miss(creq->type);
	}
	return lifecycle_create(creq, done, arg, err) == NULL ? -1 : 0;
}

/* Room for creates: a release (a warm one gone, a place under
 * MAX_SANDBOX_INSTANCES freed), a create that failed. */
static void
changed_cb(struct sandbox *sb, void *arg)
{
	(void)arg;
	if (!sb->listed || sb->state == SB_RELEASED)
		pool_refill();
}

/* Creates waited for Redis. */
static void
shared_up_cb(void)
{
	pool_refill();
}

void
pool_init(void)
{
	npools = sd.cfg.pool_types.n;
	pools = xcalloc(npools, sizeof *pools);
	for (size_t i = 0; i < npools; i++)
		pools[i].type = sandbox_types_find(sd.cfg.pool_types.v[i]);
	refill_ev = evtimer_new(sd.base, refill_cb, NULL);
	sandbox_hook_add(changed_cb, NULL);
	if (shared_enabled()) {
		shared_on_up(shared_up_cb);
		shared_on_take_asked(pool_handed_out);
	}
}

void
pool_stop(void)
{
	if (refill_ev != NULL)
		event_free(refill_ev);
	refill_ev = NULL;
	free(pools);
	pools = NULL;
	npools = 0;
}
