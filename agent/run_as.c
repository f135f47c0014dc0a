/*
 * --run-as UID:GID needs CAP_SETUID and CAP_SETGID, and a container may be
 * started with every capability dropped. Then each command's drop to the
 * user would fail and no command could run at all; the agent says so once
 * at start and runs them as itself instead (an unprivileged root without
 * capabilities, under the same seccomp filter).
 */
#include "agent.h"

#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

/* setfsuid/setfsgid succeed exactly when setuid/setgid to that id would:
 * a probe that changes nothing the process keeps. */
static int
can_switch(uid_t uid, gid_t gid)
{
	uid_t old_uid = (uid_t)setfsuid(uid);
	gid_t old_gid = (gid_t)setfsgid(gid);
	/* An invalid id changes nothing and answers the current one. */
	int ok = (uid_t)setfsuid((uid_t)-1) == uid &&
	    (gid_t)setfsgid((gid_t)-1) == gid;

	setfsuid(old_uid);
	setfsgid(old_gid);
	return ok;
}

void
run_as_check(struct agent *agent)
{
	if (!agent->drop_ids || can_switch(agent->uid, agent->gid))
		return;
	agent->drop_ids = 0;
	log_warn("--run-as %u:%u: the agent lacks CAP_SETUID/CAP_SETGID, so "
	    "commands run as uid %u (give the container those capabilities "
	    "to run them as the user)", (unsigned)agent->uid,
	    (unsigned)agent->gid, (unsigned)geteuid());
}

void
run_as_files(const struct agent *agent)
{
	if (!agent->drop_ids)
		return;
	/* Commands run with no supplementary group; root's (Docker gives it
	 * disk, adm and more) would let this thread open what they cannot.
	 * The raw call changes this thread alone, where glibc's setgroups
	 * would change every thread of the agent. */
	(void)syscall(SYS_setgroups, 0, NULL);
	setfsgid(agent->gid);
	setfsuid(agent->uid);
}
