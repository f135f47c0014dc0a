/*
 * Each policed sandbox's resolver: a UDP socket made in its network
 * namespace (EGRESS_RESOLVER:53, what its resolv.conf names) served on
 * sandboxd's loop by libevent's evdns server, which asks the upstream
 * name servers (SANDBOXD_EGRESS_DNS, else the host's resolv.conf) from
 * sandboxd's own namespace with evdns's client.
 *
 * Why here and not dnsmasq --nftset: the socket says which sandbox asks,
 * so one loop serves every sandbox with its own lists (dnsmasq fills sets
 * by name for all its clients alike: one dnsmasq per sandbox, restarted
 * at every change of its lists); an allowed name's addresses go into that
 * sandbox's set with the answer's own TTL as their timeout (dnsmasq adds
 * them with the set's fixed one), renewed by a later answer; and the
 * answer reaches the sandbox only once its addresses are in, so its
 * connect never races the set. Addresses in ranges every sandbox is
 * denied are not added (DNS rebinding); the rules refuse them anyway.
 *
 * What it answers: A and AAAA as upstream does; other types of a name it
 * may answer get no records (NOERROR); a denied name, or with the
 * internet off a name on no allow list, REFUSED, never asked upstream (its
 * query could carry data out). UDP only (evdns in libevent 2.1 serves no
 * TCP): answers of a few addresses fit.
 */
#include "sandboxd.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/dns_struct.h>
#include <event2/event.h>

#include "egress.h"
#include "egress_internal.h"
#include "log.h"
#include "xmalloc.h"

/* Queries of one sandbox waiting upstream at once; more are SERVFAIL. */
#define MAX_QUERIES 64

static struct evdns_base *upstream;

/* One query asked upstream. Freed when it is answered, or when its
 * sandbox's resolver stops (eg NULL while upstream's callback is due). */
struct egress_query {
	LIST_ENTRY(egress_query) entry;
	struct egress *eg;
	struct evdns_server_request *sreq;
	struct evdns_request *creq;	/* while upstream has it */
	struct egress_job *job;		/* while its addresses go in */
	enum egress_verdict verdict;
};

int
egress_dns_init(struct event_base *base, const char *servers,
    struct error *err)
{
	struct config_list l = { 0 };

	upstream = evdns_base_new(base, 0);
	if (servers != NULL && *servers != '\0') {
		config_list_split(servers, &l);
		for (size_t i = 0; i < l.n; i++) {
			if (evdns_base_nameserver_ip_add(upstream, l.v[i]) != 0) {
				error_set(err, 400, "SANDBOXD_EGRESS_DNS: '%s' is "
				    "not ADDR[:PORT]", l.v[i]);
				config_list_free(&l);
				return -1;
			}
		}
		config_list_free(&l);
	} else if (evdns_base_resolv_conf_parse(upstream,
	    DNS_OPTION_NAMESERVERS, "/etc/resolv.conf") != 0 ||
	    evdns_base_count_nameservers(upstream) == 0) {
		log_warn("egress: no name server in /etc/resolv.conf: sandboxes "
		    "with a network resolve nothing (SANDBOXD_EGRESS_DNS)");
	}
	evdns_base_set_option(upstream, "timeout:", "3");
	evdns_base_set_option(upstream, "attempts:", "2");
	return 0;
}

void
egress_dns_shutdown(void)
{
	if (upstream != NULL)
		evdns_base_free(upstream, 1);
	upstream = NULL;
}

static void
query_free(struct egress_query *q)
{
	if (q->eg != NULL) {
		LIST_REMOVE(q, entry);
		q->eg->nqueries--;
	}
	free(q);
}

/* libevent 2.1 keeps a request it could not send at once (EAGAIN, or an
 * answer that does not format) and answers -1: drop it then. */
static void
answer(struct evdns_server_request *req, int rcode)
{
	if (evdns_server_request_respond(req, rcode) < 0)
		evdns_server_request_drop(req);
}

static void
respond(struct egress_query *q, int rcode)
{
	answer(q->sreq, rcode);
	query_free(q);
}

static void
names_in_cb(struct egress_job *job, void *arg)
{
	struct egress_query *q = arg;

	q->job = NULL;
	if (job->rc < 0)
		log_warn("sandbox %s: resolved addresses not allowed: %s",
		    q->eg->name, job->msg);
	respond(q, job->rc < 0 ? DNS_ERR_SERVERFAILED : DNS_ERR_NONE);
}

/* The addresses of an allowed name into the sandbox's sets; then the
 * answer. */
