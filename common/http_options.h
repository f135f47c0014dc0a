/*
 * The options of an HTTP server's limits (http.h), the same in every
 * program that serves: entries of its option table (config.h) for the
 * fields max_connections, header_timeout, body_min_rate, body_rate_window
 * and access_log of its configuration TYPE, their environment variables
 * named PREFIX_MAX_CONNECTIONS and so on.
 */
#ifndef HTTP_OPTIONS_H
#define HTTP_OPTIONS_H

#include <stddef.h>

#include "config.h"
#include "http.h"

#define HTTP_OPTIONS_STR_(x)	#x
#define HTTP_OPTIONS_STR(x)	HTTP_OPTIONS_STR_(x)

#define HTTP_SERVER_OPTIONS(PREFIX, TYPE)				\
	{ "--access-log", PREFIX "_ACCESS_LOG", CONFIG_BOOL,		\
	    offsetof(TYPE, access_log), "BOOL",				\
	    .help = "log one line per request", .def = "false" },	\
	{ "--max-connections", PREFIX "_MAX_CONNECTIONS", CONFIG_INT,	\
	    offsetof(TYPE, max_connections), "N",			\
	    .help = "client connections open at once; more get 503; "	\
	    "0: a quarter of the open-file limit, at most 1024",	\
	    .def = "0", .min = 0, .max = INFINITY },			\
	{ "--header-timeout", PREFIX "_HEADER_TIMEOUT", CONFIG_DOUBLE,	\
	    offsetof(TYPE, header_timeout), "SECONDS",			\
	    .help = "a request's whole head must come within this of "	\
	    "its first byte",						\
	    .def = HTTP_OPTIONS_STR(HTTP_DEFAULT_HEADER_TIMEOUT),	\
	    .min = 0, .max = INFINITY, .flags = CONFIG_ABOVE_MIN },	\
	{ "--body-min-rate", PREFIX "_BODY_MIN_RATE", CONFIG_SIZE,	\
	    offsetof(TYPE, body_min_rate), "SIZE",			\
	    .help = "bytes per second a request body must average over "	\
	    "each window, or it is cut; 0: no minimum",			\
	    .def = HTTP_OPTIONS_STR(HTTP_DEFAULT_BODY_MIN_RATE) },	\
	{ "--body-rate-window", PREFIX "_BODY_RATE_WINDOW",		\
	    CONFIG_DOUBLE, offsetof(TYPE, body_rate_window), "SECONDS",	\
	    .help = "the window of --body-min-rate",			\
	    .def = HTTP_OPTIONS_STR(HTTP_DEFAULT_BODY_RATE_WINDOW),	\
	    .min = 0, .max = INFINITY, .flags = CONFIG_ABOVE_MIN }

#endif
