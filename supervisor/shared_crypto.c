/*
 * Shared state in Redis: what makes it trustworthy. Whoever can write
 * Redis is not trusted (see SECURITY.md): everything an
 * instance reads there that steers a request (a record, a lease, a take
 * from the pool, a release request, a session's activity) carries an
 * HMAC-SHA256 made with a key derived from SANDBOXD_REDIS_SECRET, which
 * the instances share through their configuration and Redis never holds,
 * over the Redis key it is stored under and each of its parts, so a value
 * moved to another key or another owner does not check. A sandbox's token
 * is sealed (ChaCha20-Poly1305, a random nonce, the key as associated
 * data): a reader of Redis cannot use it. One key per purpose, derived
 * with HKDF-SHA256 (salt "sandboxd-redis-v1", info "mac" and "seal").
 * The formats are those of tests/integration/helpers/redis_sign.py.
 */
#include "sandboxd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <nettle/chacha-poly1305.h>
#include <nettle/hkdf.h>
#include <nettle/hmac.h>
#include <nettle/memops.h>

#include "log.h"
#include "shared_internal.h"
#include "xmalloc.h"

/* 256 bits once encoded as base64 or hex; a passphrase as long does. */
#define SECRET_MIN 32
#define SECRET_MAX 4096
#define KEY_LEN 32
/* A token and a little more: what is sealed is only ever a token. */
#define SEAL_MAX 128

static const char salt[] = "sandboxd-redis-v1";
static uint8_t mac_key[KEY_LEN], seal_key[KEY_LEN];

const char *const shared_fields[SHARED_NFIELDS] = {
	"id", "owner", "type", "image", "token", "agent", "port", "state",
	"session", "meta", "container_id", "mount_dir", "storage_path",
	"timeout", "created_at", "updated_at", "ports", "host", "api",
};

const char *
shared_field(json_t *f, const char *k)
{
	const char *v = json_string_value(json_object_get(f, k));

	return v != NULL ? v : "";
}

static void
derive(const uint8_t *secret, size_t len)
{
	struct hmac_sha256_ctx ctx;
	uint8_t prk[SHA256_DIGEST_SIZE];

	hmac_sha256_set_key(&ctx, sizeof salt - 1, (const uint8_t *)salt);
	hkdf_extract(&ctx, (nettle_hash_update_func *)hmac_sha256_update,
	    (nettle_hash_digest_func *)hmac_sha256_digest, SHA256_DIGEST_SIZE,
	    len, secret, prk);
	hmac_sha256_set_key(&ctx, sizeof prk, prk);
	hkdf_expand(&ctx, (nettle_hash_update_func *)hmac_sha256_update,
	    (nettle_hash_digest_func *)hmac_sha256_digest, SHA256_DIGEST_SIZE,
	    3, (const uint8_t *)"mac", KEY_LEN, mac_key);
	hkdf_expand(&ctx, (nettle_hash_update_func *)hmac_sha256_update,
	    (nettle_hash_digest_func *)hmac_sha256_digest, SHA256_DIGEST_SIZE,
	    4, (const uint8_t *)"seal", KEY_LEN, seal_key);
	explicit_bzero(prk, sizeof prk);
	explicit_bzero(&ctx, sizeof ctx);
}

/* The file's first line, without its line end. */
static int
read_secret_file(const char *path, char **out, struct error *err)
{
	char buf[SECRET_MAX + 2];
	size_t n;
	FILE *f = fopen(path, "re");

	if (f == NULL) {
		error_set_errno(err, 400, errno, "SANDBOXD_REDIS_SECRET_FILE: "
		    "cannot read %s", path);
		return -1;
	}
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	*out = xstrdup(buf);
	explicit_bzero(buf, sizeof buf);
	return 0;
}

static void
wipe(char **s)
{
	if (*s != NULL) {
		explicit_bzero(*s, strlen(*s));
		free(*s);
		*s = NULL;
	}
}

