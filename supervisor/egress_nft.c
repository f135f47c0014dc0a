/*
 * nft commands run in a sandbox's network namespace, off the loop: one
 * worker thread takes jobs in order, enters the namespace (setns acts on
 * the calling thread alone), runs the job's commands through libnftables
 * as one transaction, and returns to sandboxd's namespace. A netlink
 * transaction waits on the kernel (the commit of a big set, a busy
 * rtnl lock), which the loop must not. Results come back to the loop
 * through a pipe; a job's callback runs there, after the submit returned.
 *
 * An install job also reads, before it builds its commands, the host's
 * addresses (in sandboxd's namespace) and the subnets of the sandbox's
 * interfaces (in its own): what no list may open.
 */
#include "egress_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <nftables/libnftables.h>

#include "log.h"
#include "xmalloc.h"

static struct {
	pthread_t thread;
	int started;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	TAILQ_HEAD(, egress_job) todo, done;
	int stop;
	int pipe[2];			/* worker -> loop: jobs done */
	struct event *ev;
	int home;			/* sandboxd's own network namespace */
} w = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.wake = PTHREAD_COND_INITIALIZER,
	.pipe = { -1, -1 },
	.home = -1,
};

/* Each address of the current namespace's interfaces but loopback's:
 * itself (whole_subnet 0) or its subnet. */
static void
scan_addresses(struct config_list *out, int whole_subnet)
{
	struct ifaddrs *ifa, *i;

	if (getifaddrs(&ifa) < 0)
		return;
	for (i = ifa; i != NULL; i = i->ifa_next) {
		char text[INET6_ADDRSTRLEN], cidr[INET6_ADDRSTRLEN + 16];
		unsigned char *m;
		int family, bits = 0, len;

		if (i->ifa_addr == NULL || (i->ifa_flags & IFF_LOOPBACK))
			continue;
		family = i->ifa_addr->sa_family;
		if (family == AF_INET) {
			inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)
			    i->ifa_addr)->sin_addr, text, sizeof text);
			m = (unsigned char *)&((struct sockaddr_in *)(void *)
			    i->ifa_netmask)->sin_addr;
			len = 4;
		} else if (family == AF_INET6) {
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)
			    i->ifa_addr)->sin6_addr, text, sizeof text);
			m = (unsigned char *)&((struct sockaddr_in6 *)(void *)
			    i->ifa_netmask)->sin6_addr;
			len = 16;
		} else {
			continue;
		}
		for (int k = 0; whole_subnet && i->ifa_netmask != NULL &&
		    k < len; k++)
			bits += __builtin_popcount(m[k]);
		snprintf(cidr, sizeof cidr, "%s/%d", text, whole_subnet &&
		    i->ifa_netmask != NULL ? bits : len * 8);
		config_list_add(out, cidr);
	}
	freeifaddrs(ifa);
}

/* The resolver's socket, made in the sandbox's namespace (a socket stays
 * in the namespace it was made in, wherever its descriptor goes). */
static int
resolver_socket(char *msg, size_t size)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
	    .sin_port = htons(53) };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	inet_pton(AF_INET, EGRESS_RESOLVER, &sin.sin_addr);
	/* Filtered before bound: nothing reaches it unfiltered. */
	if (fd >= 0 && egress_dns_filter(fd) == 0 &&
	    bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0)
		return fd;
	snprintf(msg, size, "cannot listen on %s:53 in the sandbox: %s",
	    EGRESS_RESOLVER, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

static void
run_job(struct egress_job *job)
{
	struct nft_ctx *nft;
	char *script = job->script;
	const char *text;

	if (job->install)
		scan_addresses(&job->host, 0);
	if (setns(job->netns, CLONE_NEWNET) < 0) {
		snprintf(job->msg, sizeof job->msg, "cannot enter the sandbox's "
		    "network namespace: %s", strerror(errno));
		job->rc = -1;
		return;
	}
	if (job->resolver &&
	    (job->sock = resolver_socket(job->msg, sizeof job->msg)) < 0) {
		job->rc = -1;
		goto home;
	}
	if (job->install) {
		scan_addresses(&job->host, 1);
		script = egress_rules_script(&job->policy,
		    (const char *const *)job->host.v, job->host.n,
		    job->keep_names, job->generation);
	}
	nft = nft_ctx_new(NFT_CTX_DEFAULT);
	nft_ctx_buffer_output(nft);
	nft_ctx_buffer_error(nft);
	if (job->json)
		nft_ctx_output_set_flags(nft, NFT_CTX_OUTPUT_JSON);
	job->rc = nft_run_cmd_from_buffer(nft, script) == 0 ? 0 : -1;
	if (job->rc < 0) {
		text = nft_ctx_get_error_buffer(nft);
		snprintf(job->msg, sizeof job->msg, "nft: %.*s",
		    (int)strcspn(text, "\n"), text);
	} else if (job->json) {
		job->output = xstrdup(nft_ctx_get_output_buffer(nft));
	}
	nft_ctx_free(nft);
	if (script != job->script)
		free(script);
home:
	/* Back home, or every later job would start from the sandbox's
	 * namespace and read its addresses as the host's. */
	if (setns(w.home, CLONE_NEWNET) < 0)
		fatal("egress: cannot return to sandboxd's network namespace: "
		    "%s", strerror(errno));
}

static void *
worker_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&w.lock);
	for (;;) {
		struct egress_job *job;

		while (!w.stop && TAILQ_EMPTY(&w.todo))
			pthread_cond_wait(&w.wake, &w.lock);
		if (w.stop)
			break;
		job = TAILQ_FIRST(&w.todo);
		TAILQ_REMOVE(&w.todo, job, entry);
		pthread_mutex_unlock(&w.lock);
		run_job(job);
		pthread_mutex_lock(&w.lock);
		TAILQ_INSERT_TAIL(&w.done, job, entry);
		if (write(w.pipe[1], "", 1) < 0 && errno != EAGAIN)
			log_warn("egress: cannot wake the loop: %s",
			    strerror(errno));
	}
	pthread_mutex_unlock(&w.lock);
	return NULL;
}

