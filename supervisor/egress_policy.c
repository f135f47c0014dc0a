/*
 * Egress lists: checked where they come in (a create's or a live
 * change's network object, a type's, the configuration's), merged into a
 * sandbox's effective policy, and asked by the resolver about a name.
 * Entries are CIDRs (a bare address is one host) or DNS names; "*." in
 * front of a name means its subdomains, not the name itself.
 */
#include "sandboxd.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "egress.h"
#include "xmalloc.h"

/* Denied to every sandbox unless a list opens them (the host's own
 * addresses and the sandbox network are added per namespace and never
 * opened). IPv4-mapped and NAT64 forms of the IPv4 ranges are added by
 * egress_rules.c. */
static const char *const default_denied[] = {
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8",
	"169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/4",
	"240.0.0.0/4",
	"::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8",
	NULL,
};

static struct config_list denied_all;	/* defaults + SANDBOXD_EGRESS_DENY */
/* SANDBOXD_EGRESS_DENY: its ranges no list opens, its names no resolver
 * answers. */
static struct config_list operator_ranges, operator_names;
static json_t *config_net;		/* SANDBOXD_EGRESS_ALLOW */

int
egress_cidr(const char *s, char *out, size_t size)
{
	unsigned char a[16];
	char addr[INET6_ADDRSTRLEN + 1], text[INET6_ADDRSTRLEN];
	const char *slash = strchr(s, '/');
	size_t alen = slash != NULL ? (size_t)(slash - s) : strlen(s);
	int family, bits, max;
	char *end;

	if (alen == 0 || alen >= sizeof addr)
		return 0;
	memcpy(addr, s, alen);
	addr[alen] = '\0';
	if (inet_pton(AF_INET, addr, a) == 1)
		family = 4, max = 32;
	else if (inet_pton(AF_INET6, addr, a) == 1)
		family = 6, max = 128;
	else
		return 0;
	bits = max;
	if (slash != NULL) {
		long v;

		if (!isdigit((unsigned char)slash[1]))
			return 0;
		v = strtol(slash + 1, &end, 10);
		if (*end != '\0' || v < 0 || v > max)
			return 0;
		bits = (int)v;
	}
	for (int i = 0; i < max / 8; i++) {
		int keep = bits - i * 8;

		a[i] &= keep >= 8 ? 0xff : keep <= 0 ? 0 :
		    (unsigned char)(0xff << (8 - keep));
	}
	inet_ntop(family == 4 ? AF_INET : AF_INET6, a, text, sizeof text);
	snprintf(out, size, "%s/%d", text, bits);
	return family;
}

/* A DNS name: labels of letters, digits, '-' and '_', 1 to 63 bytes, at
 * most 253 in all; "*." may stand before. */
static int
name_valid(const char *s)
{
	size_t n = strlen(s), label = 0;

	if (strncmp(s, "*.", 2) == 0)
		s += 2, n -= 2;
	if (n == 0 || n > EGRESS_MAX_NAME || s[0] == '.' || s[n - 1] == '.')
		return 0;
	for (; *s != '\0'; s++) {
		if (*s == '.') {
			if (label == 0)
				return 0;
			label = 0;
		} else if (isalnum((unsigned char)*s) || *s == '-' ||
		    *s == '_') {
			if (++label > 63)
				return 0;
		} else {
			return 0;
		}
	}
	return 1;
}

static int
check_list(json_t *net, const char *key, const char *where, json_t *out,
    struct error *err)
{
	json_t *list = json_object_get(net, key), *norm, *v;
	size_t i;

	if (list == NULL || json_is_null(list))
		return 0;
	if (!json_is_array(list)) {
		error_set(err, 400, "%s.%s must be a list of CIDRs and names",
		    where, key);
		return -1;
	}
	if (json_array_size(list) > EGRESS_MAX_ENTRIES) {
		error_set(err, 400, "%s.%s: at most %d entries", where, key,
		    EGRESS_MAX_ENTRIES);
		return -1;
	}
	norm = json_array();
	json_array_foreach(list, i, v) {
		const char *s = json_string_value(v);
		char cidr[INET6_ADDRSTRLEN + 8], name[EGRESS_MAX_NAME + 3];

		if (s != NULL && egress_cidr(s, cidr, sizeof cidr) != 0) {
			json_array_append_new(norm, json_string(cidr));
		} else if (s != NULL && strlen(s) < sizeof name &&
		    name_valid(s)) {
			size_t k = 0;

			for (; s[k] != '\0'; k++)
				name[k] = (char)tolower((unsigned char)s[k]);
			name[k] = '\0';
			json_array_append_new(norm, json_string(name));
		} else {
			error_set(err, 400, "%s.%s: '%.64s' is neither a CIDR nor "
			    "a DNS name", where, key, s != NULL ? s : "?");
			json_decref(norm);
			return -1;
		}
	}
	json_object_set_new(out, key, norm);
	return 0;
}

int
egress_network_check(json_t *network, const char *where, json_t **out,
    struct error *err)
{
	const char *k;
	json_t *v, *norm;

	*out = NULL;
	if (!json_is_object(network)) {
		error_set(err, 400, "%s must be an object {\"allow_out\": [...], "
		    "\"deny_out\": [...], \"internet\": bool}", where);
		return -1;
	}
	json_object_foreach(network, k, v) {
		if (strcmp(k, "allow_out") != 0 && strcmp(k, "deny_out") != 0 &&
		    strcmp(k, "internet") != 0) {
			error_set(err, 400, "%s: unknown key '%.64s' (allow_out, "
			    "deny_out, internet)", where, k);
			return -1;
		}
	}
	norm = json_object();
	v = json_object_get(network, "internet");
	if (v != NULL && !json_is_null(v)) {
		if (!json_is_boolean(v)) {
			error_set(err, 400, "%s.internet must be a boolean", where);
			json_decref(norm);
			return -1;
		}
		json_object_set(norm, "internet", v);
	}
	if (check_list(network, "allow_out", where, norm, err) < 0 ||
	    check_list(network, "deny_out", where, norm, err) < 0) {
		json_decref(norm);
		return -1;
	}
	*out = norm;
	return 0;
}

