/*
 * The computer tool's arguments: computer-use-mcp's input schema checked
 * as its SDK (zod) checks it, with zod's messages, one issue a line; then
 * the checks it makes before it acts, and our limits, each said in its
 * refusal when exceeded.
 */
#include "computer.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "jsonx.h"
#include "log.h"
#include "xmalloc.h"

#define TYPE_MAX_CHARS 4096
#define KEY_MAX_LEN 256
/* A scroll's N pixels are N / 50 wheel clicks, at least one. */
#define SCROLL_PIXELS_PER_CLICK 50
#define SCROLL_MAX_CLICKS 100

const char *const computer_action_names[COMPUTER_COUNT] = {
	"key", "type", "mouse_move", "left_click", "left_click_drag",
	"right_click", "middle_click", "double_click", "scroll",
	"get_screenshot", "get_cursor_position",
};

static char *
refusal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *
refusal(const char *fmt, ...)
{
	char *text;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&text, fmt, ap) < 0)
		fatal("out of memory");
	va_end(ap);
	return text;
}

/* One line per zod issue, as the MCP SDK joins them. */
static void
issue(char **msg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
issue(char **msg, const char *fmt, ...)
{
	char *line, *joined;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&line, fmt, ap) < 0)
		fatal("out of memory");
	va_end(ap);
	joined = *msg != NULL ? xasprintf("%s\n%s", *msg, line) : line;
	if (*msg != NULL) {
		free(*msg);
		free(line);
	}
	*msg = joined;
}

static void
check_action(json_t *v, struct computer_call *c, char **msg)
{
	for (int i = 0; v != NULL && json_is_string(v) && i < COMPUTER_COUNT; i++)
		if (strcmp(json_string_value(v), computer_action_names[i]) == 0) {
			c->action = (enum computer_action)i;
			return;
		}
	issue(msg, "Invalid option: expected one of \"key\"|\"type\"|"
	    "\"mouse_move\"|\"left_click\"|\"left_click_drag\"|\"right_click\"|"
	    "\"middle_click\"|\"double_click\"|\"scroll\"|\"get_screenshot\"|"
	    "\"get_cursor_position\" at action");
}

static void
check_coordinate(json_t *v, struct computer_call *c, char **msg)
{
	size_t i;
	json_t *n;
	int bad = 0;

	if (v == NULL || json_is_null(v))
		return;
	if (!json_is_array(v)) {
		issue(msg, "Invalid input: expected array, received %s at "
		    "coordinate", jsonx_zod_type(v));
		return;
	}
	json_array_foreach(v, i, n) {
		if (!json_is_number(n)) {
			issue(msg, "Invalid input: expected number, received %s "
			    "at coordinate[%zu]", jsonx_zod_type(n), i);
			bad = 1;
		}
	}
	if (json_array_size(v) != 2) {
		issue(msg, "Too %s: expected array to have exactly 2 items at "
		    "coordinate", json_array_size(v) < 2 ? "small" : "big");
		return;
	}
	if (bad)
		return;
	/* Math.round, within what an int holds; the bounds check follows. */
	for (i = 0; i < 2; i++) {
		double d = floor(json_number_value(json_array_get(v, i)) + 0.5);

		if (!(d > -1e6))
			d = -1e6;
		if (!(d < 1e6))
			d = 1e6;
		*(i == 0 ? &c->x : &c->y) = (int)d;
	}
	c->has_coord = 1;
}

char *
computer_args_check(json_t *args, struct computer_call *c)
{
	static const char *const known[] = { "action", "coordinate", "text" };
	char *msg = NULL, *keys = NULL;
	size_t nunknown = 0;
	const char *key;
	json_t *v, *text;

	if (!json_is_object(args)) {
		issue(&msg, "Invalid input: expected object, received %s",
		    jsonx_zod_type(args));
		return msg;
	}
	check_action(json_object_get(args, "action"), c, &msg);
	check_coordinate(json_object_get(args, "coordinate"), c, &msg);
	text = json_object_get(args, "text");
	if (text != NULL && !json_is_null(text)) {
		if (!json_is_string(text)) {
			issue(&msg, "Invalid input: expected string, received %s "
			    "at text", jsonx_zod_type(text));
		} else {
			c->text = json_string_value(text);
			c->text_len = json_string_length(text);
		}
	}
	json_object_foreach(args, key, v) {
		size_t i = 0;
		char *more;

		while (i < 3 && strcmp(key, known[i]) != 0)
			i++;
		if (i < 3)
			continue;
		more = xasprintf("%s%s\"%s\"", keys != NULL ? keys : "",
		    keys != NULL ? ", " : "", key);
		free(keys);
		keys = more;
		nunknown++;
	}
	if (nunknown > 0) {
		issue(&msg, "Unrecognized key%s: %s", nunknown > 1 ? "s" : "",
		    keys);
		free(keys);
	}
	return msg;
}

static size_t
count_chars(const char *s, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++)
		if (((unsigned char)s[i] & 0xc0) != 0x80)
			n++;
	return n;
}