static void
job_free(struct egress_job *job)
{
	close(job->netns);
	if (job->sock >= 0)
		close(job->sock);
	free(job->script);
	free(job->output);
	egress_policy_free(&job->policy);
	config_list_free(&job->host);
	free(job);
}

static void
done_cb(evutil_socket_t fd, short what, void *arg)
{
	char buf[64];

	(void)what;
	(void)arg;
	while (read(fd, buf, sizeof buf) > 0)
		;
	for (;;) {
		struct egress_job *job;

		int cancelled = 0;

		pthread_mutex_lock(&w.lock);
		job = TAILQ_FIRST(&w.done);
		if (job != NULL) {
			TAILQ_REMOVE(&w.done, job, entry);
			cancelled = job->cancelled;
		}
		pthread_mutex_unlock(&w.lock);
		if (job == NULL)
			break;
		if (!cancelled)
			job->done(job, job->arg);
		job_free(job);
	}
}

int
egress_nft_init(struct event_base *base, struct error *err)
{
	if ((w.home = open("/proc/thread-self/ns/net", O_RDONLY |
	    O_CLOEXEC)) < 0 || pipe2(w.pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		error_set(err, 500, "egress: %s", strerror(errno));
		return -1;
	}
	TAILQ_INIT(&w.todo);
	TAILQ_INIT(&w.done);
	w.ev = event_new(base, w.pipe[0], EV_READ | EV_PERSIST, done_cb, NULL);
	event_add(w.ev, NULL);
	if (pthread_create(&w.thread, NULL, worker_main, NULL) != 0) {
		error_set(err, 500, "egress: cannot start its worker thread");
		return -1;
	}
	w.started = 1;
	return 0;
}

void
egress_nft_shutdown(void)
{
	struct egress_job *job;

	if (w.started) {
		pthread_mutex_lock(&w.lock);
		w.stop = 1;
		pthread_cond_signal(&w.wake);
		pthread_mutex_unlock(&w.lock);
		pthread_join(w.thread, NULL);
		w.started = 0;
	}
	while ((job = TAILQ_FIRST(&w.todo)) != NULL) {
		TAILQ_REMOVE(&w.todo, job, entry);
		job_free(job);
	}
	while ((job = TAILQ_FIRST(&w.done)) != NULL) {
		TAILQ_REMOVE(&w.done, job, entry);
		job_free(job);
	}
	if (w.ev != NULL)
		event_free(w.ev);
	w.ev = NULL;
	for (int i = 0; i < 2; i++) {
		if (w.pipe[i] >= 0)
			close(w.pipe[i]);
		w.pipe[i] = -1;
	}
	if (w.home >= 0)
		close(w.home);
	w.home = -1;
}

struct egress_job *
egress_nft_job(int netns, egress_job_cb done, void *arg)
{
	struct egress_job *job = xcalloc(1, sizeof *job);

	if ((job->netns = fcntl(netns, F_DUPFD_CLOEXEC, 3)) < 0)
		fatal("egress: cannot duplicate a descriptor: %s",
		    strerror(errno));
	job->done = done;
	job->arg = arg;
	job->sock = -1;
	return job;
}

void
egress_nft_submit(struct egress_job *job)
{
	pthread_mutex_lock(&w.lock);
	TAILQ_INSERT_TAIL(&w.todo, job, entry);
	pthread_cond_signal(&w.wake);
	pthread_mutex_unlock(&w.lock);
}

void
egress_nft_cancel(struct egress_job *job)
{
	pthread_mutex_lock(&w.lock);
	job->cancelled = 1;
	pthread_mutex_unlock(&w.lock);
}
