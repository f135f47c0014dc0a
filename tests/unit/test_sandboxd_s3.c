/* supervisor/s3_client.c: requests signed as AWS Signature V4 says, checked
 * against AWS's published test vectors (aws-sig-v4-test-suite, as
 * awslabs/aws-c-auth carries it: example.amazonaws.com, region us-east-1,
 * service "service", AKIDEXAMPLE, 20150830T123600Z). libcurl signs; the
 * canonical path and query are ours, so each vector goes through the
 * client whole: s3_perform sends it (through a loopback HTTP proxy, this
 * test's, which keeps the Host header the vector's) and the Authorization
 * header that arrives must be AWS's, byte for byte. Also the key checks of
 * the workspace store (supervisor/oss_manifest.c). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "oss_internal.h"
#include "s3.h"

#define SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define AUTH_HEAD "Authorization: AWS4-HMAC-SHA256 " \
	"Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "

/* The proxy: one request per connection, its head kept. */
struct proxy {
	int fd;
	int port;
	pthread_t thread;
	char head[8192];
};

static void *
proxy_main(void *arg)
{
	struct proxy *p = arg;
	static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
	    "Connection: close\r\n\r\n";

	for (;;) {
		int c = accept(p->fd, NULL, NULL);
		size_t len = 0;
		ssize_t n;

		if (c < 0)
			return NULL;
		while (len + 1 < sizeof p->head && (n = read(c,
		    p->head + len, sizeof p->head - 1 - len)) > 0) {
			len += (size_t)n;
			p->head[len] = '\0';
			if (strstr(p->head, "\r\n\r\n") != NULL)
				break;
		}
		if (write(c, ok, sizeof ok - 1) < 0)
			p->head[0] = '\0';
		close(c);
	}
}

static struct proxy proxy;

static int
setup(void **state)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof sin;
	char url[64];

	(void)state;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	proxy.fd = socket(AF_INET, SOCK_STREAM, 0);
	if (proxy.fd < 0 || bind(proxy.fd, (struct sockaddr *)&sin,
	    sizeof sin) < 0 || listen(proxy.fd, 16) < 0 ||
	    getsockname(proxy.fd, (struct sockaddr *)&sin, &len) < 0)
		return -1;
	proxy.port = ntohs(sin.sin_port);
	pthread_create(&proxy.thread, NULL, proxy_main, &proxy);
	/* libcurl's own: every request of this process goes to the proxy,
	 * which sees it with the vector's host. */
	snprintf(url, sizeof url, "http://127.0.0.1:%d", proxy.port);
	setenv("http_proxy", url, 1);
	unsetenv("no_proxy");
	s3_global_init();
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	shutdown(proxy.fd, SHUT_RDWR);
	close(proxy.fd);
	pthread_join(proxy.thread, NULL);
	s3_global_free();
	return 0;
}

/* The vectors' endpoint: bucket "example" in the host name. */
static struct s3_config vector_config = {
	.scheme = "http", .host = "amazonaws.com", .bucket = "example",
	.region = "us-east-1", .service = "service",
	.access_key = "AKIDEXAMPLE", .secret_key = SECRET, .virtual_host = 1,
};

/* The Authorization header s3_perform sends for one request. */
static void
check(const char *method, const char *key, const struct s3_param *params,
    size_t nparams, const char *extra_header, const char *signed_headers,
    const char *signature)
{
	const char *headers[2] = { "X-Amz-Date: 20150830T123600Z",
	    extra_header };
	char want[512], *got, *eol;
	struct s3_request r;
	struct s3_response resp;
	struct error err;
	struct s3 s3;

	s3_open(&s3, &vector_config, NULL);
	s3_request_init(&r, method);
	r.key = key;
	r.params = params;
	r.nparams = nparams;
	r.headers = headers;
	r.nheaders = extra_header != NULL ? 2 : 1;
	proxy.head[0] = '\0';
	assert_int_equal(s3_perform(&s3, &r, &resp, &err), 0);
	assert_int_equal(resp.status, 200);
	s3_response_free(&resp);
	s3_close(&s3);

	snprintf(want, sizeof want, AUTH_HEAD "SignedHeaders=%s, Signature=%s",
	    signed_headers, signature);
	got = strstr(proxy.head, "Authorization: ");
	assert_non_null(got);
	eol = strstr(got, "\r\n");
	assert_non_null(eol);
	*eol = '\0';
	assert_string_equal(got, want);
	assert_non_null(strstr(proxy.head, "Host: example.amazonaws.com\r\n"));
}

