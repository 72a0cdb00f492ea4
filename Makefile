# Thin wrapper over CMake. The real build is CMakeLists.txt.
#   make          build everything (Release, -O2 -g) into build/
#   make test     build, then run every test through ctest
#   make bench    build, then run tsbench on the default workloads
#   make install  install the libraries, headers, pkg-config files, the CMake
#                 package, the launcher and its tools, man pages and docs
#                 (PREFIX=/usr/local; docs/packaging.md)
#   make deb      build, then a Debian package of the same in build/package/
#   make fuzz     libFuzzer targets of each design (clang) [FUZZ_DESIGN=tsalloc|bins|...]
#                 [FUZZ_SECONDS=60 a design]; prints edges reached per file of src/
#   make fuzz-corpus  adds the inputs of those runs that reach new edges to
#                 tests/fuzz/corpus (which make test replays) [FUZZ_DESIGN=...]
#   make soak     a long multi-threaded load on each design [SOAK_MINUTES=2 a design]
#   make secure-report  heap-attack probes under glibc, the peers, Scudo [SCUDO=path],
#                 mimalloc's secure build [MIMALLOC_SECURE=path],
#                 tsalloc and tsalloc-secure: a caught/missed table (docs/secure.md)
#   make debug    the checked build (-DTSALLOC_DEBUG=ON: every invariant
#                 asserted) into build-debug/; make debug-test runs its tests
BUILD     ?= build
PREFIX    ?= /usr/local
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")
VENV      ?= .venv
BENCH_ARGS ?=

.PHONY: all build test bench install deb clean format venv fuzz fuzz-corpus soak secure-report debug debug-test

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=Release \
	      -DCMAKE_INSTALL_PREFIX=$(PREFIX)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The tests assert the default options: TSALLOC_* variables of the caller's
# environment are removed (tests that need an option set it themselves).
test: build
	cd $(BUILD) && env $$(env | sed -n 's/^\(TSALLOC_[A-Za-z0-9_]*\)=.*/-u \1/p') \
	    ctest --output-on-failure -j $(JOBS) --timeout 600

# Plots need matplotlib: a virtualenv made here, never a system-wide install.
$(VENV)/bin/python:
	python3 -m venv $(VENV) || { echo "python3-venv is missing: apt-get install -y python3-venv"; exit 1; }
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r bench/requirements.txt \
	  || echo "tsbench: matplotlib could not be installed; the report will have no plots"

venv: $(VENV)/bin/python

bench: build venv
	$(VENV)/bin/python bench/tsbench --build $(BUILD) --install-peers $(BENCH_ARGS)

# Fuzzing needs clang (CI does not): a build folder of its own.
FUZZ_BUILD   ?= build-fuzz
FUZZ_DESIGN  ?= all
FUZZ_SECONDS ?= 60
fuzz:
	@command -v clang >/dev/null 2>&1 || { echo "make fuzz needs clang: apt-get install -y clang"; exit 1; }
	cmake -S . -B $(FUZZ_BUILD) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=Release \
	      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DTSALLOC_FUZZ=ON
	tests/fuzz/run_fuzz.sh $(FUZZ_BUILD) "$(FUZZ_DESIGN)" $(FUZZ_SECONDS) $(JOBS)

# Inputs of earlier make fuzz runs that reach new edges join tests/fuzz/corpus.
fuzz-corpus:
	@test -f $(FUZZ_BUILD)/fuzz-designs.txt || { echo "make fuzz-corpus needs a make fuzz run first"; exit 1; }
	tests/fuzz/grow_corpus.sh $(FUZZ_BUILD) "$(FUZZ_DESIGN)" $(JOBS)

SOAK_MINUTES ?= 2
soak: build
	tests/soak/run_soak.sh $(BUILD) $(SOAK_MINUTES) $(VENV)

secure-report: build
	tests/secure/secure_report.sh $(BUILD)
# The checked build: a build folder of its own.
DEBUG_BUILD ?= build-debug
$(DEBUG_BUILD)/CMakeCache.txt:
	cmake -S . -B $(DEBUG_BUILD) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=Release -DTSALLOC_DEBUG=ON

debug: $(DEBUG_BUILD)/CMakeCache.txt
	cmake --build $(DEBUG_BUILD) -j $(JOBS)

debug-test: debug
	cd $(DEBUG_BUILD) && env $$(env | sed -n 's/^\(TSALLOC_[A-Za-z0-9_]*\)=.*/-u \1/p') \
	    ctest --output-on-failure -j $(JOBS) --timeout 600

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

deb: build
	cd $(BUILD) && cpack -G DEB

format:
	find include src tests bench tools -name '*.[ch]' -o -name '*.cpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