int
shared_secret_load(struct sandboxd_config *c, struct error *err)
{
	const char *key = "SANDBOXD_REDIS_SECRET";
	const char *file = c->redis_secret_file;
	char *secret = c->redis_secret;
	size_t len;

	/* Not for the processes we start (cp, rm of workspaces), nor kept
	 * in the configuration. */
	unsetenv("SANDBOXD_REDIS_SECRET");
	c->redis_secret = NULL;
	if (file != NULL && file[0] != '\0') {
		if (secret != NULL && secret[0] != '\0') {
			error_set(err, 400, "SANDBOXD_REDIS_SECRET and "
			    "SANDBOXD_REDIS_SECRET_FILE: give one of them, not "
			    "both");
			wipe(&secret);
			return -1;
		}
		wipe(&secret);
		key = "SANDBOXD_REDIS_SECRET_FILE";
		if (read_secret_file(file, &secret, err) < 0)
			return -1;
	}
	len = secret != NULL ? strlen(secret) : 0;
	if (len == 0) {
		error_set(err, 400, "SANDBOXD_REDIS_SECRET: REDIS_ENABLED needs "
		    "a secret every instance is given and Redis does not hold "
		    "(SANDBOXD_REDIS_SECRET, or SANDBOXD_REDIS_SECRET_FILE "
		    "naming a file with it), at least %d characters, e.g. "
		    "head -c 32 /dev/urandom | base64", SECRET_MIN);
		wipe(&secret);
		return -1;
	}
	if (len < SECRET_MIN || len > SECRET_MAX) {
		error_set(err, 400, "%s: the secret has %zu characters; it "
		    "needs %d to %d", key, len, SECRET_MIN, SECRET_MAX);
		wipe(&secret);
		return -1;
	}
	derive((const uint8_t *)secret, len);
	wipe(&secret);
	return 0;
}

static void
mac_part(struct hmac_sha256_ctx *ctx, const char *s)
{
	size_t n = strlen(s);
	uint8_t len[4] = { (uint8_t)(n >> 24), (uint8_t)(n >> 16),
	    (uint8_t)(n >> 8), (uint8_t)n };

	hmac_sha256_update(ctx, sizeof len, len);
	hmac_sha256_update(ctx, n, (const uint8_t *)s);
}

static void
hex(char *out, const uint8_t *b, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

static int
unhex(uint8_t *out, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int v = 0;

		for (int j = 0; j < 2; j++) {
			char c = s[2 * i + j];

			v <<= 4;
			if (c >= '0' && c <= '9')
				v |= c - '0';
			else if (c >= 'a' && c <= 'f')
				v |= c - 'a' + 10;
			else
				return -1;
		}
		out[i] = (uint8_t)v;
	}
	return 0;
}

void
shared_mac(char out[SHARED_MAC_HEX], const char *domain, const char *key,
    const char *const *parts, size_t nparts)
{
	struct hmac_sha256_ctx ctx;
	uint8_t d[SHA256_DIGEST_SIZE];

	hmac_sha256_set_key(&ctx, sizeof mac_key, mac_key);
	mac_part(&ctx, domain);
	mac_part(&ctx, key);
	for (size_t i = 0; i < nparts; i++)
		mac_part(&ctx, parts[i] != NULL ? parts[i] : "");
	hmac_sha256_digest(&ctx, sizeof d, d);
	hex(out, d, sizeof d);
}

int
shared_mac_ok(const char *mac, const char *domain, const char *key,
    const char *const *parts, size_t nparts)
{
	char want[SHARED_MAC_HEX];

	if (mac == NULL || strlen(mac) != SHARED_MAC_HEX - 1)
		return 0;
	shared_mac(want, domain, key, parts, nparts);
	return memeql_sec(want, mac, SHARED_MAC_HEX - 1);
}

char *
shared_seal(const char *plain, const char *key)
{
	struct chacha_poly1305_ctx ctx;
	size_t n = strlen(plain);
	uint8_t buf[CHACHA_POLY1305_NONCE_SIZE + SEAL_MAX +
	    CHACHA_POLY1305_DIGEST_SIZE];
	size_t total = CHACHA_POLY1305_NONCE_SIZE + n +
	    CHACHA_POLY1305_DIGEST_SIZE;
	char *out;

	if (n > SEAL_MAX)
		fatal("shared_seal: %zu bytes is more than a token", n);
	/* 96 random bits a nonce: no two sealings under the key meet. */
	token_random_bytes(buf, CHACHA_POLY1305_NONCE_SIZE);
	chacha_poly1305_set_key(&ctx, seal_key);
	chacha_poly1305_set_nonce(&ctx, buf);
	chacha_poly1305_update(&ctx, strlen(key), (const uint8_t *)key);
	chacha_poly1305_encrypt(&ctx, n, buf + CHACHA_POLY1305_NONCE_SIZE,
	    (const uint8_t *)plain);
	chacha_poly1305_digest(&ctx, CHACHA_POLY1305_DIGEST_SIZE,
	    buf + CHACHA_POLY1305_NONCE_SIZE + n);
	out = xmalloc(2 * total + 1);
	hex(out, buf, total);
	explicit_bzero(&ctx, sizeof ctx);
	return out;
}