char *
computer_args_refusal(const struct computer_call *c)
{
	switch (c->action) {
	case COMPUTER_KEY:
	case COMPUTER_TYPE:
		if (c->text == NULL || c->text_len == 0)
			return refusal("Text required for %s",
			    computer_action_names[c->action]);
		if (c->action == COMPUTER_KEY && c->text_len > KEY_MAX_LEN)
			return refusal("Text too long for key: %zu "
			    "characters (the limit is %d)", count_chars(c->text,
			    c->text_len), KEY_MAX_LEN);
		if (c->action == COMPUTER_TYPE &&
		    count_chars(c->text, c->text_len) > TYPE_MAX_CHARS)
			return refusal("Text too long for type: %zu "
			    "characters (the limit is %d; type it in parts)",
			    count_chars(c->text, c->text_len), TYPE_MAX_CHARS);
		return NULL;
	case COMPUTER_MOUSE_MOVE:
	case COMPUTER_LEFT_CLICK_DRAG:
		if (!c->has_coord)
			return refusal("Coordinate required for %s",
			    computer_action_names[c->action]);
		return NULL;
	case COMPUTER_SCROLL:
		if (!c->has_coord)
			return refusal("Coordinate required for scroll");
		if (c->text == NULL || c->text_len == 0)
			return refusal("Text required for scroll "
			    "(direction like \"up\", \"down:5\")");
		return NULL;
	default:
		return NULL;
	}
}

char *
computer_scroll(const struct computer_call *c, int *button, int *clicks)
{
	static const char *const dirs[] = { "up", "down", "left", "right" };
	const char *colon = memchr(c->text, ':', c->text_len);
	size_t dlen = colon != NULL ? (size_t)(colon - c->text) : c->text_len;
	long amount = 300;

	if (dlen == 0)
		return refusal("Scroll direction required");
	if (colon != NULL) {
		const char *s = colon + 1;
		char *end;

		amount = strtol(s, &end, 10);
		if (end == s || end != c->text + c->text_len || amount <= 0 ||
		    s[0] == '-' || s[0] == '+' || s[0] == ' ')
			return refusal("Invalid scroll amount: %s", s);
		/* strtol gives LONG_MAX for more: bound it before the
		 * rounding below adds to it. */
		if (amount > SCROLL_MAX_CLICKS * SCROLL_PIXELS_PER_CLICK)
			amount = SCROLL_MAX_CLICKS * SCROLL_PIXELS_PER_CLICK;
	}
	for (int i = 0; i < 4; i++)
		if (strlen(dirs[i]) == dlen &&
		    strncasecmp(c->text, dirs[i], dlen) == 0) {
			/* Wheel buttons 4 to 7: up, down, left, right. */
			*button = 1 << (3 + i);
			*clicks = (int)((amount + SCROLL_PIXELS_PER_CLICK - 1) /
			    SCROLL_PIXELS_PER_CLICK);
			return NULL;
		}
	return refusal("Invalid scroll direction: %.*s. Use \"up\", "
	    "\"down\", \"left\", or \"right\"", (int)dlen, c->text);
}

char *
computer_key_events(const struct computer_call *c, uint32_t *syms,
    int *down, size_t *n)
{
	char *text = xstrndup(c->text, c->text_len), *save = NULL, *combo;
	char *msg = NULL;
	size_t keys = 0;

	*n = 0;
	for (combo = strtok_r(text, " \t\n", &save); combo != NULL &&
	    msg == NULL; combo = strtok_r(NULL, " \t\n", &save)) {
		uint32_t pressed[COMPUTER_KEY_MAX_KEYS];
		size_t np = 0, start = 0, len = strlen(combo);
		int shift = 0;

		for (size_t i = 0; i <= len && msg == NULL; i++) {
			uint32_t sym;

			if (i < len && combo[i] != '+')
				continue;
			combo[i] = '\0';
			sym = computer_keysym(combo + start);
			if (sym == 0) {
				for (char *l = combo + start; *l; l++)
					if (*l >= 'A' && *l <= 'Z')
						*l = (char)(*l - 'A' + 'a');
				msg = refusal("Invalid key: %s", combo + start);
			} else if (keys++ >= COMPUTER_KEY_MAX_KEYS) {
				msg = refusal("Too many keys for key: the limit "
				    "is %d", COMPUTER_KEY_MAX_KEYS);
			} else {
				if (sym == 0xffe1 || sym == 0xffe2)
					shift = 1;
				/* With shift held, X types the capital. */
				pressed[np++] = shift && i == len ?
				    computer_shifted(sym) : sym;
			}
			start = i + 1;
		}
		for (size_t i = 0; i < np && msg == NULL; i++) {
			syms[*n] = pressed[i];
			down[(*n)++] = 1;
		}
		for (size_t i = np; i > 0 && msg == NULL; i--) {
			syms[*n] = pressed[i - 1];
			down[(*n)++] = 0;
		}
	}
	free(text);
	if (msg == NULL && *n == 0)
		msg = refusal("Invalid key: ");
	return msg;
}

char *
computer_type_events(const struct computer_call *c, uint32_t *syms,
    int *down, size_t *n)
{
	size_t chars = 0, at = 0, used;
	uint32_t cp;

	*n = 0;
	while ((used = computer_utf8_next(c->text + at, c->text_len - at,
	    &cp)) > 0) {
		uint32_t sym = computer_char_keysym(cp);

		at += used;
		chars++;
		if (cp == '\r' && at < c->text_len && c->text[at] == '\n')
			continue;	/* CR LF is one Return */
		if (sym == 0)
			return refusal("Cannot type U+%04X (character %zu of "
			    "the text): no key types that control character",
			    (unsigned)cp, chars);
		syms[*n] = sym;
		down[(*n)++] = 1;
		syms[*n] = sym;
		down[(*n)++] = 0;
	}
	return NULL;
}
