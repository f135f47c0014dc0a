/*
 * Objects of the workspace store: a file's ETag foretold, a file put (one
 * PUT, or a multipart upload from OSS_PART_SIZE) and got, streamed from
 * and to its descriptor in constant memory and checked against what the
 * server says it holds, listings page by page, deletions a thousand at a
 * time. On a worker thread; every step checks the job's cancel flag
 * through the client's transfers.
 */
#include "oss_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <nettle/base64.h>
#include <nettle/sha2.h>

#include "http.h"
#include "log.h"
#include "xmalloc.h"

#define HASH_CHUNK (1u << 20)
#define DELETE_BATCH 1000
#define MD5_HEX (2 * MD5_DIGEST_SIZE + 1)

static void
hex(char *out, const uint8_t *digest, size_t n)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", digest[i]);
}

/* The payload hash of a request body (x-amz-content-sha256). */
static void
sha256_hex(const char *data, size_t len, char *out)
{
	uint8_t d[SHA256_DIGEST_SIZE];
	struct sha256_ctx ctx;

	sha256_init(&ctx);
	sha256_update(&ctx, len, (const uint8_t *)data);
	sha256_digest(&ctx, sizeof d, d);
	hex(out, d, sizeof d);
}

static void
md5_hex(struct md5_ctx *ctx, char *out)
{
	uint8_t d[MD5_DIGEST_SIZE];

	md5_digest(ctx, sizeof d, d);
	hex(out, d, sizeof d);
}

int
oss_etag_fd(struct oss_job *job, int fd, uint64_t size, char *etag,
    struct error *err)
{
	uint64_t part = oss_part_size(size), off = 0, in_part = 0;
	struct md5_ctx whole, parts;
	uint8_t *buf = xmalloc(HASH_CHUNK), d[MD5_DIGEST_SIZE];
	unsigned nparts = 0;

	md5_init(&whole);
	md5_init(&parts);
	while (off < size) {
		size_t want = size - off < HASH_CHUNK ? (size_t)(size - off) :
		    HASH_CHUNK;
		ssize_t n;

		if (part != 0 && part - in_part < want)
			want = (size_t)(part - in_part);
		if (oss_cancelled(job, err) < 0)
			goto fail;
		n = pread(fd, buf, want, (off_t)off);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			error_set(err, 409, "the file changed while it was read");
			goto fail;
		}
		md5_update(&whole, (size_t)n, buf);
		off += (uint64_t)n;
		in_part += (uint64_t)n;
		if (part != 0 && (in_part == part || off == size)) {
			md5_digest(&whole, sizeof d, d);
			md5_update(&parts, sizeof d, d);
			nparts++;
			in_part = 0;
		}
	}
	free(buf);
	if (part == 0) {
		md5_hex(&whole, etag);
		return 0;
	}
	md5_hex(&parts, etag);
	snprintf(etag + 2 * MD5_DIGEST_SIZE, OSS_ETAG_MAX - 2 * MD5_DIGEST_SIZE,
	    "-%u", nparts);
	return 0;
fail:
	free(buf);
	return -1;
}

/* resp of what: 2xx, or err. */
static int
answered(struct s3 *s3, struct s3_response *resp, const char *what,
    const char *key, struct error *err)
{
	char shown[160], *w;

	if (resp->status >= 200 && resp->status < 300)
		return 0;
	oss_printable(shown, sizeof shown, key);
	w = xasprintf("%s '%s'", what, shown);
	s3_answer_error(s3, resp, w, err);
	free(w);
	s3_response_free(resp);
	return -1;
}

/* One PUT of size bytes of fd from off (a whole object, or a part with
 * params); *md5_out the MD5 of what was sent, checked against the ETag. */
static int
put_range(struct s3 *s3, const char *key, const struct s3_param *params,
    size_t nparams, int fd, uint64_t off, uint64_t size, uint8_t *md5_out,
    struct error *err)
{
	struct s3_request r;
	struct s3_response resp;
	struct md5_ctx md5;
	char sent[MD5_HEX];

