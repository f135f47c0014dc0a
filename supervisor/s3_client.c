/*
 * The S3 client's requests (s3.h): URLs in canonical form, libcurl's
 * SigV4 signing, bodies streamed from a buffer or a file and answers
 * streamed into a file or a bounded buffer, and errors worded with the
 * setting at fault. Every call blocks; they run on worker threads.
 */
#include "s3.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <curl/curl.h>

#include "fdio.h"
#include "log.h"
#include "xmalloc.h"

/* A connection that cannot be made in this long will not be. */
#define CONNECT_TIMEOUT 15L
/* A transfer that moves no byte for this long is given up. */
#define STALL_SECONDS 60L

/* One request in flight. */
struct call {
	const struct s3_request *r;
	struct s3_response *resp;
	const atomic_int *cancel;
	void *curl;
	uint64_t sent;			/* of the body */
	int read_errno;			/* the body's file failed us */
	int short_read;			/* it had fewer bytes than promised */
	int write_errno;		/* out_fd failed us */
	int too_large;			/* the answer passed its bound */
	int to_file;			/* -1: not decided yet */
	size_t cap;
};

void
s3_global_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

void
s3_global_free(void)
{
	curl_global_cleanup();
}

int
s3_config_endpoint(struct s3_config *c, const char *endpoint,
    struct error *err)
{
	const char *host = endpoint, *scheme = "https";
	size_t n;

	if (strncmp(endpoint, "http://", 7) == 0) {
		scheme = "http";
		host += 7;
	} else if (strncmp(endpoint, "https://", 8) == 0) {
		host += 8;
	} else if (strstr(endpoint, "://") != NULL) {
		error_set(err, 400, "OSS_ENDPOINT: '%s' is neither http:// nor "
		    "https://", endpoint);
		return -1;
	}
	n = strlen(host);
	while (n > 0 && host[n - 1] == '/')
		n--;
	if (n == 0 || n > 255 || strspn(host, "abcdefghijklmnopqrstuvwxyz"
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") < n) {
		error_set(err, 400, "OSS_ENDPOINT: '%s' is not [http[s]://]"
		    "host[:port] (no path)", endpoint);
		return -1;
	}
	free(c->scheme);
	free(c->host);
	c->scheme = xstrdup(scheme);
	c->host = xstrndup(host, n);
	return 0;
}

void
s3_config_free(struct s3_config *c)
{
	char **strings[] = {
		&c->scheme, &c->host, &c->bucket, &c->region, &c->service,
		&c->access_key, &c->secret_key,
	};

	for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
		if (*strings[i] != NULL)
			explicit_bzero(*strings[i], strlen(*strings[i]));
		free(*strings[i]);
		*strings[i] = NULL;
	}
}

void
s3_open(struct s3 *s, const struct s3_config *cfg, const atomic_int *cancel)
{
	s->cfg = cfg;
	s->cancel = cancel;
	s->curl = curl_easy_init();
	if (s->curl == NULL)
		fatal("cannot make a libcurl handle");
}

void
s3_close(struct s3 *s)
{
	if (s->curl != NULL)
		curl_easy_cleanup(s->curl);
	s->curl = NULL;
}

void
s3_request_init(struct s3_request *r, const char *method)
{
	memset(r, 0, sizeof *r);
	r->method = method;
	r->body_fd = -1;
	r->out_fd = -1;
}

void
s3_response_free(struct s3_response *resp)
{
	free(resp->body);
	resp->body = NULL;
	resp->len = 0;
}

/* Percent-encode s onto f: the unreserved bytes stay, and '/' when
 * keep_slash (a key in a path); every other byte once, as S3 signs it. */
static void
encode(FILE *f, const char *s, int keep_slash)
{
	for (const unsigned char *p = (const unsigned char *)s; *p != '\0';
	    p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		    (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' ||
		    *p == '_' || *p == '~' || (keep_slash && *p == '/'))
			fputc(*p, f);
		else
			fprintf(f, "%%%02X", *p);
	}
}

/* A memory stream; its text is the caller's after close_stream. */
static FILE *
open_stream(char **text, size_t *len)
{
	FILE *f = open_memstream(text, len);

	if (f == NULL)
		fatal("out of memory");
	return f;
}

static char *
close_stream(FILE *f, char **text)
{
	if (fclose(f) != 0)
		fatal("out of memory");
	return *text;
}

struct encoded_param {
	char *name;
	char *value;
};

static int
param_cmp(const void *a, const void *b)
{
	const struct encoded_param *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c != 0 ? c : strcmp(x->value, y->value);
}

static char *
encoded(const char *s, int keep_slash)
{
	char *text;
	size_t len;
	FILE *f = open_stream(&text, &len);

	encode(f, s, keep_slash);
	return close_stream(f, &text);
}

