# sandbox-agent and sandboxd. See README.md.
#   make deps    install build and test dependencies (Debian 12, as root) and build
#   make         build agent/sandbox-agent (static) and supervisor/sandboxd
#   make test    unit tests (plain and ASan/UBSan), the fuzz corpus replayed
#                under ASan/UBSan, and integration tests
#   make fuzz    each fuzz target for FUZZ_SECONDS (clang's libFuzzer)
#   make images  build the sandbox images with tools/build-image
#   make run     build the images it serves and start sandboxd (foreground),
#                its sandboxes run by crun where it works (root, crun
#                installed), else by Docker
#   make bench   benchmarks; figures go to tools/bench/README.md
#   make test-scale  SCALE_N (1000) minimal sandboxes through sandboxd, one
#                call each, then SIGTERM: none left, exit 0, within 30 s or,
#                where Docker alone cannot remove as many that fast (timed
#                right after), within 1.25 times Docker's own time (not in
#                make test: it takes many minutes)

VERSION := 0.1.0
CC ?= cc
BUILD := build
DEPS := $(BUILD)/deps/prefix

WARN := -Wall -Wextra -Werror
CFLAGS_BASE := -std=c11 $(WARN) -D_GNU_SOURCE -DVERSION='"$(VERSION)"' \
	-Icommon -I$(DEPS)/include -ffunction-sections -fdata-sections
CFLAGS ?= -O2 -g
SAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=undefined

