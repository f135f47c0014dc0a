/*
 * The layout of a stored workspace (oss_internal.h): object keys, the
 * checks every path from the store passes, the multipart rule, and the
 * manifest, JSON Lines: a header line
 *   {"sandboxd_workspace": 1, "complete": true, "entries": N}
 * then one line per entry
 *   {"path": "src/a.c", "type": "file", "mode": 420, "size": 5, "etag": ".."}
 *   {"path": "src", "type": "dir", "mode": 493}
 *   {"path": "l", "type": "link", "target": "src/a.c"}
 * with "path_b64" / "target_b64" (base64) for bytes that are not UTF-8.
 * Read line by line from a file, each line at most MAX_LINE bytes, so a
 * hostile manifest costs no more memory than its entries.
 */
#include "oss_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <nettle/base64.h>
#include <nettle/md5.h>

#include "utf8.h"
#include "xmalloc.h"

#define MANIFEST_FORMAT 1
/* A path and a target of PATH_MAX, base64, and the rest. */
#define MAX_LINE (16u << 10)

int
oss_plain_key(const char *prefix, const char *path)
{
	size_t n = strlen(path);

	if (strlen(prefix) + 1 + n > OSS_MAX_KEY || !utf8_valid(path, n))
		return 0;
	for (const unsigned char *p = (const unsigned char *)path; *p != '\0';
	    p++) {
		if (*p < 0x20 || *p == 0x7f)
			return 0;
	}
	return 1;
}

