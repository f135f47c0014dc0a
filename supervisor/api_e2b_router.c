/*
 * E2B's sandbox traffic (spec/e2b-wire.md 1.3), where
 * E2B_SANDBOX_URL=http://HOST:PORT points the SDKs: every envd and code
 * interpreter request names its sandbox and port only in the
 * E2b-Sandbox-Id and E2b-Sandbox-Port headers, so any request carrying
 * E2b-Sandbox-Id comes here before sandboxd's own routes, whatever its
 * path (/health exists on both ports: the port header decides). Port
 * 49983 goes to the agent's /envd + path, 49999 to its /ci + path,
 * through the streaming proxy (Connect streams and the code
 * interpreter's JSON lines pass as they come).
 *
 * Unknown, released or paused sandbox: 502 with E2B's Error body, which
 * the SDK reads as "sandbox gone" (isRunning false, TimeoutError), as
 * E2B's own proxy answers. A secure sandbox's traffic needs its access
 * token: X-Access-Token on either port, on 49999 also the traffic token
 * (the code interpreter sends X-Access-Token on /execute only), on /files
 * also a URL signature (spec section 4); envd's /health needs none, as
 * in envd. The tokens are sandboxd's to check and go no further; the
 * SDK's Authorization (Basic, naming the user) reaches envd as
 * E2b-Authorization, the agent's own token taking its place.
 *
 * GET and POST /files without E2b-Sandbox-Id: the SDK's uploadUrl() and
 * downloadUrl() give such URLs, signed, to be fetched without headers;
 * the sandbox is the one whose token makes the signature.
 */
#include "api_e2b.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <nettle/base64.h>
#include <nettle/sha2.h>

#include "log.h"
#include "shared.h"
#include "xmalloc.h"

#define ENVD_PORT	"49983"
#define CI_PORT		"49999"
#define SIGNATURE_MAX	128

/* What the sandbox never sees: the tokens sandboxd checks, the routing,
 * and a user header of the client's own making. */
static const char *const dropped[] = {
	"X-Access-Token", "E2B-Traffic-Access-Token", "E2b-Sandbox-Id",
	"E2b-Sandbox-Port", "E2b-Authorization", "X-API-Key", NULL,
};

/* An id or port fit to repeat in an answer (the client's own words, said
 * before any check): letters, digits, - _ . and bounded. */
static int
printable_id(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && n <= E2B_ID_MAX && strspn(s, "abcdefghijklmnopqrstuvwxyz"
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == n;
}

static void
reply_gone(struct http_request *req, const char *id)
{
	if (printable_id(id))
		api_e2b_reply_error(req, 502, "sandbox %s not found", id);
	else
		api_e2b_reply_error(req, 502, "sandbox not found");
}

static int
token_is(const char *presented, const struct sandbox *sb,
    enum api_e2b_token which)
{
	char want[E2B_TOKEN_HEX];
	int ok;

	if (presented == NULL)
		return 0;
	api_e2b_token(sb, which, want);
	ok = http_token_equal(presented, want);
	explicit_bzero(want, sizeof want);
	return ok;
}

/* "v1_" + base64(sha256("<path>:<read|write>:<user>:<token>[:<exp>]")),
 * padding dropped: the SDK's signature of a /files URL (spec section 4).
 * 0 when the request's signature is sb's and not expired. */
static int
signature_is(struct http_request *req, const struct sandbox *sb)
{
	const char *sig = http_request_query(req, "signature");
	const char *exp = http_request_query(req, "signature_expiration");
	const char *path = http_request_query(req, "path");
	const char *user = http_request_query(req, "username");
	char token[E2B_TOKEN_HEX], *raw;
	uint8_t digest[SHA256_DIGEST_SIZE];
	char want[4 + BASE64_ENCODE_RAW_LENGTH(SHA256_DIGEST_SIZE)];
	struct sha256_ctx ctx;
	size_t n;
	int ok;

	if (sig == NULL || strlen(sig) > SIGNATURE_MAX)
		return 0;
	if (exp != NULL) {
		char *end;
		double at = strtod(exp, &end);

		if (end == exp || *end != '\0' || at < timing_wall())
			return 0;
	}
	api_e2b_token(sb, E2B_TOKEN_ENVD, token);
	raw = xasprintf("%s:%s:%s:%s%s%s", path != NULL ? path : "",
	    http_request_method(req) == HTTP_METHOD_GET ? "read" : "write",
	    user != NULL ? user : "", token, exp != NULL ? ":" : "",
	    exp != NULL ? exp : "");
	sha256_init(&ctx);
	sha256_update(&ctx, strlen(raw), (const uint8_t *)raw);
	sha256_digest(&ctx, sizeof digest, digest);
	memcpy(want, "v1_", 3);
	base64_encode_raw(want + 3, sizeof digest, digest);
	n = 3 + BASE64_ENCODE_RAW_LENGTH(sizeof digest);
	while (n > 3 && want[n - 1] == '=')
		n--;
	want[n] = '\0';
	ok = http_token_equal(sig, want);
	explicit_bzero(raw, strlen(raw));
	explicit_bzero(token, sizeof token);
	free(raw);
	return ok;
}

static int
authorized(struct http_request *req, const struct sandbox *sb, int ci)
{
	const char *path = http_request_path(req);

	if (!api_e2b_secure(sb))
		return 1;
	if (!ci && strcmp(path, "/health") == 0)
		return 1;
	if (token_is(http_request_header(req, "X-Access-Token"), sb,
	    E2B_TOKEN_ENVD))
		return 1;
	if (ci && token_is(http_request_header(req,
	    "E2B-Traffic-Access-Token"), sb, E2B_TOKEN_TRAFFIC))
		return 1;
	return !ci && strcmp(path, "/files") == 0 && signature_is(req, sb);
}

/* A path with a "." or ".." part is refused: nothing between here and
 * the agent resolves them, and nothing should have to. */
static int
dot_segments(const char *path)
{
	for (const char *p = path; (p = strchr(p, '/')) != NULL; ) {
		size_t n = strcspn(++p, "/");

		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' &&
		    p[1] == '.'))
			return 1;
	}
	return 0;
}

