# tqserve: the README's commands. Each target installs missing Debian packages
# first (scripts/install_deps.sh), so they work on a fresh Debian 12 machine.
#   make serve      build (Release) and run the bundled model
#   make test       build and run every test through CTest
#   make test-asan  the same under AddressSanitizer + UBSan (build-asan/)
#   make test-tsan  the same under ThreadSanitizer (build-tsan/; tests/tsan.supp).
#                   Not in CI (too slow): run it before resolving a threading
#                   change; TSAN_CTEST_ARGS='-R integration' picks tests.
#                   Build and test times: docs/testing.md
#   make build      build into build/ (binary: build/bin/tqserve)
#   make test-http-full  the HTTP front end's load tests at the issue's full counts
#                   (2,000 streams, 1,000 slowloris connections, 200 streams at SIGTERM)
#   make fuzz       build the libFuzzer targets with clang-14 (build-fuzz/) and run each
#                   for FUZZ_SECONDS (default 60); docs/fuzzing.md
#   make soak       the soak test for SOAK_SECONDS (default 600; CTest runs 60 s)

BUILD_DIR ?= build
ASAN_DIR ?= build-asan
TSAN_DIR ?= build-tsan
BUILD_TYPE ?= Release
CMAKE_FLAGS ?=
PROMPT ?= Once upon a time
MODEL ?= models/stories260K
# Unit tests run side by side; each integration test claims every core
# (PROCESSORS 2 in tests/integration/CMakeLists.txt), so those run one at a time.
CTEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)

# Use nvcc from the standard CUDA location even when it is not on PATH.
NVCC := $(shell command -v nvcc 2>/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
ifneq ($(NVCC),)
CUDA_FLAGS := -DCMAKE_CUDA_COMPILER=$(NVCC)
endif

SOAK_SECONDS ?= 600

.PHONY: deps configure build serve test test-asan test-tsan test-http-full fuzz soak format clean

deps:
	@bash scripts/install_deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CUDA_FLAGS) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR)

serve: build
	$(BUILD_DIR)/bin/tqserve serve --model $(MODEL)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 600 -j $(CTEST_JOBS)

test-http-full: build
	cd $(BUILD_DIR) && TQ_HTTP_FULL=1 ctest -R 'integration\.(npm_ci_done|http_)' --output-on-failure -V

# Node directly (with the environment CTest gives the test): the CTest entry's
# timeout is sized for the 60-second CI run.
soak: build
	cd tests/integration && TQ_SOAK_SECONDS=$(SOAK_SECONDS) \
	  TQSERVE_BIN=$(abspath $(BUILD_DIR))/bin/tqserve TQSERVE_MODEL=$(abspath models/stories260K) \
	  TQ_SOURCE_DIR=$(CURDIR) TQ_WORK_DIR=$(abspath $(BUILD_DIR))/tests/integration/work/soak_full \
	  node --test --test-reporter=spec soak.test.mjs

test-asan: deps
	cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTQ_SANITIZE=ON -DTQ_CUDA=OFF -DTQ_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(ASAN_DIR)
	cd $(ASAN_DIR) && ctest --output-on-failure --timeout 900 -j $(CTEST_JOBS)

# ThreadSanitizer: a race (or a lock-order inversion) ends the process with
# exit code 66 at the first report (halt_on_error), so the test fails;
# tests/tsan.supp silences only third-party libraries that are not built with
# -fsanitize=thread (each entry gives its reason). The integration tests'
# daemons inherit TSAN_OPTIONS from CTest, and the harness fails a test whose
# daemon printed a ThreadSanitizer report. history_size=7 (the most, 4M
# accesses per thread): with the default (2) TSan could not restore the
# earlier access's stack of a gRPC hand-off (integration.limits, RefusedStream),
# and a suppression can only match a stack it has.
TSAN_OPTIONS_TQ := suppressions=$(CURDIR)/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1 exitcode=66 history_size=7
TSAN_CTEST_ARGS ?=
test-tsan: deps
	cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTQ_TSAN=ON -DTQ_CUDA=OFF -DTQ_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(TSAN_DIR)
	cd $(TSAN_DIR) && TSAN_OPTIONS="$(TSAN_OPTIONS_TQ)" ctest --output-on-failure --timeout 1800 -j $(CTEST_JOBS) $(TSAN_CTEST_ARGS)

FUZZ_SECONDS ?= 60
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run_fuzz.sh $(FUZZ_TARGETS)

format:
	git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) build-fuzz