COMMON_SRC := $(sort $(wildcard common/*.c))
AGENT_SRC := $(sort $(wildcard agent/*.c))
AGENT_EMBED := $(sort $(wildcard agent/embed/*))
SUPERVISOR_SRC := $(sort $(wildcard supervisor/*.c))
MCP_SRC := $(sort $(wildcard sandbox-mcp/*.c))
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))

COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/%.o)
# The shell template's builtin, a shared object for bash (agent/bash/),
# carried by the agent as an object like the embedded files.
SHELL_TEMPLATE_SO := $(BUILD)/agent/bash/shell_template.so
SHELL_TEMPLATE_OBJ := $(BUILD)/agent/bash/shell_template_so.o
AGENT_OBJ := $(AGENT_SRC:%.c=$(BUILD)/%.o) $(AGENT_EMBED:%=$(BUILD)/%.o) \
	$(SHELL_TEMPLATE_OBJ)
SUPERVISOR_OBJ := $(SUPERVISOR_SRC:%.c=$(BUILD)/%.o)
MCP_OBJ := $(MCP_SRC:%.c=$(BUILD)/%.o)

LIBGIT2 := $(DEPS)/lib/libgit2.a
LIBVNCCLIENT := $(DEPS)/lib/libvncclient.a
AGENT_LIBS := $(LIBGIT2) $(LIBVNCCLIENT) -lxcb -lXau -lXdmcp -lnettle \
	-lhttp_parser -lpng16 -lz -lm -levent_core -ljansson -lseccomp -lpthread
SUPERVISOR_LIBS := -lhttp_parser -levent_core -levent_extra -ljansson -lhiredis \
	-lcurl -lexpat -lnettle -lnftables -lseccomp -lpthread
UNIT_LIBS := -lcmocka -lhttp_parser -levent_core -levent_extra -ljansson -lhiredis \
	-lnettle -lnftables -lseccomp -lpthread

.PHONY: all deps install test test-scale unit unit-asan integration integration-crun \
	integration-asan images run \
	bench clean fuzz fuzz-replay

SUPERVISOR_TARGET := $(if $(wildcard supervisor/main.c),supervisor/sandboxd)

all: agent/sandbox-agent $(SUPERVISOR_TARGET) sandbox-mcp/sandbox-mcp $(BUILD)/httpc

deps:
	tools/install-deps
	$(MAKE) all
	$(MAKE) install

# sandbox-mcp on the PATH, where an MCP host's configuration names it
# ("command": "sandbox-mcp"); `make deps` runs this too.
PREFIX ?= /usr/local
install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 sandbox-mcp/sandbox-mcp $(DESTDIR)$(PREFIX)/bin/sandbox-mcp

$(LIBGIT2) $(LIBVNCCLIENT):
	@echo "$(notdir $@) is missing: run 'make deps' first (it builds lean static libgit2 and libvncclient into $(DEPS))" >&2
	@exit 1

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -MMD -MP -c $< -o $@

# Files the agent carries inside itself (the IPython kernel script):
# symbols _binary_<name>_start / _end, <name> with '.' as '_'.
$(BUILD)/agent/embed/%.o: agent/embed/%
	@mkdir -p $(dir $@)
	cd agent/embed && ld -r -b binary -z noexecstack -o $(CURDIR)/$@ $*

# Built against Debian's bash-builtins headers (the images' bash: bookworm's
# 5.2), position-independent, every symbol bound at load (the template's
# keepers run it in bash's memory from the first request on: no lazy
# binding then), only bash's two entry points exported.
BASH_INC := -isystem /usr/include/bash -isystem /usr/include/bash/include \
	-isystem /usr/include/bash/builtins
$(SHELL_TEMPLATE_SO): agent/bash/shell_template_bash.c \
    agent/bash/shell_template_start.c agent/bash/shell_template_bash.h \
    common/spawn_child.c common/fdio.c common/fdio.h common/spawn_internal.h \
    common/spawn.h common/error.h agent/shell_template_wire.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(WARN) -D_GNU_SOURCE -U_FORTIFY_SOURCE -O2 -g -fPIC -shared \
		-fvisibility=hidden -Icommon $(BASH_INC) -Wl,-z,now \
		-Wl,-z,noexecstack -o $@ agent/bash/shell_template_bash.c \
		agent/bash/shell_template_start.c common/spawn_child.c common/fdio.c
	strip $@

$(SHELL_TEMPLATE_OBJ): $(SHELL_TEMPLATE_SO)
	cd $(dir $@) && ld -r -b binary -z noexecstack -o $(CURDIR)/$@ \
		$(notdir $<)

# glibc warns that getaddrinfo & co. need its shared NSS modules at run time;
# the agent resolves no names, so that warning is filtered out, nothing else.
agent/sandbox-agent: $(AGENT_OBJ) $(COMMON_OBJ) $(LIBGIT2) $(LIBVNCCLIENT)
	@rm -f $@.tmp; st=0; $(CC) -static -Wl,--gc-sections -Wl,-z,noexecstack \
		-o $@.tmp $(AGENT_OBJ) $(COMMON_OBJ) $(AGENT_LIBS) 2>$@.log || st=$$?; \
	grep -v -e 'statically linked applications requires at runtime' \
		-e ': in function' $@.log >&2 || true; rm -f $@.log; \
	test $$st -eq 0 && strip $@.tmp && mv $@.tmp $@
	@echo "built $@ ($$(stat -c %s $@) bytes, static)"

supervisor/sandboxd: $(SUPERVISOR_OBJ) $(COMMON_OBJ)
	$(CC) -Wl,--gc-sections -o $@ $(SUPERVISOR_OBJ) $(COMMON_OBJ) $(SUPERVISOR_LIBS)

# sandbox-mcp: an MCP server over stdio in front of one sandbox of sandboxd.
sandbox-mcp/sandbox-mcp: $(MCP_OBJ) $(COMMON_OBJ)
	$(CC) -Wl,--gc-sections -o $@ $(MCP_OBJ) $(COMMON_OBJ) $(SUPERVISOR_LIBS)

# httpc: a one-request HTTP client CLI (common/http_client.c) for debugging.
$(BUILD)/httpc: $(BUILD)/tools/httpc.o $(COMMON_OBJ)
	$(CC) -Wl,--gc-sections -o $@ $(BUILD)/tools/httpc.o $(COMMON_OBJ) \
		-lhttp_parser -levent_core -ljansson

# Unit tests: each tests/unit/test_X.c is a cmocka program linked against
# the common objects, built twice: plain and under ASan/UBSan.
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/unit/%)
UNIT_ASAN_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/unit-asan/%)
COMMON_ASAN_OBJ := $(COMMON_SRC:%.c=$(BUILD)/asan/%.o)
# Named only in a pattern rule, make would delete them after each run.
.SECONDARY: $(COMMON_ASAN_OBJ)

$(BUILD)/asan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(SAN_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/unit/%: tests/unit/%.c $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $< $(COMMON_OBJ) $(UNIT_LIBS)

$(BUILD)/unit-asan/%: tests/unit/%.c $(COMMON_ASAN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(SAN_FLAGS) -o $@ $< $(COMMON_ASAN_OBJ) $(UNIT_LIBS)

# tests/unit/test_sandboxd_*.c also link sandboxd's modules, from an archive
# so each test pulls in only the objects it uses.
SUPERVISOR_LIB_SRC := $(filter-out supervisor/main.c,$(SUPERVISOR_SRC))
SUPERVISOR_LIB := $(BUILD)/libsandboxd.a
SUPERVISOR_ASAN_LIB := $(BUILD)/asan/libsandboxd.a

$(SUPERVISOR_LIB): $(SUPERVISOR_LIB_SRC:%.c=$(BUILD)/%.o)
	@rm -f $@
	ar rcs $@ $^

$(SUPERVISOR_ASAN_LIB): $(SUPERVISOR_LIB_SRC:%.c=$(BUILD)/asan/%.o)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/unit/test_sandboxd_%: tests/unit/test_sandboxd_%.c $(SUPERVISOR_LIB) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Isupervisor $(CFLAGS) -o $@ $< $(SUPERVISOR_LIB) $(COMMON_OBJ) $(UNIT_LIBS) -lcurl -lexpat

$(BUILD)/unit-asan/test_sandboxd_%: tests/unit/test_sandboxd_%.c $(SUPERVISOR_ASAN_LIB) $(COMMON_ASAN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Isupervisor $(SAN_FLAGS) -o $@ $< $(SUPERVISOR_ASAN_LIB) $(COMMON_ASAN_OBJ) $(UNIT_LIBS) -lcurl -lexpat

# tests/unit/test_agent_X.c test the agent's module agent/X.c alone (with
# the common objects and what the module is built on, listed below; Nettle
# for the WebSocket handshake's hashing).
$(BUILD)/unit/test_agent_%: tests/unit/test_agent_%.c $(BUILD)/agent/%.o $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Iagent $(CFLAGS) -o $@ $< $(filter %.o,$^) $(UNIT_LIBS) -lnettle

$(BUILD)/unit-asan/test_agent_%: tests/unit/test_agent_%.c $(BUILD)/asan/agent/%.o $(COMMON_ASAN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Iagent $(SAN_FLAGS) -o $@ $< $(filter %.o,$^) $(UNIT_LIBS) -lnettle

# The computer tool's arguments name keys by their keysyms.
$(BUILD)/unit/test_agent_computer_args: $(BUILD)/agent/computer_keys.o
$(BUILD)/unit-asan/test_agent_computer_args: $(BUILD)/asan/agent/computer_keys.o

unit: $(UNIT_BIN)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $$t; done

unit-asan: $(UNIT_ASAN_BIN)
	@set -e; for t in $(UNIT_ASAN_BIN); do echo "== $$t (asan/ubsan)"; \
		ASAN_OPTIONS=detect_leaks=1 $$t; done

integration: all
	tools/with-dockerd tools/run-integration

# The sandboxd suites once more with their sandboxes run by crun
# (CONTAINER_DEPLOYMENT=crun; dockerd only builds the images). The crun
# backend's own tests (test_hostile_crun.py, test_image_store.py) are in
# `integration`: they start crun sandboxd themselves.
SANDBOXD_SUITES := $(sort $(wildcard tests/integration/test_sandboxd_*.py))
integration-crun: all
	SANDBOXD_TEST_BACKEND=crun tools/with-dockerd tools/run-integration \
		$(SANDBOXD_SUITES)

# The agent's integration tests once more against an ASan/UBSan build of
# the agent (dynamically linked: the sanitizers need it), so that memory
# errors and leaks on the paths only real requests reach are caught too.
# Tests that measure the agent's memory are left out: ASan's shadow and
# quarantine would swamp what they measure.
AGENT_ASAN := $(BUILD)/asan-agent/sandbox-agent
AGENT_ASAN_OBJ := $(AGENT_SRC:%.c=$(BUILD)/asan/%.o) $(AGENT_EMBED:%=$(BUILD)/%.o) \
	$(SHELL_TEMPLATE_OBJ)
.SECONDARY: $(AGENT_ASAN_OBJ)

$(AGENT_ASAN): $(AGENT_ASAN_OBJ) $(COMMON_ASAN_OBJ) $(LIBGIT2) $(LIBVNCCLIENT)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_FLAGS) -o $@ $(AGENT_ASAN_OBJ) $(COMMON_ASAN_OBJ) $(AGENT_LIBS)

# sandboxd's tests likewise against an ASan/UBSan sandboxd (the fixtures
# require every sandboxd to exit 0 on SIGTERM: no error, no leak), and the
# hostile-input modules (test_hostile_*.py) against both ASan builds (an
# overflow from a hostile agent only aborts under UBSan).
SANDBOXD_ASAN := $(BUILD)/asan-sandboxd/sandboxd
SANDBOXD_ASAN_OBJ := $(SUPERVISOR_SRC:%.c=$(BUILD)/asan/%.o)
.SECONDARY: $(SANDBOXD_ASAN_OBJ)

$(SANDBOXD_ASAN): $(SANDBOXD_ASAN_OBJ) $(COMMON_ASAN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_FLAGS) -o $@ $(SANDBOXD_ASAN_OBJ) $(COMMON_ASAN_OBJ) $(SUPERVISOR_LIBS)

# sandbox-mcp's tests against an ASan/UBSan sandbox-mcp (they require it
# to exit 0: no memory error, no leak) and sandboxd.
SANDBOX_MCP_ASAN := $(BUILD)/asan-mcp/sandbox-mcp
SANDBOX_MCP_ASAN_OBJ := $(MCP_SRC:%.c=$(BUILD)/asan/%.o)
.SECONDARY: $(SANDBOX_MCP_ASAN_OBJ)

$(SANDBOX_MCP_ASAN): $(SANDBOX_MCP_ASAN_OBJ) $(COMMON_ASAN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_FLAGS) -o $@ $(SANDBOX_MCP_ASAN_OBJ) $(COMMON_ASAN_OBJ) $(SUPERVISOR_LIBS)

integration-asan: $(AGENT_ASAN) $(if $(SUPERVISOR_TARGET),$(SANDBOXD_ASAN)) \
    $(SANDBOX_MCP_ASAN)
	SANDBOX_AGENT_BIN=$(CURDIR)/$(AGENT_ASAN) \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99 \
		tools/run-integration -m "not memory" $(sort $(wildcard tests/integration/test_agent_*.py))
	$(if $(SUPERVISOR_TARGET),SANDBOXD_BIN=$(CURDIR)/$(SANDBOXD_ASAN) \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99 \
		tools/with-dockerd tools/run-integration -m "not memory" \
		$(SANDBOXD_SUITES))
	$(if $(SUPERVISOR_TARGET),SANDBOXD_BIN=$(CURDIR)/$(SANDBOXD_ASAN) \
	SANDBOXD_TEST_BACKEND=crun \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99 \
		tools/with-dockerd tools/run-integration -m "not memory" \
		$(SANDBOXD_SUITES))
	SANDBOX_AGENT_BIN=$(CURDIR)/$(AGENT_ASAN) \
	$(if $(SUPERVISOR_TARGET),SANDBOXD_BIN=$(CURDIR)/$(SANDBOXD_ASAN)) \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99 \
		tools/with-dockerd tools/run-integration -m "not memory" \
		$(sort $(wildcard tests/integration/test_hostile_*.py))
	$(if $(SUPERVISOR_TARGET),SANDBOXD_BIN=$(CURDIR)/$(SANDBOXD_ASAN)) \
	SANDBOX_MCP_BIN=$(CURDIR)/$(SANDBOX_MCP_ASAN) \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99 \
		tools/with-dockerd tools/run-integration -m "not memory" \
		tests/integration/test_sandbox_mcp.py

# Fuzzing (tests/fuzz/): libFuzzer targets built with clang. `make fuzz`
# runs each for FUZZ_SECONDS, its new inputs kept under build/fuzz/corpus
# (the committed seeds in tests/fuzz/corpus are read, never written) and
# any crash saved as build/fuzz/crash-TARGET-*. `make fuzz-replay`, part of
# `make test`, runs the same targets over the committed corpus through a
# plain main() built by $(CC) under ASan/UBSan, so CI needs no clang.
FUZZ_TARGETS := http_server http_head multipart agent_json computer_args envd \
	vnc_filter egress_dns
FUZZ_SECONDS ?= 180
FUZZ_CC ?= clang
FUZZ_ARGS ?=
FUZZ_SAN := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=undefined
FUZZ_SUPPORT := tests/fuzz/harness.c tests/fuzz/routes.c
FUZZ_INC := -Iagent -Itests/fuzz
FUZZ_BIN := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
FUZZ_REPLAY_BIN := $(FUZZ_TARGETS:%=$(BUILD)/fuzz-replay/fuzz_%)
FUZZ_COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/fuzz/obj/%.o)
FUZZ_AGENT_OBJ := $(filter-out %/main.o,$(AGENT_SRC:%.c=$(BUILD)/fuzz/obj/%.o))
FUZZ_AGENT_LIB := $(BUILD)/fuzz/libagent.a
AGENT_ASAN_LIB := $(BUILD)/asan/libagent.a
.SECONDARY: $(FUZZ_COMMON_OBJ) $(FUZZ_AGENT_OBJ) \
	$(FUZZ_SUPPORT:%.c=$(BUILD)/fuzz/obj/%.o)

$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_BASE) $(FUZZ_INC) $(FUZZ_SAN) -fsanitize=fuzzer-no-link \
		-MMD -MP -c $< -o $@

# The agent's modules but main.c, for the targets that serve its routes.
$(FUZZ_AGENT_LIB): $(FUZZ_AGENT_OBJ) $(AGENT_EMBED:%=$(BUILD)/%.o) \
    $(SHELL_TEMPLATE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(AGENT_ASAN_LIB): $(filter-out %/main.o,$(AGENT_ASAN_OBJ))
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_SUPPORT:%.c=$(BUILD)/fuzz/obj/%.o) \
    $(FUZZ_AGENT_LIB) $(FUZZ_COMMON_OBJ) $(LIBGIT2)
	$(FUZZ_CC) $(CFLAGS_BASE) $(FUZZ_INC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ \
		$< $(FUZZ_SUPPORT:%.c=$(BUILD)/fuzz/obj/%.o) $(FUZZ_AGENT_LIB) \
		$(FUZZ_COMMON_OBJ) $(AGENT_LIBS)

$(BUILD)/fuzz-replay/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(FUZZ_SUPPORT) \
    $(AGENT_ASAN_LIB) $(COMMON_ASAN_OBJ) $(LIBGIT2)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(FUZZ_INC) $(SAN_FLAGS) -o $@ $< tests/fuzz/replay.c \
		$(FUZZ_SUPPORT) $(AGENT_ASAN_LIB) $(COMMON_ASAN_OBJ) $(AGENT_LIBS)

# Targets in sandboxd's modules (egress_dns: a sandbox's resolver) link
# them from an archive, fuzz-built or ASan-built.
FUZZ_SANDBOXD_LIB := $(BUILD)/fuzz/libsandboxd.a
FUZZ_SANDBOXD_OBJ := $(SUPERVISOR_LIB_SRC:%.c=$(BUILD)/fuzz/obj/%.o)
.SECONDARY: $(FUZZ_SANDBOXD_OBJ)

$(FUZZ_SANDBOXD_LIB): $(FUZZ_SANDBOXD_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/fuzz/fuzz_egress_dns: tests/fuzz/fuzz_egress_dns.c $(FUZZ_SANDBOXD_LIB) \
    $(FUZZ_COMMON_OBJ)
	$(FUZZ_CC) $(CFLAGS_BASE) -Isupervisor $(FUZZ_SAN) -fsanitize=fuzzer -o $@ \
		$< $(FUZZ_SANDBOXD_LIB) $(FUZZ_COMMON_OBJ) $(SUPERVISOR_LIBS)

$(BUILD)/fuzz-replay/fuzz_egress_dns: tests/fuzz/fuzz_egress_dns.c tests/fuzz/replay.c \
    $(SUPERVISOR_ASAN_LIB) $(COMMON_ASAN_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Isupervisor $(SAN_FLAGS) -o $@ $< tests/fuzz/replay.c \
		$(SUPERVISOR_ASAN_LIB) $(COMMON_ASAN_OBJ) $(SUPERVISOR_LIBS)

fuzz: $(FUZZ_BIN)
	@set -e; for t in $(FUZZ_TARGETS); do \
		mkdir -p $(BUILD)/fuzz/corpus/$$t; \
		echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
		$(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) \
			-print_final_stats=1 -artifact_prefix=$(BUILD)/fuzz/crash-$$t- \
			$(FUZZ_ARGS) $(BUILD)/fuzz/corpus/$$t tests/fuzz/corpus/$$t; \
	done

fuzz-replay: $(FUZZ_REPLAY_BIN)
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "== fuzz_$$t over tests/fuzz/corpus/$$t (asan/ubsan)"; \
		ASAN_OPTIONS=detect_leaks=1 $(BUILD)/fuzz-replay/fuzz_$$t \
			tests/fuzz/corpus/$$t; \
	done

test: all unit unit-asan fuzz-replay integration integration-crun integration-asan

# Containers named SCALE_PREFIX*; any left at the end are removed.
SCALE_N ?= 1000
SCALE_PREFIX ?= sbxscale-
test-scale: all
	tools/with-dockerd /usr/bin/python3 tools/scale.py run $(SCALE_N) --check \
		--baseline --prefix $(SCALE_PREFIX)

images: all
	tools/with-dockerd tools/build-image all

# The service: the images it serves (built unless up to date), then
# sandboxd in the foreground; Ctrl-C removes its sandboxes. Its sandboxes
# are run by crun where it works here (as root with crun installed: the
# images go into its image store as they are built, and dockerd, started
# by with-dockerd for the build when none runs, is stopped before sandboxd
# starts), else by Docker (then a dockerd with-dockerd had to start is
# stopped after sandboxd). CONTAINER_DEPLOYMENT=docker|crun chooses.
# RUN_IMAGES=all adds the browser (about 1 GB); SANDBOXD_ARGS passes
# flags (--host, --port ...).
RUN_IMAGES ?= minimal base filesystem
run: all
	@backend=$${CONTAINER_DEPLOYMENT:-$$( [ "$$(id -u)" = 0 ] && \
		crun --version >/dev/null 2>&1 && echo crun || echo docker)}; \
	echo "make run: sandboxes run by $$backend (CONTAINER_DEPLOYMENT)"; \
	if [ "$$backend" = crun ]; then \
		tools/with-dockerd tools/build-image $(RUN_IMAGES) && \
		CONTAINER_DEPLOYMENT=crun exec supervisor/sandboxd $(SANDBOXD_ARGS); \
	else \
		CONTAINER_DEPLOYMENT=$$backend tools/with-dockerd sh -c \
			'tools/build-image $(RUN_IMAGES) && exec supervisor/sandboxd $(SANDBOXD_ARGS)'; \
	fi

# The benchmark's own C clients (tools/bench/*.c): latency, start time.
BENCH_BIN := $(patsubst tools/bench/%.c,$(BUILD)/bench/%,$(wildcard tools/bench/*.c))

$(BUILD)/bench/%: tools/bench/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(WARN) -D_GNU_SOURCE $(CFLAGS) -o $@ $<

bench: all $(BENCH_BIN)
	tools/bench/run

clean:
	rm -rf $(BUILD)/agent $(BUILD)/common $(BUILD)/tools $(BUILD)/httpc $(BUILD)/supervisor $(BUILD)/asan $(BUILD)/asan-agent \
		$(BUILD)/unit $(BUILD)/unit-asan $(BUILD)/fuzz-replay agent/sandbox-agent supervisor/sandboxd \
		$(BUILD)/sandbox-mcp $(BUILD)/asan-mcp sandbox-mcp/sandbox-mcp

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