	s3_request_init(&r, "PUT");
	r.key = key;
	r.params = params;
	r.nparams = nparams;
	r.payload_hash = "UNSIGNED-PAYLOAD";
	r.body_fd = fd;
	r.body_off = off;
	r.body_size = size;
	r.body_md5 = &md5;
	md5_init(&md5);
	if (s3_perform(s3, &r, &resp, err) < 0 ||
	    answered(s3, &resp, "PUT", key, err) < 0)
		return -1;
	s3_response_free(&resp);
	md5_digest(&md5, MD5_DIGEST_SIZE, md5_out);
	hex(sent, md5_out, MD5_DIGEST_SIZE);
	if (strcasecmp(resp.etag, sent) != 0) {
		error_set(err, 502, "object storage holds other bytes than were "
		    "sent (ETag %.40s, sent MD5 %s)", resp.etag, sent);
		return -1;
	}
	return 0;
}

struct upload_id {
	char id[512];
	char etag[OSS_ETAG_MAX];
	int error;
};

static int
multipart_cb(const char *path, const char *text, void *arg)
{
	struct upload_id *u = arg;

	if (strcmp(path, "InitiateMultipartUploadResult/UploadId") == 0 &&
	    strlen(text) < sizeof u->id) {
		memcpy(u->id, text, strlen(text) + 1);
	} else if (strcmp(path, "CompleteMultipartUploadResult/ETag") == 0) {
		snprintf(u->etag, sizeof u->etag, "%s", text +
		    (text[0] == '"'));
		u->etag[strcspn(u->etag, "\"")] = '\0';
	} else if (strcmp(path, "Error") == 0) {
		u->error = 1;
	}
	return 0;
}

static int
multipart_call(struct s3 *s3, const char *key, const struct s3_param *p,
    size_t np, const char *body, struct upload_id *u, struct error *err)
{
	static const char *const xml[] = { "Content-Type: application/xml" };
	struct s3_request r;
	struct s3_response resp;
	char sha[2 * SHA256_DIGEST_SIZE + 1];

	s3_request_init(&r, "POST");
	r.key = key;
	r.params = p;
	r.nparams = np;
	r.headers = xml;
	r.nheaders = 1;
	r.body = body;
	r.body_len = body != NULL ? strlen(body) : 0;
	sha256_hex(body != NULL ? body : "", r.body_len, sha);
	r.payload_hash = sha;
	if (s3_perform(s3, &r, &resp, err) < 0 ||
	    answered(s3, &resp, "multipart upload of", key, err) < 0)
		return -1;
	/* S3 may answer a completion 200 and an error inside. */
	if (resp.body == NULL || s3_xml_parse(resp.body, resp.len,
	    multipart_cb, u) < 0 || u->error) {
		resp.status = 500;
		answered(s3, &resp, "multipart upload of", key, err);
		return -1;
	}
	s3_response_free(&resp);
	return 0;
}

static void
abort_multipart(struct s3 *s3, const char *key, const char *id)
{
	struct s3_param p[] = { { "uploadId", id } };
	struct s3_request r;
	struct s3_response resp;
	struct error e;

	s3_request_init(&r, "DELETE");
	r.key = key;
	r.params = p;
	r.nparams = 1;
	r.payload_hash = S3_EMPTY_SHA256;
	if (s3_perform(s3, &r, &resp, &e) == 0)
		s3_response_free(&resp);
}

static int
head_etag(struct s3 *s3, const char *key, char *etag, struct error *err)
{
	struct s3_request r;
	struct s3_response resp;

	s3_request_init(&r, "HEAD");
	r.key = key;
	r.payload_hash = S3_EMPTY_SHA256;
	if (s3_perform(s3, &r, &resp, err) < 0 ||
	    answered(s3, &resp, "HEAD", key, err) < 0)
		return -1;
	s3_response_free(&resp);
	snprintf(etag, OSS_ETAG_MAX, "%s", resp.etag);
	return 0;
}

