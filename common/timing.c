/* Clocks (timing.h). */
#include "timing.h"

#include <time.h>

double
timing_monotonic(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t
timing_monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double
timing_wall(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	/* To the microsecond, as records keep it ("%.6f"): a time read back
	 * from one (a list's next token) compares equal to the original. */
	return (double)ts.tv_sec + (double)(ts.tv_nsec / 1000) / 1e6;
}

struct timeval
timing_timeval(double seconds)
{
	struct timeval tv;

	tv.tv_sec = (time_t)seconds;
	tv.tv_usec = (suseconds_t)((seconds - (double)tv.tv_sec) * 1e6);
	return tv;
}
