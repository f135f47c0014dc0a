/*
 * E2B's view of a sandbox (api_e2b.h): its fields in meta.e2b, its
 * access tokens, the answers that describe it, and its timeout.
 *
 * The timeout: E2B has no heartbeat; a sandbox lives until its end (300 s
 * after its create by default), which each set-timeout moves. Each
 * sandbox keeps its end twice: as epoch seconds in meta.e2b, which is
 * what the state file, Redis and another instance see, and on the
 * monotonic clock (sb->ends_at), which is what decides, so a step of the
 * wall clock neither kills a sandbox early nor keeps it late. The
 * monotonic end is derived from the wall one where this instance did not
 * set it (a restart, a take from our pool by another instance). A tick
 * once a second, as the session reaper has, ends the sandboxes whose
 * time is up: released, or paused where the create asked for it. Only
 * the owner ends a sandbox; a paused one's clock stands still, however
 * it was paused, and a resume starts it again with its last timeout.
 */
#include "api_e2b.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <nettle/hmac.h>

#include "log.h"
#include "utf8.h"
#include "xmalloc.h"

#define TICK_S 1.0
/* A pause at the end that failed is tried again this much later. */
#define RETRY_S 5.0

/* Templates E2B's SDKs name by default, and the types that serve them. */
static const char *const default_templates[][2] = {
	{ "base", "base" },
	{ "code-interpreter-v1", "code-interpreter" },
	{ "desktop", "gui" },
};

static struct event *tick_ev;

json_t *
api_e2b_fields(const struct sandbox *sb)
{
	json_t *e = sb->meta != NULL ? json_object_get(sb->meta, "e2b") : NULL;

	return json_is_object(e) ? e : NULL;
}

struct sandbox *
api_e2b_find(const char *id)
{
	struct sandbox *sb;

	if (id == NULL || strlen(id) > E2B_ID_MAX)
		return NULL;
	sb = sandbox_resolve(id);
	if (sb == NULL || api_e2b_fields(sb) == NULL ||
	    sb->state == SB_CREATING || sb->state == SB_RELEASING ||
	    sb->state == SB_RELEASED)
		return NULL;
	return sb;
}

const struct sandbox_type *
api_e2b_template_type(const char *tmpl)
{
	const struct config_list *aliases = &sd.cfg.e2b_aliases;
	size_t n = strlen(tmpl);

	for (size_t i = 0; i < aliases->n; i++) {
		if (strncmp(aliases->v[i], tmpl, n) == 0 &&
		    aliases->v[i][n] == '=')
			return sandbox_types_find(aliases->v[i] + n + 1);
	}
	for (size_t i = 0; i < sizeof default_templates /
	    sizeof default_templates[0]; i++) {
		if (strcmp(default_templates[i][0], tmpl) == 0)
			return sandbox_types_find(default_templates[i][1]);
	}
	return sandbox_types_find(tmpl);
}

json_t *
api_e2b_new_fields(const char *tmpl, json_t *metadata, double timeout,
    int pause_on_timeout, int secure)
{
	json_t *e = json_object();
	double now = timing_wall();

	json_object_set_new(e, "template", json_string(tmpl));
	json_object_set_new(e, "metadata", metadata != NULL ?
	    json_deep_copy(metadata) : json_object());
	json_object_set_new(e, "started_at", json_real(now));
	json_object_set_new(e, "end_at", json_real(now + timeout));
	json_object_set_new(e, "timeout", json_real(timeout));
	json_object_set_new(e, "on_timeout", json_string(pause_on_timeout ?
	    "pause" : "kill"));
	json_object_set_new(e, "secure", json_boolean(secure));
	return e;
}

int
api_e2b_secure(const struct sandbox *sb)
{
	json_t *e = api_e2b_fields(sb);

	return sd.cfg.bearer_token != NULL || (e != NULL &&
	    json_is_true(json_object_get(e, "secure")));
}

void
api_e2b_token(const struct sandbox *sb, enum api_e2b_token which,
    char out[E2B_TOKEN_HEX])
{
	static const char *const labels[] = {
		[E2B_TOKEN_ENVD] = "e2b envd access token",
		[E2B_TOKEN_TRAFFIC] = "e2b traffic access token",
	};
	struct hmac_sha256_ctx ctx;
	uint8_t digest[SHA256_DIGEST_SIZE];

	hmac_sha256_set_key(&ctx, strlen(sb->token), (const uint8_t *)sb->token);
	hmac_sha256_update(&ctx, strlen(labels[which]),
	    (const uint8_t *)labels[which]);
	hmac_sha256_digest(&ctx, sizeof digest, digest);
	for (size_t i = 0; i < sizeof digest; i++)
		snprintf(out + 2 * i, 3, "%02x", digest[i]);
	explicit_bzero(&ctx, sizeof ctx);
	explicit_bzero(digest, sizeof digest);
}