static int
put_multipart(struct s3 *s3, const char *key, int fd, uint64_t size,
    char *etag, struct error *err)
{
	uint64_t part = oss_part_size(size);
	unsigned nparts = (unsigned)((size + part - 1) / part);
	struct s3_param init[] = { { "uploads", "" } };
	struct upload_id u = { "", "", 0 };
	struct md5_ctx parts;
	uint8_t d[MD5_DIGEST_SIZE];
	char *body = NULL, want[OSS_ETAG_MAX];
	size_t len = 0;
	FILE *f;
	int rc = -1;

	if (multipart_call(s3, key, init, 1, NULL, &u, err) < 0)
		return -1;
	if (u.id[0] == '\0') {
		error_set(err, 502, "object storage began a multipart upload "
		    "without an UploadId");
		return -1;
	}
	md5_init(&parts);
	f = open_memstream(&body, &len);
	if (f == NULL)
		fatal("out of memory");
	fputs("<CompleteMultipartUpload>", f);
	for (unsigned i = 0; i < nparts; i++) {
		uint64_t off = (uint64_t)i * part;
		char num[16];
		struct s3_param p[] = { { "partNumber", num },
		    { "uploadId", u.id } };

		snprintf(num, sizeof num, "%u", i + 1);
		if (put_range(s3, key, p, 2, fd, off, size - off < part ?
		    size - off : part, d, err) < 0)
			goto out;
		md5_update(&parts, sizeof d, d);
		hex(want, d, sizeof d);
		fprintf(f, "<Part><PartNumber>%u</PartNumber><ETag>\"%s\""
		    "</ETag></Part>", i + 1, want);
	}
	fputs("</CompleteMultipartUpload>", f);
	if (fclose(f) != 0)
		fatal("out of memory");
	f = NULL;
	{
		struct s3_param p[] = { { "uploadId", u.id } };

		if (multipart_call(s3, key, p, 1, body, &u, err) < 0)
			goto out;
	}
	md5_hex(&parts, want);
	snprintf(want + 2 * MD5_DIGEST_SIZE, sizeof want - 2 * MD5_DIGEST_SIZE,
	    "-%u", nparts);
	/* Ceph 16's RADOS gateway answers the completion with an empty
	 * ETag; the object's own says what was made. */
	if (u.etag[0] == '\0' && head_etag(s3, key, u.etag, err) < 0)
		goto out;
	if (strcasecmp(u.etag, want) != 0) {
		error_set(err, 502, "object storage made another object than "
		    "was sent (ETag %.48s, expected %s)", u.etag, want);
		goto out;
	}
	if (etag != NULL)
		memcpy(etag, want, strlen(want) + 1);
	rc = 0;
out:
	if (f != NULL)
		fclose(f);
	free(body);
	if (rc < 0)
		abort_multipart(s3, key, u.id);
	return rc;
}

int
oss_put_fd(struct s3 *s3, const char *key, int fd, uint64_t size,
    char *etag, struct error *err)
{
	uint8_t d[MD5_DIGEST_SIZE];

	if (oss_part_size(size) != 0)
		return put_multipart(s3, key, fd, size, etag, err);
	if (put_range(s3, key, NULL, 0, fd, 0, size, d, err) < 0)
		return -1;
	if (etag != NULL)
		hex(etag, d, sizeof d);
	return 0;
}

static int
get(struct s3 *s3, const char *key, int fd, uint64_t max,
    struct md5_ctx *md5, struct s3_response *resp, struct error *err)
{
	struct s3_request r;

	s3_request_init(&r, "GET");
	r.key = key;
	r.payload_hash = S3_EMPTY_SHA256;
	r.out_fd = fd;
	r.out_max = max;
	r.out_md5 = md5;
	return s3_perform(s3, &r, resp, err);
}

int
oss_get_fd(struct s3 *s3, const char *key, int fd, uint64_t size,
    const char *etag, struct error *err)
{
	struct s3_response resp;
	struct md5_ctx md5;
	char got[MD5_HEX], shown[160];

	md5_init(&md5);
	if (get(s3, key, fd, size, &md5, &resp, err) < 0 ||
	    answered(s3, &resp, "GET", key, err) < 0)
		return -1;
	s3_response_free(&resp);
	oss_printable(shown, sizeof shown, key);
	if (resp.written != size) {
		error_set(err, 502, "object storage sent %" PRIu64 " bytes of "
		    "'%s', which it listed with %" PRIu64, resp.written, shown,
		    size);
		return -1;
	}
	md5_hex(&md5, got);
	/* A one-part object's ETag is its MD5 (a multipart one's is not). */
	if (etag != NULL && strlen(etag) == 2 * MD5_DIGEST_SIZE &&
	    strcasecmp(etag, got) != 0) {
		error_set(err, 502, "object storage sent other bytes of '%s' "
		    "than its ETag says", shown);
		return -1;
	}
	return 0;
}

