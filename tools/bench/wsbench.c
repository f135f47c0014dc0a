/*
 * wsbench: the desktop's relay measured as a viewer sees it. A C client,
 * so that the figures are the relay's, not an interpreter's: it speaks
 * RFB (3.8, security None, raw encoding only) either straight to a VNC
 * server's unix socket or inside a WebSocket (RFC 6455, binary frames,
 * masked as a client must) to the agent's /websockify or sandboxd's
 * /desktop/{id}, over TCP or a unix socket.
 *
 *   wsbench [-u UNIX_PATH | -t HOST:PORT] [-p PATH_AND_QUERY] [-a TOKEN]
 *           [-r] throughput|latency N
 *
 * -r: plain RFB on the socket, no WebSocket (the VNC server itself).
 * -a: sent as "Authorization: Bearer TOKEN" with the upgrade.
 * throughput N: N full screens asked for one after the other (each a
 *   non-incremental update of the whole screen); prints
 *   "mib_s=X bytes=B seconds=S".
 * latency N: N updates of a 64x64 corner, after 10% as many to warm up;
 *   prints "p50_us=X p99_us=Y n=N".
 * Only the addresses given are reached (loopback or unix sockets).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct conn {
	int fd;
	int ws;				/* inside a WebSocket */
	unsigned char *buf;		/* bytes read, not yet consumed */
	size_t len, cap;
	uint64_t frame_left;		/* of the binary frame being read */
	uint64_t bytes;			/* RFB bytes received */
};

static void __attribute__((noreturn, format(printf, 1, 2)))
die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "wsbench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* At least want bytes in c->buf. */
static void
fill(struct conn *c, size_t want)
{
	while (c->len < want) {
		ssize_t n;

		if (c->cap - c->len < 65536) {
			c->cap = c->cap * 2 + 262144;
			c->buf = realloc(c->buf, c->cap);
			if (c->buf == NULL)
				die("out of memory");
		}
		n = read(c->fd, c->buf + c->len, c->cap - c->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("the server closed the connection");
		c->len += (size_t)n;
	}
}

static void
consume(struct conn *c, size_t n)
{
	memmove(c->buf, c->buf + n, c->len - n);
	c->len -= n;
}

static void
write_all(int fd, const void *p, size_t n)
{
	const char *s = p;

	while (n > 0) {
		ssize_t w = write(fd, s, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die("write: %s", strerror(errno));
		s += w;
		n -= (size_t)w;
	}
}

/* Send RFB bytes: as they are, or in one masked binary frame. */
static void
send_rfb(struct conn *c, const void *data, size_t n)
{
	unsigned char f[14 + 64];
	const unsigned char *d = data;
	static const unsigned char mask[4] = { 0x12, 0x34, 0x56, 0x78 };

	if (!c->ws) {
		write_all(c->fd, data, n);
		return;
	}
	if (n > 64)
		die("a message of %zu bytes", n);
	f[0] = 0x82;
	f[1] = (unsigned char)(0x80 | n);
	memcpy(f + 2, mask, 4);
	for (size_t i = 0; i < n; i++)
		f[6 + i] = d[i] ^ mask[i & 3];
	write_all(c->fd, f, 6 + n);
}

/* n bytes of the RFB stream into out (NULL: dropped). Frames other than
 * binary ones (pings) are skipped. */
static void
recv_rfb(struct conn *c, void *out, size_t n)
{
	unsigned char *o = out;

	while (n > 0) {
		size_t take;

		if (c->ws && c->frame_left == 0) {
			unsigned len7, at = 2, op;
			uint64_t len;

			fill(c, 2);
			op = c->buf[0] & 0x0f;
			len7 = c->buf[1] & 0x7f;
			if (len7 == 126)
				at = 4;
			else if (len7 == 127)
				at = 10;
			fill(c, at);
			len = len7;
			if (len7 >= 126) {
				len = 0;
				for (unsigned i = 2; i < at; i++)
					len = len << 8 | c->buf[i];
			}
			consume(c, at);
			if (op == 0x8)
				die("the server closed the WebSocket");
			if (op != 0x2 && op != 0x0) {
				fill(c, (size_t)len);
				consume(c, (size_t)len);
				continue;
			}
			c->frame_left = len;
			continue;
		}
		take = n;
		if (c->ws && take > c->frame_left)
			take = (size_t)c->frame_left;
		if (c->len == 0)
			fill(c, 1);
		if (take > c->len)
			take = c->len;
		if (o != NULL) {
			memcpy(o, c->buf, take);
			o += take;
		}
		consume(c, take);
		n -= take;
		c->bytes += take;
		if (c->ws)
			c->frame_left -= take;
	}
}

static int
dial(const char *unix_path, const char *tcp)
{
	int fd;

	if (unix_path != NULL) {
		struct sockaddr_un sun = { .sun_family = AF_UNIX };

		if (strlen(unix_path) >= sizeof sun.sun_path)
			die("socket path too long");
		strcpy(sun.sun_path, unix_path);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sun,
		    sizeof sun) < 0)
			die("connect %s: %s", unix_path, strerror(errno));
	} else {
		struct sockaddr_in sin = { .sin_family = AF_INET };
		const char *colon = strrchr(tcp, ':');
		char host[64];
		int one = 1;

		if (colon == NULL || (size_t)(colon - tcp) >= sizeof host)
			die("bad address %s", tcp);
		memcpy(host, tcp, (size_t)(colon - tcp));
		host[colon - tcp] = '\0';
		sin.sin_port = htons((uint16_t)atoi(colon + 1));
		if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
			die("bad host %s", host);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sin,
		    sizeof sin) < 0)
			die("connect %s: %s", tcp, strerror(errno));
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	}
	return fd;
}

