/*
 * Clocks. Every deadline and duration is measured on the monotonic clock,
 * which a change of the wall clock (an administrator, NTP stepping it)
 * does not move; wall time is only for what a person or another host
 * reads (a record's created_at, a log line's stamp, E2B's endAt).
 */
#ifndef TIMING_H
#define TIMING_H

#include <stdint.h>
#include <sys/time.h>

/* Seconds on the monotonic clock, with fractions. */
double timing_monotonic(void);
/* Milliseconds on the monotonic clock. */
int64_t timing_monotonic_ms(void);
/* Seconds since the epoch, to the microsecond. */
double timing_wall(void);
/* seconds (not negative) as a timeval, for a timer. */
struct timeval timing_timeval(double seconds);

#endif
