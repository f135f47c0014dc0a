/* What the VNC helper's files share (vnc_helper.c is the helper). */
#ifndef VNC_HELPER_H
#define VNC_HELPER_H

#include "error.h"

/* vnc_x11.c: where the pointer is, from the display's X server. */
struct vnc_x11;
struct vnc_x11 *vnc_x11_new(const char *display);
void vnc_x11_free(struct vnc_x11 *x);
void vnc_x11_close(struct vnc_x11 *x);
int vnc_x11_query_pointer(struct vnc_x11 *x, int *px, int *py,
    struct error *err);

#endif
