/*
 * The nft commands of a sandbox's table, "inet sandboxd" in its own
 * network namespace: pure text, run by egress_nft.c as one transaction.
 *
 * Its output chain, in order: the sandbox's own loopback passes (its
 * programs talk to each other, its resolver listens there); packets
 * answering a connection made to it pass (its agent's port); IPv6
 * neighbour discovery passes; DNS anywhere else is refused; then the host's
 * addresses, the sandbox network (other sandboxes, the gateway) and the
 * operator's SANDBOXD_EGRESS_DENY, which no list opens; the lists' allowed
 * ranges (which may open a private one) and the addresses allowed names
 * resolved to, each while its TTL lasts (never one in a default range);
 * the lists' denied ranges (an allow list wins over a deny list, as E2B's
 * allowOut over denyOut: "deny 0.0.0.0/0, allow these" works); the ranges
 * every sandbox is denied; and last the internet, or nothing. Refused means rejected (a TCP reset, else an ICMP
 * "administratively prohibited"), never dropped: the program learns at
 * once. Every refusal counts in the counter "denied".
 *
 * A connection let through is marked with the policy's generation, and
 * its later packets pass on that mark alone (a bulk download's ACKs do
 * not walk the sets); a change of the policy has a new generation, so
 * every connection is judged again by the new rules at its next packet
 * (and reset if they refuse it).
 */
#include "sandboxd.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "egress.h"
#include "xmalloc.h"

#define TABLE "inet sandboxd"

static const char *const interval_sets[] = {
	"host4", "host6", "block4", "block6", "allow4", "allow6", "deny4",
	"deny6",
};

/* The IPv4-mapped and NAT64 prefixes (the last 4 bytes an IPv4
 * address), whose forms of the denied IPv4 ranges are denied too. */
static const unsigned char v4_in_v6[][12] = {
	{ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff },
	{ 0, 0x64, 0xff, 0x9b },
};

/* cidr into set<family> of buf's elements; an IPv4 range also as its
 * IPv4-mapped and NAT64 forms in the IPv6 set. */
static void
add_cidr(struct evbuffer *sets[2], const char *cidr, int mapped)
{
	char norm[INET6_ADDRSTRLEN + 8];
	int family = egress_cidr(cidr, norm, sizeof norm);

	if (family == 0)
		return;
	evbuffer_add_printf(sets[family == 6], "%s%s",
	    evbuffer_get_length(sets[family == 6]) > 0 ? ", " : "", norm);
	if (family == 4 && mapped) {
		const char *slash = strchr(norm, '/');
		char v4[INET_ADDRSTRLEN], v6[INET6_ADDRSTRLEN];
		unsigned char a[16];

		snprintf(v4, sizeof v4, "%.*s", (int)(slash - norm), norm);
		for (int i = 0; i < 2; i++) {
			memcpy(a, v4_in_v6[i], 12);
			inet_pton(AF_INET, v4, a + 12);
			inet_ntop(AF_INET6, a, v6, sizeof v6);
			evbuffer_add_printf(sets[1], "%s%s/%d",
			    evbuffer_get_length(sets[1]) > 0 ? ", " : "", v6,
			    atoi(slash + 1) + 96);
		}
	}
}

static void
fill(struct evbuffer *out, const char *set, const char *const *v, size_t n,
    int mapped)
{
	struct evbuffer *sets[2] = { evbuffer_new(), evbuffer_new() };

	for (size_t i = 0; i < n; i++)
		add_cidr(sets, v[i], mapped);
	for (int f = 0; f < 2; f++) {
		if (evbuffer_get_length(sets[f]) == 0)
			continue;
		evbuffer_add_printf(out, "add element " TABLE " %s%c { ", set,
		    f == 0 ? '4' : '6');
		evbuffer_add_buffer(out, sets[f]);
		evbuffer_add_printf(out, " }\n");
	}
	evbuffer_free(sets[0]);
	evbuffer_free(sets[1]);
}

static char *
finish(struct evbuffer *out)
{
	size_t n = evbuffer_get_length(out);
	char *s = xmalloc(n + 1);

	evbuffer_remove(out, s, n);
	s[n] = '\0';
	evbuffer_free(out);
	return s;
}

