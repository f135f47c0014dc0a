#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "timing.h"

static const char *log_program = "?";
static enum log_level log_level = LOG_INFO;

const char *const log_level_names[] = {
	[LOG_DEBUG] = "debug",
	[LOG_INFO] = "info",
	[LOG_WARN] = "warn",
	[LOG_ERROR] = "error",
	NULL,
};

void
log_init(const char *program)
{
	log_program = program;
}

void
log_set_level(enum log_level level)
{
	log_level = level;
}

int
log_parse_level(const char *name, enum log_level *level)
{
	for (size_t i = 0; log_level_names[i] != NULL; i++) {
		if (strcasecmp(name, log_level_names[i]) == 0) {
			*level = (enum log_level)i;
			return 0;
		}
	}
	return -1;
}

int
log_enabled(enum log_level level)
{
	return level >= log_level;
}

/*
 * Append msg to line[0..at) escaped, never past cap bytes; returns the new
 * length. A message may carry what a peer sent (a request's decoded path,
 * an MCP server's stderr): a control byte in it would start a forged line
 * of our log or steer a terminal, so each one is written as \xNN.
 */
static size_t
log_escape(char *line, size_t at, size_t cap, const char *msg)
{
	static const char hex[] = "0123456789abcdef";

	for (const unsigned char *p = (const unsigned char *)msg; *p != '\0';
	    p++) {
		if (*p >= 0x20 && *p != 0x7f) {
			if (at + 1 > cap)
				break;
			line[at++] = (char)*p;
			continue;
		}
		if (at + 4 > cap)
			break;
		line[at++] = '\\';
		line[at++] = 'x';
		line[at++] = hex[*p >> 4];
		line[at++] = hex[*p & 0xf];
	}
	return at;
}

static void
log_vmsg(enum log_level level, const char *fmt, va_list ap)
{
	char line[4096], msg[4096], stamp[32];
	struct timeval tv;
	struct tm tm;
	int n;

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
	n = snprintf(line, sizeof line, "%s.%03ldZ %s[%ld] %s: ", stamp,
	    (long)(tv.tv_usec / 1000), log_program, (long)getpid(),
	    log_level_names[level]);
	if (n < 0 || (size_t)n >= sizeof line)
		n = 0;
	vsnprintf(msg, sizeof msg, fmt, ap);
	n = (int)log_escape(line, (size_t)n, sizeof line - 1, msg);
	line[n++] = '\n';
	/* One write per line so lines of concurrent processes do not mix. */
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}

void
log_msg(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	if (!log_enabled(level))
		return;
	va_start(ap, fmt);
	log_vmsg(level, fmt, ap);
	va_end(ap);
}

void
log_rate_msg(struct log_rate *rate, enum log_level level, const char *fmt,
    ...)
{
	double now = timing_monotonic();
	va_list ap;

	if (!log_enabled(level))
		return;
	if (rate->used > 0 && now - rate->window >= rate->interval) {
		if (rate->dropped > 0)
			log_msg(level, "(%lu more lines like the next were "
			    "dropped in %.0f s: over %u per %.0f s)",
			    rate->dropped, now - rate->window, rate->burst,
			    rate->interval);
		rate->used = 0;
		rate->dropped = 0;
	}
	if (rate->used == 0)
		rate->window = now;
	if (rate->used >= rate->burst) {
		rate->dropped++;
		return;
	}
	rate->used++;
	va_start(ap, fmt);
	log_vmsg(level, fmt, ap);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(LOG_ERROR, fmt, ap);
	va_end(ap);
	abort();
}
