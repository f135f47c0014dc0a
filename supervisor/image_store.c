/*
 * Reading the image store (layout: tools/image-store). A record is read
 * once and kept while its file is the same (a refresh replaces it by
 * rename: another inode), so a create costs one fstatat, not a parse.
 * Records are root's (the store is made by root, 0755), but are checked
 * as any input is: a layer is 64 hex digits and must be there.
 */
#include "image_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xmalloc.h"

/* Records are small; a bigger one is not the store's. */
#define RECORD_MAX (1024 * 1024)
/* overlayfs takes at most 500 lower layers. */
#define LAYERS_MAX 500

struct cached {
	struct image_store_image img;
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
	LIST_ENTRY(cached) entry;
};

struct image_store {
	int images_fd;
	int layers_fd;
	LIST_HEAD(, cached) cache;
};

struct image_store *
image_store_open(const char *dir, struct error *err)
{
	struct image_store *st = xcalloc(1, sizeof *st);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	st->images_fd = st->layers_fd = -1;
	if (fd >= 0) {
		st->images_fd = openat(fd, "images", O_RDONLY | O_DIRECTORY |
		    O_CLOEXEC);
		st->layers_fd = openat(fd, "layers", O_RDONLY | O_DIRECTORY |
		    O_CLOEXEC);
		close(fd);
	}
	if (st->images_fd < 0 || st->layers_fd < 0) {
		error_set_errno(err, 500, errno, "SANDBOXD_IMAGE_STORE: cannot "
		    "open the image store (tools/image-store import NAME makes "
		    "it; tools/build-image does for its types)");
		image_store_free(st);
		return NULL;
	}
	LIST_INIT(&st->cache);
	return st;
}

static void
drop(struct cached *c)
{
	LIST_REMOVE(c, entry);
	free(c->img.name);
	free(c->img.lowerdir);
	json_decref(c->img.config);
	free(c);
}

void
image_store_free(struct image_store *st)
{
	if (st == NULL)
		return;
	while (!LIST_EMPTY(&st->cache))
		drop(LIST_FIRST(&st->cache));
	if (st->images_fd >= 0)
		close(st->images_fd);
	if (st->layers_fd >= 0)
		close(st->layers_fd);
	free(st);
}

/* images/<name>.json, '%' and '/' escaped as tools/image-store does. */
static char *
record_name(const char *name)
{
	size_t n = 0;
	char *out = xmalloc(strlen(name) * 3 + 6);

	for (const char *p = name; *p != '\0'; p++) {
		if (*p == '%' || *p == '/') {
			memcpy(out + n, *p == '%' ? "%25" : "%2F", 3);
			n += 3;
		} else {
			out[n++] = *p;
		}
	}
	memcpy(out + n, ".json", 6);
	return out;
}

static int
layer_ok(int layers_fd, const char *l)
{
	struct stat st;

	return l != NULL && strlen(l) == 64 && strspn(l, "0123456789abcdef") ==
	    64 && fstatat(layers_fd, l, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISDIR(st.st_mode);
}

/* lowerdir from the record's layers (bottom first): top first. */
static char *
lowerdir(int layers_fd, json_t *layers, const char *name, struct error *err)
{
	size_t n = json_array_size(layers), len = 0;
	char *out;

	if (!json_is_array(layers) || n == 0 || n > LAYERS_MAX) {
		error_set(err, 500, "image %s: its record in the image store "
		    "has no usable layer list", name);
		return NULL;
	}
	out = xmalloc(n * 65);
	for (size_t i = n; i-- > 0;) {
		const char *l = json_string_value(json_array_get(layers, i));

		if (!layer_ok(layers_fd, l)) {
			error_set(err, 500, "image %s: layer %zu of its record is "
			    "missing from the image store (import it again: "
			    "tools/image-store import %s)", name, i, name);
			free(out);
			return NULL;
		}
		if (len > 0)
			out[len++] = ':';
		memcpy(out + len, l, 64);
		len += 64;
	}
	out[len] = '\0';
	return out;
}

static struct cached *
load(struct image_store *st, int fd, const struct stat *sb, const char *name,
    struct error *err)
{
	json_error_t je;
	json_t *rec, *config;
	struct cached *c;
	char *lower;

	if (!S_ISREG(sb->st_mode) || sb->st_size > RECORD_MAX) {
		error_set(err, 500, "image %s: its record in the image store is "
		    "not a file of at most 1 MiB", name);
		return NULL;
	}
	rec = json_loadfd(fd, 0, &je);
	if (rec == NULL) {
		error_set(err, 500, "image %s: its record in the image store is "
		    "not JSON: %s", name, je.text);
		return NULL;
	}
	config = json_object_get(rec, "config");
	lower = lowerdir(st->layers_fd, json_object_get(rec, "layers"), name,
	    err);
	if (lower == NULL || !json_is_object(config)) {
		if (lower != NULL)
			error_set(err, 500, "image %s: its record in the image "
			    "store has no configuration", name);
		free(lower);
		json_decref(rec);
		return NULL;
	}
	c = xcalloc(1, sizeof *c);
	c->img.name = xstrdup(name);
	c->img.lowerdir = lower;
	c->img.config = json_incref(config);
	c->dev = sb->st_dev;
	c->ino = sb->st_ino;
	c->mtime = sb->st_mtim;
	json_decref(rec);
	LIST_INSERT_HEAD(&st->cache, c, entry);
	return c;
}

const struct image_store_image *
image_store_get(struct image_store *st, const char *name, struct error *err)
{
	char *file = record_name(name);
	struct cached *c;
	struct stat sb;
	int fd;

	LIST_FOREACH(c, &st->cache, entry) {
		if (strcmp(c->img.name, name) == 0)
			break;
	}
	fd = openat(st->images_fd, file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	free(file);
	if (fd < 0 || fstat(fd, &sb) < 0) {
		if (fd >= 0)
			close(fd);
		if (c != NULL)
			drop(c);
		error_set(err, 404, "image %s is not in the image store "
		    "($SANDBOXD_IMAGE_STORE; tools/image-store import %s puts "
		    "it there from Docker)", name, name);
		return NULL;
	}
	if (c != NULL && c->dev == sb.st_dev && c->ino == sb.st_ino &&
	    c->mtime.tv_sec == sb.st_mtim.tv_sec &&
	    c->mtime.tv_nsec == sb.st_mtim.tv_nsec) {
		close(fd);
		return &c->img;
	}
	if (c != NULL)
		drop(c);
	c = load(st, fd, &sb, name, err);
	close(fd);
	return c != NULL ? &c->img : NULL;
}
