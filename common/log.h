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
/* Parse "debug", "info", "warn" or "error"; -1 if none of them. */
int log_parse_level(const char *name, enum log_level *level);
int log_enabled(enum log_level level);
void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* For states that cannot happen, and out of memory: log and abort. */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define log_debug(...) do { if (log_enabled(LOG_DEBUG)) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
