/*
 * startlat: time from exec of a server to its first 200 on GET /healthz,
 * over N starts (CLOCK_MONOTONIC from just before fork). Each start polls
 * connect + GET on 127.0.0.1:PORT as fast as it can, then stops the server
 * with SIGTERM and waits for it.
 *
 *   startlat [-n N] [-H 'Name: value'] PORT -- PROGRAM ARGS...
 *
 * The server's output goes to /dev/null. Prints
 * "n=N median_ms=X min_ms=Y max_ms=Z".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GIVE_UP_MS 10000	/* a server that takes longer is broken */

static void __attribute__((noreturn, format(printf, 1, 2)))
die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "startlat: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One attempt: 1 when GET /healthz answered 200. */
static int
healthy(const struct sockaddr_in *sa, const char *req, size_t req_len)
{
	char buf[64];
	size_t got = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok = 0;

	if (fd < 0)
		die("socket: %s", strerror(errno));
	if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) < 0)
		goto out;
	if (write(fd, req, req_len) != (ssize_t)req_len)
		goto out;
	/* The status line is enough. */
	while (got < sizeof buf - 1) {
		ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);

		if (n <= 0)
			break;
		got += (size_t)n;
		buf[got] = '\0';
		if (strstr(buf, "\r\n") != NULL)
			break;
	}
	buf[got] = '\0';
	ok = strncmp(buf, "HTTP/1.1 200 ", 13) == 0;
out:
	close(fd);
	return ok;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	const char *header = NULL;
	char req[512];
	int opt, n = 20, port, len;
	double *t;

	while ((opt = getopt(argc, argv, "+n:H:")) != -1) {
		switch (opt) {
		case 'n': n = atoi(optarg); break;
		case 'H': header = optarg; break;
		default: die("usage: startlat [-n N] [-H HEADER] PORT -- PROGRAM ARGS...");
		}
	}
	if (argc - optind < 3 || strcmp(argv[optind + 1], "--") != 0 || n < 1)
		die("usage: startlat [-n N] [-H HEADER] PORT -- PROGRAM ARGS...");
	port = atoi(argv[optind]);
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	len = snprintf(req, sizeof req, "GET /healthz HTTP/1.1\r\nHost: "
	    "127.0.0.1:%d\r\n%s%s\r\n", port, header ? header : "",
	    header ? "\r\n" : "");
	if (len < 0 || (size_t)len >= sizeof req)
		die("header too long");
	t = calloc((size_t)n, sizeof *t);
	if (t == NULL)
		die("out of memory");
	/* A server still up on the port would answer for the new one. */
	if (healthy(&sa, req, (size_t)len))
		die("something already answers on port %d", port);

	for (int i = 0; i < n; i++) {
		double t0 = now_ms();
		int status;
		pid_t pid = fork();

		if (pid < 0)
			die("fork: %s", strerror(errno));
		if (pid == 0) {
			int null = open("/dev/null", O_RDWR);

			dup2(null, 1);
			dup2(null, 2);
			execv(argv[optind + 2], argv + optind + 2);
			_exit(127);
		}
		while (!healthy(&sa, req, (size_t)len)) {
			if (waitpid(pid, &status, WNOHANG) == pid)
				die("%s exited before it was healthy (status "
				    "%d)", argv[optind + 2], status);
			if (now_ms() - t0 > GIVE_UP_MS) {
				kill(pid, SIGKILL);
				waitpid(pid, &status, 0);
				die("%s was not healthy after %d ms",
				    argv[optind + 2], GIVE_UP_MS);
			}
			usleep(50);
		}
		t[i] = now_ms() - t0;
		kill(pid, SIGTERM);
		if (waitpid(pid, &status, 0) != pid)
			die("waitpid: %s", strerror(errno));
	}
	qsort(t, (size_t)n, sizeof *t, cmp_double);
	printf("n=%d median_ms=%.2f min_ms=%.2f max_ms=%.2f\n", n,
	    n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2, t[0], t[n - 1]);
	free(t);
	return 0;
}
