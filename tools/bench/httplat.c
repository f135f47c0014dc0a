/*
 * httplat: latency of one HTTP request type over one keep-alive TCP
 * connection, measured per request with CLOCK_MONOTONIC. A C client so that
 * the figures are the server's, not an interpreter's.
 *
 *   httplat [-m METHOD] [-d BODY | -f BODYFILE] [-c CONTENT-TYPE]
 *           [-H 'Name: value']... [-n N] [-w WARMUP] [-C CALLERS]
 *           [-g GAP_US] HOST PORT TARGET
 *
 * -C: that many callers at once, each on its own connection, sharing the
 * N requests (and each doing the warm-up); -g: each caller pauses that
 * long after each answer (not counted), as a client that does something
 * between its calls.
 * Prints "status=S n=N p50_us=X p99_us=Y" on success (every answer 2xx).
 * When the first answer is not 2xx it prints "status=S" and exits 2, so a
 * caller can tell a route that is not there from a failure (exit 1).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEADERS 16

/* The connection's input: bytes read but not yet consumed, followed by a
 * NUL once anything has been read. */
struct conn {
	int fd;
	char *buf;
	size_t len, cap;
};

static void __attribute__((noreturn, format(printf, 1, 2)))
die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "httplat: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void *
xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (p == NULL)
		die("out of memory");
	return p;
}

static int
dial(const char *host, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd, one = 1;

	sa.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		die("%s is not an IPv4 address", host);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		die("connect %s:%d: %s", host, port, strerror(errno));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

static void
send_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die("write: %s", w < 0 ? strerror(errno) : "closed");
		p += w;
		n -= (size_t)w;
	}
}

/* Read more into the connection buffer; dies on end of file. */
static void
fill(struct conn *c)
{
	ssize_t n;

	if (c->cap - c->len < 65536) {
		c->cap = c->cap * 2 + 65536;
		c->buf = xrealloc(c->buf, c->cap);
	}
	do
		n = read(c->fd, c->buf + c->len, c->cap - c->len - 1);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		die("read: %s", strerror(errno));
	if (n == 0)
		die("the server closed the connection");
	c->len += (size_t)n;
	c->buf[c->len] = '\0';	/* for sscanf and strtoul */
}

static void
consume(struct conn *c, size_t n)
{
	memmove(c->buf, c->buf + n, c->len - n + 1);
	c->len -= n;
}

/* Offset just past the next CRLF at or after from, reading as needed. */
static size_t
line_end(struct conn *c, size_t from)
{
	for (;;) {
		char *p = c->len > from ? memmem(c->buf + from, c->len - from,
		    "\r\n", 2) : NULL;

		if (p != NULL)
			return (size_t)(p - c->buf) + 2;
		fill(c);
	}
}

static void
skip_bytes(struct conn *c, size_t n)
{
	while (c->len < n)
		fill(c);
	consume(c, n);
}

/* Read one whole response; returns its status, *closing set when the
 * server ends the connection after it. */
static int
read_response(struct conn *c, const char *method, int *closing)
{
	size_t end = 0, at;
	long long length = -1;
	int status, chunked = 0;

	*closing = 0;
	/* Headers: up to the empty line. */
	for (;;) {
		size_t next = line_end(c, end);

		if (next - end == 2)
			break;
		end = next;
	}
	end += 2;
	if (sscanf(c->buf, "HTTP/1.%*d %d", &status) != 1)
		die("bad status line");
	for (at = 0; at < end;) {
		char *line = c->buf + at;
		char *eol = memmem(line, end - at, "\r\n", 2);

		if (strncasecmp(line, "Content-Length:", 15) == 0)
			length = atoll(line + 15);
		else if (strncasecmp(line, "Transfer-Encoding:", 18) == 0 &&
		    memmem(line, (size_t)(eol - line), "chunked", 7) != NULL)
			chunked = 1;
		else if (strncasecmp(line, "Connection:", 11) == 0 &&
		    memmem(line, (size_t)(eol - line), "close", 5) != NULL)
			*closing = 1;
		at = (size_t)(eol - c->buf) + 2;
	}
	consume(c, end);
	if (strcmp(method, "HEAD") == 0 || status == 204 || status == 304)
		return status;
	if (chunked) {
		for (;;) {
			size_t e = line_end(c, 0);
			unsigned long size = strtoul(c->buf, NULL, 16);

			consume(c, e);
			if (size == 0) {
				/* Trailers, then the empty line. */
				while ((e = line_end(c, 0)) != 2)
					consume(c, e);
				consume(c, 2);
				break;
			}
			skip_bytes(c, size + 2);
		}
	} else if (length >= 0) {
		skip_bytes(c, (size_t)length);
	} else if (status >= 200 && status <= 299) {
		die("an answer with neither a length nor chunks");
	}
	return status;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static char *
read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *data = NULL;
	size_t cap = 0, n;

	if (f == NULL)
		die("%s: %s", path, strerror(errno));
	*len = 0;
	do {
		if (cap - *len < 65536) {
			cap = cap * 2 + 65536;
			data = xrealloc(data, cap);
		}
		n = fread(data + *len, 1, cap - *len, f);
		*len += n;
	} while (n > 0);
	fclose(f);
	return data;
}

