/*
 * E2B's API on sandboxd (spec/e2b-wire.md), so that E2B's SDKs run
 * unchanged against it: what api_e2b.c (the control API under /e2b),
 * api_e2b_list.c (its list), api_e2b_network.c (its network options),
 * api_e2b_router.c (the sandbox traffic the SDKs name by the
 * E2b-Sandbox-Id header) and api_e2b_sandbox.c (E2B's fields of a
 * sandbox, its access tokens, its timeout) share. E2B's words stay in
 * these files.
 *
 * An E2B sandbox is a sandbox of ours whose meta holds "e2b", an object
 * that the state file, the Redis records and a take from another
 * instance's pool carry like the rest of meta:
 *   template    the template asked for
 *   metadata    the caller's {string: string}
 *   started_at  epoch seconds of its create
 *   end_at      epoch seconds its timeout ends it; null while paused
 *   timeout     seconds of the last timeout given
 *   on_timeout  "kill" or "pause"
 *   secure      its traffic needs its access token
 * Its id in E2B's API is its container name. Its access tokens are not
 * stored anywhere: each is an HMAC of the sandbox's own token, so every
 * instance that can reach its agent can check them.
 */
#ifndef API_E2B_H
#define API_E2B_H

#include "sandboxd.h"

/* The envd of the agent's /envd routes, for the SDK's feature gates. */
#define E2B_ENVD_VERSION	"0.6.4"
#define E2B_DEFAULT_TIMEOUT	300
/* E2B's own limit (its Pro tier): a day. */
#define E2B_MAX_TIMEOUT		86400
#define E2B_TOKEN_HEX		(64 + 1)
/* The longest sandbox id an answer repeats. */
#define E2B_ID_MAX		128

enum api_e2b_token {
	E2B_TOKEN_ENVD,		/* X-Access-Token, file URL signatures */
	E2B_TOKEN_TRAFFIC,	/* E2B-Traffic-Access-Token */
};

/* api_e2b.c */

/* Whether a field is absent or its SDK's "not asked for" value (null,
 * false, {}, []). */
int api_e2b_unset(json_t *v);
/* A sandbox_done_cb whose arg is the request: 204, or the error. */
void api_e2b_done_cb(struct sandbox *sb, const struct error *err,
    void *arg);

/* api_e2b_list.c: GET /e2b/v2/sandboxes (v2) and /e2b/sandboxes. */
void api_e2b_list(struct http_request *req, int v2);

/* api_e2b_network.c */

/* The egress lists a create body asks for (allow_internet_access,
 * network), as create_request.network: *out a checked network object
 * (new reference), or NULL when it asks for nothing; 400 naming what
 * sandboxd lacks, or the type when it has no network. */
int api_e2b_network_create(json_t *body, const struct sandbox_type *type,
    const char *tmpl, int v2, json_t **out, struct error *err);
/* PUT /sandboxes/{id}/network with its body: 204 once the new lists
 * hold. */
void api_e2b_network_put(struct http_request *req, struct sandbox *sb,
    json_t *body);
/* allowInternetAccess and network of a SandboxDetail: the effective
 * policy. */
void api_e2b_network_info(struct sandbox *sb, json_t *detail);

/* api_e2b_sandbox.c */

/* sb's E2B fields (borrowed), or NULL when E2B's API did not make it. */
json_t *api_e2b_fields(const struct sandbox *sb);
/* The E2B sandbox of an id: made through E2B's API, not released or
 * going; NULL otherwise. */
struct sandbox *api_e2b_find(const char *id);
/* The sandbox type of a template, or NULL. */
const struct sandbox_type *api_e2b_template_type(const char *tmpl);
/* E2B's fields of a new sandbox (new reference). */
json_t *api_e2b_new_fields(const char *tmpl, json_t *metadata,
    double timeout, int pause_on_timeout, int secure);
/* Whether its traffic needs its tokens: asked for at create, or a
 * sandboxd with a BEARER_TOKEN (whose sandboxes are never open). */
int api_e2b_secure(const struct sandbox *sb);
void api_e2b_token(const struct sandbox *sb, enum api_e2b_token which,
    char out[E2B_TOKEN_HEX]);
/* The end of its timeout: now + seconds (may shorten it), or at least
 * that (extend: connect and refreshes only lengthen it). */
void api_e2b_set_end(struct sandbox *sb, double seconds, int extend);
/* Its clock stops (paused). */
void api_e2b_stop_clock(struct sandbox *sb);
/* E2B's state of it: "running" or "paused". */
const char *api_e2b_state(const struct sandbox *sb);
/* {"sandboxID", "templateID", "envdVersion", tokens...} as create and
 * connect answer (new reference). */
json_t *api_e2b_sandbox_json(struct sandbox *sb);
/* SandboxDetail (detail) or ListedSandbox (new reference). */
json_t *api_e2b_detail_json(struct sandbox *sb, int detail);
/* RFC 3339 in UTC with milliseconds, as E2B writes times. */
void api_e2b_time(double epoch, char out[32]);
/* E2B's error body {"code", "message"}, the status mirrored in code. */
void api_e2b_reply_error(struct http_request *req, int status,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void api_e2b_reply_err(struct http_request *req, const struct error *err);

#endif
