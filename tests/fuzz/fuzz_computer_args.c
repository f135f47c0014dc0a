/*
 * Fuzz target: the computer tool's arguments (agent/computer_args.c, the
 * key names of computer_keys.c) as a client sends them in /mcp/call_tool:
 * the schema check, the refusals, and what an accepted call becomes
 * (wheel clicks, key events), with the bounds each promises checked.
 *
 * Input: the arguments' JSON text.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "computer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
broken(const char *what)
{
	fprintf(stderr, "computer_args: %s\n", what);
	abort();
}

static void
events(const struct computer_call *c)
{
	uint32_t keys[2 * COMPUTER_KEY_MAX_KEYS], *syms;
	int kdown[2 * COMPUTER_KEY_MAX_KEYS], *down, button, clicks;
	size_t n;
	char *msg;

	switch (c->action) {
	case COMPUTER_SCROLL:
		msg = computer_scroll(c, &button, &clicks);
		if (msg == NULL && (clicks < 1 || clicks > 100 ||
		    (button != 8 && button != 16 && button != 32 &&
		    button != 64)))
			broken("a scroll out of bounds");
		break;
	case COMPUTER_KEY:
		msg = computer_key_events(c, keys, kdown, &n);
		if (msg == NULL && (n == 0 || n % 2 != 0 ||
		    n > 2 * COMPUTER_KEY_MAX_KEYS))
			broken("key events out of bounds");
		break;
	case COMPUTER_TYPE:
		syms = calloc(2 * c->text_len, sizeof *syms);
		down = calloc(2 * c->text_len, sizeof *down);
		msg = computer_type_events(c, syms, down, &n);
		if (msg == NULL && n > 2 * c->text_len)
			broken("more typed events than room");
		free(syms);
		free(down);
		break;
	default:
		return;
	}
	free(msg);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct computer_call c = { 0 };
	json_t *args = json_loadb((const char *)data, size,
	    JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	char *msg;

	if (args == NULL)
		return 0;
	if ((msg = computer_args_check(args, &c)) == NULL &&
	    (msg = computer_args_refusal(&c)) == NULL)
		events(&c);
	if (c.has_coord && (c.x < -1000000 || c.x > 1000000 ||
	    c.y < -1000000 || c.y > 1000000))
		broken("a coordinate out of bounds");
	free(msg);
	json_decref(args);
	return 0;
}
