/*
 * The computer tool group (--tools computer): one tool, "computer", with
 * the name, input schema and answers of the npm server computer-use-mcp,
 * done over the sandbox's own display (desktop.h, vnc.h) instead of nut-js
 * and xdotool.
 *
 * Answers: {"ok": true} (or the cursor's {"x", "y"}) as an indented JSON
 * text item plus structuredContent; a screenshot as a text item with
 * {"image_width", "image_height"} and a PNG image item, with a red
 * crosshair where the cursor is. Bad arguments are an isError result with
 * the zod message the npm server answers, and every other refusal an
 * isError result with a clear text; the agent keeps serving.
 *
 * Differences, on purpose: no second of waiting before a screenshot (the
 * caller can take another), the screen is not scaled (the display is
 * 1280x800, within what the npm server sends unscaled), a scroll of N
 * pixels is N / 50 wheel clicks (the npm server makes N clicks), and "key"
 * also takes several combinations separated by spaces, as xdotool does.
 */
#include "agent.h"
#include "computer.h"
#include "desktop.h"
#include "toolset.h"
#include "vnc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "timing.h"
#include "xmalloc.h"

/* How long a call waits for a display that does not answer. */
#define DISPLAY_WAIT_MS 10000
/* How long a moved pointer may take to get there, as X sees it. */
#define POINTER_SETTLE_MS 200
#define DRAG_STEPS 10
/* How long a click holds its button down, and the pause between the two
 * of a double click: as a hand does. Some programs (jwm's menus among
 * them) take a press and release of the same millisecond for no click. */
#define CLICK_HOLD_MS 30

#define BUTTON_LEFT 1
#define BUTTON_MIDDLE 2
#define BUTTON_RIGHT 4

/* ---- answers ------------------------------------------------------------- */

