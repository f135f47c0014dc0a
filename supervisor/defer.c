/*
 * The callback contract of sandboxd: a function that takes a completion
 * callback never calls it before it returns, even when the answer is
 * ready at once (bad input, a refused start, nothing to do). Its caller
 * may then set up what the callback uses, or free what it no longer
 * needs, after the call, whichever way the call ends. sandboxd_defer is
 * how such an early answer is given: from the loop, on its next turn.
 */
#include "sandboxd.h"

#include <event2/event.h>

#include "log.h"

void
sandboxd_defer(void (*cb)(evutil_socket_t, short, void *), void *arg)
{
	static const struct timeval now = { 0, 0 };

	/* It fails only without memory, where xmalloc aborts too. */
	if (event_base_once(sd.base, -1, EV_TIMEOUT, cb, arg, &now) < 0)
		fatal("cannot defer a callback: out of memory");
}