/* To the agent, with sb checked and the port's prefix. */
static void
forward(struct http_request *req, struct sandbox *sb, const char *prefix)
{
	const char *auth = http_request_header(req, "Authorization");
	const char *add[2] = { NULL, NULL };
	struct proxy_headers h = { dropped, add };
	char *target, *user = NULL;

	if (sb->state == SB_PAUSED) {
		api_e2b_reply_error(req, 502, "sandbox %s is paused: connect to "
		    "it to resume it", sb->name);
		return;
	}
	if (sandbox_check_callable(sb, &(struct error){ 0 }) < 0) {
		api_e2b_reply_error(req, 502, "sandbox %s is %s", sb->name,
		    sandbox_state_name(sb->state));
		return;
	}
	if (dot_segments(http_request_path(req))) {
		api_e2b_reply_error(req, 400, "a path with . or .. parts");
		return;
	}
	/* The user, never a credential of ours, goes on. */
	if (auth != NULL) {
		if (strncasecmp(auth, "Basic ", 6) != 0) {
			api_e2b_reply_error(req, 401, "Authorization must be "
			    "Basic base64(user:)");
			return;
		}
		add[0] = user = xasprintf("E2b-Authorization: %s", auth);
	}
	target = xasprintf("%s%s", prefix, http_request_raw_target(req));
	proxy_forward_with(req, sb, target, &h);
	free(target);
	free(user);
}

static void
route(struct http_request *req, struct sandbox *sb)
{
	const char *id = http_request_header(req, "E2b-Sandbox-Id");
	const char *port = http_request_header(req, "E2b-Sandbox-Port");
	int ci;

	if (sb == NULL) {
		reply_gone(req, id);
		return;
	}
	if (port == NULL || (strcmp(port, ENVD_PORT) != 0 &&
	    strcmp(port, CI_PORT) != 0)) {
		api_e2b_reply_error(req, 502, "port %s of sandbox %s is not "
		    "open: " ENVD_PORT " is envd, " CI_PORT " the code "
		    "interpreter", port != NULL && strlen(port) <= 5 &&
		    strspn(port, "0123456789") == strlen(port) ? port : "?",
		    sb->name);
		return;
	}
	ci = strcmp(port, CI_PORT) == 0;
	if (!authorized(req, sb, ci)) {
		api_e2b_reply_error(req, 401, "a valid access token is required "
		    "(X-Access-Token)");
		return;
	}
	forward(req, sb, ci ? "/ci" : "/envd");
}

/* A sandbox this instance may not have heard of yet: the body waits
 * while Redis is asked. */
static void
looked_up_cb(void *arg, int ok)
{
	struct http_request *req = arg;

	(void)ok;
	route(req, api_e2b_find(http_request_header(req, "E2b-Sandbox-Id")));
	http_request_resume_body(req);
}

static void
route_header(struct http_request *req, void *arg)
{
	const char *id = http_request_header(req, "E2b-Sandbox-Id");
	struct sandbox *sb = api_e2b_find(id);

	(void)arg;
	if (sb == NULL && shared_enabled() && printable_id(id)) {
		http_request_pause_body(req);
		if (shared_lookup(id, looked_up_cb, req) == 0)
			return;
		http_request_resume_body(req);
	}
	route(req, sb);
}

/* The sandbox whose token made a signed /files URL, of all ours and the
 * other instances'. */
static struct sandbox *
signed_by(struct http_request *req)
{
	struct sandbox *sb;

	for (sb = sandbox_resolve_first(); sb != NULL;
	    sb = sandbox_resolve_next(sb)) {
		if (api_e2b_fields(sb) != NULL && api_e2b_secure(sb) &&
		    sb->state != SB_RELEASED && sb->state != SB_RELEASING &&
		    signature_is(req, sb))
			return sb;
	}
	return NULL;
}

static void
route_signed_files(struct http_request *req, void *arg)
{
	struct sandbox *sb;

	(void)arg;
	if (http_request_query(req, "signature") == NULL) {
		api_e2b_reply_error(req, 401, "a signed URL (uploadUrl, "
		    "downloadUrl) or the E2b-Sandbox-Id header is required");
		return;
	}
	if ((sb = signed_by(req)) == NULL) {
		api_e2b_reply_error(req, 401, "the signature is not valid");
		return;
	}
	forward(req, sb, "/envd");
}

static const struct http_route routes[] = {
	{ HTTP_METHOD_ANY, "E2b-Sandbox-Id", HTTP_MATCH_HEADER,
	    HTTP_ROUTE_STREAM_BODY | HTTP_ROUTE_NO_AUTH, route_header, 0 },
	{ HTTP_METHOD_GET | HTTP_METHOD_POST, "/files", HTTP_MATCH_EXACT,
	    HTTP_ROUTE_STREAM_BODY | HTTP_ROUTE_NO_AUTH, route_signed_files,
	    0 },
};

const struct http_route *
api_e2b_router_routes(size_t *n)
{
	*n = sizeof routes / sizeof routes[0];
	return routes;
}
