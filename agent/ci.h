/*
 * The code interpreter of E2B's SDK (@e2b/code-interpreter's runCode and
 * its contexts; spec e2b-wire.md section 6), served under /ci: sandboxd
 * maps the SDK's port 49999 there. Private to ci_*.c.
 *
 * A context is a KERNEL_E2B kernel of its own (its state, its directory),
 * with an id the SDK names it by. The default Python context exists from
 * the start (its kernel starts on first use, or at once with
 * --prewarm-context), so runCode needs no create; removed, it is made
 * anew on the next run that names none. Python is the only language.
 */
#ifndef CI_H
#define CI_H

#include <stddef.h>
#include <sys/queue.h>

#include "error.h"

#define CI_ID_LEN 36		/* a UUID, as Jupyter's kernel ids */

struct agent;
struct kernel;

/* Owned by the context list; freed when removed. */
struct ci_context {
	TAILQ_ENTRY(ci_context) entry;
	char id[CI_ID_LEN + 1];
	char *cwd;
	struct kernel *k;
};

TAILQ_HEAD(ci_context_list, ci_context);

/* One per agent (agent->ci), made by ci_init; lives until exit. */
struct ci {
	struct agent *agent;
	struct ci_context_list contexts;
	size_t ncontexts;
	struct ci_context *python;	/* the default; NULL once removed */
	const char *home;		/* default cwd: the user's home, else
					 * the workspace */
};

/* The context of that id ("default": the default one), or NULL. */
struct ci_context *ci_context_find(struct ci *ci, const char *id);
/* The default context, made anew if it was removed; NULL with err (429)
 * when --max-contexts are running. */
struct ci_context *ci_context_default(struct ci *ci, struct error *err);
/* 0 if language (may be NULL: Python) names Python, in any case and
 * spacing; else -1 with err (400). */
int ci_language_check(const char *language, struct error *err);

#endif