char *
s3_url(const struct s3_config *cfg, const char *key,
    const struct s3_param *params, size_t nparams)
{
	struct encoded_param *v;
	char *text;
	size_t len;
	FILE *f = open_stream(&text, &len);

	fprintf(f, "%s://", cfg->scheme);
	if (cfg->virtual_host) {
		fprintf(f, "%s.%s/", cfg->bucket, cfg->host);
	} else {
		fprintf(f, "%s/", cfg->host);
		encode(f, cfg->bucket, 0);
		if (key != NULL)
			fputc('/', f);
	}
	if (key != NULL)
		encode(f, key, 1);
	/* Canonical order: sorted by encoded name, then value, each with
	 * its '=' ("uploads=": a server signs it so). */
	v = xcalloc(nparams + 1, sizeof *v);
	for (size_t i = 0; i < nparams; i++) {
		v[i].name = encoded(params[i].name, 0);
		v[i].value = encoded(params[i].value != NULL ?
		    params[i].value : "", 0);
	}
	qsort(v, nparams, sizeof *v, param_cmp);
	for (size_t i = 0; i < nparams; i++) {
		fprintf(f, "%c%s=%s", i == 0 ? '?' : '&', v[i].name,
		    v[i].value);
		free(v[i].name);
		free(v[i].value);
	}
	free(v);
	return close_stream(f, &text);
}

static size_t
read_cb(char *buf, size_t size, size_t n, void *arg)
{
	struct call *c = arg;
	const struct s3_request *r = c->r;
	uint64_t total = r->body_fd >= 0 ? r->body_size : r->body_len;
	size_t want = size * n;
	ssize_t got;

	if (total - c->sent < want)
		want = (size_t)(total - c->sent);
	if (want == 0)
		return 0;
	if (r->body_fd < 0) {
		memcpy(buf, r->body + c->sent, want);
		got = (ssize_t)want;
	} else {
		do {
			got = pread(r->body_fd, buf, want,
			    (off_t)(r->body_off + c->sent));
		} while (got < 0 && errno == EINTR);
		if (got <= 0) {
			/* The file shrank (or failed) under us: what the
			 * promised size says would not be what is sent. */
			c->read_errno = got < 0 ? errno : 0;
			c->short_read = got == 0;
			return CURL_READFUNC_ABORT;
		}
	}
	if (r->body_md5 != NULL)
		md5_update(r->body_md5, (size_t)got, (const uint8_t *)buf);
	c->sent += (uint64_t)got;
	return (size_t)got;
}

static size_t
write_cb(char *data, size_t size, size_t n, void *arg)
{
	struct call *c = arg;
	const struct s3_request *r = c->r;
	struct s3_response *resp = c->resp;
	size_t len = size * n;

	if (c->to_file < 0) {
		long status = 0;

		curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
		c->to_file = r->out_fd >= 0 && status >= 200 && status < 300;
	}
	if (c->to_file) {
		if (resp->written + len > r->out_max) {
			c->too_large = 1;
			return 0;
		}
		if (fdio_write_all(r->out_fd, data, len) < 0) {
			c->write_errno = errno;
			return 0;
		}
		if (r->out_md5 != NULL)
			md5_update(r->out_md5, len, (const uint8_t *)data);
		resp->written += len;
		return len;
	}
	if (resp->len + len > S3_MAX_BODY) {
		c->too_large = 1;
		return 0;
	}
	if (resp->len + len + 1 > c->cap) {
		while (resp->len + len + 1 > c->cap)
			c->cap = c->cap != 0 ? c->cap * 2 : 4096;
		resp->body = xrealloc(resp->body, c->cap);
	}
	memcpy(resp->body + resp->len, data, len);
	resp->len += len;
	resp->body[resp->len] = '\0';
	return len;
}

static size_t
header_cb(char *line, size_t size, size_t n, void *arg)
{
	struct call *c = arg;
	size_t len = size * n, i;

	if (len > 5 && strncasecmp(line, "ETag:", 5) == 0) {
		for (i = 5; i < len && (line[i] == ' ' || line[i] == '"'); i++)
			;
		len -= i;
		line += i;
		while (len > 0 && (line[len - 1] == '\r' ||
		    line[len - 1] == '\n' || line[len - 1] == '"' ||
		    line[len - 1] == ' '))
			len--;
		if (len < sizeof c->resp->etag) {
			memcpy(c->resp->etag, line, len);
			c->resp->etag[len] = '\0';
		}
	}
	return size * n;
}

static int
progress_cb(void *arg, curl_off_t dltotal, curl_off_t dlnow,
    curl_off_t ultotal, curl_off_t ulnow)
{
	struct call *c = arg;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	return c->cancel != NULL && atomic_load(c->cancel) != 0;
}

static void
set_method(void *h, const struct s3_request *r)
{
	uint64_t size = r->body_fd >= 0 ? r->body_size : r->body_len;

	if (strcmp(r->method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (strcmp(r->method, "PUT") == 0) {
		/* Always a size, 0 too: servers refuse chunked uploads. */
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
		    (curl_off_t)size);
	} else if (strcmp(r->method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		if (r->body_fd < 0 && r->body != NULL) {
			curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body);
			curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
			    (curl_off_t)r->body_len);
		} else if (r->body_fd < 0) {
			/* Signed as the empty body it is. */
			curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
			curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
			    (curl_off_t)0);
		} else {
			curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
			    (curl_off_t)size);
		}
	} else if (strcmp(r->method, "GET") != 0) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
	}
}

