/*
 * Staged files of the workspace file routes (files_staged.c): a file being
 * written that appears in the workspace only once complete, so a failed or
 * aborted write leaves nothing behind. Owned by its route, which ends it
 * with files_staged_commit or files_staged_discard.
 */
#ifndef FILES_STAGED_H
#define FILES_STAGED_H

#include <sys/stat.h>

#include "error.h"

struct agent;

struct staged_file {
	int fd;		/* read-write; -1 once closed */
	int dirfd;	/* the directory it lives in, borrowed: the caller
			 * keeps it open as long as the staged file */
	char *name;	/* its hidden name there; NULL while anonymous */
};

/* A private directory: root's alone (mode 0700), made under a hidden name
 * and used only through its descriptor, so that files staged in it by name
 * cannot be swapped by the user who owns the workspace. */
struct staged_dir {
	int fd;
	int parentfd;	/* borrowed, as staged_file's dirfd */
	char *name;
	dev_t dev;
	ino_t ino;
};

void files_staged_init(struct staged_file *f);
/* A new empty file in dirfd: anonymous (O_TMPFILE) unless named or the
 * filesystem cannot, else under a hidden name. Only a file in a private
 * directory may be named on purpose: its descriptor may then be closed
 * and the name used again. rel (the target) names it in error messages. */
int files_staged_create(struct staged_file *f, int dirfd, int named,
    const char *rel, struct error *err);
/* Close the descriptor but keep the file (it must have a name). */
void files_staged_close(struct staged_file *f);
/* Whether a rename between directories a and b can work (one mount). */
int files_staged_same_mount(int a, int b);
/* Copy f into a new staged file in dirfd (on another mount); f is that
 * one afterwards. */
int files_staged_copy_to(struct staged_file *f, int dirfd, const char *rel,
    struct error *err);
/* Give it the owner and mode of the regular file it replaces (else to the
 * command user), through its descriptor, then rename it over name in
 * dirfd: the atomic replace. 409 when name is a directory, or when name
 * does not hold our file afterwards (another process renamed something
 * over it). *st: what landed, for the entry info. The staged file is done
 * with afterwards (files_staged_discard it). */
int files_staged_commit(struct staged_file *f, struct agent *agent, int dirfd,
    const char *name, const char *rel, struct stat *st, struct error *err);
/* Remove what is left of it and close it. */
void files_staged_discard(struct staged_file *f);
void files_staged_dir_init(struct staged_dir *d);
/* A new private directory in parentfd. */
int files_staged_dir_create(struct staged_dir *d, int parentfd,
    struct error *err);
/* Remove it, empty, and close it. */
void files_staged_dir_remove(struct staged_dir *d);
/* Whether name (a last component) is one a staged file goes by while
 * hidden: ".sandbox-upload-" and 16 lowercase hex digits. */
int files_staged_is_hidden_name(const char *name);
/* Remove, in the background, the hidden files and private directories
 * anywhere beneath the workspace root that are older than this call: an
 * agent that died mid-upload left them. Once at start, after the loop
 * exists. */
void files_staged_sweep_start(struct agent *agent);
/* After the loop ended: stop a sweep still under way. */
void files_staged_sweep_shutdown(void);

#endif
