/*
 * What the route files share (api_agentscope.c, api_rest.c, and
 * agent_client.c's relay for the spec's call_tool): reading a create's
 * arguments the same way for both APIs, and the spec's error answer.
 */
#include "sandboxd.h"

#include <string.h>

#include "json_util.h"

int
api_parse_create(json_t *args, struct create_request *creq,
    const char *type_key, struct error *err)
{
	const char *type_name, *session = NULL;
	json_t *meta;

	memset(creq, 0, sizeof *creq);
	if (json_get_string(args, type_key, 0, &type_name, err) < 0 ||
	    json_get_string(args, "mount_dir", 0, &creq->mount_dir, err) < 0 ||
	    json_get_string(args, "storage_path", 0, &creq->storage_path,
	    err) < 0 ||
	    json_get_object(args, "environment", 0, &creq->environment,
	    err) < 0 ||
	    json_get_object(args, "meta", 0, &meta, err) < 0)
		return -1;
	if (type_name == NULL)
		type_name = sd.cfg.pool_types.v[0];
	creq->type = sandbox_types_find(type_name);
	if (creq->type == NULL) {
		error_set(err, 400, "unknown sandbox type '%s'", type_name);
		return -1;
	}
	if (meta != NULL) {
		if (json_get_string(meta, "session_ctx_id", 0, &session,
		    err) < 0) {
			error_prefix(err, "meta");
			return -1;
		}
		creq->meta = meta;
	}
	creq->session = session;
	return 0;
}

void
api_reply_rpc_error(struct http_request *req, const char *what,
    const struct error *err)
{
	struct error e = *err;

	error_prefix(&e, "Error in %s", what);
	sandboxd_reply_error(req, &e);
}