int
oss_get_optional(struct s3 *s3, const char *key, int fd, uint64_t max,
    struct error *err)
{
	struct s3_response resp;

	if (get(s3, key, fd, max, NULL, &resp, err) < 0)
		return -1;
	if (resp.status == 404) {
		s3_response_free(&resp);
		return 1;
	}
	if (answered(s3, &resp, "GET", key, err) < 0)
		return -1;
	s3_response_free(&resp);
	return 0;
}

/* One page of a listing. */
struct page {
	struct listed {
		char *key;
		uint64_t size;
		char etag[OSS_ETAG_MAX];
	} *v;
	size_t n, cap;
	struct listed cur;
	int truncated;
	int url_encoded;
	char *next;
	int bad;
};

static int
page_cb(const char *path, const char *text, void *arg)
{
	struct page *p = arg;
	const char *leaf;

	if (strncmp(path, "ListBucketResult/", 17) != 0)
		return 0;
	leaf = path + 17;
	if (strcmp(leaf, "Contents/Key") == 0) {
		free(p->cur.key);
		p->cur.key = xstrdup(text);
	} else if (strcmp(leaf, "Contents/Size") == 0) {
		char *end;

		errno = 0;
		p->cur.size = strtoull(text, &end, 10);
		p->bad |= *text == '\0' || *end != '\0' || errno != 0;
	} else if (strcmp(leaf, "Contents/ETag") == 0) {
		snprintf(p->cur.etag, sizeof p->cur.etag, "%s",
		    text + (text[0] == '"'));
		p->cur.etag[strcspn(p->cur.etag, "\"")] = '\0';
	} else if (strcmp(leaf, "Contents") == 0) {
		if (p->cur.key == NULL) {
			p->bad = 1;
			return 0;
		}
		if (p->n == p->cap) {
			p->cap = p->cap != 0 ? p->cap * 2 : 256;
			p->v = xreallocarray(p->v, p->cap, sizeof *p->v);
		}
		p->v[p->n++] = p->cur;
		memset(&p->cur, 0, sizeof p->cur);
	} else if (strcmp(leaf, "IsTruncated") == 0) {
		p->truncated = strcmp(text, "true") == 0;
	} else if (strcmp(leaf, "NextContinuationToken") == 0) {
		free(p->next);
		p->next = xstrdup(text);
	} else if (strcmp(leaf, "EncodingType") == 0) {
		p->url_encoded = strcmp(text, "url") == 0;
	}
	return 0;
}

static void
page_free(struct page *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->v[i].key);
	free(p->v);
	free(p->cur.key);
	free(p->next);
	memset(p, 0, sizeof *p);
}

int
oss_list(struct s3 *s3, const char *prefix, oss_list_cb cb, void *arg,
    struct error *err)
{
	char *token = NULL;
	int rc = 0;

