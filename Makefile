# runnel — the user's entry points. `make run` and `make test` are all a fresh Debian 12
# machine needs (run as root or with sudo: they install missing packages first).

JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
BUILD       ?= build
RELEASE_DIR := $(BUILD)/release
ASAN_DIR    := $(BUILD)/asan
TSAN_DIR    := $(BUILD)/tsan
BENCH_DIR   := $(BUILD)/bench
LISTEN      ?= 127.0.0.1:4437
DATA        ?= ./data
CMAKE_GEN   := -G Ninja
# Line-table debug info (-g1) is enough for backtraces and costs far less to compile than -g;
# the sanitizer builds use -O1 (their usual level): one Beast translation unit takes about
# 6 minutes under ASan at -O2 -g here, under 3 at -O1 -g1.
RELEASE_FLAGS  := -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
SANITIZE_FLAGS := -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG"
# Tests that exercise threads; they run again under ThreadSanitizer (only their binaries are
# built in that configuration). TSAN_SERVER: the HTTP server's suites that run a server with
# several io threads, workers and store callbacks.
TSAN_SERVER  := ServerLimits|TenantServer|GroupHttp|GroupLongPoll|Quota|GatedServer|AppendCache|SubscriptionService|SseShare|SseUnshared|SseTinyShare|SseFanout|WebhookClient
TSAN_REGEX   ?= Concurren|A8_|D6_|C8_|N1_|TwoInstances|TwoWriters|^($(TSAN_SERVER))Test\.
TSAN_TARGETS ?= runnel_tests runnel_channel_tests runnel_log_tests runnel_postgres_tests \
                runnel_server_tests
export CCACHE_DIR ?= $(HOME)/.cache/ccache
# Hash paths relative to the checkout, so clones in other folders (as CI makes) share the cache.
export CCACHE_BASEDIR ?= $(CURDIR)
# With -g, ccache hashes the working directory too unless told not to; debug info of a cache hit
# may then name another checkout's directory, which is harmless for tests.
export CCACHE_NOHASHDIR ?= 1

.PHONY: fuzz
.PHONY: all deps build run test test-release test-asan test-tsan test-example bench format \
        format-check tidy clean help install package thread-safety

all: build

help:
	@echo "make run          install deps, build the runnel binary, serve on $(LISTEN) with data in $(DATA)"
	@echo "make test         install deps, check formatting, build, run every test (release, ASan+UBSan, TSan, example)"
	@echo "make build        optimised build in $(RELEASE_DIR)"
	@echo "make install      build, then install into PREFIX ($(PREFIX)); DESTDIR is honoured"
	@echo "make package      build, then the Debian package $(RELEASE_DIR)/runnel_*.deb (CPack)"
	@echo "make bench        build and run the benchmarks"
	@echo "make format       clang-format every source file"
	@echo "make tidy         clang-tidy over the library sources"
	@echo "make fuzz         libFuzzer over every parser (FUZZ_SECONDS=60 each; needs clang)"

deps:
	@scripts/install-deps

$(RELEASE_DIR)/build.ninja:
	cmake -S . -B $(RELEASE_DIR) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRUNNEL_BUILD_TESTS=ON \
	  $(RELEASE_FLAGS)

build: deps $(RELEASE_DIR)/build.ninja
	cmake --build $(RELEASE_DIR) -j $(JOBS)

# Builds only what serving needs (the runnel binary), not the test binaries.
run: deps $(RELEASE_DIR)/build.ninja
	cmake --build $(RELEASE_DIR) -j $(JOBS) --target runnel_cli
	$(RELEASE_DIR)/bin/runnel serve --listen $(LISTEN) --data $(DATA)

test: deps format-check thread-safety test-release test-asan test-tsan test-example
	@echo "make test: all suites passed"

test-release: build
	cd $(RELEASE_DIR) && ctest -j $(JOBS) --output-on-failure

test-asan: deps
	cmake -S . -B $(ASAN_DIR) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRUNNEL_BUILD_TESTS=ON \
	  $(SANITIZE_FLAGS) \
	  -DRUNNEL_SANITIZE=address,undefined
	cmake --build $(ASAN_DIR) -j $(JOBS)
	cd $(ASAN_DIR) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest -j $(JOBS) --output-on-failure -LE no-sanitizer

test-tsan: deps
	cmake -S . -B $(TSAN_DIR) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRUNNEL_BUILD_TESTS=ON \
	  $(SANITIZE_FLAGS) \
	  -DRUNNEL_SANITIZE=thread
	cmake --build $(TSAN_DIR) -j $(JOBS) --target $(TSAN_TARGETS)
	cd $(TSAN_DIR) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest -j $(JOBS) --output-on-failure -R '$(TSAN_REGEX)' -LE no-sanitizer

