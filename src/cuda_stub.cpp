// cuda_stub.cpp: the CUDA entry points of a CPU-only build (no nvcc at build time).
#ifndef OLMO_CUDA
#include "common.h"
#include "device_caps.h"
#include "engine.h"
#include "memory_check.h"

namespace olmo {
DeviceCaps device_caps() { return {}; }
std::string device_problem() { return "this build has no CUDA support"; }
void set_portable(Portable) {}
Portable portable() { return Portable::Off; }
bool cuda_available() { return false; }
size_t gpu_free_bytes() { return 0; }
std::string cuda_unsupported_reason(const ModelConfig&) { return "this build has no CUDA support"; }
int cuda_device_count() { return 0; }
std::unique_ptr<Engine> make_cuda_engine(const ModelConfig&, const Checkpoint*, int, DeviceDType, int, int, LoadProgress*,
                                         int, int, int, KvDType) {
    fail("this build has no CUDA support (nvcc was not found when it was built); use --device cpu");
}
}  // namespace olmo
#endif
