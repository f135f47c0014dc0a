/* Egress lists and rules (egress_policy.c, egress_rules.c): what a client
 * may write in a network object and its normal form, how the
 * configuration's, the type's and the sandbox's lists merge, which names
 * the resolver answers, which addresses it never lets in, and the nft
 * commands (the integration test runs them in a real namespace). */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sandboxd.h"
#include "egress.h"

/* The process-wide state the archive's modules name. */
struct sandboxd sd;

static json_t *
checked(const char *text, struct error *err)
{
	json_t *in = json_loads(text, 0, NULL), *out = NULL;

	assert_non_null(in);
	egress_network_check(in, "network", &out, err);
	json_decref(in);
	return out;
}

static void
test_network_objects(void **state)
{
	struct error err;
	json_t *n;
	char *s;

	(void)state;
	n = checked("{\"allow_out\": [\"10.1.2.3/8\", \"Mirror.Example.COM\", "
	    "\"*.pypi.org\", \"2001:db8::1\"], \"internet\": false}", &err);
	assert_non_null(n);
	s = json_dumps(n, JSON_SORT_KEYS | JSON_COMPACT);
	assert_string_equal(s, "{\"allow_out\":[\"10.0.0.0/8\","
	    "\"mirror.example.com\",\"*.pypi.org\",\"2001:db8::1/128\"],"
	    "\"internet\":false}");
	free(s);
	json_decref(n);
	static const char *const bad[] = {
		"[]", "{\"rules\": {}}", "{\"internet\": \"no\"}",
		"{\"allow_out\": \"10.0.0.0/8\"}", "{\"allow_out\": [1]}",
		"{\"deny_out\": [\"10.0.0.0/33\"]}", "{\"deny_out\": [\"a..b\"]}",
		"{\"deny_out\": [\"-/8\"]}", "{\"allow_out\": [\"a b\"]}",
		"{\"allow_out\": [\"*.\"]}", "{\"allow_out\": [\"x.\"]}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		err.status = 0;
		n = checked(bad[i], &err);
		assert_null(n);
		assert_int_equal(err.status, 400);
	}
}

static void
test_merge_and_names(void **state)
{
	struct sandboxd_config cfg = { 0 };
	struct egress_policy p;
	struct error err;
	json_t *type, *own;

	(void)state;
	cfg.egress_allow = "mirror.internal, 10.8.0.0/16";
	cfg.egress_deny = "198.18.0.0/15, evil.example";
	assert_int_equal(egress_config_check(&cfg, &err), 0);
	type = checked("{\"allow_out\": [\"*.pypi.org\"], \"internet\": false}",
	    &err);
	own = checked("{\"allow_out\": [\"api.example.com\", \"evil.example\"], "
	    "\"deny_out\": [\"*.pypi.org\", \"ads.example.com\"], "
	    "\"internet\": true}", &err);
	egress_policy_build(&p, type, own);
	assert_true(p.internet);
	assert_int_equal(p.allow.n, 5);
	/* An allow list wins over a deny list (E2B's allowOut over denyOut),
	 * the operator's deny over both. */
	assert_int_equal(egress_name_verdict(&p, "files.pypi.org"),
	    EGRESS_ALLOW);
	assert_int_equal(egress_name_verdict(&p, "ads.example.com"),
	    EGRESS_REFUSE);
	assert_int_equal(egress_name_verdict(&p, "evil.example"),
	    EGRESS_REFUSE);
	assert_int_equal(egress_name_verdict(&p, "x.pypi.org"), EGRESS_ALLOW);
	/* "*." is the subdomains, not the name. */
	assert_int_equal(egress_name_verdict(&p, "pypi.org"), EGRESS_PASS);
	assert_int_equal(egress_name_verdict(&p, "mirror.internal"),
	    EGRESS_ALLOW);
	egress_policy_free(&p);
	egress_policy_build(&p, type, NULL);
	assert_false(p.internet);
	assert_int_equal(egress_name_verdict(&p, "example.org"),
	    EGRESS_REFUSE);
	egress_policy_free(&p);
	json_decref(type);
	json_decref(own);
	/* The operator's ranges are denied to all, like the defaults. */
	{
		size_t n;
		const char *const *d = egress_default_denied(&n);
		int found = 0;

		for (size_t i = 0; i < n; i++)
			found |= strcmp(d[i], "198.18.0.0/15") == 0;
		assert_true(found);
	}
	cfg.egress_deny = "not a range";
	assert_int_equal(egress_config_check(&cfg, &err), -1);
	assert_non_null(strstr(err.msg, "SANDBOXD_EGRESS_DENY"));
}