int
s3_perform(struct s3 *s, const struct s3_request *r,
    struct s3_response *resp, struct error *err)
{
	struct curl_slist *headers = NULL;
	struct call c = { 0 };
	char errbuf[CURL_ERROR_SIZE] = "", sigv4[160], *url;
	CURLcode rc;
	void *h = s->curl;

	memset(resp, 0, sizeof *resp);
	c.r = r;
	c.resp = resp;
	c.cancel = s->cancel;
	c.curl = h;
	c.to_file = -1;
	url = s3_url(s->cfg, r->key, r->params, r->nparams);
	snprintf(sigv4, sizeof sigv4, "aws:amz:%s:%s", s->cfg->region,
	    s->cfg->service);
	for (size_t i = 0; i < r->nheaders; i++)
		headers = curl_slist_append(headers, r->headers[i]);
	if (r->payload_hash != NULL) {
		char *line = xasprintf("x-amz-content-sha256: %s",
		    r->payload_hash);

		headers = curl_slist_append(headers, line);
		free(line);
	}

	/* The connection cache survives a reset; the options do not. */
	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	/* What is signed must be what is sent: no dot-segment folding. */
	curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
	curl_easy_setopt(h, CURLOPT_USERNAME, s->cfg->access_key);
	curl_easy_setopt(h, CURLOPT_PASSWORD, s->cfg->secret_key);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, STALL_SECONDS);
	curl_easy_setopt(h, CURLOPT_READFUNCTION, read_cb);
	curl_easy_setopt(h, CURLOPT_READDATA, &c);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &c);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, &c);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, progress_cb);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, &c);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	set_method(h, r);

	rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
	/* The secret is in the handle until the next request's reset. */
	curl_easy_setopt(h, CURLOPT_PASSWORD, "");
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(headers);
	if (rc == CURLE_OK) {
		free(url);
		return 0;
	}
	s3_response_free(resp);
	if (c.read_errno != 0 || c.short_read)
		error_set(err, 409, "the file changed while it was sent (%s)",
		    c.short_read ? "it shrank" : strerror(c.read_errno));
	else if (c.write_errno != 0)
		error_set(err, 500, "cannot write what %s %s sent: %s",
		    r->method, r->key != NULL ? "an object's GET" : "a request",
		    strerror(c.write_errno));
	else if (c.too_large)
		error_set(err, 502, "object storage sent more than it said for "
		    "%s", r->key != NULL ? "an object" : "a request");
	else if (rc == CURLE_ABORTED_BY_CALLBACK)
		error_set(err, 503, "transfer given up");
	else
		error_set(err, rc == CURLE_OPERATION_TIMEDOUT ? 504 : 502,
		    "object storage at %s://%s (OSS_ENDPOINT) did not answer: "
		    "%s", s->cfg->scheme, s->cfg->host, errbuf[0] != '\0' ?
		    errbuf : curl_easy_strerror(rc));
	free(url);
	return -1;
}

struct xml_error {
	char code[64];
	char message[160];
};

/* Printable ASCII of text into buf (the rest as '?'): what a server says
 * goes into messages and logs. */
static void
printable(char *buf, size_t size, const char *text)
{
	size_t i;

	for (i = 0; i + 1 < size && text[i] != '\0'; i++)
		buf[i] = text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '?';
	buf[i] = '\0';
}

static int
error_field_cb(const char *path, const char *text, void *arg)
{
	struct xml_error *e = arg;

	if (strcmp(path, "Error/Code") == 0)
		printable(e->code, sizeof e->code, text);
	else if (strcmp(path, "Error/Message") == 0)
		printable(e->message, sizeof e->message, text);
	return 0;
}

void
s3_answer_error(const struct s3 *s, const struct s3_response *resp,
    const char *what, struct error *err)
{
	struct xml_error e = { "", "" };
	const char *hint = "";

	if (resp->body != NULL)
		s3_xml_parse(resp->body, resp->len, error_field_cb, &e);
	if (strcmp(e.code, "SignatureDoesNotMatch") == 0 ||
	    strcmp(e.code, "InvalidAccessKeyId") == 0 ||
	    (resp->status == 403 && e.code[0] == '\0'))
		hint = " (check OSS_ACCESS_KEY_ID and OSS_ACCESS_KEY_SECRET)";
	else if (strcmp(e.code, "NoSuchBucket") == 0)
		hint = " (check OSS_BUCKET_NAME)";
	else if (strcmp(e.code, "AuthorizationHeaderMalformed") == 0 ||
	    strcmp(e.code, "InvalidRegion") == 0)
		hint = " (check OSS_REGION)";
	error_set(err, 502, "object storage at %s://%s, bucket %s: %s: %ld%s%s"
	    "%s%s%s", s->cfg->scheme, s->cfg->host, s->cfg->bucket, what,
	    resp->status, e.code[0] != '\0' ? " " : "", e.code,
	    e.message[0] != '\0' ? ": " : "", e.message, hint);
}
