/*
 * The state directory: our instance id (the label value that marks our
 * containers), a lock so two supervisors never share it, and state.json with
 * the records of live sandboxes and the sessions' last activity, so a
 * restarted sandboxd can take its sandboxes back. Writes are coalesced (one
 * per burst of changes), atomic (write a temporary file, rename) and
 * durable (the file is synced before the rename, its directory after), so
 * a power cut leaves the old file or the new one, never an empty one.
 * The file follows the sandbox table through its hook; what other
 * modules keep in it (the sessions' activity) they hand over as sections.
 */
#include "sandboxd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "fdio.h"
#include "log.h"
#include "xmalloc.h"

#define STATE_WRITE_DELAY_US 50000
/* While shutdown removes every sandbox the file changes with each removal,
 * and with a thousand records each write costs milliseconds of the CPU
 * Docker needs for the removals; the last write comes at the end anyway. */
#define STATE_WRITE_DELAY_SHUTDOWN_US 1000000

static char instance[TOKEN_HEX_LEN];
static char *state_path;
static struct event *write_ev;
static json_t *loaded;		/* name -> record, from the last run */
static json_t *loaded_root;	/* the whole file of the last run */
static int lock_fd = -1;
/* Parts of the file other modules keep (state_add_section). */
#define SECTIONS_MAX 4
static struct {
	const char *key;
	json_t *(*save)(void);
} sections[SECTIONS_MAX];
static size_t nsections;

const char *
state_instance(void)
{
	return instance;
}

/* Replace path by data: written beside it, synced, renamed over it, the
 * directory synced. -1 with errno. */
static int
replace_durably(const char *path, const char *data, size_t len)
{
	char *tmp = xasprintf("%s.tmp", path);
	char *dir = xstrdup(path);
	int fd, rc = -1, saved;

	*strrchr(dir, '/') = '\0';
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		goto out;
	if (fdio_write_all(fd, data, len) < 0 || fsync(fd) < 0) {
		saved = errno;
		close(fd);
		errno = saved;
		goto out;
	}
	if (close(fd) < 0 || rename(tmp, path) < 0)
		goto out;
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		goto out;
	rc = fsync(fd);
	saved = errno;
	close(fd);
	errno = saved;
out:
	if (rc < 0) {
		saved = errno;
		unlink(tmp);
		errno = saved;
	}
	free(tmp);
	free(dir);
	return rc;
}

static int
read_instance(const char *dir, struct error *err)
{
	char *path = xasprintf("%s/instance", dir);
	char buf[64];
	ssize_t n = -1;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
	}
	if (n >= 32) {
		memcpy(instance, buf, 32);
		instance[32] = '\0';
		if (strspn(instance, "0123456789abcdef") == 32) {
			free(path);
			return 0;
		}
	}
	token_random_hex(instance);
	/* Lost, it would orphan every container labelled with it. */
	snprintf(buf, sizeof buf, "%s\n", instance);
	if (replace_durably(path, buf, strlen(buf)) < 0) {
		error_set_errno(err, 500, errno, "cannot write %s", path);
		free(path);
		return -1;
	}
	free(path);
	return 0;
}

void
state_flush(void)
{
	json_t *root, *list = json_array();
	struct sandbox *sb;
	char *text;

	if (state_path == NULL)
		return;
	if (write_ev != NULL)
		event_del(write_ev);
	for (sb = sandbox_first(); sb != NULL; sb = sandbox_next(sb)) {
		/* A container may exist from the moment we ask for it; a
		 * workspace not uploaded yet is the next start's to upload. */
		if (sb->state != SB_RELEASED || sb->workspace_unsaved)
			json_array_append_new(list,
			    sandbox_record(sb, SANDBOX_STATE));
	}
	root = json_pack("{s:i,s:s,s:o}", "version", 1, "instance",
	    instance, "sandboxes", list);
	for (size_t i = 0; i < nsections; i++)
		json_object_set_new(root, sections[i].key, sections[i].save());
	text = json_dumps(root, JSON_COMPACT);
	if (text == NULL)
		fatal("cannot serialise the state");
	if (replace_durably(state_path, text, strlen(text)) < 0)
		log_error("cannot write the state file %s: %s", state_path,
		    strerror(errno));
	free(text);
	json_decref(root);
}

static void
write_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	state_flush();
}

void
state_dirty(void)
{
	struct timeval tv = { 0, STATE_WRITE_DELAY_US };

	if (sd.shutting_down) {
		tv.tv_sec = STATE_WRITE_DELAY_SHUTDOWN_US / 1000000;
		tv.tv_usec = STATE_WRITE_DELAY_SHUTDOWN_US % 1000000;
	}
	if (write_ev == NULL || evtimer_pending(write_ev, NULL))
		return;
	evtimer_add(write_ev, &tv);
}

static void
changed_cb(struct sandbox *sb, void *arg)
{
	(void)sb;
	(void)arg;
	state_dirty();
}

void
state_add_section(const char *key, json_t *(*save)(void))
{
	if (nsections == SECTIONS_MAX)
		fatal("more than %d state file sections", SECTIONS_MAX);
	sections[nsections].key = key;
	sections[nsections].save = save;
	nsections++;
}

json_t *
state_loaded_section(const char *key)
{
	return loaded_root != NULL ? json_object_get(loaded_root, key) : NULL;
}

static void
load(void)
{
	json_error_t jerr;
	json_t *root, *list, *r;
	size_t i;

	loaded = json_object();
	root = json_load_file(state_path, 0, &jerr);
	if (root == NULL) {
		if (access(state_path, F_OK) == 0)
			log_warn("ignoring the unreadable state file %s: %s",
			    state_path, jerr.text);
		return;
	}
	if (strcmp(json_string_value(json_object_get(root, "instance")) ?
	    json_string_value(json_object_get(root, "instance")) : "",
	    instance) != 0) {
		log_warn("the state file %s belongs to another instance; "
		    "ignoring it", state_path);
		json_decref(root);
		return;
	}
	list = json_object_get(root, "sandboxes");
	json_array_foreach(list, i, r) {
		const char *name = json_string_value(json_object_get(r, "name"));

		if (name != NULL)
			json_object_set(loaded, name, r);
	}
	loaded_root = root;
}

int
state_init(const char *dir, struct error *err)
{
	char *lock_path = xasprintf("%s/lock", dir);

	lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock_fd < 0) {
		error_set_errno(err, 500, errno, "cannot open %s", lock_path);
		free(lock_path);
		return -1;
	}
	if (flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
		error_set(err, 409, "another sandboxd is using the state "
		    "directory %s (SANDBOXD_STATE_DIR)", dir);
		free(lock_path);
		return -1;
	}
	free(lock_path);
	if (read_instance(dir, err) < 0)
		return -1;
	state_path = xasprintf("%s/state.json", dir);
	write_ev = evtimer_new(sd.base, write_cb, NULL);
	load();
	sandbox_hook_add(changed_cb, NULL);
	return 0;
}

json_t *
state_saved(const char *name)
{
	return loaded != NULL ? json_object_get(loaded, name) : NULL;
}

json_t *
state_saved_all(void)
{
	return loaded;
}

void
state_loaded_free(void)
{
	json_decref(loaded);
	loaded = NULL;
	json_decref(loaded_root);
	loaded_root = NULL;
}

void
state_close(void)
{
	state_flush();
	if (write_ev != NULL)
		event_free(write_ev);
	write_ev = NULL;
	free(state_path);
	state_path = NULL;
	state_loaded_free();
	if (lock_fd >= 0)
		close(lock_fd);
	lock_fd = -1;
}