/* Seconds its timeout has left, from the clock that decides where this
 * instance knows it; -1 when it has none (paused). */
static double
time_left(const struct sandbox *sb)
{
	json_t *end = json_object_get(api_e2b_fields(sb), "end_at");

	if (sb->ends_at > 0)
		return sb->ends_at - timing_monotonic();
	if (!json_is_number(end))
		return -1;
	return json_number_value(end) - timing_wall();
}

void
api_e2b_set_end(struct sandbox *sb, double seconds, int extend)
{
	json_t *e = api_e2b_fields(sb);

	if (e == NULL || (extend && time_left(sb) >= seconds))
		return;
	sb->ends_at = timing_monotonic() + seconds;
	json_object_set_new(e, "end_at", json_real(timing_wall() + seconds));
	json_object_set_new(e, "timeout", json_real(seconds));
	sandbox_changed(sb);
}

void
api_e2b_stop_clock(struct sandbox *sb)
{
	json_t *e = api_e2b_fields(sb);

	if (e == NULL)
		return;
	sb->ends_at = 0;
	json_object_set_new(e, "end_at", json_null());
	sandbox_changed(sb);
}

const char *
api_e2b_state(const struct sandbox *sb)
{
	return sb->state == SB_PAUSED ? "paused" : "running";
}

void
api_e2b_time(double epoch, char out[32])
{
	time_t t = (time_t)epoch;
	int ms = (int)((epoch - (double)t) * 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + strlen(out), 32 - strlen(out), ".%03dZ",
	    ms < 0 ? 0 : ms > 999 ? 999 : ms);
}

static json_t *
time_json(double epoch)
{
	char buf[32];

	api_e2b_time(epoch, buf);
	return json_string(buf);
}

static const char *
field_string(json_t *e, const char *key, const char *dflt)
{
	const char *v = json_string_value(json_object_get(e, key));

	return v != NULL ? v : dflt;
}

json_t *
api_e2b_sandbox_json(struct sandbox *sb)
{
	json_t *e = api_e2b_fields(sb), *j = json_object();
	char token[E2B_TOKEN_HEX];

	json_object_set_new(j, "sandboxID", json_string(sb->name));
	json_object_set_new(j, "templateID",
	    json_string(field_string(e, "template", sb->type_name)));
	json_object_set_new(j, "clientID", json_string("sandboxd"));
	json_object_set_new(j, "envdVersion", json_string(E2B_ENVD_VERSION));
	if (api_e2b_secure(sb)) {
		api_e2b_token(sb, E2B_TOKEN_ENVD, token);
		json_object_set_new(j, "envdAccessToken", json_string(token));
		api_e2b_token(sb, E2B_TOKEN_TRAFFIC, token);
		json_object_set_new(j, "trafficAccessToken", json_string(token));
		explicit_bzero(token, sizeof token);
	} else {
		json_object_set_new(j, "trafficAccessToken", json_null());
	}
	json_object_set_new(j, "domain", json_null());
	return j;
}

/* The type's CPU limit, rounded up, else the host's CPUs. */
static json_int_t
cpu_count(const struct sandbox *sb)
{
	long n;

	if (sb->type != NULL && sb->type->nano_cpus > 0)
		return (json_int_t)((sb->type->nano_cpus + 999999999) /
		    1000000000);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? n : 1;
}

static json_int_t
memory_mb(const struct sandbox *sb)
{
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);

	if (sb->type != NULL && sb->type->memory > 0)
		return (json_int_t)(sb->type->memory / (1024 * 1024));
	return pages > 0 && size > 0 ?
	    (json_int_t)((double)pages * (double)size / (1024 * 1024)) : 0;
}

