/*
 * Fuzz target: a sandbox's resolver (supervisor/egress_dns.c), the way a
 * hostile sandbox and a hostile upstream reach it. A real evdns server
 * port serves a UDP socket on loopback through egress_dns_start, as
 * sandboxd serves the socket it made in a sandbox's namespace; the
 * upstream it asks (egress_dns_init) is a UDP socket of this harness that
 * answers with the input's packets. Only the worker that runs nft in the
 * namespace is stood in for: its jobs complete on the loop, and their
 * scripts are read back.
 *
 * Checked, beyond the sanitizers: no name the policy refuses is asked
 * upstream; every address a script lets in is outside the ranges every
 * sandbox is denied, in any of its forms (rebinding), with a timeout
 * from 5 s to a day; and stopping the resolver with queries in flight
 * leaves nothing behind (the leak checker).
 *
 * Input: one byte choosing the policy (internet on or off, the allow and
 * deny lists) and whether the worker fails, then records: a kind byte, a
 * 2-byte length, the packet. Kinds: a query from the sandbox; an answer
 * from upstream (optionally given the ID, and the question, of the
 * oldest query upstream has not answered); the resolver stopped and
 * started again; the names sets flushed (a change of the policy).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "sandboxd.h"
#include "egress.h"
#include "egress_internal.h"
#include "log.h"
#include "xmalloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The process-wide state the archive's modules name. */
struct sandboxd sd;

#define PACKET_MAX 1500
#define KEPT 16

static struct event_base *base;
static int upstream_fd, client_fd;
static struct sockaddr_in resolver_addr;
static struct egress eg;
static int worker_fails;
static char upstream[32];		/* ADDR:PORT, as SANDBOXD_EGRESS_DNS */

/* Queries upstream was sent and has not answered, oldest first. */
static struct {
	uint8_t data[PACKET_MAX];
	size_t len;
	struct sockaddr_in from;
} asked[KEPT];
static size_t nasked;

static void
broken(const char *what, const char *detail)
{
	fprintf(stderr, "egress_dns: %s: %s\n", what, detail);
	abort();
}

/* A socket on loopback; a resolver's filtered before it is bound, as
 * egress_nft.c makes it. */
static int
udp_socket(struct sockaddr_in *bound, int resolver)
{
	socklen_t len = sizeof *bound;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	memset(bound, 0, sizeof *bound);
	bound->sin_family = AF_INET;
	bound->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || (resolver && egress_dns_filter(fd) < 0) || bind(fd, (struct sockaddr *)bound, sizeof *bound) < 0 ||
	    getsockname(fd, (struct sockaddr *)bound, &len) < 0)
		broken("socket", "cannot bind on loopback");
	return fd;
}

/* The worker's stand-in (egress_internal.h). */

static void
check_script(const char *script)
{
	const char *p = script;

	while ((p = strstr(p, "add element inet sandboxd names")) != NULL) {
		int family = p[31] == '6' ? 6 : 4;
		const char *end = strchr(p, '}');

		p = strchr(p, '{') + 1;
		while (p < end) {
			char addr[INET6_ADDRSTRLEN + 1];
			unsigned char bin[16];
			int n = 0, ttl = -1;

			if (sscanf(p, " %46[0-9a-fA-F.:] timeout %ds%n", addr, &ttl,
			    &n) != 2 || n == 0)
				break;
			if (inet_pton(family == 4 ? AF_INET : AF_INET6, addr,
			    bin) != 1)
				broken("an address nft cannot read", addr);
			/* The IPv4-mapped and NAT64 forms checked apart. */
			if (egress_rules_denied(family, bin) ||
			    (family == 6 && (memcmp(bin, "\0\0\0\0\0\0\0\0\0\0"
			    "\xff\xff", 12) == 0 || memcmp(bin, "\0\x64\xff\x9b"
			    "\0\0\0\0\0\0\0\0", 12) == 0) &&
			    egress_rules_denied(4, bin + 12)))
				broken("a denied address let in", addr);
			if (ttl < 5 || ttl > 86400)
				broken("a timeout out of bounds", p);
			p += n;
			p += strspn(p, ", ");
		}
		p = end;
	}
}

static void
job_run_cb(evutil_socket_t fd, short what, void *arg)
{
	struct egress_job *job = arg;

	(void)fd;
	(void)what;
	if (!job->cancelled) {
		if (job->script != NULL)
			check_script(job->script);
		job->rc = worker_fails ? -1 : 0;
		if (worker_fails)
			snprintf(job->msg, sizeof job->msg, "the set is full");
		job->done(job, job->arg);
	}
	free(job->script);
	free(job);
}

struct egress_job *
egress_nft_job(int netns, egress_job_cb done, void *arg)
{
	struct egress_job *job = xcalloc(1, sizeof *job);

	job->netns = netns;
	job->sock = -1;
	job->done = done;
	job->arg = arg;
	return job;
}

void
egress_nft_submit(struct egress_job *job)
{
	event_base_once(base, -1, EV_TIMEOUT, job_run_cb, job, NULL);
}

void
egress_nft_cancel(struct egress_job *job)
{
	job->cancelled = 1;
}

/* The sandbox's side and upstream's. */