static void
test_get_vanilla(void **state)
{
	(void)state;
	check("GET", "", NULL, 0, NULL, "host;x-amz-date",
	    "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

static void
test_get_vanilla_query_order_key_case(void **state)
{
	const struct s3_param p[] = {
		{ "Param2", "value2" }, { "Param1", "value1" },
	};

	(void)state;
	check("GET", "", p, 2, NULL, "host;x-amz-date",
	    "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
	assert_non_null(strstr(proxy.head,
	    "/?Param1=value1&Param2=value2 HTTP/1.1"));
}

static void
test_get_vanilla_empty_query_key(void **state)
{
	const struct s3_param p[] = { { "Param1", "value1" } };

	(void)state;
	check("GET", "", p, 1, NULL, "host;x-amz-date",
	    "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb");
}

static void
test_get_vanilla_query_unreserved(void **state)
{
	static const char u[] = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "abcdefghijklmnopqrstuvwxyz";
	const struct s3_param p[] = { { u, u } };

	(void)state;
	check("GET", "", p, 1, NULL, "host;x-amz-date",
	    "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197");
}

static void
test_get_vanilla_utf8_query(void **state)
{
	const struct s3_param p[] = { { "\xe1\x88\xb4", "bar" } };

	(void)state;
	check("GET", "", p, 1, NULL, "host;x-amz-date",
	    "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04");
	assert_non_null(strstr(proxy.head, "/?%E1%88%B4=bar HTTP/1.1"));
}

static void
test_get_utf8(void **state)
{
	(void)state;
	check("GET", "\xe1\x88\xb4", NULL, 0, NULL, "host;x-amz-date",
	    "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85");
}

static void
test_get_space_unnormalized(void **state)
{
	(void)state;
	check("GET", "example space/", NULL, 0, NULL, "host;x-amz-date",
	    "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741");
	assert_non_null(strstr(proxy.head, "/example%20space/ HTTP/1.1"));
}

static void
test_get_unreserved(void **state)
{
	(void)state;
	check("GET", "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmn"
	    "opqrstuvwxyz", NULL, 0, NULL, "host;x-amz-date",
	    "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f");
}

static void
test_post_vanilla(void **state)
{
	(void)state;
	check("POST", "", NULL, 0, NULL, "host;x-amz-date",
	    "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b");
}

static void
test_post_header_key_sort(void **state)
{
	(void)state;
	check("POST", "", NULL, 0, "My-Header1: value1",
	    "host;my-header1;x-amz-date",
	    "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c");
}

/* What the vectors do not show and S3 servers want (radosgw refuses the
 * signature otherwise): a key's '/' kept, a value's '/' encoded, every
 * parameter with its '=', path style with the bucket first. */
static void
test_canonical_form(void **state)
{
	struct s3_config path = vector_config;
	const struct s3_param p[] = {
		{ "uploads", "" }, { "prefix", "a b/c+d" }, { "list-type", "2" },
	};
	char *url;

	(void)state;
	path.host = "127.0.0.1:7480";
	path.bucket = "bkt";
	path.virtual_host = 0;
	url = s3_url(&path, "dir/f i+le~\xff", p, 3);
	assert_string_equal(url, "http://127.0.0.1:7480/bkt/dir/f%20i%2Ble~%FF"
	    "?list-type=2&prefix=a%20b%2Fc%2Bd&uploads=");
	free(url);
	url = s3_url(&path, NULL, NULL, 0);
	assert_string_equal(url, "http://127.0.0.1:7480/bkt");
	free(url);
	url = s3_url(&vector_config, NULL, NULL, 0);
	assert_string_equal(url, "http://example.amazonaws.com/");
	free(url);
}

/* Paths from the store: nothing that leaves a workspace. */
static void
test_store_paths(void **state)
{
	(void)state;
	assert_true(oss_valid_path("a"));
	assert_true(oss_valid_path("a/b c/..d/.e"));
	assert_true(oss_valid_path("\xff\x01"));
	assert_false(oss_valid_path(""));
	assert_false(oss_valid_path("/etc/passwd"));
	assert_false(oss_valid_path(".."));
	assert_false(oss_valid_path("../x"));
	assert_false(oss_valid_path("a/../../x"));
	assert_false(oss_valid_path("a/./b"));
	assert_false(oss_valid_path("a//b"));
	assert_false(oss_valid_path("a/"));
	assert_false(oss_valid_path("."));
}

/* Which paths are their own keys, and where the others go. */
static void
test_keys(void **state)
{
	char *k;

	(void)state;
	assert_true(oss_plain_key("p", "src/\xc3\xa9t\xc3\xa9.txt"));
	assert_false(oss_plain_key("p", "bad\xff"));
	assert_false(oss_plain_key("p", "new\nline"));
	k = oss_file_key("ws/1", "a/b");
	assert_string_equal(k, "ws/1/a/b");
	free(k);
	k = oss_file_key("ws/1", "\xff");
	assert_string_equal(k, "ws/1.sandboxd/raw/00594fd4f42ba43fc1ca0427a0576295");
	free(k);
	k = oss_manifest_key("ws/1");
	assert_string_equal(k, "ws/1.sandboxd/manifest.jsonl");
	free(k);
}

/* Multipart from 8 MiB, in 8 MiB parts, fewer than 10000 of them. */
static void
test_part_sizes(void **state)
{
	(void)state;
	assert_int_equal(oss_part_size(0), 0);
	assert_int_equal(oss_part_size((8u << 20) - 1), 0);
	assert_int_equal(oss_part_size(8u << 20), 8u << 20);
	assert_int_equal(oss_part_size(50u << 20), 8u << 20);
	assert_true(oss_part_size((uint64_t)200 << 30) * OSS_MAX_PARTS >=
	    (uint64_t)200 << 30);
	assert_int_equal(oss_part_size((uint64_t)200 << 30) % (1u << 20), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_get_vanilla),
		cmocka_unit_test(test_get_vanilla_query_order_key_case),
		cmocka_unit_test(test_get_vanilla_empty_query_key),
		cmocka_unit_test(test_get_vanilla_query_unreserved),
		cmocka_unit_test(test_get_vanilla_utf8_query),
		cmocka_unit_test(test_get_utf8),
		cmocka_unit_test(test_get_space_unnormalized),
		cmocka_unit_test(test_get_unreserved),
		cmocka_unit_test(test_post_vanilla),
		cmocka_unit_test(test_post_header_key_sort),
		cmocka_unit_test(test_canonical_form),
		cmocka_unit_test(test_store_paths),
		cmocka_unit_test(test_keys),
		cmocka_unit_test(test_part_sizes),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