json_t *
api_e2b_detail_json(struct sandbox *sb, int detail)
{
	json_t *e = api_e2b_fields(sb), *j = json_object(), *v;
	char token[E2B_TOKEN_HEX];
	double end;

	v = json_object_get(e, "end_at");
	/* A paused one's time stopped when it paused. */
	end = json_is_number(v) ? json_number_value(v) : sb->updated_at;
	json_object_set_new(j, "sandboxID", json_string(sb->name));
	json_object_set_new(j, "templateID",
	    json_string(field_string(e, "template", sb->type_name)));
	json_object_set_new(j, "clientID", json_string("sandboxd"));
	v = json_object_get(e, "started_at");
	json_object_set_new(j, "startedAt", time_json(json_is_number(v) ?
	    json_number_value(v) : sb->created_at));
	json_object_set_new(j, "endAt", time_json(end));
	json_object_set_new(j, "cpuCount", json_integer(cpu_count(sb)));
	json_object_set_new(j, "memoryMB", json_integer(memory_mb(sb)));
	/* Docker gives a sandbox no disk of its own size. */
	json_object_set_new(j, "diskSizeMB", json_integer(0));
	json_object_set_new(j, "state", json_string(api_e2b_state(sb)));
	json_object_set_new(j, "envdVersion", json_string(E2B_ENVD_VERSION));
	v = json_object_get(e, "metadata");
	json_object_set_new(j, "metadata", json_is_object(v) ?
	    json_deep_copy(v) : json_object());
	json_object_set_new(j, "volumeMounts", json_array());
	if (!detail)
		return j;
	if (api_e2b_secure(sb)) {
		api_e2b_token(sb, E2B_TOKEN_ENVD, token);
		json_object_set_new(j, "envdAccessToken", json_string(token));
		explicit_bzero(token, sizeof token);
	}
	json_object_set_new(j, "domain", json_null());
	api_e2b_network_info(sb, j);
	json_object_set_new(j, "lifecycle", json_pack("{s:s,s:b}", "onTimeout",
	    field_string(e, "on_timeout", "kill"), "autoResume", 0));
	return j;
}

void
api_e2b_reply_err(struct http_request *req, const struct error *err)
{
	int status = err->status >= 400 && err->status <= 599 ? err->status :
	    500;
	struct error e = *err;

	redact_error(&e, NULL);
	if (status >= 500)
		log_warn("%s %s: %d %s", http_request_method_name(req),
		    http_request_path(req), status, e.msg);
	http_reply_json(req, status, json_pack("{s:i,s:o}", "code", status,
	    "message", utf8_json_string(e.msg, strlen(e.msg))));
}

void
api_e2b_reply_error(struct http_request *req, int status, const char *fmt,
    ...)
{
	struct error err;
	va_list ap;

	va_start(ap, fmt);
	error_vset(&err, status, fmt, ap);
	va_end(ap);
	api_e2b_reply_err(req, &err);
}

/* The timeout. */

/* arg: non-NULL for a pause. */
static void
ended_cb(struct sandbox *sb, const struct error *err, void *arg)
{
	int paused = arg != NULL;

	if (err != NULL) {
		log_warn("sandbox %s: its E2B timeout ended, but it could not "
		    "be %s: %s", sb->name, paused ? "paused" : "released",
		    err->msg);
		sb->ends_at = timing_monotonic() + RETRY_S;
	} else if (paused) {
		api_e2b_stop_clock(sb);
	}
}

static void
end(struct sandbox *sb, json_t *e)
{
	int pause = strcmp(field_string(e, "on_timeout", "kill"),
	    "pause") == 0;

	if (pause && sb->state != SB_RUNNING && sb->state != SB_UNHEALTHY)
		return;
	log_info("sandbox %s: its E2B timeout ended: %s", sb->name,
	    pause ? "pausing it" : "releasing it");
	/* Once: the operation in progress keeps the tick away. */
	sb->ends_at = 0;
	if (pause)
		lifecycle_pause(sb, ended_cb, sb);
	else
		lifecycle_release(sb, ended_cb, NULL);
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	double mono = timing_monotonic(), now = timing_wall();
	struct sandbox *sb, *next;

	(void)fd;
	(void)what;
	(void)arg;
	if (!sd.ready || sd.shutting_down)
		return;
	/* Ours only: another instance's sandboxes are its to end. */
	for (sb = sandbox_first(); sb != NULL; sb = next) {
		json_t *e = api_e2b_fields(sb), *end_at;

		next = sandbox_next(sb);
		if (e == NULL || sb->op != NULL || sb->state == SB_CREATING ||
		    sb->state == SB_RELEASING || sb->state == SB_RELEASED)
			continue;
		end_at = json_object_get(e, "end_at");
		/* Paused or resumed through our own REST routes: the clock
		 * stops, and starts again with its last timeout. */
		if (sb->state == SB_PAUSED) {
			if (json_is_number(end_at))
				api_e2b_stop_clock(sb);
			continue;
		}
		if (!json_is_number(end_at)) {
			api_e2b_set_end(sb, json_number_value(json_object_get(e,
			    "timeout")), 0);
			continue;
		}
		if (sb->ends_at == 0) {
			sb->ends_at = mono + json_number_value(end_at) - now;
			if (sb->ends_at <= 0)
				sb->ends_at = mono;
		}
		if (mono >= sb->ends_at)
			end(sb, e);
	}
}

void
api_e2b_timeouts_start(void)
{
	struct timeval tv = { (time_t)TICK_S, 0 };

	tick_ev = event_new(sd.base, -1, EV_PERSIST, tick_cb, NULL);
	event_add(tick_ev, &tv);
}

void
api_e2b_timeouts_stop(void)
{
	if (tick_ev != NULL)
		event_free(tick_ev);
	tick_ev = NULL;
}
