# Convenience front end over CMake. `make` builds, `make test` runs the whole
# suite twice (plain, then ASan+UBSan), `make demo` runs the main job,
# `make cluster` starts a Redis Cluster and a Sentinel setup to try.
# `make test-loaded` runs what `make test` runs with a busy loop on every
# core beside it (scripts/cpu-hog.sh; HOG_LOOPS of them, nproc by
# default), as a busy CI machine would: a verdict that hangs on a short
# lease or a tight deadline fails there. test-loaded-plain and
# test-loaded-asan run one half each.
# `make` and `make build` never install anything: `make deps` installs the
# Debian packages, and the targets that set up a fresh machine (test,
# test-plain, test-asan, test-valkey, test-loaded, demo, bench, bench-cli, bench-seckill, bench-cluster,
# bench-tls, bench-redlock, cluster, torture) run it first, then build. Only `make deps` and
# the test targets install Valkey (from bookworm-backports on bookworm,
# scripts/install-deps.sh --valkey): the demo, the benchmarks, the torture
# run and `make cluster` need Redis alone (deps-core).
BUILD      ?= build
ASAN_BUILD ?= build-asan
PREFIX     ?= /usr/local
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# ctest's jobs: twice the cores. The suites mostly wait (for leases to run
# out, failovers, servers to start): one `make test` kept 0.42 of one core
# busy on average with a job per core, and halves its time with two.
TEST_JOBS  ?= $(shell echo $$(( 2 * $(JOBS) )))
CMAKE_FLAGS ?=
# Busy loops beside `make test-loaded`: one per core.
HOG_LOOPS  ?= $(JOBS)
# The two halves' ctest runs, shared by test-plain/test-asan and their
# loaded twins.
CTEST_PLAIN = cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS)
CTEST_ASAN  = cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(TEST_JOBS) -E @valkey

.PHONY: all deps deps-core build build-asan test test-plain test-asan test-valkey test-loaded \
  test-loaded-plain test-loaded-asan demo bench bench-cli bench-cluster bench-seckill bench-tls bench-redlock cluster install clean torture

all: build

deps:
	@scripts/install-deps.sh --valkey

deps-core:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DDLOCK_SANITIZE=ON $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

build-asan: $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS)

# deps is finished before the build starts (a recipe, not a second
# prerequisite that make -j could run beside it).
test-plain: deps
	@$(MAKE) --no-print-directory build
	$(CTEST_PLAIN)

test-asan: deps
	@$(MAKE) --no-print-directory build-asan
	$(CTEST_ASAN)

# Only the runs against Valkey (ctest entries NAME@valkey, NAME@valkey-sentinel,
# NAME@valkey-cluster), which test-plain runs among the rest. test-asan
# leaves them out (tests/CMakeLists.txt says why); ASan on them by hand:
# cd $(ASAN_BUILD) && ctest -R @valkey.
test-valkey: deps
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS) -R @valkey --no-tests=error

# One half after the other, never both at once on the machine's cores.
test: deps
	@$(MAKE) --no-print-directory test-plain
	@$(MAKE) --no-print-directory test-asan

# The same under load: the build first, unloaded, then ctest with
# HOG_LOOPS busy loops at normal priority, started before it and stopped
# by PID after it, whatever its exit (scripts/cpu-hog.sh).
test-loaded-plain: deps
	@$(MAKE) --no-print-directory build
	scripts/cpu-hog.sh -n $(HOG_LOOPS) sh -c '$(CTEST_PLAIN)'

test-loaded-asan: deps
	@$(MAKE) --no-print-directory build-asan
	scripts/cpu-hog.sh -n $(HOG_LOOPS) sh -c '$(CTEST_ASAN)'

test-loaded: deps
	@$(MAKE) --no-print-directory test-loaded-plain
	@$(MAKE) --no-print-directory test-loaded-asan

demo: deps-core
	@$(MAKE) --no-print-directory build
	demo/run.sh $(BUILD)

# The benchmark needs only dlock-bench and the library, not the whole tree;
# bench/python.sh runs the Python package (on libdlock.so) against redis-py.
bench: deps-core
	@$(MAKE) --no-print-directory $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target dlock-bench dlock
	bench/run.sh $(BUILD)
	bench/python.sh $(BUILD)

bench-seckill: deps-core
	@$(MAKE) --no-print-directory build
	bench/seckill.sh $(BUILD)

# The dlock command next to flock(1) and, when installed, etcdctl lock:
# serial runs, start-up and hand-off.
bench-cli: deps-core
	@$(MAKE) --no-print-directory $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target dlock
	bench/cli.sh $(BUILD)

# Lock throughput on a 3-master cluster next to one server, same run.
bench-cluster: deps-core
	@$(MAKE) --no-print-directory $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target dlock-bench
	bench/topology.sh $(BUILD)

# What TLS costs: plaintext and TLS ports of one server, same cases.
bench-tls: deps-core
	@$(MAKE) --no-print-directory $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target dlock-bench
	bench/tls.sh $(BUILD)

# RedLock over three private masters next to node-redlock, same run.
bench-redlock: deps-core
	@$(MAKE) --no-print-directory $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target dlock-bench
	bench/redlock.sh $(BUILD)

# The torture harness's long run (docs/SAFETY.md): every scenario, the
# faults of each, TORTURE_SECONDS in all (600 by default) shared among
# them; TORTURE_SEED replays a run (its seed is printed first).
TORTURE_SECONDS ?= 600
TORTURE_SEED ?=
torture: deps-core
	@$(MAKE) --no-print-directory build
	@n=$$($(BUILD)/tests/torture/dlock-torture --list | wc -l); \
	DLOCK_BIN_DIR=$(abspath $(BUILD))/tools $(BUILD)/tests/torture/dlock-torture \
	  --seconds $$(( $(TORTURE_SECONDS) / n > 5 ? $(TORTURE_SECONDS) / n : 5 )) \
	  $(if $(TORTURE_SEED),--seed $(TORTURE_SEED))

# The lock protocol model-checked with Spin at larger bounds than
# `make test` runs (docs/design/model.md: what it covers, how long it takes).
.PHONY: model
model: deps-core
	model/check.sh large

# Both topologies of scripts/redis-topology.sh in one temp dir, left running
# for the user; a failed start stops whatever it had started.
cluster: deps-core
	@d=$$(mktemp -d "$${TMPDIR:-/tmp}/dlock-topology-XXXXXX") && \
	if scripts/redis-topology.sh cluster start "$$d/cluster" && \
	   scripts/redis-topology.sh sentinel start "$$d/sentinel"; then \
	  echo "Running under $$d (logs and configs in one directory per port)."; \
	  echo "Roles now:  scripts/redis-topology.sh status $$d/cluster  (or $$d/sentinel)"; \
	  echo "Stop both:  scripts/redis-topology.sh clean $$d"; \
	else scripts/redis-topology.sh stop "$$d"; rm -rf "$$d"; exit 1; fi

# --prefix: PREFIX counts even when $(BUILD) was configured earlier with
# another one.
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
