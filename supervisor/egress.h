/*
 * Egress policy of sandboxes with a network: where a sandbox may send
 * packets, enforced by nftables rules in its own network namespace (out
 * of reach of its users, who have no CAP_NET_ADMIN) and by a resolver
 * sandboxd serves inside that namespace, which fills the rules' sets with
 * the addresses allowed names resolve to, for as long as their TTL.
 *
 * By default a sandbox reaches public addresses and nothing of the host's
 * (its addresses, the sandbox network's subnets: other sandboxes, the
 * gateway), of private, shared, link-local, loopback, multicast or
 * reserved ranges; DNS only to its resolver. A policy adds allow and deny
 * lists of CIDRs and names (the configuration's, the type's and the
 * create's) and may turn the internet off (only the lists then).
 *
 * The backends only tell where: a descriptor of the sandbox's network
 * namespace. egress_policy.c checks and merges lists, egress_rules.c
 * writes the nft commands, egress_nft.c runs them in the namespace on a
 * worker thread (libnftables), egress_dns.c is the resolver, egress.c
 * ties one sandbox's together. Callbacks run after the call returned.
 */
#ifndef EGRESS_H
#define EGRESS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "config.h"
#include "error.h"

struct event_base;
struct sandboxd_config;

/* Where a sandbox's resolver listens inside its namespace. */
#define EGRESS_RESOLVER "127.0.0.53"
/* Entries a list may have, and how long one may be. */
#define EGRESS_MAX_ENTRIES 256
#define EGRESS_MAX_NAME 253
/* How long a name's addresses stay let in: its TTL, but at least the
 * first (the program that asked connects right after the answer, even
 * one with a TTL of 0), at most the second. */
#define EGRESS_MIN_TTL 5
#define EGRESS_MAX_TTL 86400

/* One sandbox's effective policy. Owned by whoever built it
 * (egress_policy_free). */
struct egress_policy {
	int internet;			/* public addresses allowed */
	struct config_list allow;	/* CIDRs (normalised) and names */
	struct config_list deny;
};

/* egress_policy.c */

/* A network object {"allow_out": [...], "deny_out": [...], "internet":
 * bool} as a client or a type gives it, checked: *out its normal form (a
 * new reference: CIDRs masked, names lower case, absent keys absent).
 * -1 with err (400) naming what is wrong. */
int egress_network_check(json_t *network, const char *where, json_t **out,
    struct error *err);
/* The effective policy of a sandbox: the configuration's allow list
 * (SANDBOXD_EGRESS_ALLOW), then the type's lists, then the sandbox's own
 * (each a checked network object or NULL); "internet" is the sandbox's,
 * else the type's, else true. SANDBOXD_EGRESS_DENY is no list's: it is
 * denied above them all. */
void egress_policy_build(struct egress_policy *p, json_t *type_net,
    json_t *own_net);
void egress_policy_free(struct egress_policy *p);
/* What the sandbox's info shows: the lists, internet, the ranges denied
 * by default and the resolver. New reference. */
json_t *egress_policy_json(const struct egress_policy *p);
/* The address ranges every sandbox is denied (the defaults and
 * SANDBOXD_EGRESS_DENY), *n of them. */
const char *const *egress_default_denied(size_t *n);
/* Of them, SANDBOXD_EGRESS_DENY's, which no list opens. */
const char *const *egress_operator_denied(size_t *n);
int egress_config_check(const struct sandboxd_config *cfg, struct error *err);

/* A CIDR or bare address as nft writes it, host bits masked: 4 or 6 by
 * its family, 0 when s is not one. */
int egress_cidr(const char *s, char *out, size_t size);
/* What the resolver does with a name: SANDBOXD_EGRESS_DENY's names
 * refused, then the allow list, then the deny list, then the internet. */
enum egress_verdict {
	EGRESS_REFUSE,			/* REFUSED: denied, or not listed
					 * without the internet */
	EGRESS_PASS,			/* answered; its addresses as the
					 * ranges say */
	EGRESS_ALLOW,			/* answered, its addresses allowed
					 * while their TTL lasts */
};
enum egress_verdict egress_name_verdict(const struct egress_policy *p,
    const char *name);

/* egress_rules.c */

/* The nft commands that make a namespace's table what p says, in one
 * transaction: host lists the host's addresses and the sandbox network's
 * subnets (CIDRs, refused whatever the lists say); keep_names keeps the
 * addresses names resolved to so far (no allowed name was dropped);
 * generation (non-zero) differs from every earlier script's in the
 * namespace.
 * Caller frees. */
char *egress_rules_script(const struct egress_policy *p,
    const char *const *host, size_t nhost, int keep_names,
    unsigned generation);
/* Add addresses (nft's text, each "4 ADDR" or "6 ADDR") to the resolved
 * names' sets for ttl seconds, an address already there renewed. */
char *egress_rules_names(const char *const *addrs, size_t n, int ttl);
/* Whether addr (4 or 16 bytes by family) falls in a range every sandbox
 * is denied; an IPv6 one also as the IPv4-mapped or NAT64 form of a
 * denied IPv4 address, which the rules refuse too. */
int egress_rules_denied(int family, const void *addr);

/* egress.c: one sandbox's enforcement. */

struct egress;
typedef void (*egress_done_cb)(const struct error *err, void *arg);

/* Start the worker and the upstream resolver (SANDBOXD_EGRESS_DNS). */
int egress_init(struct event_base *base, const struct sandboxd_config *cfg,
    struct error *err);
/* Close every sandbox's resolver, stop the worker; no callback runs.
 * Every handle is gone after it. */
void egress_shutdown(void);
/* Police the namespace netns (taken over) with p (copied): the rules in,
 * the resolver listening, then done. The handle is the caller's at once;
 * egress_free drops it, also while an install or change runs (its done
 * then runs from egress_free, with a 409).
 * NULL with err at once when netns is sandboxd's own. */
struct egress *egress_attach(const char *name, int netns,
    const struct egress_policy *p, egress_done_cb done, void *arg,
    struct error *err);
/* Replace the policy (copied), atomically; done once it holds. One
 * change at a time: not while egress_busy. */
void egress_update(struct egress *e, const struct egress_policy *p,
    egress_done_cb done, void *arg);
int egress_busy(const struct egress *e);
/* The resolver closes; the rules go with the namespace. */
void egress_free(struct egress *e);
/* Packets refused and names refused so far (refreshed by
 * egress_refresh_counters). */
uint64_t egress_denied_packets(const struct egress *e);
uint64_t egress_denied_names(const struct egress *e);
/* Read every policed namespace's counter again, in the background. */
void egress_refresh_counters(void);
/* The counters of every policed sandbox, as Prometheus text (what the
 * previous refresh read), and a refresh. */
struct evbuffer;
void egress_metrics(struct evbuffer *b);
/* The host path of the resolv.conf naming the resolver, to be mounted
 * read-only at /etc/resolv.conf of a sandbox with a network. */
const char *egress_resolv_conf(void);

#endif
