# Makefile: `make` builds ./generate, ./tokenize, ./perplexity and the tests; `make test` runs every test;
# `make deps` installs the Debian packages the build needs; `make bench` runs the GPU
# benchmarks (on a machine with a GPU); `make dev` builds the dev/ ladders into build/dev/. With nvcc present the CUDA backend is built in;
# without it the build is CPU-only and the GPU tests are left out.
# `make test SANITIZE=1`: the CPU build and every CPU test under ASan + UBSan, in build-asan/
# (its ./generate and ./tokenize too). `make fuzz`: the libFuzzer targets of tests/fuzz/, built
# with clang in build-fuzz/, each run for FUZZ_SECONDS (default 60).

CXX      ?= g++
BUILD    := build
CUDA_HOME ?= /usr/local/cuda
NVCC     ?= $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
ifeq ($(NO_CUDA),1)
NVCC :=
BUILD := build-cpu
endif

CXXFLAGS ?= -O2 -g
ifeq ($(SANITIZE),1)
# Sanitized CPU build: any report ends the process (-fno-sanitize-recover), so a test fails.
NVCC :=
BUILD := build-asan
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
CXXFLAGS := -O1 -g $(SAN_FLAGS)
LDFLAGS  += $(SAN_FLAGS)
PROG_DIR := $(BUILD)/
endif
CXXFLAGS += -std=c++17 -Wall -Wextra -fopenmp -Isrc -Ikernels -MMD -MP
LDLIBS   := -lsentencepiece -lutf8proc -fopenmp -lpthread
GTEST    := -lgtest -lgtest_main