static void
usage(void)
{
	fprintf(stderr, "usage: httplat [-m METHOD] [-d BODY | -f BODYFILE] "
	    "[-c CONTENT-TYPE] [-H 'Name: value']... [-n N] [-w WARMUP] "
	    "[-C CALLERS] [-g GAP_US] HOST PORT TARGET\n");
	exit(1);
}

/* What every caller shares; each takes its own slice of lat. */
struct run {
	const char *host, *method, *req;
	size_t req_len;
	int port, warmup, gap_us;
	double *lat;
	int n;
	int status;	/* the last answer's, or 0 */
	int failed;	/* 2: the first answer was not 2xx; 1: a later one */
};

static void *
caller(void *arg)
{
	struct run *r = arg;
	struct conn c = { 0 };
	int status = 0;

	c.fd = dial(r->host, r->port);
	for (int i = 0; i < r->warmup + r->n; i++) {
		double t0 = now_us();
		int closing = 0;

		send_all(c.fd, r->req, r->req_len);
		status = read_response(&c, r->method, &closing);
		if (i >= r->warmup)
			r->lat[i - r->warmup] = now_us() - t0;
		if (status < 200 || status > 299) {
			r->status = status;
			r->failed = i == 0 ? 2 : 1;
			break;
		}
		if (closing)
			die("the server closed the keep-alive connection");
		if (r->gap_us > 0)
			usleep((useconds_t)r->gap_us);
	}
	if (!r->failed)
		r->status = status;
	close(c.fd);
	free(c.buf);
	return NULL;
}

int
main(int argc, char **argv)
{
	const char *method = "GET", *ctype = NULL, *headers[MAX_HEADERS];
	const char *body = NULL, *host, *target;
	size_t body_len = 0, req_len, nheaders = 0;
	int opt, port, n = 2000, warmup = 200, status = 0, callers = 1;
	int gap_us = 0;
	struct run *runs;
	pthread_t *threads;
	char *req;
	double *lat;
	FILE *m;

	while ((opt = getopt(argc, argv, "m:d:f:c:H:n:w:C:g:")) != -1) {
		switch (opt) {
		case 'm': method = optarg; break;
		case 'd': body = optarg; body_len = strlen(optarg); break;
		case 'f': body = read_file(optarg, &body_len); break;
		case 'c': ctype = optarg; break;
		case 'H':
			if (nheaders == MAX_HEADERS)
				die("too many headers");
			headers[nheaders++] = optarg;
			break;
		case 'n': n = atoi(optarg); break;
		case 'w': warmup = atoi(optarg); break;
		case 'C': callers = atoi(optarg); break;
		case 'g': gap_us = atoi(optarg); break;
		default: usage();
		}
	}
	if (argc - optind != 3 || n < 1 || warmup < 0 || callers < 1 ||
	    callers > n || gap_us < 0)
		usage();
	host = argv[optind];
	port = atoi(argv[optind + 1]);
	target = argv[optind + 2];

	m = open_memstream(&req, &req_len);
	fprintf(m, "%s %s HTTP/1.1\r\nHost: %s:%d\r\n", method, target, host,
	    port);
	for (size_t i = 0; i < nheaders; i++)
		fprintf(m, "%s\r\n", headers[i]);
	if (body != NULL) {
		fprintf(m, "Content-Length: %zu\r\n", body_len);
		if (ctype != NULL)
			fprintf(m, "Content-Type: %s\r\n", ctype);
	}
	fprintf(m, "\r\n");
	if (body != NULL)
		fwrite(body, 1, body_len, m);
	fclose(m);

	lat = calloc((size_t)n, sizeof *lat);
	if (lat == NULL)
		die("out of memory");
	runs = calloc((size_t)callers, sizeof *runs);
	threads = calloc((size_t)callers, sizeof *threads);
	if (runs == NULL || threads == NULL)
		die("out of memory");
	for (int k = 0, from = 0; k < callers; k++) {
		struct run *r = &runs[k];

		r->host = host;
		r->method = method;
		r->req = req;
		r->req_len = req_len;
		r->port = port;
		r->warmup = warmup;
		r->gap_us = gap_us;
		r->n = n / callers + (k < n % callers);
		r->lat = lat + from;
		from += r->n;
		if (pthread_create(&threads[k], NULL, caller, r) != 0)
			die("pthread_create failed");
	}
	for (int k = 0; k < callers; k++) {
		pthread_join(threads[k], NULL);
		if (runs[k].failed) {
			printf("status=%d\n", runs[k].status);
			return runs[k].failed;
		}
		status = runs[k].status;
	}
	free(runs);
	free(threads);
	qsort(lat, (size_t)n, sizeof *lat, cmp_double);
	printf("status=%d n=%d p50_us=%.0f p99_us=%.0f\n", status, n,
	    lat[(size_t)((n - 1) * 0.50)], lat[(size_t)((n - 1) * 0.99)]);
	free(lat);
	free(req);
	return 0;
}
