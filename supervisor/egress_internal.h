/*
 * What egress*.c share: one sandbox's enforcement (egress.c), its
 * resolver (egress_dns.c) and the worker that runs nft commands in
 * network namespaces (egress_nft.c).
 */
#ifndef EGRESS_INTERNAL_H
#define EGRESS_INTERNAL_H

#include <sys/queue.h>

#include "egress.h"

struct egress_job;
typedef void (*egress_job_cb)(struct egress_job *job, void *arg);

/* One job; the worker's between submit and its callback, freed after the
 * callback returns. The loop fills the request, reads the result in the
 * callback. */
struct egress_job {
	TAILQ_ENTRY(egress_job) entry;
	int netns;			/* a duplicate, closed with the job */
	/* The request: script, or install (the commands built from policy,
	 * the host's addresses and the namespace's subnets). */
	char *script;
	int install;
	struct egress_policy policy;
	int keep_names;
	unsigned generation;
	int resolver;			/* also open the resolver's socket */
	int json;			/* output wanted, as JSON */
	/* The result. */
	int rc;				/* 0, or -1 with msg */
	char msg[256];
	char *output;			/* with json */
	struct config_list host;	/* what install found not to open */
	int sock;			/* with resolver: bound, or -1 */
	egress_job_cb done;
	void *arg;
	int cancelled;			/* under the worker's lock */
};

int egress_nft_init(struct event_base *base, struct error *err);
void egress_nft_shutdown(void);
/* A job for the namespace netns (duplicated: the caller keeps its own). */
struct egress_job *egress_nft_job(int netns, egress_job_cb done, void *arg);
void egress_nft_submit(struct egress_job *job);
/* The job's callback will not run; it may still be running. */
void egress_nft_cancel(struct egress_job *job);

struct egress_query;

/* One sandbox's enforcement. Owned by its caller (egress_free). */
struct egress {
	LIST_ENTRY(egress) entry;
	char *name;			/* the sandbox's, for the log */
	int netns;
	/* What the resolver answers by: the policy being put in from the
	 * moment it is asked for (a name it drops is not answered during
	 * the change), back to prev if the change fails. */
	struct egress_policy policy;
	struct egress_policy prev;
	int installed;
	unsigned generation;		/* of the last script sent */
	struct egress_job *job;		/* an install or update under way */
	egress_done_cb done;		/* its caller's */
	void *arg;
	struct egress_job *count_job;	/* reading the counter */
	uint64_t denied_packets;
	uint64_t denied_names;
	/* The resolver (egress_dns.c). */
	struct evdns_server_port *port;
	LIST_HEAD(, egress_query) queries;
	size_t nqueries;
	/* The addresses it let into the names sets ("4 ADDR"), each until
	 * when on the monotonic clock; and how often the sets were flushed
	 * (egress_dns_names_flushed). */
	json_t *names_in;
	unsigned names_flushes;
};

/* egress_dns.c */
int egress_dns_init(struct event_base *base, const char *servers,
    struct error *err);
void egress_dns_shutdown(void);
/* Keep from sock what the resolver must never read (a socket filter),
 * before it is bound: 0, or -1 with errno. */
int egress_dns_filter(int sock);
/* Serve e's resolver on sock (taken over). */
void egress_dns_start(struct egress *e, int sock);
/* Its queries dropped, its socket closed, what it let in forgotten. */
void egress_dns_stop(struct egress *e);
/* The names sets are flushed (an install that keeps no names): nothing
 * let in before is there any longer. */
void egress_dns_names_flushed(struct egress *e);

#endif
