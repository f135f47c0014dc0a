/* What the computer tool's files share (computer.c is the tool). */
#ifndef COMPUTER_H
#define COMPUTER_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"

struct vnc;
struct vnc_image;

enum computer_action {
	COMPUTER_KEY, COMPUTER_TYPE, COMPUTER_MOUSE_MOVE, COMPUTER_LEFT_CLICK,
	COMPUTER_LEFT_CLICK_DRAG, COMPUTER_RIGHT_CLICK, COMPUTER_MIDDLE_CLICK,
	COMPUTER_DOUBLE_CLICK, COMPUTER_SCROLL, COMPUTER_GET_SCREENSHOT,
	COMPUTER_GET_CURSOR_POSITION, COMPUTER_COUNT
};

/* One call: its arguments, borrowed from the request, and the display
 * session it holds while it acts. On the caller's stack. */
struct computer_call {
	enum computer_action action;
	int has_coord;
	int x, y;			/* rounded as computer-use-mcp rounds */
	const char *text;		/* NULL when absent */
	size_t text_len;
	struct vnc *vnc;		/* in a session, else NULL */
};

/* computer_args.c */
extern const char *const computer_action_names[COMPUTER_COUNT];
/* NULL when args fit the input schema, filling c; else the message the
 * npm server's SDK answers with (caller frees). */
char *computer_args_check(json_t *args, struct computer_call *c);
/* What computer-use-mcp refuses before it acts, and our limits: the
 * refusal (caller frees), or NULL. */
char *computer_args_refusal(const struct computer_call *c);
/* A scroll's text ("down", "left:500"): the wheel button's mask and the
 * clicks; else the refusal (caller frees). */
char *computer_scroll(const struct computer_call *c, int *button,
    int *clicks);
/* Keys pressed by one "key" action, at most. */
#define COMPUTER_KEY_MAX_KEYS 64
/* A "key" text ("ctrl+shift+t Return"): each combination pressed in
 * order and released in reverse, as n events in syms and down (room for
 * 2 * COMPUTER_KEY_MAX_KEYS); else the refusal (caller frees). */
char *computer_key_events(const struct computer_call *c, uint32_t *syms,
    int *down, size_t *n);
/* A "type" text as n events in syms and down (room for 2 * text_len),
 * a press and a release a character; else the refusal (caller frees). */
char *computer_type_events(const struct computer_call *c, uint32_t *syms,
    int *down, size_t *n);

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
