/*
 * envd's GET /metrics (/envd/metrics here): E2B's envd answers its
 * orchestrator with the machine's figures as the sandbox sees them, and
 * so does this route, field for field: CPUs and their use since the last
 * call (/proc/stat), memory (/proc/meminfo, as envd's gopsutil counts
 * it) and the root file system (statvfs of /: used is all but what is
 * available, as envd has it). In a container /proc is the host's, so the
 * CPU and memory figures are the host's; sandboxd takes those from the
 * engine's view of the container and only the disk from here.
 */
#include "envd.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

/* /proc/stat's CPU line at the previous call. */
static unsigned long long last_busy, last_total;

/* The share of the CPUs busy since the previous call (since boot at the
 * first), in percent with two decimals; -1 when /proc/stat is not
 * there. */
static double
cpu_used_pct(void)
{
	unsigned long long v[8] = { 0 }, busy, total = 0;
	double pct = 0;
	FILE *f = fopen("/proc/stat", "re");
	int n;

	if (f == NULL)
		return -1;
	/* user nice system idle iowait irq softirq steal */
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
	    &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n < 4)
		return -1;
	for (int i = 0; i < 8; i++)
		total += v[i];
	busy = total - v[3] - v[4];
	if (total > last_total && busy >= last_busy)
		pct = 100.0 * (double)(busy - last_busy) /
		    (double)(total - last_total);
	last_busy = busy;
	last_total = total;
	return (double)(long long)(pct * 100 + 0.5) / 100;
}

/* /proc/meminfo's fields, in bytes. */
struct meminfo {
	unsigned long long total, free, buffers, cached, reclaimable;
};

static int
meminfo(struct meminfo *m)
{
	static const struct {
		const char *key;
		size_t offset;
	} keys[] = {
		{ "MemTotal:", offsetof(struct meminfo, total) },
		{ "MemFree:", offsetof(struct meminfo, free) },
		{ "Buffers:", offsetof(struct meminfo, buffers) },
		{ "Cached:", offsetof(struct meminfo, cached) },
		{ "SReclaimable:", offsetof(struct meminfo, reclaimable) },
	};
	FILE *f = fopen("/proc/meminfo", "re");
	char line[256];

	memset(m, 0, sizeof *m);
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL) {
		for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
			size_t len = strlen(keys[i].key);
			unsigned long long kib;

			if (strncmp(line, keys[i].key, len) == 0 &&
			    sscanf(line + len, "%llu", &kib) == 1)
				*(unsigned long long *)((char *)m +
				    keys[i].offset) = kib * 1024;
		}
	}
	fclose(f);
	return m->total > 0 ? 0 : -1;
}

void
envd_route_metrics(struct http_request *req, void *arg)
{
	struct meminfo m;
	struct statvfs fs;
	cpu_set_t cpus;
	unsigned long long cache, used = 0, disk_total = 0, disk_used = 0;
	double pct = cpu_used_pct();
	int ncpu = 1;

	(void)arg;
	if (sched_getaffinity(0, sizeof cpus, &cpus) == 0)
		ncpu = CPU_COUNT(&cpus);
	if (meminfo(&m) < 0) {
		struct error err;

		error_set(&err, 500, "cannot read /proc/meminfo");
		envd_rest_error(req, &err);
		return;
	}
	/* gopsutil's: cached counts the reclaimable slab too. */
	cache = m.cached + m.reclaimable;
	if (m.total > m.free + m.buffers + cache)
		used = m.total - m.free - m.buffers - cache;
	if (statvfs("/", &fs) == 0) {
		disk_total = (unsigned long long)fs.f_blocks * fs.f_frsize;
		disk_used = disk_total - (unsigned long long)fs.f_bavail *
		    fs.f_frsize;
	}
	http_reply_add_header(req, "Cache-Control", "no-store");
	http_reply_json(req, 200, json_pack("{s:I,s:i,s:f,s:I,s:I,s:I,s:I,"
	    "s:I,s:I,s:I}", "ts", (json_int_t)time(NULL), "cpu_count", ncpu,
	    "cpu_used_pct", pct < 0 ? 0.0 : pct, "mem_total",
	    (json_int_t)m.total, "mem_used", (json_int_t)used, "mem_cache",
	    (json_int_t)cache, "mem_total_mib", (json_int_t)(m.total >> 20),
	    "mem_used_mib", (json_int_t)(used >> 20), "disk_used",
	    (json_int_t)disk_used, "disk_total", (json_int_t)disk_total));
}
