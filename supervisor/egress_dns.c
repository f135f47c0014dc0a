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
 * TCP): an answer holds the addresses that fit in 512 bytes, and only
 * those are let in.
 *
 * An allowed name's addresses cost an nft transaction in the sandbox's
 * namespace (tens of ms, on the one worker every sandbox shares), so the
 * resolver remembers until when each address it let in stays there: an
 * answer whose addresses all stay long enough goes without one, its TTL
 * cut to what is left, and a name asked again and again renews its
 * addresses at most every half TTL.
 *
 * Both sides are hostile: the sandbox writes the queries, and upstream's
 * answers are of names the sandbox may control. Queries are bounded (64
 * of a sandbox waiting upstream, no more of all of them than evdns sends
 * at once); an answer's TTL is cut to a day, one of 2^31 s or more is 0
 * (RFC 2181), and a sandbox's resolved addresses are at most the sets'
 * size (egress_rules.c).
 */
#include "sandboxd.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <linux/filter.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
/* Queries evdns sends upstream at once (its default is 64: one sandbox's
 * flood would hold every other's back); the rest wait their turn. */
#define MAX_INFLIGHT "4096"
/* What an answer over UDP may be without EDNS, as evdns's server cuts it
 * (the truncated bit then sends the client to TCP, which it lacks). */
#define ANSWER_MAX 512
/* The header, and per record a name pointer, type, class, TTL and
 * length. */
#define HEADER_LEN 12
#define RECORD_LEN 12
/* Seconds a program has to connect after its answer: an address left in
 * for less is let in again. */
#define CONNECT_MARGIN 2.0
/* Addresses a sandbox's resolver remembers; past them every answer goes
 * to the worker, as it would without. */
#define REMEMBERED_MAX 4096

static struct evdns_base *upstream;
/* Addresses the worker could not add, and evdns's own complaints (an
 * answer it could not send, upstream failing), however fast sandboxes
 * ask. */
static struct log_rate names_rate = LOG_RATE_INIT(60, 10);
static struct log_rate evdns_rate = LOG_RATE_INIT(60, 10);

/* One query asked upstream. Freed when it is answered, or when its
 * sandbox's resolver stops (eg NULL while upstream's callback is due). */
struct egress_query {
	LIST_ENTRY(egress_query) entry;
	struct egress *eg;
	struct evdns_server_request *sreq;
	struct evdns_request *creq;	/* while upstream has it */
	struct egress_job *job;		/* while its addresses go in */
	enum egress_verdict verdict;
	/* With job: the addresses ("4 ADDR"), until when they stay on the
	 * monotonic clock, and the names sets' flushes then. */
	char **addrs;
	size_t naddrs;
	double until;
	unsigned flushes;
};

/* evdns would log to stderr, a line for each packet it cannot handle;
 * given a function, it tells only whether a line is a warning. */
static void
evdns_log_cb(int is_warn, const char *msg)
{
	if (is_warn)
		log_rate_msg(&evdns_rate, LOG_WARN, "egress: evdns: %s", msg);
	else
		log_debug("egress: evdns: %s", msg);
}

int
egress_dns_init(struct event_base *base, const char *servers,
    struct error *err)
{
	struct config_list l = { 0 };

	evdns_set_log_fn(evdns_log_cb);
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
	evdns_base_set_option(upstream, "max-inflight:", MAX_INFLIGHT);
	return 0;
}

int
egress_dns_filter(int sock)
{
	/* The kernel keeps from the socket any datagram shorter than a DNS
	 * header (its UDP header's 8 bytes come first here): libevent 2.1's
	 * server dereferences NULL on one (libevent issue 1231, fixed in
	 * 2.2), and the sandbox could end sandboxd with five bytes. */
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 8 + HEADER_LEN, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, 0xffffffff),
		BPF_STMT(BPF_RET | BPF_K, 0),
	};
	struct sock_fprog prog = { sizeof code / sizeof code[0], code };

	return setsockopt(sock, SOL_SOCKET, SO_ATTACH_FILTER, &prog,
	    sizeof prog);
}

void
egress_dns_shutdown(void)
{
	if (upstream != NULL)
		evdns_base_free(upstream, 1);
	upstream = NULL;
}

/* Freed, out of its sandbox's list or not. */
static void
query_release(struct egress_query *q)
{
	for (size_t i = 0; i < q->naddrs; i++)
		free(q->addrs[i]);
	free(q->addrs);
	free(q);
}

static void
query_free(struct egress_query *q)
{
	if (q->eg != NULL) {
		LIST_REMOVE(q, entry);
		q->eg->nqueries--;
	}
	query_release(q);
}

/* That addr stays in the sandbox's set until then. */
static void
remember(struct egress *e, const char *addr, double until)
{
	double now = timing_monotonic();
	const char *k;
	json_t *v, *tmp;

	if (e->names_in == NULL)
		e->names_in = json_object();
	if (json_object_size(e->names_in) >= REMEMBERED_MAX) {
		json_object_foreach_safe(e->names_in, tmp, k, v) {
			if (json_real_value(v) <= now)
				json_object_del(e->names_in, k);
		}
	}
	if (json_object_size(e->names_in) < REMEMBERED_MAX ||
	    json_object_get(e->names_in, addr) != NULL)
		json_object_set_new(e->names_in, addr, json_real(until));
}

/* Seconds the least of addrs stays in the set; -1 when one is not known
 * to be there. */
static double
remembered(const struct egress *e, char *const *addrs, size_t n)
{
	double now = timing_monotonic(), left = -1;

	for (size_t i = 0; i < n; i++) {
		json_t *v = json_object_get(e->names_in, addrs[i]);

		if (v == NULL || json_real_value(v) <= now)
			return -1;
		if (i == 0 || json_real_value(v) - now < left)
			left = json_real_value(v) - now;
	}
	return left;
}