static json_t *
text_result(int is_error, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static json_t *
text_result(int is_error, const char *fmt, ...)
{
	char *text;
	va_list ap;
	json_t *res;

	va_start(ap, fmt);
	if (vasprintf(&text, fmt, ap) < 0)
		fatal("out of memory");
	va_end(ap);
	res = json_pack("{s:[{s:s, s:s}]}", "content", "type", "text", "text",
	    text);
	if (is_error)
		json_object_set_new(res, "isError", json_true());
	free(text);
	return res;
}

/* computer-use-mcp's jsonResult: the data as indented JSON text, and as
 * structuredContent. Takes data. */
static json_t *
json_result(json_t *data)
{
	char *text = json_dumps(data, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_t *res = json_pack("{s:[{s:s, s:s}], s:o}", "content", "type",
	    "text", "text", text, "structuredContent", data);

	free(text);
	return res;
}

static json_t *
ok_result(void)
{
	return json_result(json_pack("{s:b}", "ok", 1));
}

/* ---- arguments ----------------------------------------------------------- */

/* ---- the display -------------------------------------------------------- */

static void
sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* A session on the display, waiting a while for one that does not
 * answer (and telling the desktop, which restarts it). */
static int
begin(struct agent *agent, struct computer_call *c, struct error *err)
{
	struct desktop *d = agent->desktop;
	int64_t deadline = timing_monotonic_ms() + DISPLAY_WAIT_MS;

	c->vnc = desktop_vnc(d);
	for (;;) {
		if (vnc_begin(c->vnc, err) == 0)
			return 0;
		desktop_kick(d);
		if (timing_monotonic_ms() >= deadline || desktop_stopping(d))
			return -1;
		sleep_ms(100);
	}
}

/* Move, and wait until the X server has the pointer there: a position
 * asked for next is then the new one. */
static int
move(struct computer_call *c, int x, int y, int buttons, struct error *err)
{
	int64_t deadline = timing_monotonic_ms() + POINTER_SETTLE_MS;
	int px, py;

	if (vnc_pointer(c->vnc, x, y, buttons, err) < 0)
		return -1;
	/* The first answer has it as a rule (the server reads our VNC input
	 * before a query sent after it); this is for a server that is not
	 * so quick. */
	while (vnc_pointer_position(c->vnc, &px, &py, err) == 0 &&
	    (px != x || py != y) && timing_monotonic_ms() < deadline)
		sleep_ms(1);
	return 0;
}

static int
click(struct computer_call *c, int buttons, int times, struct error *err)
{
	int x, y;

	if (c->has_coord) {
		if (move(c, c->x, c->y, 0, err) < 0)
			return -1;
		x = c->x;
		y = c->y;
	} else if (vnc_pointer_position(c->vnc, &x, &y, err) < 0) {
		return -1;
	}
	for (int i = 0; i < times; i++) {
		if (i > 0)
			sleep_ms(CLICK_HOLD_MS);
		if (vnc_pointer(c->vnc, x, y, buttons, err) < 0)
			return -1;
		sleep_ms(CLICK_HOLD_MS);
		if (vnc_pointer(c->vnc, x, y, 0, err) < 0)
			return -1;
	}
	return 0;
}

static int
drag(struct computer_call *c, struct error *err)
{
	int x0, y0;

	if (vnc_pointer_position(c->vnc, &x0, &y0, err) < 0 ||
	    vnc_pointer(c->vnc, x0, y0, BUTTON_LEFT, err) < 0)
		return -1;
	/* Steps between, so that programs see a drag, not a jump. */
	for (int i = 1; i < DRAG_STEPS; i++)
		if (vnc_pointer(c->vnc, x0 + (c->x - x0) * i / DRAG_STEPS,
		    y0 + (c->y - y0) * i / DRAG_STEPS, BUTTON_LEFT, err) < 0)
			return -1;
	if (vnc_pointer(c->vnc, c->x, c->y, BUTTON_LEFT, err) < 0)
		return -1;
	return move(c, c->x, c->y, 0, err);
}

/* ---- actions -------------------------------------------------------------- */

/* The events of a "key" or "type" action, or the refusal of its text
 * (msg, freed here) as the answer. NULL when sent. */
static json_t *
send_keys(struct computer_call *c, char *msg, const uint32_t *syms,
    const int *down, size_t n, struct error *err, int *failed)
{
	json_t *refusal = NULL;

	if (msg != NULL) {
		refusal = text_result(1, "%s", msg);
		free(msg);
	} else if (vnc_keys(c->vnc, syms, down, n, err) < 0) {
		*failed = 1;
	}
	return refusal;
}

static json_t *
key(struct computer_call *c, struct error *err, int *failed)
{
	uint32_t syms[2 * COMPUTER_KEY_MAX_KEYS];
	int down[2 * COMPUTER_KEY_MAX_KEYS];
	size_t n = 0;
	char *msg = computer_key_events(c, syms, down, &n);

	return send_keys(c, msg, syms, down, n, err, failed);
}

static json_t *
type(struct computer_call *c, struct error *err, int *failed)
{
	uint32_t *syms = xcalloc(2 * c->text_len, sizeof *syms);
	int *down = xcalloc(2 * c->text_len, sizeof *down);
	size_t n = 0;
	char *msg = computer_type_events(c, syms, down, &n);
	json_t *refusal = send_keys(c, msg, syms, down, n, err, failed);

	free(syms);
	free(down);
	return refusal;
}

static json_t *
screenshot(struct computer_call *c, struct error *err, int *failed)
{
	struct vnc_image img = { 0 };
	int cx = -1, cy = -1;
	char *b64;
	json_t *res;

	if (vnc_capture(c->vnc, &img, err) < 0) {
		*failed = 1;
		return NULL;
	}
	if (vnc_pointer_position(c->vnc, &cx, &cy, err) < 0)
		cx = cy = -1;	/* no crosshair then */
	vnc_end(c->vnc);
	c->vnc = NULL;
	b64 = computer_png_base64(&img, cx, cy, err);
	free(img.pixels);
	if (b64 == NULL) {
		*failed = 1;
		return NULL;
	}
	res = json_pack("{s:[{s:s, s:o}, {s:s, s:s, s:s}]}", "content",
	    "type", "text", "text", json_sprintf("{\"image_width\":%d,"
	    "\"image_height\":%d}", img.width, img.height), "type", "image",
	    "data", b64, "mimeType", "image/png");
	free(b64);
	return res;
}

static json_t *
act(struct computer_call *c, struct error *err, int *failed)
{
	int x, y, button = 0, clicks = 0, rc = 0;
	json_t *refusal;
	char *msg;

	switch (c->action) {
	case COMPUTER_KEY:
		return key(c, err, failed);
	case COMPUTER_TYPE:
		return type(c, err, failed);
	case COMPUTER_MOUSE_MOVE:
		rc = move(c, c->x, c->y, 0, err);
		break;
	case COMPUTER_LEFT_CLICK:
		rc = click(c, BUTTON_LEFT, 1, err);
		break;
	case COMPUTER_DOUBLE_CLICK:
		rc = click(c, BUTTON_LEFT, 2, err);
		break;
	case COMPUTER_RIGHT_CLICK:
		rc = click(c, BUTTON_RIGHT, 1, err);
		break;
	case COMPUTER_MIDDLE_CLICK:
		rc = click(c, BUTTON_MIDDLE, 1, err);
		break;
	case COMPUTER_LEFT_CLICK_DRAG:
		rc = drag(c, err);
		break;
	case COMPUTER_SCROLL:
		if ((msg = computer_scroll(c, &button, &clicks)) != NULL) {
			refusal = text_result(1, "%s", msg);
			free(msg);
			return refusal;
		}
		rc = move(c, c->x, c->y, 0, err);
		for (int i = 0; rc == 0 && i < clicks; i++)
			if (vnc_pointer(c->vnc, c->x, c->y, button, err) < 0 ||
			    vnc_pointer(c->vnc, c->x, c->y, 0, err) < 0)
				rc = -1;
		break;
	case COMPUTER_GET_SCREENSHOT:
		return screenshot(c, err, failed);
	case COMPUTER_GET_CURSOR_POSITION:
		if (vnc_pointer_position(c->vnc, &x, &y, err) < 0) {
			*failed = 1;
			return NULL;
		}
		return json_result(json_pack("{s:i, s:i}", "x", x, "y", y));
	case COMPUTER_COUNT:
		break;
	}
	if (rc < 0)
		*failed = 1;
	return NULL;
}

static int
repeatable(enum computer_action a)
{
	return a == COMPUTER_MOUSE_MOVE || a == COMPUTER_GET_CURSOR_POSITION ||
	    a == COMPUTER_GET_SCREENSHOT;
}

static int
call_computer(struct agent *agent, json_t *args, json_t **result,
    struct error *err)
{
	struct computer_call c = { 0 };
	char *msg;
	int failed = 0, w, h;

	if ((msg = computer_args_check(args, &c)) != NULL) {
		*result = text_result(1, "MCP error -32602: Input validation "
		    "error: Invalid arguments for tool computer: %s", msg);
		free(msg);
		return 0;
	}
	if ((msg = computer_args_refusal(&c)) != NULL) {
		*result = text_result(1, "%s", msg);
		free(msg);
		return 0;
	}
	if (agent->desktop == NULL) {
		*result = text_result(1, "This sandbox has no display: the agent "
		    "runs without --desktop");
		return 0;
	}
	/* An action that changes nothing but the pointer's place is tried
	 * again once on a display that went away under it (its server was
	 * killed, say): the next session waits for the new one. */
	for (int attempt = 0; attempt < 2; attempt++) {
		if (begin(agent, &c, err) < 0) {
			*result = text_result(1, "The display is not running (%s); "
			    "the agent is restarting it: try again in a few "
			    "seconds", err->msg);
			return 0;
		}
		vnc_size(c.vnc, &w, &h);
		failed = 0;
		if (c.has_coord && (c.x < 0 || c.x >= w || c.y < 0 ||
		    c.y >= h)) {
			*result = text_result(1, "Coordinates (%d, %d) are "
			    "outside display bounds of %dx%d", c.x, c.y, w, h);
		} else {
			*result = act(&c, err, &failed);
			if (*result == NULL && !failed)
				*result = ok_result();
		}
		if (c.vnc != NULL)
			vnc_end(c.vnc);
		c.vnc = NULL;
		if (!failed || !repeatable(c.action))
			break;
		json_decref(*result);
		*result = NULL;
	}
	if (failed) {
		json_decref(*result);
		*result = text_result(1, "The %s action failed on the display "
		    "(%s)%s", computer_action_names[c.action], err->msg,
		    repeatable(c.action) ? "" : "; it may have been done in "
		    "part");
	}
	return 0;
}

/* computer-use-mcp's input schema, as its listing has it. */
#define COMPUTER_SCHEMA							\
	"{\"$schema\":\"http://json-schema.org/draft-07/schema#\","	\
	"\"type\":\"object\",\"properties\":{"				\
	"\"action\":{\"type\":\"string\",\"enum\":[\"key\",\"type\","	\
	"\"mouse_move\",\"left_click\",\"left_click_drag\","		\
	"\"right_click\",\"middle_click\",\"double_click\",\"scroll\","	\
	"\"get_screenshot\",\"get_cursor_position\"],"			\
	"\"description\":\"The action to perform. The available "	\
	"actions are:\\n"						\
	"* key: Press a key or key-combination on the keyboard.\\n"	\
	"* type: Type a string of text on the keyboard.\\n"		\
	"* get_cursor_position: Get the current (x, y) pixel "		\
	"coordinate of the cursor on the screen.\\n"			\
	"* mouse_move: Move the cursor to a specified (x, y) pixel "	\
	"coordinate on the screen.\\n"					\
	"* left_click: Click the left mouse button. If coordinate is "	\
	"provided, moves to that position first.\\n"			\
	"* left_click_drag: Click and drag the cursor to a specified "	\
	"(x, y) pixel coordinate on the screen.\\n"			\
	"* right_click: Click the right mouse button. If coordinate is " \
	"provided, moves to that position first.\\n"			\
	"* middle_click: Click the middle mouse button. If coordinate " \
	"is provided, moves to that position first.\\n"			\
	"* double_click: Double-click the left mouse button. If "	\
	"coordinate is provided, moves to that position first.\\n"	\
	"* scroll: Scroll the screen in a specified direction. "	\
	"Requires coordinate (moves there first) and text parameter "	\
	"with direction: \\\"up\\\", \\\"down\\\", \\\"left\\\", or "	\
	"\\\"right\\\". Optionally append \\\":N\\\" to scroll N pixels " \
	"(default 300), e.g. \\\"down:500\\\".\\n"			\
	"* get_screenshot: Take a screenshot of the screen.\"},"	\
	"\"coordinate\":{\"minItems\":2,\"maxItems\":2,\"type\":\"array\"," \
	"\"items\":{\"type\":\"number\"},\"description\":\"(x, y): The x " \
	"(pixels from the left edge) and y (pixels from the top edge) "	\
	"coordinates\"},"						\
	"\"text\":{\"description\":\"Text to type or key command to "	\
	"execute\",\"type\":\"string\"}},"				\
	"\"required\":[\"action\"],\"additionalProperties\":false}"

static const struct tool tools[] = {
	{ "computer",
	    "Use a mouse and keyboard to interact with a computer, and take "
	    "screenshots.\n"
	    "* This is an interface to a desktop GUI (an X display with a "
	    "window manager; a terminal and a web browser are in its menu, "
	    "opened with a click on the desktop).\n"
	    "* Always prefer using keyboard shortcuts rather than clicking, "
	    "where possible.\n"
	    "* Some applications may take time to start or process actions, "
	    "so you may need to wait and take successive screenshots to see "
	    "the results of your actions.\n"
	    "* Whenever you intend to move the cursor to click on an element, "
	    "consult a screenshot to determine the coordinates of the element "
	    "first, and click with the cursor tip in its center.\n"
	    "\n"
	    "Using the crosshair:\n"
	    "* Screenshots show a red crosshair at the current cursor "
	    "position.\n"
	    "* After clicking, check where the crosshair appears vs your "
	    "target. If it missed, adjust coordinates proportionally to the "
	    "distance.\n"
	    "* Consider display dimensions when estimating positions. E.g. "
	    "if it's 90% to the bottom of the screen, the coordinates should "
	    "reflect this.",
	    COMPUTER_SCHEMA, call_computer },
};

static const struct tool_group group = {
	"computer", tools, sizeof tools / sizeof tools[0],
};

const struct tool_group *
computer_group(void)
{
	return &group;
}