static void
test_denied_addresses(void **state)
{
	static const struct {
		int family;
		const char *addr;
		int denied;
	} cases[] = {
		{ 4, "10.99.0.10", 1 }, { 4, "169.254.169.254", 1 },
		{ 4, "100.100.100.200", 1 }, { 4, "172.31.255.255", 1 },
		{ 4, "172.32.0.1", 0 }, { 4, "127.0.0.53", 1 },
		{ 4, "198.51.100.10", 0 }, { 4, "8.8.8.8", 0 },
		{ 4, "255.255.255.255", 1 }, { 6, "::1", 1 },
		{ 6, "fd00:ec2::254", 1 }, { 6, "fe80::1", 1 },
		{ 6, "2001:db8::1", 0 },
		/* A denied IPv4 address in its IPv4-mapped and NAT64 forms (a
		 * hostile AAAA answer: NAT64 would carry it there). */
		{ 6, "::ffff:169.254.169.254", 1 }, { 6, "64:ff9b::a9fe:a9fe", 1 },
		{ 6, "64:ff9b::10.1.2.3", 1 }, { 6, "64:ff9b::198.51.100.10", 0 },
		{ 6, "::ffff:198.51.100.10", 0 },
	};
	struct sandboxd_config cfg = { 0 };
	struct error err;

	(void)state;
	assert_int_equal(egress_config_check(&cfg, &err), 0);
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		unsigned char a[16];

		inet_pton(cases[i].family == 4 ? AF_INET : AF_INET6,
		    cases[i].addr, a);
		assert_int_equal(egress_rules_denied(cases[i].family, a),
		    cases[i].denied);
	}
}

static void
test_script(void **state)
{
	struct sandboxd_config cfg = { 0 };
	const char *host[] = { "192.0.2.2/32", "10.254.3.0/24" };
	const char *addrs[] = { "4 203.0.113.10", "6 2001:db8::1" };
	struct egress_policy p;
	struct error err;
	json_t *own;
	char *s;

	(void)state;
	assert_int_equal(egress_config_check(&cfg, &err), 0);
	own = checked("{\"allow_out\": [\"10.99.0.0/16\", \"a.test\"], "
	    "\"deny_out\": [\"203.0.113.10\"], \"internet\": false}", &err);
	egress_policy_build(&p, NULL, own);
	s = egress_rules_script(&p, host, 2, 1, 7);
	assert_non_null(strstr(s, "add element inet sandboxd host4 { "
	    "192.0.2.2/32, 10.254.3.0/24 }"));
	/* IPv4-mapped and NAT64 forms, as nft's parser takes them. */
	assert_non_null(strstr(s, "::ffff:192.0.2.2/128, 64:ff9b::c000:202/128"));
	assert_non_null(strstr(s, "block4 { 203.0.113.10/32 }"));
	assert_non_null(strstr(s, "allow4 { 10.99.0.0/16 }"));
	assert_null(strstr(s, "a.test"));
	/* Names kept across the change: no flush of their sets. */
	assert_null(strstr(s, "flush set inet sandboxd names4"));
	/* Without the internet the chain ends refusing. */
	assert_non_null(strstr(s, "add rule inet sandboxd out goto refuse\n"));
	/* Allowed ranges and names before the denied ranges. */
	assert_true(strstr(s, "@allow4 ct mark") < strstr(s, "@block4 goto") &&
	    strstr(s, "@names4 ct mark") < strstr(s, "@block4 goto"));
	/* What passed is marked with the generation, and passes on it. */
	assert_non_null(strstr(s, "out ct mark 7 accept\n"));
	assert_non_null(strstr(s, "@allow4 ct mark set 7 accept\n"));
	free(s);
	egress_policy_free(&p);
	json_decref(own);
	s = egress_rules_names(addrs, 2, 0);
	/* A TTL of 0 still leaves time to connect. */
	assert_string_equal(s,
	    "add element inet sandboxd names4 { 203.0.113.10 timeout 5s }\n"
	    "delete element inet sandboxd names4 { 203.0.113.10 }\n"
	    "add element inet sandboxd names4 { 203.0.113.10 timeout 5s }\n"
	    "add element inet sandboxd names6 { 2001:db8::1 timeout 5s }\n"
	    "delete element inet sandboxd names6 { 2001:db8::1 }\n"
	    "add element inet sandboxd names6 { 2001:db8::1 timeout 5s }\n");
	free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_network_objects),
		cmocka_unit_test(test_merge_and_names),
		cmocka_unit_test(test_denied_addresses),
		cmocka_unit_test(test_script),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