char *
egress_rules_script(const struct egress_policy *p, const char *const *host,
    size_t nhost, int keep_names, unsigned generation)
{
	struct evbuffer *out = evbuffer_new();
	size_t ndflt;
	const char *const *dflt = egress_default_denied(&ndflt);
	evbuffer_add_printf(out, "table " TABLE " {\n\tcounter denied { }\n");
	for (size_t i = 0; i < sizeof interval_sets / sizeof *interval_sets; i++)
		evbuffer_add_printf(out, "\tset %s { type ipv%c_addr; flags "
		    "interval; auto-merge; }\n", interval_sets[i],
		    interval_sets[i][strlen(interval_sets[i]) - 1]);
	evbuffer_add_printf(out,
	    "\tset names4 { type ipv4_addr; flags timeout; size 65536; }\n"
	    "\tset names6 { type ipv6_addr; flags timeout; size 65536; }\n"
	    "\tchain out { type filter hook output priority filter; "
	    "policy accept; }\n"
	    "\tchain refuse { }\n}\n"
	    "flush chain " TABLE " out\nflush chain " TABLE " refuse\n");
	for (size_t i = 0; i < sizeof interval_sets / sizeof *interval_sets; i++)
		evbuffer_add_printf(out, "flush set " TABLE " %s\n",
		    interval_sets[i]);
	if (!keep_names)
		evbuffer_add_printf(out, "flush set " TABLE " names4\n"
		    "flush set " TABLE " names6\n");
	{
		size_t nop;
		const char *const *op = egress_operator_denied(&nop);
		const char **never = xreallocarray(NULL, nhost + nop + 1,
		    sizeof *never);

		for (size_t i = 0; i < nhost; i++)
			never[i] = host[i];
		for (size_t i = 0; i < nop; i++)
			never[nhost + i] = op[i];
		fill(out, "host", never, nhost + nop, 1);
		free(never);
	}
	fill(out, "block", (const char *const *)p->deny.v, p->deny.n, 0);
	fill(out, "allow", (const char *const *)p->allow.v, p->allow.n, 0);
	fill(out, "deny", dflt, ndflt, 1);
	evbuffer_add_printf(out,
	    "add rule " TABLE " refuse meta l4proto tcp counter name \"denied\" "
	    "reject with tcp reset\n"
	    "add rule " TABLE " refuse counter name \"denied\" reject with icmpx "
	    "admin-prohibited\n"
	    "add rule " TABLE " out oifname \"lo\" accept\n"
	    "add rule " TABLE " out ct direction reply accept\n"
	    "add rule " TABLE " out ct mark %u accept\n", generation);
	evbuffer_add_printf(out,
	    "add rule " TABLE " out icmpv6 type { nd-neighbor-solicit, "
	    "nd-neighbor-advert, nd-router-solicit } accept\n"
	    "add rule " TABLE " out meta l4proto { tcp, udp } th dport 53 goto "
	    "refuse\n"
	    "add rule " TABLE " out ip daddr @host4 goto refuse\n"
	    "add rule " TABLE " out ip6 daddr @host6 goto refuse\n"
	    "add rule " TABLE " out ip daddr @allow4 ct mark set %u accept\n"
	    "add rule " TABLE " out ip6 daddr @allow6 ct mark set %u accept\n"
	    "add rule " TABLE " out ip daddr @names4 ct mark set %u accept\n"
	    "add rule " TABLE " out ip6 daddr @names6 ct mark set %u accept\n"
	    "add rule " TABLE " out ip daddr @block4 goto refuse\n"
	    "add rule " TABLE " out ip6 daddr @block6 goto refuse\n"
	    "add rule " TABLE " out ip daddr @deny4 goto refuse\n"
	    "add rule " TABLE " out ip6 daddr @deny6 goto refuse\n",
	    generation, generation, generation, generation);
	evbuffer_add_printf(out, p->internet ? "add rule " TABLE " out ct mark "
	    "set %u accept\n" : "add rule " TABLE " out goto refuse\n",
	    generation);
	return finish(out);
}

char *
egress_rules_names(const char *const *addrs, size_t n, int ttl)
{
	struct evbuffer *out = evbuffer_new(), *v[2][2];

	if (ttl < EGRESS_MIN_TTL)
		ttl = EGRESS_MIN_TTL;
	if (ttl > EGRESS_MAX_TTL)
		ttl = EGRESS_MAX_TTL;
	for (int f = 0; f < 2; f++) {
		v[f][0] = evbuffer_new();	/* with the timeout */
		v[f][1] = evbuffer_new();	/* bare */
	}
	for (size_t i = 0; i < n; i++) {
		int f = addrs[i][0] == '6';
		const char *sep = evbuffer_get_length(v[f][1]) > 0 ? ", " : "";

		evbuffer_add_printf(v[f][0], "%s%s timeout %ds", sep,
		    addrs[i] + 2, ttl);
		evbuffer_add_printf(v[f][1], "%s%s", sep, addrs[i] + 2);
	}
	/* An address there already keeps its old timeout on a plain add:
	 * add (it is there), delete, add again, in one transaction. */
	for (int f = 0; f < 2; f++) {
		char *with, *bare;

		if (evbuffer_get_length(v[f][1]) == 0)
			continue;
		evbuffer_add(v[f][0], "", 1);
		evbuffer_add(v[f][1], "", 1);
		with = (char *)evbuffer_pullup(v[f][0], -1);
		bare = (char *)evbuffer_pullup(v[f][1], -1);
		evbuffer_add_printf(out, "add element " TABLE " names%c { %s }\n"
		    "delete element " TABLE " names%c { %s }\n"
		    "add element " TABLE " names%c { %s }\n", f ? '6' : '4', with,
		    f ? '6' : '4', bare, f ? '6' : '4', with);
	}
	for (int f = 0; f < 2; f++) {
		evbuffer_free(v[f][0]);
		evbuffer_free(v[f][1]);
	}
	return finish(out);
}

int
egress_rules_denied(int family, const void *addr)
{
	size_t n;
	const char *const *ranges = egress_default_denied(&n);

	for (size_t i = 0; family == 6 && i < 2; i++) {
		if (memcmp(addr, v4_in_v6[i], 12) == 0 &&
		    egress_rules_denied(4, (const unsigned char *)addr + 12))
			return 1;
	}

	for (const char *const *r = ranges; r < ranges + n; r++) {
		unsigned char net[16];
		char text[INET6_ADDRSTRLEN + 8], *slash;
		int bits, f = egress_cidr(*r, text, sizeof text);
		const unsigned char *a = addr;

		if (f != family)
			continue;
		slash = strchr(text, '/');
		*slash = '\0';
		bits = atoi(slash + 1);
		inet_pton(f == 4 ? AF_INET : AF_INET6, text, net);
		if (memcmp(net, a, (size_t)bits / 8) == 0 && (bits % 8 == 0 ||
		    ((net[bits / 8] ^ a[bits / 8]) &
		    (0xff << (8 - bits % 8)) & 0xff) == 0))
			return 1;
	}
	return 0;
}