static void
add_list(struct config_list *l, json_t *net, const char *key)
{
	json_t *v;
	size_t i;

	json_array_foreach(json_object_get(net, key), i, v) {
		size_t j = 0;

		while (j < l->n && strcmp(l->v[j], json_string_value(v)) != 0)
			j++;
		if (j == l->n)
			config_list_add(l, json_string_value(v));
	}
}

void
egress_policy_build(struct egress_policy *p, json_t *type_net,
    json_t *own_net)
{
	json_t *nets[] = { config_net, type_net, own_net };

	memset(p, 0, sizeof *p);
	p->internet = 1;
	for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++) {
		json_t *v = json_object_get(nets[i], "internet");

		if (json_is_boolean(v))
			p->internet = json_is_true(v);
		add_list(&p->allow, nets[i], "allow_out");
		add_list(&p->deny, nets[i], "deny_out");
	}
}

void
egress_policy_free(struct egress_policy *p)
{
	config_list_free(&p->allow);
	config_list_free(&p->deny);
}

static json_t *
list_json(const struct config_list *l)
{
	json_t *a = json_array();

	for (size_t i = 0; i < l->n; i++)
		json_array_append_new(a, json_string(l->v[i]));
	return a;
}

json_t *
egress_policy_json(const struct egress_policy *p)
{
	return json_pack("{s:b,s:o,s:o,s:o,s:s}", "internet", p->internet,
	    "allow_out", list_json(&p->allow), "deny_out", list_json(&p->deny),
	    "denied_by_default", list_json(&denied_all), "resolver",
	    EGRESS_RESOLVER);
}

const char *const *
egress_default_denied(size_t *n)
{
	*n = denied_all.n;
	return (const char *const *)denied_all.v;
}

const char *const *
egress_operator_denied(size_t *n)
{
	*n = operator_ranges.n;
	return (const char *const *)operator_ranges.v;
}

/* A comma list of the configuration as a checked network object. */
static int
config_list_json(const char *text, const char *key, const char *setting,
    json_t *net, struct error *err)
{
	struct config_list l = { 0 };
	json_t *a, *wrap, *norm;
	int rc;

	if (text == NULL || *text == '\0')
		return 0;
	config_list_split(text, &l);
	a = json_array();
	for (size_t i = 0; i < l.n; i++)
		json_array_append_new(a, json_string(l.v[i]));
	config_list_free(&l);
	wrap = json_pack("{s:o}", key, a);
	rc = egress_network_check(wrap, setting, &norm, err);
	json_decref(wrap);
	if (rc == 0) {
		json_object_update(net, norm);
		json_decref(norm);
	}
	return rc;
}

int
egress_config_check(const struct sandboxd_config *cfg, struct error *err)
{
	json_t *net = json_object(), *v;
	size_t i;

	config_list_free(&denied_all);
	config_list_free(&operator_ranges);
	config_list_free(&operator_names);
	json_decref(config_net);
	config_net = NULL;
	for (i = 0; default_denied[i] != NULL; i++)
		config_list_add(&denied_all, default_denied[i]);
	if (config_list_json(cfg->egress_allow, "allow_out",
	    "SANDBOXD_EGRESS_ALLOW", net, err) < 0 ||
	    config_list_json(cfg->egress_deny, "deny_out",
	    "SANDBOXD_EGRESS_DENY", net, err) < 0) {
		json_decref(net);
		return -1;
	}
	json_array_foreach(json_object_get(net, "deny_out"), i, v) {
		char cidr[INET6_ADDRSTRLEN + 8];

		if (egress_cidr(json_string_value(v), cidr, sizeof cidr) != 0) {
			config_list_add(&denied_all, cidr);
			config_list_add(&operator_ranges, cidr);
		} else {
			config_list_add(&operator_names, json_string_value(v));
		}
	}
	json_object_del(net, "deny_out");
	config_net = net;
	return 0;
}

/* name is pattern, or under it for "*.pattern". */
static int
name_matches(const char *pattern, const char *name)
{
	size_t pn, nn = strlen(name);

	if (strncmp(pattern, "*.", 2) != 0)
		return strcmp(pattern, name) == 0;
	pn = strlen(pattern + 1);	/* ".example.com" */
	return nn > pn && strcmp(name + nn - pn, pattern + 1) == 0;
}

static int
list_has_name(const struct config_list *l, const char *name)
{
	char cidr[INET6_ADDRSTRLEN + 8];

	for (size_t i = 0; i < l->n; i++) {
		if (egress_cidr(l->v[i], cidr, sizeof cidr) == 0 &&
		    name_matches(l->v[i], name))
			return 1;
	}
	return 0;
}

enum egress_verdict
egress_name_verdict(const struct egress_policy *p, const char *name)
{
	/* The lists' allow before their deny, as for addresses; the
	 * operator's deny before all. */
	if (list_has_name(&operator_names, name))
		return EGRESS_REFUSE;
	if (list_has_name(&p->allow, name))
		return EGRESS_ALLOW;
	if (list_has_name(&p->deny, name))
		return EGRESS_REFUSE;
	/* Without the internet an unlisted name is not even asked
	 * upstream: its query would carry data out. */
	return p->internet ? EGRESS_PASS : EGRESS_REFUSE;
}
