/* Whole writes to a file descriptor: the one loop over short writes and
 * EINTR that every module writing a file or a pipe shares. */
#ifndef FDIO_H
#define FDIO_H

#include <stddef.h>

/* Writes all len bytes of buf to fd, retrying short writes and EINTR.
 * 0, or -1 with errno (some bytes may have been written). */
int fdio_write_all(int fd, const void *buf, size_t len);

#endif
