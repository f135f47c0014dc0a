/*
 * One sandbox's egress enforcement: its namespace, the policy that holds
 * there, the change under way, its resolver and its counters. Every
 * namespace change is a job of egress_nft.c; the resolver opens with the
 * first install (its socket is made in the namespace by that job) and
 * closes at egress_free. The rules are not removed at the end: they live
 * in the sandbox's namespace and go with it.
 */
#include "sandboxd.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "egress.h"
#include "egress_internal.h"
#include "log.h"
#include "xmalloc.h"

static LIST_HEAD(, egress) all = LIST_HEAD_INITIALIZER(all);
static char *resolv_conf;

/* The resolv.conf every policed sandbox reads: its resolver alone. */
static int
write_resolv_conf(const char *state_dir, struct error *err)
{
	char *tmp;
	int fd, ok;
	static const char text[] = "# sandboxd: this sandbox's resolver\n"
	    "nameserver " EGRESS_RESOLVER "\noptions ndots:0\n";

	resolv_conf = xasprintf("%s/resolv.conf", state_dir);
	tmp = xasprintf("%s.tmp", resolv_conf);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
	    0644);
	ok = fd >= 0 && write(fd, text, sizeof text - 1) ==
	    (ssize_t)(sizeof text - 1) && fchmod(fd, 0644) == 0;
	if (fd >= 0 && close(fd) < 0)
		ok = 0;
	if (!ok || rename(tmp, resolv_conf) < 0) {
		error_set(err, 500, "egress: cannot write %s: %s", resolv_conf,
		    strerror(errno));
		unlink(tmp);
		free(tmp);
		return -1;
	}
	free(tmp);
	return 0;
}

int
egress_init(struct event_base *base, const struct sandboxd_config *cfg,
    struct error *err)
{
	if (write_resolv_conf(cfg->state_dir, err) < 0 ||
	    egress_nft_init(base, err) < 0 ||
	    egress_dns_init(base, cfg->egress_dns, err) < 0)
		return -1;
	return 0;
}

const char *
egress_resolv_conf(void)
{
	return resolv_conf;
}

static void
policy_copy(struct egress_policy *dst, const struct egress_policy *src)
{
	memset(dst, 0, sizeof *dst);
	dst->internet = src->internet;
	for (size_t i = 0; i < src->allow.n; i++)
		config_list_add(&dst->allow, src->allow.v[i]);
	for (size_t i = 0; i < src->deny.n; i++)
		config_list_add(&dst->deny, src->deny.v[i]);
}

/* Whether every name of list a is in list b. */
static int
names_within(const struct config_list *a, const struct config_list *b)
{
	char cidr[64];

	for (size_t i = 0; i < a->n; i++) {
		size_t j = 0;

		if (egress_cidr(a->v[i], cidr, sizeof cidr) != 0)
			continue;
		while (j < b->n && strcmp(b->v[j], a->v[i]) != 0)
			j++;
		if (j == b->n)
			return 0;
	}
	return 1;
}

static void
installed_cb(struct egress_job *job, void *arg)
{
	struct egress *e = arg;
	egress_done_cb done = e->done;
	struct error err;

	e->job = NULL;
	e->done = NULL;
	if (job->rc < 0) {
		egress_policy_free(&e->policy);
		e->policy = e->prev;
		memset(&e->prev, 0, sizeof e->prev);
		error_set(&err, 502, "sandbox %s: its egress policy could not be "
		    "put in place: %s", e->name, job->msg);
		log_warn("%s", err.msg);
		done(&err, e->arg);
		return;
	}
	if (job->resolver) {
		egress_dns_start(e, job->sock);
		job->sock = -1;
	}
	egress_policy_free(&e->prev);
	e->installed = 1;
	log_debug("sandbox %s: egress policy in (%zu ranges it may never "
	    "reach)", e->name, job->host.n);
	done(NULL, e->arg);
}

static void
submit_install(struct egress *e, const struct egress_policy *p,
    int keep_names, egress_done_cb done, void *arg)
{
	struct egress_job *job = egress_nft_job(e->netns, installed_cb, e);

	job->install = 1;
	job->resolver = e->port == NULL;
	job->keep_names = keep_names;
	if (!keep_names)
		egress_dns_names_flushed(e);
	/* 0 is every connection's mark before the rules saw it. */
	if (++e->generation == 0)
		e->generation = 1;
	job->generation = e->generation;
	policy_copy(&job->policy, p);
	e->job = job;
	e->done = done;
	e->arg = arg;
	egress_nft_submit(job);
}

/* Never the namespace sandboxd itself lives in: its rules would be the
 * host's. */
static int
foreign_netns(int netns)
{
	struct stat a, b;

	return fstat(netns, &a) == 0 && stat("/proc/thread-self/ns/net",
	    &b) == 0 && (a.st_dev != b.st_dev || a.st_ino != b.st_ino);
}