void
egress_dns_names_flushed(struct egress *e)
{
	e->names_flushes++;
	json_decref(e->names_in);
	e->names_in = NULL;
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
		log_rate_msg(&names_rate, LOG_WARN, "sandbox %s: resolved "
		    "addresses not allowed: %s", q->eg->name, job->msg);
	/* Not after a flush that came behind it. */
	else if (q->flushes == q->eg->names_flushes)
		for (size_t i = 0; i < q->naddrs; i++)
			remember(q->eg, q->addrs[i], q->until);
	respond(q, job->rc < 0 ? DNS_ERR_SERVERFAILED : DNS_ERR_NONE);
}

/* The answer's records, one per address. evdns's add_a_reply(n) would
 * write n addresses into one record, which resolvers take for a broken
 * answer. */
static void
add_records(struct egress_query *q, char type, int count, int ttl,
    const void *addresses)
{
	size_t len = type == DNS_IPv4_A ? 4 : 16;

	for (int i = 0; i < count; i++)
		evdns_server_request_add_reply(q->sreq, EVDNS_ANSWER_SECTION,
		    q->sreq->questions[0]->name, type == DNS_IPv4_A ?
		    EVDNS_TYPE_A : EVDNS_TYPE_AAAA, EVDNS_CLASS_INET, ttl,
		    (int)len, 0, (const char *)addresses + (size_t)i * len);
}

/* The addresses of an allowed name into the sandbox's sets, unless they
 * stay there long enough already; then the answer. */
static void
allow_addresses(struct egress_query *q, char type, int count, int ttl,
    const void *addresses)
{
	char **v = xcalloc((size_t)count + 1, sizeof *v);
	size_t n = 0, len = type == DNS_IPv4_A ? 4 : 16;
	int family = type == DNS_IPv4_A ? 4 : 6;
	double left;

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
	q->addrs = v;
	q->naddrs = n;
	left = n > 0 ? remembered(q->eg, v, n) : 0;
	/* Long enough: the answer may be kept as long as they stay, and
	 * comes with at least half its TTL. */
	if (n == 0 || left >= (ttl / 2.0 > CONNECT_MARGIN ? ttl / 2.0 :
	    CONNECT_MARGIN)) {
		add_records(q, type, count, n == 0 || left >= ttl ? ttl :
		    (int)left, addresses);
		respond(q, DNS_ERR_NONE);
		return;
	}
	add_records(q, type, count, ttl, addresses);
	q->until = timing_monotonic() + (ttl > EGRESS_MIN_TTL ? ttl :
	    EGRESS_MIN_TTL);
	q->flushes = q->eg->names_flushes;
	q->job = egress_nft_job(q->eg->netns, names_in_cb, q);
	q->job->script = egress_rules_names((const char *const *)v, n, ttl);
	egress_nft_submit(q->job);
}

/* How many of count addresses of len bytes fit in an answer to name. */
static int
answer_fits(const char *name, int count, size_t len)
{
	/* The question: the name's labels and their end, type and class;
	 * each record names it by a pointer. */
	size_t question = strlen(name) + 2 + 4, room;

	if (HEADER_LEN + question >= ANSWER_MAX)
		return 0;
	room = (ANSWER_MAX - HEADER_LEN - question) / (RECORD_LEN + len);
	return count < (int)room ? count : (int)room;
}

static void
resolved_cb(int result, char type, int count, int ttl, void *addresses,
    void *arg)
{
	struct egress_query *q = arg;
	const char *name;

	q->creq = NULL;
	if (q->eg == NULL) {
		query_release(q);
		return;
	}
	/* A name without records of the type asked is no failure. */
	if (result == DNS_ERR_NODATA) {
		respond(q, DNS_ERR_NONE);
		return;
	}
	if (result != DNS_ERR_NONE) {
		respond(q, result == DNS_ERR_NOTEXIST ? DNS_ERR_NOTEXIST :
		    DNS_ERR_SERVERFAILED);
		return;
	}
	name = q->sreq->questions[0]->name;
	/* evdns hands upstream's 32-bit TTL over as an int. */
	if (ttl < 0)
		ttl = 0;
	if (ttl > EGRESS_MAX_TTL)
		ttl = EGRESS_MAX_TTL;
	count = answer_fits(name, count, type == DNS_IPv4_A ? 4 : 16);
	if (q->verdict == EGRESS_ALLOW && count > 0) {
		allow_addresses(q, type, count, ttl, addresses);
		return;
	}
	add_records(q, type, count, ttl, addresses);
	respond(q, DNS_ERR_NONE);
}

/* The name asked, lower case; -1 when it is no name at all. evdns joins
 * the labels with dots, and a label may hold dots itself: one that makes
 * an empty label ("x.", ".") would be asked upstream as the name before
 * it ("evil.example." + "allowed.test" asks for evil.example), not the
 * one judged. */
static int
question_name(const char *asked, char *out, size_t size)
{
	size_t n = strlen(asked);

	if (n == 0 || n >= size || asked[0] == '.' || asked[n - 1] == '.' ||
	    strstr(asked, "..") != NULL)
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
			query_release(q);
		} else if (q->creq != NULL) {
			/* Its callback runs later, with DNS_ERR_CANCEL, and
			 * frees it. */
			evdns_cancel_request(upstream, q->creq);
		} else {
			query_release(q);
		}
	}
	json_decref(e->names_in);
	e->names_in = NULL;
	e->nqueries = 0;
	if (e->port != NULL)
		evdns_close_server_port(e->port);
	e->port = NULL;
}
