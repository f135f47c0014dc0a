/* What the computer tool's files share (computer.c is the tool). */
#ifndef COMPUTER_H
#define COMPUTER_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct vnc_image;

/* computer_keys.c */
/* The keysym of a key name ("Return", "ctrl", "F5", "é"); 0 if none. */
uint32_t computer_keysym(const char *name);
/* The keysym that types a character; 0 for controls no key types. */
uint32_t computer_char_keysym(uint32_t cp);
/* A letter's upper-case keysym (held shift makes it), else keysym. */
uint32_t computer_shifted(uint32_t keysym);
/* One code point of valid UTF-8 s; its length, 0 at the end. */
size_t computer_utf8_next(const char *s, size_t len, uint32_t *cp);

/* computer_screenshot.c: img as a PNG, base64, with a red crosshair at
 * (cx, cy) as computer-use-mcp draws one (none when off the screen).
 * Caller frees; NULL with err (500) if PNG encoding failed. */
char *computer_png_base64(const struct vnc_image *img, int cx, int cy,
    struct error *err);

#endif
