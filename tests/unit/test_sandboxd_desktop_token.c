/* The tokens of desktop links (supervisor/desktop_token.c): HMAC-SHA256
 * keyed with the sandbox's token, one per access, as any other
 * implementation computes them (the values below are Python's hmac);
 * what each opens, and the links that carry them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sandboxd.h"
#include "xmalloc.h"

struct sandboxd sd;

#define TOKEN "0123456789abcdef0123456789abcdef"
/* hmac.new(TOKEN, label, sha256).hexdigest()[:32] */
#define VIEW "55b9bf04c8df4464d9813a9df1346082"
#define INTERACTIVE "1c7706f5c329e10418d88b3ce046f03e"

static struct sandbox *
sandbox(void)
{
	struct sandbox *sb;

	sd.cfg.prefix = "sandboxd-";
	sd.cfg.host = "127.0.0.1";
	sd.cfg.port = 8000;
	sandbox_types_init(NULL, NULL, NULL);
	sb = sandbox_new(sandbox_types_find("gui"));
	memcpy(sb->token, TOKEN, sizeof TOKEN);
	return sb;
}

static void
test_tokens_are_the_hmac_of_the_sandboxs_token(void **state)
{
	struct sandbox *sb = sandbox();
	char t[TOKEN_HEX_LEN];

	(void)state;
	desktop_token(sb, DESKTOP_VIEW, t);
	assert_string_equal(t, VIEW);
	desktop_token(sb, DESKTOP_INTERACTIVE, t);
	assert_string_equal(t, INTERACTIVE);
	sandbox_free_all();
	sandbox_types_free();
}

static void
test_each_token_opens_its_access_and_nothing_else_does(void **state)
{
	struct sandbox *sb = sandbox();

	(void)state;
	assert_int_equal(desktop_token_check(sb, VIEW), DESKTOP_VIEW);
	assert_int_equal(desktop_token_check(sb, INTERACTIVE),
	    DESKTOP_INTERACTIVE);
	assert_int_equal(desktop_token_check(sb, TOKEN), DESKTOP_DENIED);
	assert_int_equal(desktop_token_check(sb, NULL), DESKTOP_DENIED);
	assert_int_equal(desktop_token_check(sb, ""), DESKTOP_DENIED);
	assert_int_equal(desktop_token_check(sb, VIEW "0"), DESKTOP_DENIED);
	assert_int_equal(desktop_token_check(sb, "55b9bf04c8df4464"),
	    DESKTOP_DENIED);
	assert_int_equal(desktop_token_check(sb,
	    "55B9BF04C8DF4464D9813A9DF1346082"), DESKTOP_DENIED);
	sandbox_free_all();
	sandbox_types_free();
}

static void
test_links_carry_the_desktop_tokens_on_our_address(void **state)
{
	struct sandbox *sb = sandbox();
	char *url, *want;
	json_t *m;

	(void)state;
	url = desktop_url(sb, DESKTOP_INTERACTIVE);
	want = xasprintf("http://127.0.0.1:8000/desktop/%s/vnc/"
	    "vnc_relay.html?password=" INTERACTIVE, sb->name);
	assert_string_equal(url, want);
	free(url);
	free(want);
	sd.cfg.public_url = "https://sandboxes.example";
	url = desktop_url(sb, DESKTOP_VIEW);
	want = xasprintf("https://sandboxes.example/desktop/%s/vnc/"
	    "vnc_relay.html?password=" VIEW "&view_only=true", sb->name);
	assert_string_equal(url, want);
	free(url);
	free(want);
	sd.cfg.public_url = NULL;
	/* In the model of a desktop type, never the sandbox's token. */
	m = sandbox_model(sb);
	assert_non_null(strstr(json_string_value(json_object_get(m,
	    "desktop_url")), INTERACTIVE));
	assert_non_null(strstr(json_string_value(json_object_get(m,
	    "desktop_view_url")), VIEW));
	assert_null(strstr(json_string_value(json_object_get(m,
	    "desktop_url")), TOKEN));
	json_decref(m);
	sb->type = sandbox_types_find("base");
	m = sandbox_model(sb);
	assert_null(json_object_get(m, "desktop_url"));
	json_decref(m);
	sandbox_free_all();
	sandbox_types_free();
}

/* A type of one's own says whether its image serves a desktop. */
static void
test_a_types_file_says_which_types_have_a_desktop(void **state)
{
	json_t *def = json_loads("{\"types\": {\"kiosk\": {\"from\": "
	    "\"minimal\", \"desktop\": true}, \"copy\": {\"from\": "
	    "\"gui\"}}}", 0, NULL);
	json_t *bad = json_loads("{\"types\": {\"x\": {\"desktop\": "
	    "\"yes\"}}}", 0, NULL);
	struct error err = { 0 };

	(void)state;
	sandbox_types_init(NULL, NULL, NULL);
	assert_int_equal(sandbox_types_load_json(def, "T", NULL, NULL, NULL,
	    &err), 0);
	assert_true(sandbox_types_find("kiosk")->desktop);
	assert_true(sandbox_types_find("copy")->desktop);
	assert_false(sandbox_types_find("minimal")->desktop);
	assert_int_equal(sandbox_types_load_json(bad, "T", NULL, NULL, NULL,
	    &err), -1);
	assert_string_equal(err.msg, "T: type x: desktop: expected true or "
	    "false");
	json_decref(def);
	json_decref(bad);
	sandbox_types_free();
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tokens_are_the_hmac_of_the_sandboxs_token),
		cmocka_unit_test(
		    test_each_token_opens_its_access_and_nothing_else_does),
		cmocka_unit_test(
		    test_links_carry_the_desktop_tokens_on_our_address),
		cmocka_unit_test(
		    test_a_types_file_says_which_types_have_a_desktop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
