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
token_random_hex(char out[TOKEN_HEX_LEN])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char raw[16];

	token_random_bytes(raw, sizeof raw);
	for (size_t i = 0; i < sizeof raw; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[32] = '\0';
}
