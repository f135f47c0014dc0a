/*
 * The tokens of desktop links. A desktop_url must open the desktop and
 * nothing else, so it never carries the sandbox's own token (which opens
 * /proxy/{id}, a shell): it carries a token derived from it, HMAC-SHA256
 * keyed with the sandbox's token over a label naming the access, one for
 * watching and one for driving, cut to 128 bits as hex. Knowing one tells
 * nothing of the sandbox's token nor of the other.
 *
 * Any sandboxd that serves the sandbox knows its token (its own record, or
 * the shared one in Redis), so any of them computes and checks the link's
 * token alike, and nothing is stored for it: a link lives as long as its
 * sandbox.
 */
#include "sandboxd.h"

#include <stdlib.h>
#include <string.h>

#include <nettle/hmac.h>

#include "xmalloc.h"

static const char *const labels[] = {
	[DESKTOP_VIEW] = "agentscope-sandbox desktop view-only",
	[DESKTOP_INTERACTIVE] = "agentscope-sandbox desktop interactive",
};

void
desktop_token(const struct sandbox *sb, enum desktop_access access,
    char out[TOKEN_HEX_LEN])
{
	static const char hex[] = "0123456789abcdef";
	struct hmac_sha256_ctx ctx;
	uint8_t digest[SHA256_DIGEST_SIZE];
	const char *label = labels[access];

	hmac_sha256_set_key(&ctx, strlen(sb->token), (const uint8_t *)sb->token);
	hmac_sha256_update(&ctx, strlen(label), (const uint8_t *)label);
	hmac_sha256_digest(&ctx, sizeof digest, digest);
	for (size_t i = 0; i < (TOKEN_HEX_LEN - 1) / 2; i++) {
		out[2 * i] = hex[digest[i] >> 4];
		out[2 * i + 1] = hex[digest[i] & 15];
	}
	out[TOKEN_HEX_LEN - 1] = '\0';
}

enum desktop_access
desktop_token_check(const struct sandbox *sb, const char *presented)
{
	char want[TOKEN_HEX_LEN];
	enum desktop_access access = DESKTOP_DENIED;

	if (presented == NULL)
		return DESKTOP_DENIED;
	/* Both compared, each in constant time. */
	desktop_token(sb, DESKTOP_VIEW, want);
	if (http_token_equal(presented, want))
		access = DESKTOP_VIEW;
	desktop_token(sb, DESKTOP_INTERACTIVE, want);
	if (http_token_equal(presented, want))
		access = DESKTOP_INTERACTIVE;
	return access;
}

char *
desktop_url(const struct sandbox *sb, enum desktop_access access)
{
	char token[TOKEN_HEX_LEN];
	char *base = sandboxd_base_url(&sd.cfg), *url;

	desktop_token(sb, access, token);
	url = xasprintf("%s/desktop/%s/vnc/vnc_relay.html?password=%s%s", base,
	    sb->name, token, access == DESKTOP_VIEW ? "&view_only=true" : "");
	free(base);
	return url;
}
