/*
 * Between the shell template's builtin (shell_template_bash.c) and its
 * start of a bash anew for envd (shell_template_start.c).
 */
#ifndef SHELL_TEMPLATE_BASH_H
#define SHELL_TEMPLATE_BASH_H

#include "spawn.h"
#include "../shell_template_wire.h"

/* A message on the report pipe (spawn_internal.h); _exit(127) when it
 * cannot be written. */
void shell_template_tell(int fd, int kind, int value);

/* In a command that took a SHELL_TEMPLATE_START request (req, its text of
 * req->len bytes, NUL-ended, its own; stdin, stdout and stderr in fd; the
 * report pipe): set itself up as base says but as the request's user in
 * its directory, tell it runs, and become the bash the request starts. */
void shell_template_start(const struct shell_template_request *req,
    char *text, const struct spawn_options *base, int fd[3], int report)
    __attribute__((noreturn));

#endif
