/* Random tokens for sandboxes and sessions. */
#ifndef TOKEN_H
#define TOKEN_H

#include <stddef.h>

/* 128 random bits as 32 lowercase hex digits plus NUL. */
#define TOKEN_HEX_LEN 33
void token_random_hex(char out[TOKEN_HEX_LEN]);
/* nbytes random bytes as 2 * nbytes lowercase hex digits plus NUL into
 * out (2 * nbytes + 1 bytes), for names shorter or longer than a token. */
void token_random_hex_n(char *out, size_t nbytes);
/* n random bytes from the kernel; aborts if it cannot give them. */
void token_random_bytes(void *buf, size_t n);

#endif
