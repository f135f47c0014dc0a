/* Whole writes to a file descriptor: the one loop over short writes and
 * EINTR that every module writing a file or a pipe shares; and a message
 * with descriptors on a unix socket. */
#ifndef FDIO_H
#define FDIO_H

#include <stddef.h>
#include <sys/types.h>

struct iovec;

/* Descriptors in one fdio_send_fds, at most. */
#define FDIO_MAX_FDS 8

/* Writes all len bytes of buf to fd, retrying short writes and EINTR.
 * 0, or -1 with errno (some bytes may have been written). */
int fdio_write_all(int fd, const void *buf, size_t len);

/* sendmsg of iov with nfds descriptors of fds (SCM_RIGHTS) on the unix
 * socket sock, flags as sendmsg's, never raising SIGPIPE; as sendmsg
 * returns (-1 with EINVAL past FDIO_MAX_FDS). */
ssize_t fdio_send_fds(int sock, const struct iovec *iov, size_t iovcnt,
    const int *fds, size_t nfds, int flags);

#endif