struct egress *
egress_attach(const char *name, int netns, const struct egress_policy *p,
    egress_done_cb done, void *arg, struct error *err)
{
	struct egress *e;

	if (!foreign_netns(netns)) {
		error_set(err, 502, "sandbox %s: its network namespace is "
		    "sandboxd's own", name);
		close(netns);
		return NULL;
	}
	e = xcalloc(1, sizeof *e);
	e->name = xstrdup(name);
	e->netns = netns;
	/* Marks an earlier sandboxd left on connections there (adoption)
	 * must not pass for this one's. */
	e->generation = arc4random();
	LIST_INIT(&e->queries);
	policy_copy(&e->policy, p);
	policy_copy(&e->prev, p);
	LIST_INSERT_HEAD(&all, e, entry);
	submit_install(e, p, 0, done, arg);
	return e;
}

void
egress_update(struct egress *e, const struct egress_policy *p,
    egress_done_cb done, void *arg)
{
	/* The addresses names resolved to may stay when no allowed name
	 * went and no name was denied anew. */
	int keep = names_within(&e->policy.allow, &p->allow) &&
	    names_within(&p->deny, &e->policy.deny);

	egress_policy_free(&e->prev);
	e->prev = e->policy;
	policy_copy(&e->policy, p);
	submit_install(e, p, keep, done, arg);
}

int
egress_busy(const struct egress *e)
{
	return e->job != NULL || e->done != NULL;
}

/* Without telling anyone (shutdown). */
static void
drop(struct egress *e)
{
	LIST_REMOVE(e, entry);
	if (e->job != NULL)
		egress_nft_cancel(e->job);
	if (e->count_job != NULL)
		egress_nft_cancel(e->count_job);
	egress_dns_stop(e);
	close(e->netns);
	egress_policy_free(&e->policy);
	egress_policy_free(&e->prev);
	free(e->name);
	free(e);
}

void
egress_free(struct egress *e)
{
	egress_done_cb done;
	void *arg;
	struct error err;

	if (e == NULL)
		return;
	done = e->done;
	arg = e->arg;
	error_set(&err, 409, "sandbox %s went while its network changed",
	    e->name);
	drop(e);
	if (done != NULL)
		done(&err, arg);
}

uint64_t
egress_denied_packets(const struct egress *e)
{
	return e->denied_packets;
}

uint64_t
egress_denied_names(const struct egress *e)
{
	return e->denied_names;
}

static void
counted_cb(struct egress_job *job, void *arg)
{
	struct egress *e = arg;
	json_t *root, *v;
	size_t i;

	e->count_job = NULL;
	if (job->rc < 0 || job->output == NULL)
		return;
	root = json_loads(job->output, 0, NULL);
	json_array_foreach(json_object_get(root, "nftables"), i, v) {
		json_t *c = json_object_get(v, "counter");

		if (c != NULL)
			e->denied_packets = (uint64_t)json_integer_value(
			    json_object_get(c, "packets"));
	}
	json_decref(root);
}

void
egress_refresh_counters(void)
{
	struct egress *e;

	LIST_FOREACH(e, &all, entry) {
		if (!e->installed || e->count_job != NULL)
			continue;
		e->count_job = egress_nft_job(e->netns, counted_cb, e);
		e->count_job->script = xstrdup("list counter inet sandboxd "
		    "denied\n");
		e->count_job->json = 1;
		egress_nft_submit(e->count_job);
	}
}

void
egress_metrics(struct evbuffer *b)
{
	static const struct {
		const char *name;
		const char *help;
		size_t offset;
	} counters[] = {
		{ "sandboxd_egress_denied_packets_total", "Packets a sandbox's "
		    "egress policy refused (read at the previous scrape).",
		    offsetof(struct egress, denied_packets) },
		{ "sandboxd_egress_denied_names_total", "Names a sandbox's "
		    "resolver refused.", offsetof(struct egress, denied_names) },
	};
	struct egress *e;

	for (size_t i = 0; i < sizeof counters / sizeof *counters; i++) {
		evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s counter\n",
		    counters[i].name, counters[i].help, counters[i].name);
		LIST_FOREACH(e, &all, entry)
			evbuffer_add_printf(b, "%s{sandbox=\"%s\"} %llu\n",
			    counters[i].name, e->name, (unsigned long long)
			    *(const uint64_t *)(const void *)((const char *)e +
			    counters[i].offset));
	}
	egress_refresh_counters();
}

void
egress_shutdown(void)
{
	while (!LIST_EMPTY(&all))
		drop(LIST_FIRST(&all));
	egress_nft_shutdown();
	egress_dns_shutdown();
	free(resolv_conf);
	resolv_conf = NULL;
}
