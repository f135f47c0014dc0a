/* sandboxd's host port allocator: never the same port twice, ports come
 * back on release, ports some other program listens on are skipped. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandboxd.h"

/* Above Linux's default ephemeral range, so no client socket sits there. */
#define LO 62100
#define HI 62115

static void
test_all_distinct_then_exhausted(void **state)
{
	struct ports *p = ports_new(LO, HI);
	int seen[HI - LO + 1] = { 0 }, n = 0, port;
	struct error err;

	(void)state;
	while ((port = ports_alloc(p, &err)) > 0) {
		assert_in_range(port, LO, HI);
		assert_int_equal(seen[port - LO], 0);
		seen[port - LO] = 1;
		n++;
	}
	assert_int_equal(port, -1);
	assert_int_equal(err.status, 503);
	assert_non_null(strstr(err.msg, "PORT_RANGE"));
	assert_int_equal((size_t)n, ports_in_use(p));
	assert_true(n > 0);
	ports_free(p);
}

static void
test_release_returns_the_port(void **state)
{
	struct ports *p = ports_new(LO, LO + 1);
	struct error err;
	int a, b, c;

	(void)state;
	a = ports_alloc(p, &err);
	b = ports_alloc(p, &err);
	assert_true(a > 0 && b > 0);
	assert_int_not_equal(a, b);
	assert_int_equal(ports_alloc(p, &err), -1);
	ports_release(p, a);
	assert_int_equal(ports_in_use(p), 1);
	c = ports_alloc(p, &err);
	assert_int_equal(c, a);
	/* Releasing twice or out of range changes nothing. */
	ports_release(p, b);
	ports_release(p, b);
	ports_release(p, 80);
	assert_int_equal(ports_in_use(p), 1);
	ports_free(p);
}

static void
test_round_robin(void **state)
{
	struct ports *p = ports_new(LO, HI);
	struct error err;
	int a, b;

	(void)state;
	a = ports_alloc(p, &err);
	assert_true(a > 0);
	ports_release(p, a);
	/* The port just freed is not handed out again right away. */
	b = ports_alloc(p, &err);
	assert_true(b > 0);
	assert_int_not_equal(a, b);
	ports_free(p);
}

static void
test_reserve(void **state)
{
	struct ports *p = ports_new(LO, HI);
	struct error err;
	int port;

	(void)state;
	assert_int_equal(ports_reserve(p, LO + 3), 0);
	assert_int_equal(ports_reserve(p, LO + 3), -1);
	assert_int_equal(ports_reserve(p, HI + 1), -1);
	assert_int_equal(ports_reserve(p, LO - 1), -1);
	while ((port = ports_alloc(p, &err)) > 0)
		assert_int_not_equal(port, LO + 3);
	ports_free(p);
}

static void
test_skips_ports_in_use(void **state)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct ports *p;
	struct error err;
	int fd, port, busy = LO + 5;

	(void)state;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	sin.sin_port = htons(busy);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
	assert_int_equal(listen(fd, 1), 0);
	p = ports_new(LO, HI);
	while ((port = ports_alloc(p, &err)) > 0)
		assert_int_not_equal(port, busy);
	assert_true(ports_in_use(p) < ports_capacity(p));
	ports_free(p);
	close(fd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_all_distinct_then_exhausted),
		cmocka_unit_test(test_release_returns_the_port),
		cmocka_unit_test(test_round_robin),
		cmocka_unit_test(test_reserve),
		cmocka_unit_test(test_skips_ports_in_use),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
