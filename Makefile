# Makefile: `make` builds ./generate, ./tokenize and the tests; `make test` runs every test;
# `make deps` installs the Debian packages the build needs; `make bench` runs the GPU
# benchmarks (on a machine with a GPU); `make dev` builds the dev/ ladders into build/dev/. With nvcc present the CUDA backend is built in;
# without it the build is CPU-only and the GPU tests are left out.

CXX      ?= g++
BUILD    := build
CUDA_HOME ?= /usr/local/cuda
NVCC     ?= $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
ifeq ($(NO_CUDA),1)
NVCC :=
BUILD := build-cpu
endif

CXXFLAGS ?= -O2 -g
CXXFLAGS += -std=c++17 -Wall -Wextra -fopenmp -Isrc -Ikernels -MMD -MP
LDLIBS   := -lsentencepiece -lutf8proc -fopenmp -lpthread
GTEST    := -lgtest -lgtest_main

# Sources: every src/*.cpp except the programs' mains goes into the engine library.
MAINS    := src/generate.cpp src/tokenize.cpp
LIB_CPP  := $(filter-out $(MAINS),$(wildcard src/*.cpp))
LIB_OBJ  := $(LIB_CPP:%.cpp=$(BUILD)/%.o)
CPU_TESTS := $(patsubst tests/%.cpp,$(BUILD)/tests/%,$(wildcard tests/test_*.cpp))

ifneq ($(NVCC),)
# GPU build: src/*.cu (the CUDA engine, which includes kernels/*.cuh) joins the library.
NVCCFLAGS ?= -O3 -g -lineinfo
NVCCFLAGS += -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
             -Isrc -Ikernels -MMD -MP -Xcompiler -Wall,-Wextra,-fopenmp
CXXFLAGS += -DOLMO_CUDA -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart
LIB_CU   := $(wildcard src/*.cu)
LIB_OBJ  += $(LIB_CU:%.cu=$(BUILD)/%.o)
GPU_TESTS := $(patsubst tests/%.cu,$(BUILD)/tests/%,$(wildcard tests/test_*.cu))
BENCHES  := $(patsubst bench/%.cu,$(BUILD)/bench/%,$(wildcard bench/*.cu))
DEV      := $(patsubst dev/%.cu,$(BUILD)/dev/%,$(wildcard dev/*.cu))
# The torch extension's kernel half (python/olmo_kernels/csrc/ops.cu) is compiled here too, so a
# change to a kernel entry point that breaks it fails the build (the extension itself needs torch).
TORCH_EXT_OBJ := $(BUILD)/python/olmo_kernels/csrc/ops.o
endif

PROGRAMS := generate tokenize
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

generate tokenize: %: $(BUILD)/src/%.o $(BUILD)/libolmo.a
	$(CXX) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libolmo.a
	$(CXX) $^ -o $@ $(GTEST) $(LDLIBS)

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

# Runs every test binary and ends with one "N passed, N failed, N skipped" line.
test: all
	@bash tests/run_all.sh $(TESTS)

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
	rm -rf $(BUILD) $(PROGRAMS)

.PHONY: all test bench dev deps clean
.SECONDARY:
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
