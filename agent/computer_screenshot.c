/*
 * The computer tool's screenshots: the screen's RGBX copy as a PNG
 * (libpng), then base64 for the MCP image item.
 *
 * The PNG is made for speed: a desktop is mostly flat colour, which
 * zlib's fastest level packs small without PNG's row filters in about
 * 6 ms here (1280x800), where the default level with adaptive filters
 * takes six times as long for a file two thirds the size.
 */
#include "computer.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "vnc.h"
#include "xmalloc.h"

/* computer-use-mcp's crosshair: 20 pixels each way, 3 wide, red. */
#define CROSSHAIR_REACH 20

struct png_out {
	unsigned char *data;
	size_t len, cap;
};

static void
png_write_cb(png_structp png, png_bytep data, size_t len)
{
	struct png_out *o = png_get_io_ptr(png);

	if (o->len + len > o->cap) {
		while (o->len + len > o->cap)
			o->cap = o->cap != 0 ? o->cap * 2 : 64 * 1024;
		o->data = xrealloc(o->data, o->cap);
	}
	memcpy(o->data + o->len, data, len);
	o->len += len;
}

static void
png_flush_cb(png_structp png)
{
	(void)png;
}

static void
put_red(const struct vnc_image *img, unsigned char *px, int x, int y)
{
	unsigned char *p;

	if (x < 0 || y < 0 || x >= img->width || y >= img->height)
		return;
	p = px + ((size_t)y * (size_t)img->width + (size_t)x) * 4;
	p[0] = 0xff;
	p[1] = 0;
	p[2] = 0;
}

static void
crosshair(const struct vnc_image *img, int cx, int cy)
{
	if (cx < 0 || cy < 0 || cx >= img->width || cy >= img->height)
		return;
	for (int d = -CROSSHAIR_REACH; d <= CROSSHAIR_REACH; d++)
		for (int t = -1; t <= 1; t++) {
			put_red(img, img->pixels, cx + d, cy + t);
			put_red(img, img->pixels, cx + t, cy + d);
		}
}

static char *
base64(const unsigned char *s, size_t len)
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "abcdefghijklmnopqrstuvwxyz0123456789+/";
	char *out = xmalloc((len + 2) / 3 * 4 + 1), *o = out;
	size_t i = 0;

	for (; i + 3 <= len; i += 3) {
		unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 |
		    s[i + 2];

		*o++ = abc[v >> 18];
		*o++ = abc[v >> 12 & 63];
		*o++ = abc[v >> 6 & 63];
		*o++ = abc[v & 63];
	}
	if (i < len) {
		unsigned v = (unsigned)s[i] << 16 |
		    (i + 1 < len ? (unsigned)s[i + 1] << 8 : 0);

		*o++ = abc[v >> 18];
		*o++ = abc[v >> 12 & 63];
		*o++ = i + 1 < len ? abc[v >> 6 & 63] : '=';
		*o++ = '=';
	}
	*o = '\0';
	return out;
}

/* setjmp has a function of its own, in which no local changes after it
 * (a longjmp would leave such a local undefined). */
static int
encode(const struct vnc_image *img, png_bytep *rows, struct png_out *out)
{
	png_structp png;
	png_infop info;

	png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	if (png == NULL)
		return -1;
	info = png_create_info_struct(png);
	if (info == NULL || setjmp(png_jmpbuf(png))) {
		png_destroy_write_struct(&png, &info);
		return -1;
	}
	png_set_write_fn(png, out, png_write_cb, png_flush_cb);
	png_set_IHDR(png, info, (png_uint_32)img->width,
	    (png_uint_32)img->height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
	    PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_set_compression_level(png, 1);
	png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
	png_write_info(png, info);
	/* The fourth byte of each pixel is padding. */
	png_set_filler(png, 0, PNG_FILLER_AFTER);
	png_write_image(png, rows);
	png_write_end(png, NULL);
	png_destroy_write_struct(&png, &info);
	return 0;
}

char *
computer_png_base64(const struct vnc_image *img, int cx, int cy,
    struct error *err)
{
	struct png_out out = { 0 };
	png_bytep *rows;
	char *b64;
	int rc;

	crosshair(img, cx, cy);
	rows = xcalloc((size_t)img->height, sizeof *rows);
	for (int y = 0; y < img->height; y++)
		rows[y] = img->pixels + (size_t)y * (size_t)img->width * 4;
	rc = encode(img, rows, &out);
	free(rows);
	if (rc < 0) {
		free(out.data);
		error_set(err, 500, "cannot encode the screenshot as PNG");
		return NULL;
	}
	b64 = base64(out.data, out.len);
	free(out.data);
	return b64;
}
