/*
 * Replays fuzz inputs through a target's LLVMFuzzerTestOneInput without
 * libFuzzer: each file named, or each file of each directory named, once,
 * in name order. Built with gcc under ASan/UBSan, it is how `make test`
 * checks the committed corpus (no clang needed), and how a crash a fuzzer
 * found is re-run under a debugger.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *data;
	long size;

	if (f == NULL || fseek(f, 0, SEEK_END) < 0 || (size = ftell(f)) < 0) {
		perror(path);
		return -1;
	}
	rewind(f);
	data = malloc((size_t)size + 1);
	if (fread(data, 1, (size_t)size, f) != (size_t)size) {
		perror(path);
		fclose(f);
		free(data);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(data, (size_t)size);
	free(data);
	return 0;
}

static int
by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

int
main(int argc, char **argv)
{
	int runs = 0, failed = 0;

	for (int i = 1; i < argc; i++) {
		struct dirent **names;
		struct stat st;
		int n;

		if (stat(argv[i], &st) < 0 || !S_ISDIR(st.st_mode)) {
			failed |= run_file(argv[i]) < 0;
			runs++;
			continue;
		}
		n = scandir(argv[i], &names, NULL, by_name);
		for (int k = 0; k < n; k++) {
			char path[4096];

			if (names[k]->d_name[0] != '.') {
				snprintf(path, sizeof path, "%s/%s", argv[i],
				    names[k]->d_name);
				failed |= run_file(path) < 0;
				runs++;
			}
			free(names[k]);
		}
		free(names);
	}
	printf("replayed %d inputs\n", runs);
	return failed;
}
