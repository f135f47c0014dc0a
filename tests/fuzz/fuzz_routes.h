/* The small route table the HTTP fuzz targets serve (routes.c). */
#ifndef FUZZ_ROUTES_H
#define FUZZ_ROUTES_H

#include <stddef.h>

#include "http.h"

/* Start the harness's server with these routes (once). */
void fuzz_routes_start(void);
const struct http_route *fuzz_routes(size_t *n);

#endif
