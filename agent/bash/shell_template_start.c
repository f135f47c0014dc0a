/*
 * envd's Start through the shell template (SHELL_TEMPLATE_START): a
 * command of the template, a fork of its bash (shell_template_bash.c),
 * made into a bash started anew from the request's argv and environment,
 * as its user in its directory, by bash's own start-up code.
 *
 * Bash has a way back into main() for a forked copy of itself: a script
 * without a #! line is run by a child that longjmps to subshell_top_level
 * with the script's argv and environment (execute_cmd.c,
 * initialize_subshell). Taken as it is, that path reads no profile
 * (shell_reinitialize sets no_profile); here the command undoes what it
 * resets itself and leaves bash's "initialized" marks down, so that main()
 * starts it as it starts an exec'd bash: it parses argv (-l, -c), imports
 * the environment (exported functions, SHELLOPTS, BASHOPTS, SHLVL, PWD,
 * the locale), reads /etc/profile and the user's profile for a login
 * shell, then $BASH_ENV, and runs -c's text through its reader loop.
 *
 * What the template left is undone first: its variables, functions,
 * aliases, options and flags, parser and input, job control, the state of
 * the `enable` it is in, and every signal's disposition (back to its
 * default, as an exec leaves a caught one); environ becomes the new
 * environment (main reads POSIXLY_CORRECT from it, setlocale the locale).
 * What stays of the template is not the user's to see but in /proc: the
 * process's cmdline and environ (the template's), its maps (the builtin).
 */
#include <config.h>

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "builtins.h"
#include "shell.h"
#include "bashjmp.h"
#include "execute_cmd.h"
#include "jobs.h"
#include "variables.h"

#include "spawn_internal.h"
#include "shell_template_bash.h"

/* Not in the headers. */
extern char **environ;
extern char *primary_prompt, *secondary_prompt;
extern int current_command_number, line_number, forced_interactive;
extern int running_in_background, bash_argv_initialized, restricted;
extern int history_lines_this_session, enable_history_list;
extern int parse_and_execute_level, return_catch_flag, funcnest;
extern int evalnest, sourcenest, executing_list, indirection_level;
extern int executing_builtin, executing_command_builtin, subshell_argc;
extern int shell_initialized, expand_aliases;
extern char *the_current_working_directory;
extern char **subshell_argv, **subshell_envp, *the_printed_command_except_trap;
extern sh_builtin_func_t *this_shell_builtin, *last_shell_builtin;
extern procenv_t subshell_top_level;
extern void reset_parser(void), bash_history_reinit(int);
extern void bashline_reinitialize(void), delete_all_aliases(void);
extern void clear_unwind_protect_list(int), unset_bash_input(int);
extern void unbind_args(void), clear_fifo_list(void);
extern void reset_shell_flags(void), reset_shell_options(void);
extern void reset_shopt_options(void), reinit_special_variables(void);
extern void set_default_locale(void);

/* argc, then envc strings and the directory, each ended by a NUL, in
 * text (len bytes, a NUL after them): into argv and envp (NULL-ended,
 * pointing into text) and *cwd. -1 if it does not hold exactly those. */
static int
split(char *text, size_t len, uint32_t argc, uint32_t envc, char **argv,
    char **envp, char **cwd)
{
	char *p = text, *end = text + len;

	for (uint32_t i = 0; i < argc + envc + 1; i++) {
		char *nul = memchr(p, '\0', (size_t)(end - p));

		if (p >= end || nul == NULL)
			return -1;
		if (i < argc)
			argv[i] = p;
		else if (i < argc + envc)
			envp[i - argc] = p;
		else
			*cwd = p;
		p = nul + 1;
	}
	argv[argc] = envp[envc] = NULL;
	return p == end ? 0 : -1;
}

/* As shell_reinitialize and initialize_subshell leave a bash that longjmps
 * back into main, but with no profile forbidden: nothing of the template,
 * nothing of the `enable` it runs. */
static void
vanilla(void)
{
	reset_parser();
	delete_all_aliases();
	history_lines_this_session = 0;
	without_job_control();
	init_job_stats();
	reset_shell_flags();
	reset_shell_options();
	reset_shopt_options();
	clear_unwind_protect_list(0);
	parse_and_execute_level = 0;
	variable_context = return_catch_flag = funcnest = evalnest = 0;
	sourcenest = executing_list = 0;
	unset_bash_input(0);
	unbind_args();
	clear_fifo_list();
	primary_prompt = PPROMPT;
	secondary_prompt = SPROMPT;
	current_command_number = 1;
	login_shell = interactive = executing = 0;
	line_number = last_command_exit_value = 0;
	forced_interactive = interactive_shell = 0;
	subshell_environment = running_in_background = 0;
	expand_aliases = bash_argv_initialized = 0;
	bash_history_reinit(enable_history_list = 0);
	restricted = 0;
	delete_all_contexts(shell_variables);
	delete_all_variables(shell_functions);
	reinit_special_variables();
	bashline_reinitialize();
	this_command_name = NULL;
	this_shell_builtin = last_shell_builtin = NULL;
	executing_builtin = executing_command_builtin = 0;
	indirection_level = 0;
	the_printed_command_except_trap = NULL;
	/* Else bash would take the template's directory for its own. */
	free(the_current_working_directory);
	the_current_working_directory = NULL;
	/* Else main would reinitialize, which reads no profile. */
	shell_initialized = 0;
	shell_name = NULL;
}

/* What main does before the point a subshell jumps back to, for the new
 * user and environment (uidget, set_default_locale and the posix check,
 * which are static or run before it). */
static void
before_main(char **envp)
{
	environ = envp;
	if (current_user.uid != getuid()) {
		free(current_user.user_name);
		free(current_user.shell);
		free(current_user.home_dir);
		current_user.user_name = current_user.shell = NULL;
		current_user.home_dir = NULL;
	}
	current_user.uid = getuid();
	current_user.gid = getgid();
	current_user.euid = geteuid();
	current_user.egid = getegid();
	set_default_locale();
	posixly_correct = getenv("POSIXLY_CORRECT") != NULL ||
	    getenv("POSIX_PEDANTIC") != NULL;
}

void
shell_template_start(const struct shell_template_request *req, char *text,
    const struct spawn_options *base, int fd[3], int report)
{
	char **argv = calloc((size_t)req->argc + 1, sizeof *argv);
	char **envp = calloc((size_t)req->envc + 1, sizeof *envp);
	struct spawn_options o = *base;
	char *cwd = NULL;

	if (argv == NULL || envp == NULL || req->argc == 0 ||
	    split(text, req->len, req->argc, req->envc, argv, envp,
	    &cwd) < 0) {
		shell_template_tell(report, SPAWN_MSG_ERRNO, EINVAL);
		_exit(127);
	}
	o.set_ids = req->set_ids != 0;
	o.uid = req->uid;
	o.gid = req->gid;
	o.cwd = cwd[0] != '\0' ? cwd : NULL;
	o.cwd_as_user = 1;
	if (spawn_child_confine(&o, fd, report) < 0)
		_exit(127);
	shell_template_tell(report, SPAWN_MSG_STARTED, (int)getpid());
	if (syscall(SYS_close_range, 3, ~0U, 0) < 0)
		for (int i = 3; i < 1024; i++)
			close(i);
	/* As an exec of /bin/bash, which any user may read, leaves it. */
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	vanilla();
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	before_main(envp);
	subshell_argc = (int)req->argc;
	subshell_argv = argv;
	subshell_envp = envp;
	sh_longjmp(subshell_top_level, 1);
}
