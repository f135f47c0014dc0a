/*
 * sandbox-agent --healthcheck: a one-shot client of the agent's /healthz,
 * for the images' HEALTHCHECK (the minimal image has no curl). It asks
 * every address the running agent listens on, as given to PID 1 with
 * --listen (read from /proc/1/cmdline) or to this command, and exits 0 on
 * the first 200, 1 otherwise, as Docker expects.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/util.h>

#include "xmalloc.h"

#define HEALTHCHECK_TIMEOUT_SECONDS 2

/* A listen address as a client reaches it: the wildcard is reached on
 * loopback, "localhost" is the loopback address (no name lookup in a
 * static binary). */
static int
target_address(const char *listen, struct sockaddr_storage *ss, int *sslen)
{
	const char *colon = strrchr(listen, ':');
	char *spec;
	int rc;

	if (strncmp(listen, "unix:", 5) == 0) {
		struct sockaddr_un *sun = (struct sockaddr_un *)ss;

		if (strlen(listen + 5) >= sizeof sun->sun_path)
			return -1;
		memset(ss, 0, sizeof *ss);
		sun->sun_family = AF_UNIX;
		strcpy(sun->sun_path, listen + 5);
		*sslen = sizeof *sun;
		return 0;
	}
	if (colon == NULL)
		return -1;
	if (strncmp(listen, "0.0.0.0:", 8) == 0 ||
	    strncmp(listen, "localhost:", 10) == 0)
		spec = xasprintf("127.0.0.1%s", colon);
	else if (strncmp(listen, "[::]:", 5) == 0)
		spec = xasprintf("[::1]%s", colon);
	else
		spec = xstrdup(listen);
	memset(ss, 0, sizeof *ss);
	*sslen = sizeof *ss;
	rc = evutil_parse_sockaddr_port(spec, (struct sockaddr *)ss, sslen);
	free(spec);
	return rc;
}

/* 1 when GET /healthz at addr answers 200; the reason on stdout if not. */
static int
probe(const char *addr, const char *token)
{
	struct timeval tv = { HEALTHCHECK_TIMEOUT_SECONDS, 0 };
	struct sockaddr_storage ss;
	char *request, answer[256];
	size_t got = 0;
	int fd, sslen, ok;
	ssize_t n;

	if (target_address(addr, &ss, &sslen) < 0) {
		printf("%s: not an address to check\n", addr);
		return 0;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		printf("%s: socket: %s\n", addr, strerror(errno));
		return 0;
	}
	/* Linux applies the send timeout to connect() as well. */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (connect(fd, (struct sockaddr *)&ss, (socklen_t)sslen) < 0) {
		printf("%s: connect: %s\n", addr, strerror(errno));
		close(fd);
		return 0;
	}
	request = xasprintf("GET /healthz HTTP/1.1\r\nHost: localhost\r\n"
	    "%s%s%sConnection: close\r\n\r\n", token ? "Authorization: Bearer " :
	    "", token ? token : "", token ? "\r\n" : "");
	n = write(fd, request, strlen(request));
	explicit_bzero(request, strlen(request));
	free(request);
	/* The status line is all we need. */
	while (n > 0 && got < sizeof answer - 1) {
		ssize_t r = read(fd, answer + got, sizeof answer - 1 - got);

		if (r <= 0)
			break;
		got += (size_t)r;
		if (memchr(answer, '\n', got) != NULL)
			break;
	}
	close(fd);
	answer[got] = '\0';
	answer[strcspn(answer, "\r\n")] = '\0';
	ok = strncmp(answer, "HTTP/1.1 200 ", 13) == 0 ||
	    strncmp(answer, "HTTP/1.0 200 ", 13) == 0;
	printf("%s: %s\n", addr, got > 0 ? answer : "no answer");
	return ok;
}

/* The --listen values PID 1 was started with, if PID 1 is an agent. */
static void
pid1_listen(struct config_list *out)
{
	char buf[8192];
	size_t len = 0;
	ssize_t n;
	int fd;

	fd = open("/proc/1/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	while (len < sizeof buf - 1 &&
	    (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
	if (len == 0 || strstr(buf, "sandbox-agent") == NULL)
		return;
	for (size_t i = strlen(buf) + 1; i < len; i += strlen(buf + i) + 1) {
		const char *arg = buf + i;

		if (strncmp(arg, "--listen=", 9) == 0) {
			config_list_add(out, arg + 9);
		} else if (strcmp(arg, "--listen") == 0 &&
		    i + strlen(arg) + 1 < len) {
			i += strlen(arg) + 1;
			config_list_add(out, buf + i);
		}
	}
}

int
healthcheck_run(const struct config_list *listen, const char *token)
{
	struct config_list found = { 0 };
	const struct config_list *addrs = listen;
	int ok = 0;

	/* No --listen given to this command: PID 1's, else the default. */
	if (listen->defaulted) {
		pid1_listen(&found);
		if (found.n > 0)
			addrs = &found;
	}
	for (size_t i = 0; i < addrs->n && !ok; i++)
		ok = probe(addrs->v[i], token != NULL && *token ? token : NULL);
	config_list_free(&found);
	fflush(stdout);
	return ok ? 0 : 1;
}
