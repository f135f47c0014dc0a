/* Logging to stderr with a timestamp, level and program name. */
#ifndef LOG_H
#define LOG_H

enum log_level {
	LOG_DEBUG,
	LOG_INFO,
	LOG_WARN,
	LOG_ERROR,
};

void log_init(const char *program);
void log_set_level(enum log_level level);
/* "debug", "info", "warn", "error", by level, NULL-terminated (a choice
 * of the programs' option tables). */
extern const char *const log_level_names[];
/* Parse one of them; -1 if none. */
int log_parse_level(const char *name, enum log_level *level);
int log_enabled(enum log_level level);
void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/*
 * A limit on one source of log lines a peer can make as fast as it likes
 * (a failing accept, an MCP server's stderr): at most `burst` lines per
 * `interval` seconds; the rest are dropped and counted, and the count is
 * said once the next interval lets a line through. Owned by the source;
 * set up with LOG_RATE_INIT; used from one thread.
 */
struct log_rate {
	double interval;
	unsigned burst;
	double window;		/* start of the current interval */
	unsigned used;		/* lines let through in it */
	unsigned long dropped;	/* since the last line let through */
};
#define LOG_RATE_INIT(interval, burst) { (interval), (burst), 0, 0, 0 }

/* log_msg under the limit of rate. */
void log_rate_msg(struct log_rate *rate, enum log_level level,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* For states that cannot happen, and out of memory: log and abort. */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define log_debug(...) do { if (log_enabled(LOG_DEBUG)) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