char *
oss_file_key(const char *prefix, const char *path)
{
	uint8_t digest[MD5_DIGEST_SIZE];
	char hex[2 * MD5_DIGEST_SIZE + 1];
	struct md5_ctx md5;

	if (oss_plain_key(prefix, path))
		return xasprintf("%s/%s", prefix, path);
	md5_init(&md5);
	md5_update(&md5, strlen(path), (const uint8_t *)path);
	md5_digest(&md5, sizeof digest, digest);
	for (size_t i = 0; i < sizeof digest; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	return xasprintf("%s" OSS_META_SUFFIX "/raw/%s", prefix, hex);
}

char *
oss_manifest_key(const char *prefix)
{
	return xasprintf("%s" OSS_META_SUFFIX "/manifest.jsonl", prefix);
}

int
oss_valid_path(const char *path)
{
	const char *p = path;

	if (*path == '\0' || *path == '/' || strlen(path) >= PATH_MAX)
		return 0;
	while (*p != '\0') {
		size_t n = strcspn(p, "/");

		if (n == 0 || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		p += n;
		if (*p == '/' && *++p == '\0')
			return 0;
	}
	return 1;
}

uint64_t
oss_part_size(uint64_t size)
{
	uint64_t part = OSS_PART_SIZE;

	if (size < OSS_PART_SIZE)
		return 0;
	/* At most OSS_MAX_PARTS parts: larger ones, in whole MiB. */
	if ((size + part - 1) / part > OSS_MAX_PARTS)
		part = ((size / OSS_MAX_PARTS >> 20) + 1) << 20;
	return part;
}

/* s as "name" when it is UTF-8, else as "name_b64". */
static void
set_bytes(json_t *o, const char *name, const char *s)
{
	size_t n = strlen(s);

	if (utf8_valid(s, n)) {
		json_object_set_new(o, name, json_stringn(s, n));
	} else {
		char *b64 = xmalloc(BASE64_ENCODE_RAW_LENGTH(n) + 1), *key;

		base64_encode_raw(b64, n, (const uint8_t *)s);
		b64[BASE64_ENCODE_RAW_LENGTH(n)] = '\0';
		key = xasprintf("%s_b64", name);
		json_object_set_new(o, key, json_string(b64));
		free(key);
		free(b64);
	}
}

static int
put_line(FILE *f, json_t *o)
{
	int rc = json_dumpf(o, f, JSON_COMPACT) == 0 && fputc('\n', f) != EOF;

	json_decref(o);
	return rc ? 0 : -1;
}

static json_t *
entry_line(const struct oss_entry *e)
{
	static const char *const kinds[] = {
		[OSS_FILE] = "file", [OSS_DIR] = "dir", [OSS_LINK] = "link",
	};
	json_t *o = json_object();

	set_bytes(o, "path", e->path);
	json_object_set_new(o, "type", json_string(kinds[e->kind]));
	if (e->kind != OSS_LINK)
		json_object_set_new(o, "mode", json_integer(e->mode));
	if (e->kind == OSS_FILE) {
		json_object_set_new(o, "size", json_integer((json_int_t)e->size));
		json_object_set_new(o, "etag", json_string(e->etag));
	}
	if (e->kind == OSS_LINK)
		set_bytes(o, "target", e->target);
	return o;
}

/* The files of t as bare lines, but those skip lists as files: what an
 * incomplete marker lists. */
static int
file_lines(FILE *f, const struct oss_tree *t, const struct oss_tree *skip)
{
	for (size_t i = 0; t != NULL && i < t->n; i++) {
		const struct oss_entry *dup;
		json_t *o;

		if (t->v[i].kind != OSS_FILE)
			continue;
		dup = skip != NULL ? oss_tree_find(skip, t->v[i].path) : NULL;
		if (dup != NULL && dup->kind == OSS_FILE)
			continue;
		o = json_object();
		set_bytes(o, "path", t->v[i].path);
		json_object_set_new(o, "type", json_string("file"));
		if (put_line(f, o) < 0)
			return -1;
	}
	return 0;
}

int
oss_manifest_write(int fd, const struct oss_tree *tree, int complete,
    const struct oss_tree *also, struct error *err)
{
	int dupfd = dup(fd), rc = 0;
	FILE *f = dupfd >= 0 ? fdopen(dupfd, "w") : NULL;

	if (f == NULL) {
		if (dupfd >= 0)
			close(dupfd);
		error_set_errno(err, 500, errno, "cannot write a manifest");
		return -1;
	}
	rc = put_line(f, json_pack("{s:i,s:b,s:I}", "sandboxd_workspace",
	    MANIFEST_FORMAT, "complete", complete, "entries",
	    (json_int_t)tree->n));
	if (complete) {
		for (size_t i = 0; rc == 0 && i < tree->n; i++)
			rc = put_line(f, entry_line(&tree->v[i]));
	} else if (rc == 0) {
		rc = file_lines(f, tree, NULL) < 0 ||
		    file_lines(f, also, tree) < 0 ? -1 : 0;
	}
	if (fclose(f) != 0)
		rc = -1;
	if (rc < 0)
		error_set_errno(err, 500, errno, "cannot write a manifest");
	return rc;
}

/* "name", or "name_b64" decoded, of o; a new string, or NULL. */
static char *
get_bytes(json_t *o, const char *name)
{
	char *key = xasprintf("%s_b64", name), *out = NULL;
	const char *s = json_string_value(json_object_get(o, name));
	const char *b = json_string_value(json_object_get(o, key));

	free(key);
	if (s != NULL) {
		out = xstrdup(s);
	} else if (b != NULL) {
		struct base64_decode_ctx ctx;
		size_t n = BASE64_DECODE_LENGTH(strlen(b));

		out = xmalloc(n + 1);
		base64_decode_init(&ctx);
		if (!base64_decode_update(&ctx, &n, (uint8_t *)out, strlen(b),
		    b) || !base64_decode_final(&ctx) || memchr(out, '\0', n)) {
			free(out);
			return NULL;
		}
		out[n] = '\0';
	}
	return out;
}

static int
parse_entry(json_t *o, struct oss_tree *t, struct error *err)
{
	const char *type = json_string_value(json_object_get(o, "type"));
	json_t *mode = json_object_get(o, "mode"), *size;
	char *path = get_bytes(o, "path"), shown[128];
	struct oss_entry *e;
	enum oss_kind kind;

	if (path == NULL || type == NULL || !oss_valid_path(path)) {
		oss_printable(shown, sizeof shown, path != NULL ? path : "");
		error_set(err, 502, "the stored manifest names '%s', which is "
		    "no path inside a workspace", shown);
		free(path);
		return -1;
	}
	if (strcmp(type, "file") == 0)
		kind = OSS_FILE;
	else if (strcmp(type, "dir") == 0)
		kind = OSS_DIR;
	else if (strcmp(type, "link") == 0)
		kind = OSS_LINK;
	else
		goto bad;
	e = oss_tree_add(t, path, kind);
	free(path);
	if (mode != NULL && (!json_is_integer(mode) ||
	    json_integer_value(mode) < 0 || json_integer_value(mode) > 07777))
		goto bad;
	e->mode = mode != NULL ? (unsigned)json_integer_value(mode) : 0644;
	if (kind == OSS_FILE && (size = json_object_get(o, "size")) != NULL) {
		const char *etag = json_string_value(json_object_get(o,
		    "etag"));

		if (!json_is_integer(size) || json_integer_value(size) < 0 ||
		    etag == NULL || strlen(etag) >= sizeof e->etag)
			goto bad;
		e->size = (uint64_t)json_integer_value(size);
		memcpy(e->etag, etag, strlen(etag) + 1);
	}
	if (kind == OSS_LINK && ((e->target = get_bytes(o, "target")) ==
	    NULL || e->target[0] == '\0' || strlen(e->target) >= PATH_MAX))
		goto bad;
	return 0;
bad:
	error_set(err, 502, "the stored manifest has a malformed entry");
	return -1;
}

int
oss_manifest_read(int fd, struct oss_tree *tree, int *complete,
    struct error *err)
{
	int dupfd = dup(fd), first = 1, rc = 0;
	FILE *f = dupfd >= 0 && lseek(dupfd, 0, SEEK_SET) == 0 ?
	    fdopen(dupfd, "r") : NULL;
	char *line = xmalloc(MAX_LINE + 1);

	if (f == NULL) {
		if (dupfd >= 0)
			close(dupfd);
		free(line);
		error_set_errno(err, 500, errno, "cannot read a manifest");
		return -1;
	}
	while (rc == 0 && fgets(line, MAX_LINE + 1, f) != NULL) {
		size_t n = strlen(line);
		json_t *o;

		if (n == MAX_LINE && line[n - 1] != '\n') {
			error_set(err, 502, "the stored manifest has a line of "
			    "more than %u bytes", MAX_LINE);
			rc = -1;
			break;
		}
		o = json_loadb(line, n, JSON_REJECT_DUPLICATES, NULL);
		if (!json_is_object(o)) {
			error_set(err, 502, "the stored manifest is not JSON "
			    "lines");
			rc = -1;
		} else if (first) {
			if (json_integer_value(json_object_get(o,
			    "sandboxd_workspace")) != MANIFEST_FORMAT) {
				error_set(err, 502, "the stored manifest is of "
				    "another format");
				rc = -1;
			}
			*complete = json_is_true(json_object_get(o, "complete"));
			first = 0;
		} else if (tree->n >= OSS_MAX_ENTRIES) {
			error_set(err, 413, "the stored manifest has more than %d "
			    "entries", OSS_MAX_ENTRIES);
			rc = -1;
		} else {
			rc = parse_entry(o, tree, err);
		}
		json_decref(o);
	}
	if (rc == 0 && (ferror(f) || first)) {
		error_set(err, 502, "the stored manifest is empty or unreadable");
		rc = -1;
	}
	fclose(f);
	free(line);
	if (rc < 0)
		return -1;
	oss_tree_sort(tree);
	for (size_t i = 1; i < tree->n; i++) {
		if (strcmp(tree->v[i - 1].path, tree->v[i].path) == 0) {
			error_set(err, 502, "the stored manifest names a path "
			    "twice");
			return -1;
		}
	}
	return 0;
}