	do {
		struct s3_param p[] = {
			{ "list-type", "2" }, { "prefix", prefix },
			{ "encoding-type", "url" },
			{ "continuation-token", token },
		};
		struct page page = { 0 };
		struct s3_request r;
		struct s3_response resp;

		s3_request_init(&r, "GET");
		r.params = p;
		r.nparams = token != NULL ? 4 : 3;
		r.payload_hash = S3_EMPTY_SHA256;
		if (s3_perform(s3, &r, &resp, err) < 0 ||
		    answered(s3, &resp, "LIST", prefix, err) < 0) {
			rc = -1;
			break;
		}
		if (resp.body == NULL || s3_xml_parse(resp.body, resp.len,
		    page_cb, &page) < 0 || page.bad ||
		    (page.truncated && page.next == NULL)) {
			error_set(err, 502, "object storage sent a listing that "
			    "is not one");
			rc = -1;
		}
		s3_response_free(&resp);
		for (size_t i = 0; rc == 0 && i < page.n; i++) {
			struct listed *o = &page.v[i];
			char *decoded;

			if (page.url_encoded) {
				if (http_percent_decode(o->key, strlen(o->key), 1,
				    &decoded) < 0) {
					error_set(err, 502, "object storage listed "
					    "a key that is not URL-encoded");
					rc = -1;
					break;
				}
				free(o->key);
				o->key = decoded;
			}
			if (strncmp(o->key, prefix, strlen(prefix)) == 0)
				rc = cb(o->key, o->size, o->etag, arg, err);
		}
		free(token);
		token = rc == 0 && page.truncated ? xstrdup(page.next) : NULL;
		page_free(&page);
	} while (token != NULL);
	free(token);
	return rc;
}

/* key with XML's five characters escaped (keys have no control ones). */
static void
xml_text(FILE *f, const char *s)
{
	for (; *s != '\0'; s++) {
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&apos;", f); break;
		default: fputc(*s, f);
		}
	}
}

static int
delete_cb(const char *path, const char *text, void *arg)
{
	(void)text;
	if (strcmp(path, "DeleteResult/Error") == 0)
		*(int *)arg = 1;
	return 0;
}

static int
delete_batch(struct s3 *s3, char **keys, size_t n, struct error *err)
{
	struct s3_param p[] = { { "delete", "" } };
	uint8_t m[MD5_DIGEST_SIZE];
	char sha[2 * SHA256_DIGEST_SIZE + 1], b64[BASE64_ENCODE_RAW_LENGTH(
	    MD5_DIGEST_SIZE) + 1], *body = NULL, *md5h;
	const char *headers[2];
	struct md5_ctx mctx;
	struct s3_request r;
	struct s3_response resp;
	size_t len = 0;
	int failed = 0, rc;
	FILE *f = open_memstream(&body, &len);

	if (f == NULL)
		fatal("out of memory");
	fputs("<Delete><Quiet>true</Quiet>", f);
	for (size_t i = 0; i < n; i++) {
		fputs("<Object><Key>", f);
		xml_text(f, keys[i]);
		fputs("</Key></Object>", f);
	}
	fputs("</Delete>", f);
	if (fclose(f) != 0)
		fatal("out of memory");
	sha256_hex(body, len, sha);
	/* S3 wants the body's MD5 on a multi-object delete. */
	md5_init(&mctx);
	md5_update(&mctx, len, (const uint8_t *)body);
	md5_digest(&mctx, sizeof m, m);
	base64_encode_raw(b64, sizeof m, m);
	b64[BASE64_ENCODE_RAW_LENGTH(MD5_DIGEST_SIZE)] = '\0';
	md5h = xasprintf("Content-MD5: %s", b64);
	headers[0] = md5h;
	headers[1] = "Content-Type: application/xml";
	s3_request_init(&r, "POST");
	r.params = p;
	r.nparams = 1;
	r.headers = headers;
	r.nheaders = 2;
	r.body = body;
	r.body_len = len;
	r.payload_hash = sha;
	rc = s3_perform(s3, &r, &resp, err) < 0 ||
	    answered(s3, &resp, "DELETE of", keys[0], err) < 0 ? -1 : 0;
	if (rc == 0) {
		if (resp.body != NULL && (s3_xml_parse(resp.body, resp.len,
		    delete_cb, &failed) < 0 || failed)) {
			error_set(err, 502, "object storage did not delete every "
			    "object asked");
			rc = -1;
		}
		s3_response_free(&resp);
	}
	free(md5h);
	free(body);
	return rc;
}

int
oss_delete(struct s3 *s3, char **keys, size_t n, struct error *err)
{
	for (size_t i = 0; i < n; i += DELETE_BATCH) {
		if (delete_batch(s3, keys + i, n - i < DELETE_BATCH ? n - i :
		    DELETE_BATCH, err) < 0)
			return -1;
	}
	return 0;
}
