/*
 * The sandboxes the crun backend knows ("boxes"), each with its state as
 * sandboxd sees it: RUNNING from crun's start until its first process
 * exits, which a pidfd on the loop tells at once (no polling, no crun
 * call), PAUSED while frozen, EXITED then, with its exit code when it was
 * our child (sandboxd is a child subreaper: crun's orphans come to it).
 *
 * Reaping: spawn.c's SIGCHLD reaper takes every child, so either the
 * pidfd fires first (waitid on it reaps and gives the status) or the
 * reaper does (its orphan callback gives the status here). A first
 * process that died before crun's pid file was read is kept a while in a
 * short list of recent exits, so that its status is not lost either.
 *
 * sandbox.json in a bundle holds what a restarted sandboxd needs: its
 * agent's address, cgroup, overlay layers, first process (pid and start
 * time, so that a reused pid is not taken for it) and network.
 */
#include "backend_crun.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "spawn.h"
#include "xmalloc.h"

/* Exits of unknown children kept, and for how long. */
#define RECENT_EXITS 64
#define RECENT_SECONDS 30

TAILQ_HEAD(box_list, crun_box);

struct crun_boxes {
	struct event_base *base;
	const struct crun_host *host;
	struct box_list boxes;
	struct {
		pid_t pid;
		int status;
		time_t at;
	} recent[RECENT_EXITS];
	size_t next_recent;
};

static int
exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return -1;
}

