/* What sandboxd signs and seals in Redis (shared_crypto.c): the secret's
 * checks, MACs and seals as tests/integration/helpers/redis_sign.py makes them
 * (the vectors below are its output for the same secret), and that a
 * value moved to another key, or changed, does not check. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandboxd.h"
#include "shared_internal.h"

#define SECRET "unit-secret-0123456789abcdef-0123456789abcdef"
#define TOKEN "0123456789abcdef0123456789abcdef"

static int
load(const char *secret, const char *file, struct error *err)
{
	struct sandboxd_config c = { 0 };
	int rc;

	c.redis_secret = secret != NULL ? strdup(secret) : NULL;
	c.redis_secret_file = file != NULL ? strdup(file) : NULL;
	rc = shared_secret_load(&c, err);
	assert_null(c.redis_secret);
	free(c.redis_secret_file);
	return rc;
}

static void
test_secret_checked(void **state)
{
	struct error err;
	char path[] = "/tmp/sbxd-secret-XXXXXX";
	int fd = mkstemp(path);

	(void)state;
	assert_int_equal(load(NULL, NULL, &err), -1);
	assert_non_null(strstr(err.msg, "SANDBOXD_REDIS_SECRET"));
	assert_int_equal(load("too short", NULL, &err), -1);
	assert_non_null(strstr(err.msg, "SANDBOXD_REDIS_SECRET: the secret "
	    "has 9 characters"));
	assert_null(strstr(err.msg, "too short"));
	assert_int_equal(load(SECRET, "/nonexistent", &err), -1);
	assert_non_null(strstr(err.msg, "not both"));
	assert_int_equal(load(NULL, "/nonexistent/secret", &err), -1);
	assert_non_null(strstr(err.msg, "SANDBOXD_REDIS_SECRET_FILE"));
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "short\n", 6), 6);
	close(fd);
	assert_int_equal(load(NULL, path, &err), -1);
	assert_non_null(strstr(err.msg, "SANDBOXD_REDIS_SECRET_FILE: the "
	    "secret has 5 characters"));
	/* The first line only, without its line end: the same keys. */
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, SECRET "\nmore\n", sizeof SECRET + 5),
	    (ssize_t)sizeof SECRET + 5);
	close(fd);
	assert_int_equal(load(NULL, path, &err), 0);
	unlink(path);
}

static void
test_mac_as_redis_sign_makes_it(void **state)
{
	const char *parts[] = { "a", "b" };
	char mac[SHARED_MAC_HEX];
	struct error err;

	(void)state;
	assert_int_equal(load(SECRET, NULL, &err), 0);
	shared_mac(mac, "record", "p:sb:x", parts, 2);
	assert_string_equal(mac, "dccafc490cb620964d2222b4021dfeae794410d5602"
	    "d953dddb05f379bc674cd");
	assert_true(shared_mac_ok(mac, "record", "p:sb:x", parts, 2));
	assert_false(shared_mac_ok(mac, "record", "p:sb:y", parts, 2));
	assert_false(shared_mac_ok(mac, "lease", "p:sb:x", parts, 2));
	/* "a", "b" is not "ab", "": parts are length-prefixed. */
	parts[0] = "ab";
	parts[1] = "";
	assert_false(shared_mac_ok(mac, "record", "p:sb:x", parts, 2));
	assert_false(shared_mac_ok("", "record", "p:sb:x", parts, 2));
}

static void
test_seal(void **state)
{
	/* Sealed by redis_sign.py for key p:sb:x. */
	static const char sealed[] = "072e0028fd4148956fa2b84feae30f07c7149aac"
	    "33352a60460d325e6e73809d474a453aa1e2a2cf4aefb2788333efa7923bbd07b"
	    "dccf1d9e7eb672a";
	char out[TOKEN_HEX_LEN], *mine, *again;
	struct error err;

	(void)state;
	assert_int_equal(load(SECRET, NULL, &err), 0);
	assert_int_equal(shared_unseal(sealed, "p:sb:x", out, sizeof out), 0);
	assert_string_equal(out, TOKEN);
	assert_int_equal(shared_unseal(sealed, "p:sb:y", out, sizeof out), -1);
	mine = shared_seal(TOKEN, "p:sb:x");
	again = shared_seal(TOKEN, "p:sb:x");
	/* A new nonce each time; the token nowhere in it. */
	assert_string_not_equal(mine, again);
	assert_null(strstr(mine, TOKEN));
	assert_int_equal(shared_unseal(mine, "p:sb:x", out, sizeof out), 0);
	assert_string_equal(out, TOKEN);
	mine[30] = mine[30] == '0' ? '1' : '0';
	assert_int_equal(shared_unseal(mine, "p:sb:x", out, sizeof out), -1);
	assert_int_equal(shared_unseal("zz", "p:sb:x", out, sizeof out), -1);
	assert_int_equal(shared_unseal(again, "p:sb:x", out, 8), -1);
	free(mine);
	free(again);
}

static void
test_record_take_release(void **state)
{
	json_t *f = json_object(), *take;
	struct error err;
	char *t, *r;

	(void)state;
	assert_int_equal(load(SECRET, NULL, &err), 0);
	json_object_set_new(f, "agent", json_string("unix:/st/run/x/agent.sock"));
	json_object_set_new(f, "owner", json_string("o"));
	shared_record_sign("p:sb:x", f);
	assert_true(shared_record_signed("p:sb:x", f));
	assert_false(shared_record_signed("p:sb:y", f));
	/* What is not a field of the record is not signed: a take, a
	 * release, "taken". */
	json_object_set_new(f, "taken", json_string("anyone"));
	assert_true(shared_record_signed("p:sb:x", f));
	json_object_set_new(f, "agent", json_string("unix:/var/run/docker.sock"));
	assert_false(shared_record_signed("p:sb:x", f));
	json_decref(f);

	t = shared_take_sign("p:sb:x", "o", "me", "s1", "{}", "1.5");
	take = shared_take_check("p:sb:x", "o", t);
	assert_non_null(take);
	assert_string_equal(json_string_value(json_object_get(take,
	    "session")), "s1");
	json_decref(take);
	assert_null(shared_take_check("p:sb:y", "o", t));
	assert_null(shared_take_check("p:sb:x", "other", t));
	assert_null(shared_take_check("p:sb:x", "o", "{\"session\":\"s1\"}"));
	assert_null(shared_take_check("p:sb:x", "o", ""));
	free(t);

	r = shared_release_sign("p:sb:x", "o", "me");
	assert_true(shared_release_ok("p:sb:x", "o", r));
	assert_false(shared_release_ok("p:sb:y", "o", r));
	assert_false(shared_release_ok("p:sb:x", "other", r));
	assert_false(shared_release_ok("p:sb:x", "o", "1"));
	free(r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_secret_checked),
		cmocka_unit_test(test_mac_as_redis_sign_makes_it),
		cmocka_unit_test(test_seal),
		cmocka_unit_test(test_record_take_release),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