/* The name of a query (no compression in evdns's own), lower case. */
static void
query_name(const uint8_t *q, size_t len, char *out, size_t size)
{
	size_t i = 12, o = 0;

	out[0] = '\0';
	while (i < len && q[i] != 0 && q[i] < 64 && o + q[i] + 2 < size) {
		if (o > 0)
			out[o++] = '.';
		for (size_t k = 0; k < q[i] && i + 1 + k < len; k++)
			out[o++] = (char)tolower(q[i + 1 + k]);
		i += 1 + q[i];
	}
	out[o] = '\0';
}

static void
drain(void)
{
	uint8_t buf[PACKET_MAX];
	struct sockaddr_in from;
	socklen_t flen = sizeof from;
	ssize_t n;

	while ((n = recvfrom(upstream_fd, buf, sizeof buf, 0,
	    (struct sockaddr *)&from, &flen)) >= 0) {
		char name[300];

		query_name(buf, (size_t)n, name, sizeof name);
		if (egress_name_verdict(&eg.policy, name) == EGRESS_REFUSE)
			broken("a refused name asked upstream", name);
		if (nasked == KEPT) {
			memmove(asked, asked + 1, (KEPT - 1) * sizeof *asked);
			nasked--;
		}
		memcpy(asked[nasked].data, buf, (size_t)n);
		asked[nasked].len = (size_t)n;
		asked[nasked].from = from;
		nasked++;
		flen = sizeof from;
	}
	while (recv(client_fd, buf, sizeof buf, 0) >= 0)
		;
}

static void
turn(void)
{
	for (int i = 0; i < 4; i++) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		drain();
	}
}

/* An answer from upstream: as given, or to the oldest query upstream
 * holds (its ID, and with with_question its question section, put in). */
static void
answer(const uint8_t *p, size_t len, int to_query, int with_question)
{
	uint8_t out[PACKET_MAX * 2];
	struct sockaddr_in to;
	size_t n = 0;

	if (nasked == 0)
		return;
	to = asked[0].from;
	if (!to_query || len < 12) {
		memcpy(out, p, len);
		n = len;
	} else {
		memcpy(out, p, 12);
		memcpy(out, asked[0].data, 2);
		n = 12;
		if (with_question && asked[0].len > 12) {
			memcpy(out + n, asked[0].data + 12, asked[0].len - 12);
			n += asked[0].len - 12;
		}
		memcpy(out + n, p + 12, len - 12);
		n += len - 12;
		memmove(asked, asked + 1, --nasked * sizeof *asked);
	}
	if (n > PACKET_MAX)
		n = PACKET_MAX;
	sendto(upstream_fd, out, n, 0, (struct sockaddr *)&to, sizeof to);
}

static void
resolver_start(void)
{
	struct sockaddr_in a;

	eg.netns = -1;
	LIST_INIT(&eg.queries);
	egress_dns_start(&eg, udp_socket(&a, 1));
	resolver_addr = a;
}

static void
setup(void)
{
	struct sandboxd_config cfg = { 0 };
	struct sockaddr_in a;
	struct error err;

	log_set_level(LOG_ERROR);
	base = event_base_new();
	sd.base = base;
	cfg.egress_deny = "198.18.0.0/15, evil.test";
	cfg.egress_allow = "mirror.test";
	if (egress_config_check(&cfg, &err) < 0)
		broken("configuration", err.msg);
	upstream_fd = udp_socket(&a, 0);
	client_fd = udp_socket(&(struct sockaddr_in){ 0 }, 0);
	eg.name = "fuzz";
	snprintf(upstream, sizeof upstream, "127.0.0.1:%d", ntohs(a.sin_port));
}

static void
policy_for(uint8_t b)
{
	json_t *own = json_object(), *norm = NULL;
	struct error err;

	json_object_set_new(own, "internet", json_boolean(b & 1));
	if (b & 2)
		json_object_set_new(own, "allow_out", json_pack("[s,s,s]",
		    "allowed.test", "*.wild.test", "10.0.0.0/8"));
	if (b & 4)
		json_object_set_new(own, "deny_out", json_pack("[s,s]",
		    "denied.test", "*.wild.test"));
	if (egress_network_check(own, "network", &norm, &err) < 0)
		broken("policy", err.msg);
	egress_policy_free(&eg.policy);
	egress_policy_build(&eg.policy, NULL, norm);
	json_decref(own);
	json_decref(norm);
	worker_fails = (b & 8) != 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int started;
	struct error err;
	size_t at = 1;

	if (size < 1)
		return 0;
	if (!started) {
		setup();
		started = 1;
	}
	if (egress_dns_init(base, upstream, &err) < 0)
		broken("upstream", err.msg);
	policy_for(data[0]);
	nasked = 0;
	resolver_start();
	while (at + 3 <= size) {
		uint8_t kind = data[at];
		size_t len = (size_t)data[at + 1] << 8 | data[at + 2];

		at += 3;
		if (len > size - at)
			len = size - at;
		if (len > PACKET_MAX)
			len = PACKET_MAX;
		switch (kind & 3) {
		case 0:
			sendto(client_fd, data + at, len, 0,
			    (struct sockaddr *)&resolver_addr,
			    sizeof resolver_addr);
			break;
		case 1:
			answer(data + at, len, (kind & 4) != 0, (kind & 8) != 0);
			break;
		case 2:
			egress_dns_stop(&eg);
			turn();
			resolver_start();
			break;
		default:
			egress_dns_names_flushed(&eg);
			break;
		}
		at += len;
		turn();
	}
	/* The sandbox goes with its queries in flight. */
	egress_dns_stop(&eg);
	turn();
	egress_dns_shutdown();
	turn();
	return 0;
}