static void
allow_addresses(struct egress_query *q, char type, int count, int ttl,
    const void *addresses)
{
	const char **v = xcalloc((size_t)count + 1, sizeof *v);
	size_t n = 0, len = type == DNS_IPv4_A ? 4 : 16;
	int family = type == DNS_IPv4_A ? 4 : 6;

	for (int i = 0; i < count; i++) {
		const unsigned char *a = (const unsigned char *)addresses +
		    (size_t)i * len;
		char text[INET6_ADDRSTRLEN + 2];

		if (egress_rules_denied(family, a))
			continue;
		text[0] = (char)('0' + family);
		text[1] = ' ';
		inet_ntop(family == 4 ? AF_INET : AF_INET6, a, text + 2,
		    sizeof text - 2);
		v[n++] = xstrdup(text);
	}
	if (n == 0) {
		free(v);
		respond(q, DNS_ERR_NONE);
		return;
	}
	q->job = egress_nft_job(q->eg->netns, names_in_cb, q);
	q->job->script = egress_rules_names(v, n, ttl);
	for (size_t i = 0; i < n; i++)
		free((char *)v[i]);
	free(v);
	egress_nft_submit(q->job);
}

static void
resolved_cb(int result, char type, int count, int ttl, void *addresses,
    void *arg)
{
	struct egress_query *q = arg;
	const char *name;

	q->creq = NULL;
	if (q->eg == NULL) {
		free(q);
		return;
	}
	if (result != DNS_ERR_NONE) {
		respond(q, result == DNS_ERR_NOTEXIST ? DNS_ERR_NOTEXIST :
		    DNS_ERR_SERVERFAILED);
		return;
	}
	name = q->sreq->questions[0]->name;
	if (type == DNS_IPv4_A && count > 0)
		evdns_server_request_add_a_reply(q->sreq, name, count, addresses,
		    ttl);
	else if (type == DNS_IPv6_AAAA && count > 0)
		evdns_server_request_add_aaaa_reply(q->sreq, name, count,
		    addresses, ttl);
	if (q->verdict == EGRESS_ALLOW && count > 0)
		allow_addresses(q, type, count, ttl, addresses);
	else
		respond(q, DNS_ERR_NONE);
}

/* The name asked, lower case, without a final dot; NULL when it is no
 * name at all. */
static int
question_name(const char *asked, char *out, size_t size)
{
	size_t n = strlen(asked);

	if (n > 0 && asked[n - 1] == '.')
		n--;
	if (n == 0 || n >= size)
		return -1;
	for (size_t i = 0; i < n; i++)
		out[i] = (char)tolower((unsigned char)asked[i]);
	out[n] = '\0';
	return 0;
}

static void
request_cb(struct evdns_server_request *req, void *arg)
{
	struct egress *e = arg;
	struct evdns_server_question *qu;
	struct egress_query *q;
	char name[EGRESS_MAX_NAME + 2];
	enum egress_verdict verdict;

	if (req->nquestions != 1) {
		answer(req, DNS_ERR_FORMAT);
		return;
	}
	qu = req->questions[0];
	if (qu->dns_question_class != EVDNS_CLASS_INET ||
	    question_name(qu->name, name, sizeof name) < 0) {
		answer(req, DNS_ERR_REFUSED);
		return;
	}
	verdict = egress_name_verdict(&e->policy, name);
	if (verdict == EGRESS_REFUSE) {
		e->denied_names++;
		answer(req, DNS_ERR_REFUSED);
		return;
	}
	if (qu->type != EVDNS_TYPE_A && qu->type != EVDNS_TYPE_AAAA) {
		answer(req, DNS_ERR_NONE);
		return;
	}
	if (e->nqueries >= MAX_QUERIES) {
		answer(req, DNS_ERR_SERVERFAILED);
		return;
	}
	q = xcalloc(1, sizeof *q);
	q->eg = e;
	q->sreq = req;
	q->verdict = verdict;
	LIST_INSERT_HEAD(&e->queries, q, entry);
	e->nqueries++;
	q->creq = qu->type == EVDNS_TYPE_A ?
	    evdns_base_resolve_ipv4(upstream, name, DNS_QUERY_NO_SEARCH,
	    resolved_cb, q) :
	    evdns_base_resolve_ipv6(upstream, name, DNS_QUERY_NO_SEARCH,
	    resolved_cb, q);
	if (q->creq == NULL)
		respond(q, DNS_ERR_SERVERFAILED);
}

void
egress_dns_start(struct egress *e, int sock)
{
	e->port = evdns_add_server_port_with_base(sd.base, sock, 0, request_cb,
	    e);
	if (e->port == NULL) {
		log_warn("sandbox %s: its resolver cannot start", e->name);
		close(sock);
	}
}

void
egress_dns_stop(struct egress *e)
{
	struct egress_query *q;

	/* Each query lets go of its server request, which the port waits
	 * for before it closes its socket. */
	while ((q = LIST_FIRST(&e->queries)) != NULL) {
		LIST_REMOVE(q, entry);
		q->eg = NULL;
		evdns_server_request_drop(q->sreq);
		if (q->job != NULL) {
			egress_nft_cancel(q->job);
			free(q);
		} else if (q->creq != NULL) {
			/* Its callback runs later, with DNS_ERR_CANCEL, and
			 * frees it. */
			evdns_cancel_request(upstream, q->creq);
		} else {
			free(q);
		}
	}
	e->nqueries = 0;
	if (e->port != NULL)
		evdns_close_server_port(e->port);
	e->port = NULL;
}
