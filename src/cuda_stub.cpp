// cuda_stub.cpp: the CUDA entry points of a CPU-only build (no nvcc at build time).
#ifndef OLMO_CUDA
#include "common.h"
#include "engine.h"

namespace olmo {
bool cuda_available() { return false; }
std::string cuda_unsupported_reason(const ModelConfig&) { return "this build has no CUDA support"; }
std::unique_ptr<Engine> make_cuda_engine(const ModelConfig&, const Checkpoint*, int, DeviceDType, int, int, LoadProgress*) {
    fail("this build has no CUDA support (nvcc was not found when it was built); use --device cpu");
}
}  // namespace olmo
#endif
