/*
 * The image store (tools/image-store writes it): every image unpacked
 * once, its layers directories overlayfs stacks as lower layers, its
 * configuration beside them. What the crun backend runs sandboxes from,
 * with no Docker in the way.
 */
#ifndef IMAGE_STORE_H
#define IMAGE_STORE_H

#include <jansson.h>

#include "error.h"

struct image_store;

/* An image as the store has it; owned by the store, valid until the next
 * image_store_get of the same name. */
struct image_store_image {
	char *name;
	/* overlayfs's lowerdir, top layer first, relative to the store's
	 * layers/ directory: short enough for many layers. */
	char *lowerdir;
	json_t *config;			/* Env, Cmd, Entrypoint, WorkingDir,
					 * User, Labels */
};

/* The store at dir (absolute). NULL with err when it cannot be opened. */
struct image_store *image_store_open(const char *dir, struct error *err);
void image_store_free(struct image_store *st);
/* The image of that name, read again when its record changed; NULL with
 * err 404 naming it when the store has none. */
const struct image_store_image *image_store_get(struct image_store *st,
    const char *name, struct error *err);

#endif
