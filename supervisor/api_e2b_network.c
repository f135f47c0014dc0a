/*
 * E2B's network options on sandboxd's egress policy (egress.h): a
 * create's allow_internet_access and network {allowOut, denyOut}, PUT
 * /sandboxes/{id}/network (updateNetwork: the whole configuration
 * replaced, what is omitted cleared), and what getInfo shows of it.
 *
 * The words map one to one: allowOut is allow_out, denyOut deny_out
 * (an allow list wins over a deny list in both, so E2B's "deny
 * 0.0.0.0/0, allow these" works), allow_internet_access internet.
 * What sandboxd does not have is refused naming it: per-host rules,
 * an egress proxy, public traffic and host masks. A template whose
 * sandbox type has no network (network "none", most of them) has no
 * internet to open or lists to set: a 400 naming the type.
 */
#include "api_e2b.h"

#include <string.h>

#include "egress.h"

/* E2B's name of each list and ours. */
static const char *const lists[][2] = {
	{ "allowOut", "allow_out" },
	{ "denyOut", "deny_out" },
};

/* Fields of E2B's network configuration sandboxd does not have. */
static const char *const refused[][2] = {
	{ "rules", "network.rules (per-host rules)" },
	{ "egressProxy", "network.egressProxy (an egress proxy)" },
	{ "allowPublicTraffic", "network.allowPublicTraffic (public sandbox "
	    "URLs)" },
	{ "maskRequestHost", "network.maskRequestHost" },
	{ "httpsPorts", "network.httpsPorts" },
};

static int
has_network(const struct sandbox_type *type)
{
	return type != NULL && strcmp(type->network, "bridge") == 0;
}

static int
no_network(const struct sandbox_type *type, const char *tmpl,
    const char *what, struct error *err)
{
	error_set(err, 400, "%s: template '%.200s' is the sandbox type '%s', "
	    "which has no network (network '%s'): only a type with network "
	    "'bridge' has egress to set", what, tmpl, type->name,
	    type->network);
	return -1;
}

/*
 * Our network object of an E2B one (net: its network configuration, or
 * NULL) and an allow_internet_access (NULL: not given); extra names the
 * keys besides the lists it may carry (the update's
 * allow_internet_access). *out NULL when nothing is asked.
 */
static int
translate(json_t *net, json_t *internet, const char *extra, json_t **out,
    struct error *err)
{
	json_t *ours = json_object(), *v;
	const char *k;
	size_t i;

	*out = NULL;
	if (net != NULL && !json_is_null(net) && !json_is_object(net)) {
		error_set(err, 400, "network must be an object");
		goto fail;
	}
	json_object_foreach(net, k, v) {
		for (i = 0; i < sizeof lists / sizeof lists[0]; i++) {
			if (strcmp(k, lists[i][0]) == 0)
				break;
		}
		if (i < sizeof lists / sizeof lists[0]) {
			if (!json_is_null(v))
				json_object_set(ours, lists[i][1], v);
			continue;
		}
		if (extra != NULL && strcmp(k, extra) == 0)
			continue;
		for (i = 0; i < sizeof refused / sizeof refused[0]; i++) {
			if (strcmp(k, refused[i][0]) == 0)
				break;
		}
		if (!api_e2b_unset(v)) {
			error_set(err, 400, "%s is not supported by sandboxd",
			    i < sizeof refused / sizeof refused[0] ?
			    refused[i][1] : k);
			goto fail;
		}
	}
	if (internet != NULL && !json_is_null(internet)) {
		if (!json_is_boolean(internet)) {
			error_set(err, 400, "allow_internet_access must be a "
			    "boolean");
			goto fail;
		}
		json_object_set(ours, "internet", internet);
	}
	if (json_object_size(ours) == 0) {
		json_decref(ours);
		return 0;
	}
	if (egress_network_check(ours, "network", out, err) < 0)
		goto fail;
	json_decref(ours);
	return 0;
fail:
	json_decref(ours);
	return -1;
}

int
api_e2b_network_create(json_t *body, const struct sandbox_type *type,
    const char *tmpl, int v2, json_t **out, struct error *err)
{
	json_t *internet = json_object_get(body, "allow_internet_access");

	*out = NULL;
	/* The v1 form's SDKs send true whatever the caller said: there it
	 * is the default, not a request (a type's "internet": false holds). */
	if (json_is_true(internet) && !v2)
		internet = NULL;
	if (!has_network(type)) {
		/* No network: no internet, which false asks for. */
		if (json_is_true(internet))
			return no_network(type, tmpl, "allow_internet_access: "
			    "true", err);
		internet = NULL;
	}
	if (translate(json_object_get(body, "network"), internet, NULL, out,
	    err) < 0)
		return -1;
	if (*out != NULL && !has_network(type)) {
		json_decref(*out);
		*out = NULL;
		return no_network(type, tmpl, "network", err);
	}
	return 0;
}

void
api_e2b_network_put(struct http_request *req, struct sandbox *sb,
    json_t *body)
{
	json_t *e = api_e2b_fields(sb), *net = NULL;
	const char *tmpl = json_string_value(json_object_get(e, "template"));
	struct error err;

	if (!json_is_object(body)) {
		api_e2b_reply_error(req, 400, "the network configuration must "
		    "be an object");
		return;
	}
	if (sb->type == NULL || !has_network(sb->type)) {
		if (sb->type != NULL)
			no_network(sb->type, tmpl != NULL ? tmpl : sb->type_name,
			    "network", &err);
		else
			error_set(&err, 400, "network: sandbox %s has no network",
			    sb->name);
		api_e2b_reply_err(req, &err);
		return;
	}
	if (translate(body, json_object_get(body, "allow_internet_access"),
	    "allow_internet_access", &net, &err) < 0) {
		api_e2b_reply_err(req, &err);
		return;
	}
	/* Everything omitted is cleared: no lists of its own. */
	lifecycle_set_network(sb, net != NULL ? net : json_object(),
	    api_e2b_done_cb, req);
}

void
api_e2b_network_info(struct sandbox *sb, json_t *detail)
{
	struct egress_policy pol;
	json_t *view;

	if (sb->type == NULL || !has_network(sb->type)) {
		json_object_set_new(detail, "allowInternetAccess",
		    json_false());
		return;
	}
	egress_policy_build(&pol, sb->type->egress, sb->network);
	view = egress_policy_json(&pol);
	egress_policy_free(&pol);
	json_object_set(detail, "allowInternetAccess",
	    json_object_get(view, "internet"));
	json_object_set_new(detail, "network", json_pack("{s:O,s:O}",
	    "allowOut", json_object_get(view, "allow_out"), "denyOut",
	    json_object_get(view, "deny_out")));
	json_decref(view);
}