static time_t
monotonic(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

static void
exited(struct crun_box *box, int code)
{
	crun_box_exit_cb cb = box->on_exit;

	if (box->exit_ev != NULL)
		event_free(box->exit_ev);
	box->exit_ev = NULL;
	if (box->pidfd >= 0)
		close(box->pidfd);
	box->pidfd = -1;
	box->pid = 0;
	box->state = BACKEND_EXITED;
	box->exit_code = code;
	box->on_exit = NULL;
	if (cb != NULL)
		cb(box, box->on_exit_arg);
}

static void
pidfd_cb(evutil_socket_t fd, short what, void *arg)
{
	struct crun_box *box = arg;
	siginfo_t si;

	(void)what;
	memset(&si, 0, sizeof si);
	/* Ours: reap it here, with its status. Not ours (taken back after a
	 * restart): its parent reaps it; the status is not ours to know. */
	if (waitid(P_PIDFD, (id_t)fd, &si, WEXITED | WNOHANG) == 0 &&
	    si.si_pid != 0)
		exited(box, si.si_code == CLD_EXITED ? si.si_status :
		    128 + si.si_status);
	else
		exited(box, -1);
}

static void
orphan_cb(pid_t pid, int status, void *arg)
{
	struct crun_boxes *t = arg;
	struct crun_box *box;

	TAILQ_FOREACH(box, &t->boxes, entry) {
		if (box->pidfd >= 0 && box->pid == pid) {
			exited(box, exit_code(status));
			return;
		}
	}
	t->recent[t->next_recent].pid = pid;
	t->recent[t->next_recent].status = status;
	t->recent[t->next_recent].at = monotonic();
	t->next_recent = (t->next_recent + 1) % RECENT_EXITS;
}

struct crun_boxes *
crun_boxes_new(struct event_base *base, const struct crun_host *host)
{
	struct crun_boxes *t = xcalloc(1, sizeof *t);

	t->base = base;
	t->host = host;
	TAILQ_INIT(&t->boxes);
	spawn_set_orphan_cb(orphan_cb, t);
	return t;
}

void
crun_boxes_free(struct crun_boxes *t)
{
	if (t == NULL)
		return;
	spawn_set_orphan_cb(NULL, NULL);
	while (!TAILQ_EMPTY(&t->boxes))
		crun_box_free(TAILQ_FIRST(&t->boxes));
	free(t);
}

struct crun_box *
crun_boxes_first(struct crun_boxes *t)
{
	return TAILQ_FIRST(&t->boxes);
}

struct crun_box *
crun_boxes_next(struct crun_box *box)
{
	return TAILQ_NEXT(box, entry);
}

struct crun_box *
crun_box_find(struct crun_boxes *t, const char *name)
{
	struct crun_box *box;

	TAILQ_FOREACH(box, &t->boxes, entry) {
		if (strcmp(box->name, name) == 0)
			return box;
	}
	return NULL;
}

struct crun_box *
crun_box_new(struct crun_boxes *t, const char *dir, const char *name)
{
	struct crun_box *box = xcalloc(1, sizeof *box);

	box->t = t;
	box->name = xstrdup(name);
	box->bundle = xasprintf("%s/%s", dir, name);
	box->state = BACKEND_CREATED;
	box->pidfd = -1;
	box->exit_code = -1;
	TAILQ_INSERT_TAIL(&t->boxes, box, entry);
	return box;
}

void
crun_box_free(struct crun_box *box)
{
	TAILQ_REMOVE(&box->t->boxes, box, entry);
	if (box->exit_ev != NULL)
		event_free(box->exit_ev);
	if (box->pidfd >= 0)
		close(box->pidfd);
	free(box->name);
	free(box->bundle);
	free(box->agent_addr);
	free(box->cgroup);
	free(box->lowerdir);
	free(box->host_ip);
	crun_net_free(box->net);
	crun_publish_free(box->publish);
	free(box);
}

/* Field 22 of /proc/<pid>/stat, the start time; 0 when unreadable. */
static unsigned long long
start_time(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long t = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* The command name may hold anything: fields go on after its ')'. */
	if ((p = strrchr(buf, ')')) == NULL)
		return 0;
	for (int field = 2; field < 22 && p != NULL; field++)
		if ((p = strchr(p + 1, ' ')) == NULL)
			return 0;
	sscanf(p, " %llu", &t);
	return t;
}

static void
watch_fd(struct crun_box *box, pid_t pid, int fd)
{
	box->pid = pid;
	box->pidfd = fd;
	box->state = BACKEND_RUNNING;
	box->exit_ev = event_new(box->t->base, fd, EV_READ, pidfd_cb, box);
	event_add(box->exit_ev, NULL);
}

void
crun_box_watch(struct crun_box *box, pid_t pid)
{
	struct crun_boxes *t = box->t;
	int fd;

	for (size_t i = 0; i < RECENT_EXITS; i++) {
		if (t->recent[i].pid == pid && monotonic() - t->recent[i].at <
		    RECENT_SECONDS) {
			t->recent[i].pid = 0;
			exited(box, exit_code(t->recent[i].status));
			return;
		}
	}
	if ((fd = pidfd_open(pid, 0)) < 0) {
		exited(box, -1);
		return;
	}
	watch_fd(box, pid, fd);
}

int
crun_box_save(struct crun_box *box, int dir_fd, struct error *err)
{
	json_t *j = json_pack("{s:s,s:s?,s:s,s:s?,s:i,s:I,s:i,s:s?}",
	    "name", box->name, "agent_addr", box->agent_addr, "cgroup",
	    box->cgroup, "lowerdir", box->lowerdir, "pid", (int)box->pid,
	    "start_time", (json_int_t)(box->pid > 0 ? start_time(box->pid) : 0),
	    "host_port", box->host_port, "host_ip", box->host_ip);
	int rc = 0;

	if (box->net != NULL)
		json_object_set_new(j, "net", crun_net_save(box->net));
	char *text = json_dumps(j, JSON_COMPACT);
	int fd = openat(dir_fd, "sandbox.json.tmp", O_WRONLY | O_CREAT |
	    O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	ssize_t len = (ssize_t)strlen(text);

	if (fd < 0 || write(fd, text, (size_t)len) != len) {
		error_set_errno(err, 500, errno, "crun: cannot save the "
		    "sandbox's state");
		rc = -1;
	}
	if (fd >= 0 && close(fd) < 0 && rc == 0) {
		error_set_errno(err, 500, errno, "crun: cannot save the "
		    "sandbox's state");
		rc = -1;
	}
	if (rc == 0 && renameat(dir_fd, "sandbox.json.tmp", dir_fd,
	    "sandbox.json") < 0) {
		error_set_errno(err, 500, errno, "crun: cannot save the "
		    "sandbox's state");
		rc = -1;
	}
	free(text);
	json_decref(j);
	return rc;
}

static char *
string(json_t *j, const char *key)
{
	const char *s = json_string_value(json_object_get(j, key));

	return s != NULL ? xstrdup(s) : NULL;
}

/* Its first process, if the saved one still runs: watched. */
static void
take_back(struct crun_box *box, json_t *saved)
{
	pid_t pid = (pid_t)json_integer_value(json_object_get(saved, "pid"));
	unsigned long long st = (unsigned long long)json_integer_value(
	    json_object_get(saved, "start_time"));
	int fd;

	box->state = BACKEND_EXITED;
	if (pid <= 0)
		return;
	/* The pidfd pins the pid: a start time that matches now is that
	 * process's, not a later one's that got its pid. */
	if ((fd = pidfd_open(pid, 0)) < 0)
		return;
	if (st == 0 || start_time(pid) != st) {
		close(fd);
		return;
	}
	watch_fd(box, pid, fd);
	if (box->cgroup != NULL && crun_host_frozen(box->t->host,
	    box->cgroup) == 1)
		box->state = BACKEND_PAUSED;
}

void
crun_boxes_load(struct crun_boxes *t, int dir_fd, const char *dir)
{
	int fd = dup(dir_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (d == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d)) != NULL) {
		struct crun_box *box;
		char file[512];
		json_t *saved;
		int f;

		if (e->d_name[0] == '.' || e->d_type != DT_DIR)
			continue;
		box = crun_box_new(t, dir, e->d_name);
		/* Never started: DEAD, for adoption to remove. */
		box->state = BACKEND_DEAD;
		snprintf(file, sizeof file, "%s/sandbox.json", e->d_name);
		f = openat(dir_fd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		saved = f >= 0 ? json_loadfd(f, 0, NULL) : NULL;
		if (f >= 0)
			close(f);
		if (saved == NULL)
			continue;
		box->agent_addr = string(saved, "agent_addr");
		box->cgroup = string(saved, "cgroup");
		box->lowerdir = string(saved, "lowerdir");
		box->host_ip = string(saved, "host_ip");
		box->host_port = (int)json_integer_value(json_object_get(saved,
		    "host_port"));
		if (json_object_get(saved, "net") != NULL)
			box->net = crun_net_load(json_object_get(saved, "net"));
		take_back(box, saved);
		json_decref(saved);
	}
	closedir(d);
}

void
crun_boxes_trim_logs(struct crun_boxes *t, off_t max)
{
	struct crun_box *box;

	TAILQ_FOREACH(box, &t->boxes, entry) {
		char path[4096];
		struct stat st;
		off_t drop;
		int fd;

		snprintf(path, sizeof path, "%s/log", box->bundle);
		fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && st.st_size > max) {
			/* Keep the latest half; the sandbox appends on. */
			drop = st.st_size - max / 2;
			drop -= drop % (st.st_blksize > 0 ? st.st_blksize : 4096);
			if ((drop <= 0 || fallocate(fd, FALLOC_FL_COLLAPSE_RANGE,
			    0, drop) < 0) && ftruncate(fd, 0) < 0)
				log_warn("crun: cannot trim the output of %s: %s",
				    box->name, strerror(errno));
		}
		close(fd);
	}
}
