#include "token.h"

#include <errno.h>
#include <sys/random.h>

#include "log.h"

void
token_random_bytes(void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n > 0) {
		ssize_t r = getrandom(p, n, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			fatal("getrandom failed");
		}
		p += r;
		n -= (size_t)r;
	}
}

void
token_random_hex_n(char *out, size_t nbytes)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char raw[64];

	while (nbytes > 0) {
		size_t n = nbytes < sizeof raw ? nbytes : sizeof raw;

		token_random_bytes(raw, n);
		for (size_t i = 0; i < n; i++) {
			*out++ = hex[raw[i] >> 4];
			*out++ = hex[raw[i] & 15];
		}
		nbytes -= n;
	}
	*out = '\0';
}

void
token_random_hex(char out[TOKEN_HEX_LEN])
{
	token_random_hex_n(out, (TOKEN_HEX_LEN - 1) / 2);
}