# Installs the library into a scratch prefix and builds examples/embed against the installed
# CMake package and the pkg-config file, then runs it.
test-example: build
	rm -rf $(BUILD)/prefix $(BUILD)/example
	cmake --install $(RELEASE_DIR) --prefix $(CURDIR)/$(BUILD)/prefix >/dev/null
	cmake -S examples/embed -B $(BUILD)/example $(CMAKE_GEN) -DCMAKE_PREFIX_PATH=$(CURDIR)/$(BUILD)/prefix
	cmake --build $(BUILD)/example
	$(BUILD)/example/embed
	PKG_CONFIG_PATH=$(CURDIR)/$(BUILD)/prefix/lib/pkgconfig \
	  sh -c 'c++ examples/embed/main.cc $$(pkg-config --cflags --libs runnel) -o $(BUILD)/example/embed-pc'
	$(BUILD)/example/embed-pc >/dev/null
	awk '/^```cpp/{f=1;next} /^```/{if(f)exit} f' README.md > $(BUILD)/example/readme.cc
	c++ -std=c++20 -Wall -Werror -Wno-unused-variable $(BUILD)/example/readme.cc -I$(BUILD)/prefix/include \
	  -L$(BUILD)/prefix/lib -lrunnel -lcrypto -lpq -pthread -o $(BUILD)/example/readme
	$(BUILD)/example/readme
	@echo "test-example: installed package, pkg-config and README example all build and run"

# The binary, library, headers, CMake package, pkg-config file, man page, completions and the
# systemd unit (packaging/). The unit is written for PREFIX: under /usr it reads
# /etc/default/runnel, elsewhere PREFIX/etc/default/runnel.
# Only what is installed is built (not the test suites).
PREFIX ?= /usr/local
INSTALL_TARGETS := runnel_cli runnel_lib runnel_docs
install: deps $(RELEASE_DIR)/build.ninja
	cmake --build $(RELEASE_DIR) -j $(JOBS) --target $(INSTALL_TARGETS)
	DESTDIR=$(DESTDIR) cmake --install $(RELEASE_DIR) --prefix $(PREFIX)

# The .deb (packaging/cpack.cmake), installing under /usr; its dependencies come from
# dpkg-shlibdeps.
package: deps $(RELEASE_DIR)/build.ninja
	cmake --build $(RELEASE_DIR) -j $(JOBS) --target $(INSTALL_TARGETS)
	cd $(RELEASE_DIR) && cpack -G DEB
	@ls $(RELEASE_DIR)/runnel_*.deb

bench:
	@scripts/install-deps --bench
	cmake -S . -B $(BENCH_DIR) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release -DRUNNEL_BUILD_TESTS=OFF \
	  -DRUNNEL_BUILD_BENCHMARKS=ON
	cmake --build $(BENCH_DIR) -j $(JOBS)
	scripts/run-benchmarks $(BENCH_DIR)

# clang's lock analysis (-Wthread-safety as errors) over every file that takes an annotated lock
# (src/base/mutex.h). Configures a clang build directory for its compile commands and parses
# only; nothing is built there.
TSA_DIR := $(BUILD)/thread-safety
thread-safety: deps
	cmake -S . -B $(TSA_DIR) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
	  -DRUNNEL_BUILD_TESTS=ON -DRUNNEL_BUILD_BENCHMARKS=OFF -DRUNNEL_WERROR=OFF >/dev/null
	scripts/thread-safety-check $(TSA_DIR)

# libFuzzer over every parser, FUZZ_SECONDS each, starting from the committed corpus (copied,
# so the repository's corpus only grows by hand).
FUZZ_SECONDS ?= 60
FUZZ_DIR     := $(BUILD)/fuzz
fuzz: deps
	cmake -S . -B $(FUZZ_DIR) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DRUNNEL_BUILD_FUZZERS=ON -DRUNNEL_BUILD_TESTS=OFF -DRUNNEL_WERROR=OFF
	cmake --build $(FUZZ_DIR) -j $(JOBS)
	@set -e; for f in $(FUZZ_DIR)/bin/*_fuzz; do \
	  name=$$(basename $$f); mkdir -p $(FUZZ_DIR)/corpus/$$name; \
	  cp -n fuzz/corpus/$$name/* $(FUZZ_DIR)/corpus/$$name/ 2>/dev/null || true; \
	  echo "=== $$name ($(FUZZ_SECONDS) s)"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $(FUZZ_DIR)/corpus/$$name; \
	done

FORMAT_FILES = $(shell git ls-files '*.h' '*.cc')

format:
	clang-format -i $(FORMAT_FILES)

# The first step of `make test`: clang-format (Debian 12's, from scripts/install-deps) finds
# nothing to change in any tracked .h or .cc file.
format-check: deps
	@clang-format --dry-run --Werror $(FORMAT_FILES) && \
	  echo "format-check: $(words $(FORMAT_FILES)) files match .clang-format"

tidy: $(RELEASE_DIR)/build.ninja
	clang-tidy -p $(RELEASE_DIR) --quiet $(shell git ls-files 'src/*.cc')

clean:
	rm -rf $(BUILD)
