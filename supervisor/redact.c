/*
 * Host paths stay out of what clients read. Messages that quote Docker or
 * the HTTP client (an agent's socket address, a bind mount Docker could not
 * make) may carry them, so everything a client gets passes here on its way
 * out: RPC and REST errors, create's null detail, a sandbox's "error". The
 * directories sandboxd was given are named by their setting instead
 * ("$SANDBOXD_STATE_DIR/run/..."); the log keeps the paths.
 */
#include "sandboxd.h"

#include <stdio.h>
#include <string.h>

/* Every occurrence of needle in buf (a string of size bytes) replaced by
 * with, cut to fit. */
static void
replace_all(char *buf, size_t size, const char *needle, const char *with)
{
	char out[ERROR_MSG_MAX];
	size_t nlen = strlen(needle), o = 0;
	const char *p = buf, *hit;

	if (nlen == 0 || size > sizeof out || strstr(buf, needle) == NULL)
		return;
	while ((hit = strstr(p, needle)) != NULL && o < sizeof out) {
		o += (size_t)snprintf(out + o, sizeof out - o, "%.*s%s",
		    (int)(hit - p), p, with);
		p = hit + nlen;
	}
	if (o < sizeof out)
		snprintf(out + o, sizeof out - o, "%s", p);
	snprintf(buf, size, "%s", out);
}

/* A directory sandboxd was given, and the setting that names it. */
struct host_dir {
	const char *path;
	const char *name;
};

static size_t
dir_len(const struct host_dir *d)
{
	return d->path != NULL ? strlen(d->path) : 0;
}

void
redact_text(char *buf, size_t size)
{
	struct host_dir dirs[] = {
		{ sd.cfg.mount_dir, "$DEFAULT_MOUNT_DIR" },
		{ sd.cfg.storage_folder, "$STORAGE_FOLDER" },
		{ sd.cfg.state_dir, "$SANDBOXD_STATE_DIR" },
		{ sd.cfg.image_store, "$SANDBOXD_IMAGE_STORE" },
		/* unix:///path, quoted with or without the scheme */
		{ sd.cfg.docker_host != NULL &&
		    strncmp(sd.cfg.docker_host, "unix://", 7) == 0 ?
		    sd.cfg.docker_host + 7 : sd.cfg.docker_host, "$DOCKER_HOST" },
	};
	size_t n = sizeof dirs / sizeof dirs[0];

	/* Longest first: DEFAULT_MOUNT_DIR lies in the state directory
	 * unless set elsewhere. */
	for (size_t i = 0; i < n; i++) {
		for (size_t j = i + 1; j < n; j++) {
			if (dir_len(&dirs[j]) > dir_len(&dirs[i])) {
				struct host_dir t = dirs[i];

				dirs[i] = dirs[j];
				dirs[j] = t;
			}
		}
	}
	for (size_t i = 0; i < n; i++) {
		/* "/" would turn every slash into a setting's name. */
		if (dir_len(&dirs[i]) > 1)
			replace_all(buf, size, dirs[i].path, dirs[i].name);
	}
}

void
redact_error(struct error *err, const char *agent_addr)
{
	if (agent_addr != NULL)
		replace_all(err->msg, sizeof err->msg, agent_addr,
		    "the agent's socket");
	redact_text(err->msg, sizeof err->msg);
}

void
sandboxd_reply_error(struct http_request *req, const struct error *err)
{
	struct error e = *err;

	redact_error(&e, NULL);
	http_reply_err(req, &e);
}