static void
upgrade(struct conn *c, const char *path, const char *token)
{
	char req[2048];
	unsigned char *end;
	int n;

	n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: bench\r\n"
	    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
	    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: binary\r\n"
	    "%s%s%s\r\n", path, token ? "Authorization: Bearer " : "",
	    token ? token : "", token ? "\r\n" : "");
	if (n < 0 || (size_t)n >= sizeof req)
		die("request too long");
	write_all(c->fd, req, (size_t)n);
	for (;;) {
		fill(c, c->len + 1);
		end = memmem(c->buf, c->len, "\r\n\r\n", 4);
		if (end != NULL)
			break;
		if (c->len > 65536)
			die("no end of the answer's head");
	}
	if (c->len < 12 || memcmp(c->buf, "HTTP/1.1 101", 12) != 0)
		die("the upgrade was refused: %.*s", (int)(end - c->buf),
		    (char *)c->buf);
	consume(c, (size_t)(end + 4 - c->buf));
	c->ws = 1;
}

static void
handshake(struct conn *c, int *width, int *height)
{
	unsigned char v[12], b[24], n;
	uint32_t name_len;

	recv_rfb(c, v, 12);
	if (memcmp(v, "RFB 003.", 8) != 0)
		die("not an RFB server");
	send_rfb(c, "RFB 003.008\n", 12);
	recv_rfb(c, &n, 1);
	recv_rfb(c, b, n);
	send_rfb(c, "\x01", 1);
	recv_rfb(c, b, 4);
	send_rfb(c, "\x01", 1);
	recv_rfb(c, b, 24);
	*width = b[0] << 8 | b[1];
	*height = b[2] << 8 | b[3];
	name_len = (uint32_t)b[20] << 24 | (uint32_t)b[21] << 16 |
	    (uint32_t)b[22] << 8 | b[23];
	recv_rfb(c, NULL, name_len);
	/* SetEncodings: raw only. */
	send_rfb(c, "\x02\x00\x00\x01\x00\x00\x00\x00", 8);
}

/* Ask for x, y, w, h (non-incremental) and read the whole update. */
static void
update(struct conn *c, int x, int y, int w, int h)
{
	unsigned char m[10] = { 3, 0, (unsigned char)(x >> 8),
	    (unsigned char)x, (unsigned char)(y >> 8), (unsigned char)y,
	    (unsigned char)(w >> 8), (unsigned char)w,
	    (unsigned char)(h >> 8), (unsigned char)h };
	unsigned char head[4], r[12];
	unsigned rects;

	send_rfb(c, m, sizeof m);
	for (;;) {
		recv_rfb(c, head, 1);
		if (head[0] == 0)
			break;
		if (head[0] == 2)		/* bell */
			continue;
		die("unexpected server message %u", head[0]);
	}
	recv_rfb(c, head + 1, 3);
	rects = (unsigned)head[2] << 8 | head[3];
	for (unsigned i = 0; i < rects; i++) {
		unsigned rw, rh;

		recv_rfb(c, r, 12);
		rw = (unsigned)r[4] << 8 | r[5];
		rh = (unsigned)r[6] << 8 | r[7];
		if (r[8] | r[9] | r[10] | r[11])
			die("an encoding other than raw");
		recv_rfb(c, NULL, (size_t)rw * rh * 4);
	}
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
	const char *unix_path = NULL, *tcp = NULL, *path = "/websockify";
	const char *token = NULL;
	struct conn c = { 0 };
	int raw = 0, opt, width, height, n;

	while ((opt = getopt(argc, argv, "u:t:p:a:r")) != -1) {
		switch (opt) {
		case 'u': unix_path = optarg; break;
		case 't': tcp = optarg; break;
		case 'p': path = optarg; break;
		case 'a': token = optarg; break;
		case 'r': raw = 1; break;
		default: die("usage: see the head of tools/bench/wsbench.c");
		}
	}
	if (argc - optind != 2 || (unix_path == NULL) == (tcp == NULL))
		die("usage: see the head of tools/bench/wsbench.c");
	n = atoi(argv[optind + 1]);
	if (n <= 0)
		die("N must be positive");
	c.fd = dial(unix_path, tcp);
	if (!raw)
		upgrade(&c, path, token);
	handshake(&c, &width, &height);
	if (strcmp(argv[optind], "throughput") == 0) {
		double t0;
		uint64_t b0;

		update(&c, 0, 0, width, height);	/* warm up */
		b0 = c.bytes;
		t0 = now();
		for (int i = 0; i < n; i++)
			update(&c, 0, 0, width, height);
		t0 = now() - t0;
		printf("mib_s=%.0f bytes=%llu seconds=%.3f\n",
		    (double)(c.bytes - b0) / t0 / 1048576.0,
		    (unsigned long long)(c.bytes - b0), t0);
	} else if (strcmp(argv[optind], "latency") == 0) {
		double *t = calloc((size_t)n, sizeof *t);

		if (t == NULL)
			die("out of memory");
		for (int i = 0; i < n / 10 + 1; i++)
			update(&c, 0, 0, 64, 64);
		for (int i = 0; i < n; i++) {
			double t0 = now();

			update(&c, 0, 0, 64, 64);
			t[i] = (now() - t0) * 1e6;
		}
		qsort(t, (size_t)n, sizeof *t, cmp_double);
		printf("p50_us=%.0f p99_us=%.0f n=%d\n", t[n / 2],
		    t[(size_t)((double)n * 0.99)], n);
		free(t);
	} else {
		die("mode is throughput or latency");
	}
	close(c.fd);
	return 0;
}
