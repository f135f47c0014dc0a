/*
 * A small S3 client for the workspace store (oss*.c): requests to any
 * S3-compatible endpoint (AWS S3, MinIO, Ceph's RADOS gateway, R2, Alibaba
 * OSS's S3 endpoint), signed with AWS Signature V4 by libcurl
 * (CURLOPT_AWS_SIGV4). What libcurl 7.88 leaves to the caller, and this
 * file does: the path and query in canonical form (each key byte outside
 * A-Z a-z 0-9 - . _ ~ / percent-encoded once, as S3 wants; parameters
 * sorted, each with its '=', '/' in a value as %2F), the
 * x-amz-content-sha256 header, and the upload size, 0 included (a chunked
 * upload is refused with 411).
 *
 * Every call blocks: they run on worker threads (oss.c), never on the
 * loop. A struct s3 belongs to one thread at a time; its curl handle keeps
 * the connection between requests.
 */
#ifndef S3_H
#define S3_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <nettle/md5.h>

#include "error.h"

/* Where and as whom; lives as long as the configuration. */
struct s3_config {
	char *scheme;		/* "http" or "https" */
	char *host;		/* the endpoint's host[:port] */
	char *bucket;
	char *region;
	char *service;		/* "s3" */
	char *access_key;
	char *secret_key;
	int virtual_host;	/* bucket.host/key, else host/bucket/key */
};

/* One thread's client; s3_close frees what s3_open made. */
struct s3 {
	const struct s3_config *cfg;
	void *curl;			/* CURL * */
	const atomic_int *cancel;	/* non-zero: give up the transfer */
};

/* A query parameter, sent encoded and in sorted order. */
struct s3_param {
	const char *name;
	const char *value;
};

/* One request. The body is `body` (body_len bytes), or body_size bytes of
 * body_fd from body_off (read as sent; body_md5, when set, is fed them).
 * The answer's body goes to out_fd when set and the status is 2xx (at
 * most out_max bytes, out_md5 fed them), else to the response's buffer
 * (at most S3_MAX_BODY). */
struct s3_request {
	const char *method;
	const char *key;		/* NULL: the bucket itself */
	const struct s3_param *params;
	size_t nparams;
	const char *const *headers;	/* "Name: value", all signed */
	size_t nheaders;
	const char *payload_hash;	/* x-amz-content-sha256; NULL: not sent */
	const char *body;
	size_t body_len;
	int body_fd;			/* -1: no file */
	uint64_t body_off, body_size;
	struct md5_ctx *body_md5;
	int out_fd;			/* -1: into the response */
	uint64_t out_max;
	struct md5_ctx *out_md5;
};

/* What came back; s3_response_free frees the body. */
struct s3_response {
	long status;
	char etag[80];			/* the ETag header, unquoted */
	char *body;			/* NUL-terminated, or NULL */
	size_t len;
	uint64_t written;		/* bytes into out_fd */
};

#define S3_MAX_BODY (16u << 20)
/* The payload hash of a request without a body. */
#define S3_EMPTY_SHA256 \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* s3_client.c */
/* OSS_ENDPOINT ("http[s]://host[:port]", or host[:port] for https) into
 * c's scheme and host; 0, or -1 with err. */
int s3_config_endpoint(struct s3_config *c, const char *endpoint,
    struct error *err);
void s3_config_free(struct s3_config *c);
/* Once per process, before any thread starts. */
void s3_global_init(void);
void s3_global_free(void);
void s3_open(struct s3 *s, const struct s3_config *cfg,
    const atomic_int *cancel);
void s3_close(struct s3 *s);
/* A request with every field zero but method and fds -1. */
void s3_request_init(struct s3_request *r, const char *method);
/* Send r and read the answer, whatever its status: 0, or -1 with err
 * when no answer came (502; 504 for a timeout; 503 when cancelled). */
int s3_perform(struct s3 *s, const struct s3_request *r,
    struct s3_response *resp, struct error *err);
void s3_response_free(struct s3_response *resp);
/* err from a non-2xx answer to what ("PUT key"): the status, S3's error
 * code and message, and the setting at fault where it is clear (403:
 * the keys; NoSuchBucket: OSS_BUCKET_NAME). Status 502. */
void s3_answer_error(const struct s3 *s, const struct s3_response *resp,
    const char *what, struct error *err);
/* The request's URL: endpoint, bucket, key and query, all canonical.
 * Caller frees. */
char *s3_url(const struct s3_config *cfg, const char *key,
    const struct s3_param *params, size_t nparams);

/* s3_xml.c: the leaf texts of an answer's XML. cb(path, text, arg) runs at
 * each element's end ("ListBucketResult/Contents/Key"; text "" for one
 * with children), text at most S3_XML_TEXT bytes (longer is an error).
 * 0, or -1 when the XML is malformed or cb returned -1. */
#define S3_XML_TEXT 8192
typedef int (*s3_xml_cb)(const char *path, const char *text, void *arg);
int s3_xml_parse(const char *xml, size_t len, s3_xml_cb cb, void *arg);

#endif
