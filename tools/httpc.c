/*
 * httpc: one HTTP request with common/http_client.c, for debugging the
 * Docker API and agents by hand and for testing the client from pytest.
 *
 *   httpc [-i] [-t SECONDS] [-H 'Name: value']... [-d DATA | -d @FILE |
 *         -T FILE] ADDR METHOD TARGET
 *
 * ADDR is unix:/path or HOST:PORT. -d sends a whole body, -T streams a
 * file ("-": stdin) as a chunked body. The answer body goes to stdout as
 * it comes; -i puts the status line and headers first. Exit status: 0 for
 * an answer below 400, 1 for 400 and above, 2 when the exchange failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "http_client.h"
#include "xmalloc.h"

#define UPLOAD_HIGH	(1024 * 1024)

struct httpc {
	int show_head;
	int upload_fd;
	int exit_status;
	size_t uploaded;
};

static void
usage(void)
{
	fprintf(stderr, "usage: httpc [-i] [-t SECONDS] [-H 'Name: value']... "
	    "[-d DATA | -d @FILE | -T FILE] ADDR METHOD TARGET\n");
	exit(2);
}

static char *
read_file(const char *path, size_t *len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	char *data = NULL;
	size_t cap = 0, n;

	if (f == NULL) {
		fprintf(stderr, "httpc: %s: %s\n", path, strerror(errno));
		exit(2);
	}
	*len = 0;
	do {
		if (*len == cap) {
			cap = cap ? cap * 2 : 65536;
			data = xrealloc(data, cap);
		}
		n = fread(data + *len, 1, cap - *len, f);
		*len += n;
	} while (n > 0);
	if (f != stdin)
		fclose(f);
	return data;
}

static void
head_cb(struct http_client_request *r, int status, void *arg)
{
	struct httpc *h = arg;

	if (!h->show_head)
		return;
	printf("HTTP/1.1 %d\r\n", status);
	for (size_t i = 0; i < http_client_header_count(r); i++) {
		const char *name, *value;

		http_client_header_at(r, i, &name, &value);
		printf("%s: %s\r\n", name, value);
	}
	printf("\r\n");
}

static void
body_cb(struct http_client_request *r, const char *data, size_t len,
    void *arg)
{
	(void)r;
	(void)arg;
	fwrite(data, 1, len, stdout);
}

/* Feed the upload while the client's queue is short. Reading the file
 * blocks the loop, which a one-shot tool may afford. */
static void
drain_cb(struct http_client_request *r, void *arg)
{
	struct httpc *h = arg;
	char buf[65536];
	ssize_t n;

	while (h->upload_fd >= 0 && http_client_pending(r) < UPLOAD_HIGH) {
		n = read(h->upload_fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n < 0)
				fprintf(stderr, "httpc: read: %s\n",
				    strerror(errno));
			if (h->upload_fd != STDIN_FILENO)
				close(h->upload_fd);
			h->upload_fd = -1;
			http_client_end(r);
			return;
		}
		h->uploaded += (size_t)n;
		http_client_write(r, buf, (size_t)n);
	}
}

static void
done_cb(struct http_client_request *r, const struct error *err, void *arg)
{
	struct httpc *h = arg;

	fflush(stdout);
	if (err != NULL) {
		fprintf(stderr, "httpc: %d %s\n", err->status, err->msg);
		h->exit_status = 2;
		return;
	}
	h->exit_status = http_client_status(r) >= 400 ? 1 : 0;
}

int
main(int argc, char **argv)
{
	struct http_client_callbacks cb = {
		.on_head = head_cb,
		.on_body = body_cb,
		.on_drain = drain_cb,
		.on_done = done_cb,
	};
	struct http_client_options o = { 0 };
	struct httpc h = { .upload_fd = -1, .exit_status = 2 };
	const char **headers;
	struct event_base *base;
	struct http_client_request *r;
	struct error err;
	char *body = NULL;
	size_t nheaders = 0;
	int c;

	signal(SIGPIPE, SIG_IGN);
	headers = xcalloc((size_t)argc + 1, sizeof *headers);
	while ((c = getopt(argc, argv, "d:H:it:T:")) != -1) {
		switch (c) {
		case 'd':
			if (optarg[0] == '@') {
				body = read_file(optarg + 1, &o.body_len);
			} else {
				body = xstrdup(optarg);
				o.body_len = strlen(body);
			}
			o.body = body;
			break;
		case 'H':
			headers[nheaders++] = optarg;
			break;
		case 'i':
			h.show_head = 1;
			break;
		case 't':
			o.timeout = strtod(optarg, NULL);
			break;
		case 'T':
			h.upload_fd = strcmp(optarg, "-") == 0 ? STDIN_FILENO :
			    open(optarg, O_RDONLY | O_CLOEXEC);
			if (h.upload_fd < 0) {
				fprintf(stderr, "httpc: %s: %s\n", optarg,
				    strerror(errno));
				return 2;
			}
			o.stream_body = 1;
			o.body_length = -1;
			break;
		default:
			usage();
		}
	}
	if (argc - optind != 3 || (o.body != NULL && o.stream_body))
		usage();
	o.addr = argv[optind];
	o.method = argv[optind + 1];
	o.target = argv[optind + 2];
	o.headers = headers;

	base = event_base_new();
	r = http_client_start(base, &o, &cb, &h, &err);
	if (r == NULL) {
		fprintf(stderr, "httpc: %s\n", err.msg);
		return 2;
	}
	if (o.stream_body)
		drain_cb(r, &h);
	event_base_dispatch(base);
	event_base_free(base);
	free(body);
	free(headers);
	return h.exit_status;
}