int
shared_unseal(const char *sealed, const char *key, char *out, size_t size)
{
	struct chacha_poly1305_ctx ctx;
	uint8_t buf[CHACHA_POLY1305_NONCE_SIZE + SEAL_MAX +
	    CHACHA_POLY1305_DIGEST_SIZE], tag[CHACHA_POLY1305_DIGEST_SIZE];
	size_t len = strlen(sealed), total, n;
	int ok;

	if (len % 2 != 0 || len / 2 > sizeof buf ||
	    len / 2 < CHACHA_POLY1305_NONCE_SIZE + CHACHA_POLY1305_DIGEST_SIZE)
		return -1;
	total = len / 2;
	n = total - CHACHA_POLY1305_NONCE_SIZE - CHACHA_POLY1305_DIGEST_SIZE;
	if (n + 1 > size || unhex(buf, sealed, total) < 0)
		return -1;
	chacha_poly1305_set_key(&ctx, seal_key);
	chacha_poly1305_set_nonce(&ctx, buf);
	chacha_poly1305_update(&ctx, strlen(key), (const uint8_t *)key);
	chacha_poly1305_decrypt(&ctx, n, (uint8_t *)out,
	    buf + CHACHA_POLY1305_NONCE_SIZE);
	chacha_poly1305_digest(&ctx, sizeof tag, tag);
	ok = memeql_sec(tag, buf + CHACHA_POLY1305_NONCE_SIZE + n, sizeof tag);
	explicit_bzero(&ctx, sizeof ctx);
	if (!ok) {
		explicit_bzero(out, n);
		return -1;
	}
	out[n] = '\0';
	return memchr(out, '\0', n) == NULL ? 0 : -1;
}

/* The parts of a record's MAC: each field's name and value. */
static size_t
record_parts(json_t *f, const char **parts)
{
	size_t n = 0;

	for (size_t i = 0; i < SHARED_NFIELDS; i++) {
		parts[n++] = shared_fields[i];
		parts[n++] = shared_field(f, shared_fields[i]);
	}
	return n;
}

void
shared_record_sign(const char *key, json_t *f)
{
	const char *parts[2 * SHARED_NFIELDS];
	char mac[SHARED_MAC_HEX];

	shared_mac(mac, "record", key, parts, record_parts(f, parts));
	json_object_set_new(f, "mac", json_string(mac));
}

int
shared_record_signed(const char *key, json_t *f)
{
	const char *parts[2 * SHARED_NFIELDS];

	return shared_mac_ok(shared_field(f, "mac"), "record", key, parts,
	    record_parts(f, parts));
}

char *
shared_take_sign(const char *key, const char *owner, const char *by,
    const char *session, const char *meta, const char *at)
{
	const char *parts[] = { owner, by, session, meta, at };
	char mac[SHARED_MAC_HEX], *s;
	json_t *o;

	shared_mac(mac, "take", key, parts, sizeof parts / sizeof parts[0]);
	o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "by", by,
	    "session", session, "meta", meta, "at", at, "mac", mac);
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

json_t *
shared_take_check(const char *key, const char *owner, const char *take)
{
	json_t *o = *take != '\0' ? json_loads(take, 0, NULL) : NULL;
	const char *parts[] = { owner, shared_field(o, "by"),
	    shared_field(o, "session"), shared_field(o, "meta"),
	    shared_field(o, "at") };

	if (json_is_object(o) && shared_mac_ok(shared_field(o, "mac"),
	    "take", key, parts, sizeof parts / sizeof parts[0]))
		return o;
	json_decref(o);
	return NULL;
}

char *
shared_release_sign(const char *key, const char *owner, const char *by)
{
	const char *parts[] = { owner, by };
	char mac[SHARED_MAC_HEX];

	shared_mac(mac, "release", key, parts, 2);
	return xasprintf("%s %s", by, mac);
}

int
shared_release_ok(const char *key, const char *owner, const char *release)
{
	const char *sp = strchr(release, ' ');
	char by[65];
	const char *parts[] = { owner, by };

	if (sp == NULL || (size_t)(sp - release) >= sizeof by)
		return 0;
	memcpy(by, release, (size_t)(sp - release));
	by[sp - release] = '\0';
	return shared_mac_ok(sp + 1, "release", key, parts, 2);
}
