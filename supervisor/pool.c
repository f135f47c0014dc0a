/*
 * Warm pools: POOL_SIZE ready sandboxes of each type in DEFAULT_SANDBOX_TYPE.
 * A take hands out the oldest warm one at once and the pool refills in the
 * background, a few creates at a time (SANDBOXD_POOL_PARALLEL) so a burst
 * does not swamp the machine. A pool whose creates fail backs off before it
 * tries again, so a missing image does not become a busy loop. Every API
 * that hands out a sandbox goes through pool_take_or_create: from the pool
 * when it can, else a new one.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "log.h"
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

size_t
pool_target(const char *type_name)
{
	return pool_is_pooled(type_name) ? (size_t)sd.cfg.pool_size : 0;
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
	double due = sandboxd_now() + delay;

	if (refill_ev == NULL)
		return;
	tv.tv_sec = (time_t)delay;
	tv.tv_usec = (suseconds_t)((delay - (double)tv.tv_sec) * 1e6);
	/* An earlier run wins over a later one (of another pool, say). */
	if (evtimer_pending(refill_ev, NULL) && refill_due <= due)
		return;
	refill_due = due;
	evtimer_del(refill_ev);
	evtimer_add(refill_ev, &tv);
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
		p->retry_at = sandboxd_now() + p->backoff;
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
	if (sandboxd_now() < p->retry_at) {
		schedule(p->retry_at - sandboxd_now());
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
			p->retry_at = sandboxd_now() + BACKOFF_FIRST;
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

/* A warm sandbox of this type, now RUNNING, or NULL. */
static struct sandbox *
take(const struct sandbox_type *type)
{
	struct sandbox *sb;

	if (!pool_is_pooled(type->name))
		return NULL;
	for (sb = sandbox_first(); sb != NULL; sb = sandbox_next(sb)) {
		if (sb->state == SB_WARM && sb->op == NULL &&
		    strcmp(sb->type_name, type->name) == 0)
			break;
	}
	if (sb == NULL) {
		metrics_count(M_POOL_MISSES, type->name);
		pool_refill();
		return NULL;
	}
	sandbox_set_state(sb, SB_RUNNING);
	metrics_count(M_POOL_TAKES, type->name);
	/* A moment later, so the answer to this take leaves first. */
	if (sd.ready && !sd.shutting_down)
		schedule(REFILL_AFTER_TAKE);
	return sb;
}

int
pool_take_or_create(const struct create_request *creq, int from_pool,
    struct sandbox **taken, sandbox_done_cb done, void *arg,
    struct error *err)
{
	struct sandbox *sb;

	*taken = NULL;
	/* Every instance's warm ones, taken atomically in Redis. */
	if (shared_enabled() && from_pool && creq->mount_dir == NULL &&
	    creq->storage_path == NULL && creq->environment == NULL &&
	    creq->network == NULL && pool_is_pooled(creq->type->name))
		return shared_take(creq, done, arg, err);
	if (from_pool && creq->mount_dir == NULL &&
	    creq->storage_path == NULL && creq->environment == NULL &&
	    creq->network == NULL && (sb = take(creq->type)) != NULL) {
		if (creq->meta != NULL)
			json_object_update(sb->meta, creq->meta);
		sandbox_changed(sb);
		sessions_bind(sb, creq->session);
		*taken = sb;
		return 0;
	}
	return lifecycle_create(creq, done, arg, err) == NULL ? -1 : 0;
}

void
pool_init(void)
{
	npools = sd.cfg.pool_types.n;
	pools = xcalloc(npools, sizeof *pools);
	for (size_t i = 0; i < npools; i++)
		pools[i].type = sandbox_types_find(sd.cfg.pool_types.v[i]);
	refill_ev = evtimer_new(sd.base, refill_cb, NULL);
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
