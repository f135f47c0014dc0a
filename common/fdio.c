#include "fdio.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int
fdio_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

ssize_t
fdio_send_fds(int sock, const struct iovec *iov, size_t iovcnt,
    const int *fds, size_t nfds, int flags)
{
	char cbuf[CMSG_SPACE(sizeof(int) * FDIO_MAX_FDS)];
	struct msghdr mh = { .msg_iov = (struct iovec *)iov,
	    .msg_iovlen = iovcnt };
	struct cmsghdr *c;

	if (nfds > FDIO_MAX_FDS) {
		errno = EINVAL;
		return -1;
	}
	if (nfds > 0) {
		memset(cbuf, 0, sizeof cbuf);
		mh.msg_control = cbuf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	return sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
}