# Sources: every src/*.cpp except the programs' own files (their mains, and ./generate's flags)
# goes into the engine library.
MAINS    := src/generate.cpp src/tokenize.cpp src/perplexity.cpp
PROGRAM_ONLY := $(MAINS) src/generate_flags.cpp
LIB_CPP  := $(filter-out $(PROGRAM_ONLY),$(wildcard src/*.cpp))
LIB_OBJ  := $(LIB_CPP:%.cpp=$(BUILD)/%.o)
CPU_TESTS := $(patsubst tests/%.cpp,$(BUILD)/tests/%,$(wildcard tests/test_*.cpp))

ifneq ($(NVCC),)
# GPU build: src/*.cu (the CUDA engine, which includes kernels/*.cuh) joins the library.
# A fat binary: machine code for each of CUDA_ARCHS (A100; RTX 30xx, A10, A40; L4, L40,
# RTX 40xx; H100, H200), and PTX of CUDA_PTX (default: the last of CUDA_ARCHS without its "a";
# empty: none) that the driver compiles for newer GPUs. The kernels choose their paths at run
# time (src/device_caps.h). `make CUDA_ARCHS=90a CUDA_PTX=` builds for Hopper alone, each CUDA
# object 3 to 4 times faster. After changing them: make clean.
CUDA_ARCHS ?= 80 86 89 90a
CUDA_PTX   ?= $(patsubst %a,%,$(lastword $(CUDA_ARCHS)))
GENCODE    := $(foreach a,$(CUDA_ARCHS),-gencode=arch=compute_$(a),code=sm_$(a)) \
              $(foreach p,$(CUDA_PTX),-gencode=arch=compute_$(p),code=compute_$(p))
NVCCFLAGS ?= -O3 -g -lineinfo
NVCCFLAGS += -std=c++17 $(GENCODE) -DOLMO_CUDA_ARCHS='"$(CUDA_ARCHS)"' --expt-relaxed-constexpr \
             -Isrc -Ikernels -MMD -MP -Xcompiler -Wall,-Wextra,-fopenmp
CXXFLAGS += -DOLMO_CUDA -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lnccl -lcudart
LIB_CU   := $(wildcard src/*.cu)
LIB_OBJ  += $(LIB_CU:%.cu=$(BUILD)/%.o)
GPU_TESTS := $(patsubst tests/%.cu,$(BUILD)/tests/%,$(wildcard tests/test_*.cu))
BENCHES  := $(patsubst bench/%.cu,$(BUILD)/bench/%,$(wildcard bench/*.cu))
DEV      := $(patsubst dev/%.cu,$(BUILD)/dev/%,$(wildcard dev/*.cu))
# The torch extension's kernel half (python/olmo_kernels/csrc/ops.cu) is compiled here too, so a
# change to a kernel entry point that breaks it fails the build (the extension itself needs torch).
TORCH_EXT_OBJ := $(BUILD)/python/olmo_kernels/csrc/ops.o
endif

PROGRAMS := $(PROG_DIR)generate $(PROG_DIR)tokenize $(PROG_DIR)perplexity
TESTS    := $(CPU_TESTS) $(GPU_TESTS)

all: $(PROGRAMS) $(TESTS) $(DEV) $(TORCH_EXT_OBJ)

$(BUILD)/libolmo.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	ar rcs $@ $^

# Every object waits for `deps` (order-only: it never makes an object out of date), so that
# `make -j` on a fresh machine does not compile before the headers are installed.
$(BUILD)/%.o: %.cpp | deps
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu | deps
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# A program: its main, its other objects (listed below it), then the library.
$(PROGRAMS): $(PROG_DIR)%: $(BUILD)/src/%.o $(BUILD)/libolmo.a
	$(CXX) $(LDFLAGS) $(filter %.o,$^) $(filter %.a,$^) -o $@ $(LDLIBS)
$(PROG_DIR)generate: $(BUILD)/src/generate_flags.o

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libolmo.a
	$(CXX) $(LDFLAGS) $^ -o $@ $(GTEST) $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/libolmo.a
	$(CXX) $^ -o $@ $(LDLIBS)

$(BUILD)/dev/%: $(BUILD)/dev/%.o $(BUILD)/libolmo.a
	$(CXX) $^ -o $@ $(LDLIBS)

# The dev/ ladders (standalone CUDA programs, dev/README.md); part of `all` when nvcc is there.
ifneq ($(NVCC),)
dev: $(DEV)
else
dev:
	@echo "make dev: the dev/ ladders are CUDA programs and need nvcc (none found)"
endif

# Runs every test binary and ends with one "N passed, N failed, N skipped" line. A sanitized
# build's tests run its own programs (OLMO_BIN_DIR), which find the default model through links.
ifeq ($(SANITIZE),1)
test: all
	@ln -sfn ../weights $(BUILD)/weights && ln -sfn ../tokenizer $(BUILD)/tokenizer
	@OLMO_BIN_DIR=$(BUILD) ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 bash tests/run_all.sh $(TESTS)
else
test: all
	@bash tests/run_all.sh $(TESTS)
endif

# libFuzzer targets: tests/fuzz/fuzz_NAME.cpp -> build-fuzz/fuzz_NAME, built with clang and the
# engine's CPU sources (no OpenMP); each runs FUZZ_SECONDS from its seed corpus tests/fuzz/NAME/.
FUZZ_SECONDS ?= 60
FUZZ_BUILD   := build-fuzz
FUZZ_CXX     ?= clang++
FUZZ_FLAGS   := -O1 -g -std=c++17 -Isrc -Ikernels -Itests/fuzz -MMD -MP -Wno-unknown-pragmas \
                -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
FUZZ_TARGETS := $(patsubst tests/fuzz/%.cpp,$(FUZZ_BUILD)/%,$(wildcard tests/fuzz/fuzz_*.cpp))

$(FUZZ_BUILD)/%.o: %.cpp | deps fuzz-deps
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -c $< -o $@

$(FUZZ_BUILD)/libolmo.a: $(LIB_CPP:%.cpp=$(FUZZ_BUILD)/%.o)
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/tests/fuzz/fuzz_%.o $(FUZZ_BUILD)/libolmo.a
	$(FUZZ_CXX) -fsanitize=fuzzer,address,undefined $^ -o $@ -lsentencepiece -lutf8proc -lpthread

fuzz-build: $(FUZZ_TARGETS)

# clang brings libFuzzer; installed like the packages of `deps` when it is missing.
fuzz-deps:
	@command -v $(FUZZ_CXX) >/dev/null || { echo "installing: clang"; SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq clang; }

fuzz: fuzz-build
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

bench: all $(BENCHES)
	@bash bench/run_bench.sh

# Debian packages the build needs, each with a header that shows it is there; a package is
# installed with apt-get only when its header is missing (CI runs as root). Quick when all are
# there; every object rule waits for it.
DEB_PKGS := sentencepiece_processor.h:libsentencepiece-dev CLI/CLI.hpp:libcli11-dev \
            nlohmann/json.hpp:nlohmann-json3-dev gtest/gtest.h:libgtest-dev utf8proc.h:libutf8proc-dev
deps:
	@missing=$$(for e in $(DEB_PKGS); do h=$${e%%:*}; [ -e /usr/include/$$h ] || echo $${e#*:}; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

clean:
	rm -rf $(BUILD) $(PROGRAMS) build-asan $(FUZZ_BUILD)

.PHONY: all test bench dev deps clean fuzz fuzz-build fuzz-deps
.SECONDARY:
-include $(shell find $(BUILD) $(FUZZ_BUILD) -name '*.d' 2>/dev/null)
