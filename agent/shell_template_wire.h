/*
 * The channel between the agent (shell_template.c) and its shell template,
 * the builtin loaded into one bash (bash/shell_template_bash.c): a
 * SOCK_SEQPACKET socket pair, one message per datagram. Both ends are
 * built from this tree, so the structs go as they are in memory; the
 * template is root and the agent's own child, and neither believes a
 * message it has not checked (magic, lengths, descriptors).
 *
 * The agent sends a hello first: the commands' user and seccomp program.
 * The template answers ready. Then, per command, a request with its text
 * (inline, or in a memfd when longer than SHELL_TEMPLATE_TEXT_MAX) and
 * descriptors (SCM_RIGHTS): stdin, stdout, stderr, the report pipe's write
 * end, then the memfd if any. The template answers nothing: the keeper it
 * forks reports on that pipe (spawn_start_via), and the command tells
 * there that it runs once it has set itself up (SPAWN_MSG_STARTED).
 */
#ifndef SHELL_TEMPLATE_WIRE_H
#define SHELL_TEMPLATE_WIRE_H

#include <stdint.h>

/* The template's ends, in the template: the socket and (at start only)
 * the memfd its builtin is loaded from. */
#define SHELL_TEMPLATE_FD 3
#define SHELL_TEMPLATE_SO_FD 4
/* What its bash runs: dlopen runs nothing; the builtin's load function
 * serves until the socket ends, and its forks run the commands. */
#define SHELL_TEMPLATE_SCRIPT "enable -f /proc/self/fd/4 shell_template"

#define SHELL_TEMPLATE_MAGIC 0x53685470u	/* "ShTp" */
/* Text inline in a request, at most (a datagram fits in any socket
 * buffer); longer ones come in a memfd. */
#define SHELL_TEMPLATE_TEXT_MAX (60 * 1024)
/* Seccomp instructions in the hello, at most (the kernel's limit). */
#define SHELL_TEMPLATE_FILTER_MAX 4096

struct shell_template_hello {
	uint32_t magic;
	uint32_t set_ids;	/* drop to uid:gid (--run-as) */
	uint32_t uid;
	uint32_t gid;
	uint32_t nfilter;	/* struct sock_filter follow; 0: no seccomp */
};

struct shell_template_ready {
	uint32_t magic;
	int32_t pid;
};

/* What a request asks for. */
enum shell_template_kind {
	/* run_shell_command: the text, as bash -c would run it, as the
	 * commands' user in the template's directory. */
	SHELL_TEMPLATE_RUN,
	/* envd's Start: a bash started anew from argv with envp, as uid:gid
	 * (set_ids) in cwd (bash/shell_template_start.c). The text is argc
	 * strings of argv, envc of envp, then cwd, each ended by a NUL. */
	SHELL_TEMPLATE_START,
};

struct shell_template_request {
	uint32_t magic;
	uint32_t len;		/* bytes of text */
	uint32_t in_memfd;	/* the text is in the fifth descriptor */
	uint32_t kind;		/* enum shell_template_kind */
	uint32_t set_ids;	/* START: its user */
	uint32_t uid;
	uint32_t gid;
	uint32_t argc;		/* START: its strings */
	uint32_t envc;
};

/* Descriptors with a request: stdin, stdout, stderr, report, [memfd]. */
#define SHELL_TEMPLATE_FDS 4

#endif
