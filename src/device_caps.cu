// device_caps.cu: the current GPU's capabilities and portable mode (see device_caps.h).
//
// Which code runs on the GPU decides as much as the GPU: the fat binary holds SASS for each of
// CUDA_ARCHS and PTX that the driver compiles for newer GPUs. The PTX architecture of the image
// the GPU loads (cudaFuncGetAttributes of an empty kernel built like every other) tells whether
// the sm_90 device code (clusters, griddepcontrol) is in it: a build without sm_90 code
// running on a Hopper GPU through older PTX must take the portable paths.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "common.h"
#include "cuda_common.cuh"
#include "device_caps.h"

#ifndef OLMO_CUDA_ARCHS
#define OLMO_CUDA_ARCHS "?"
#endif

namespace olmo {

namespace {

__global__ void probe_kernel() {}

struct Native {
    DeviceCaps caps;
    std::string problem;
};

std::string gpu_named(const cudaDeviceProp& prop) {
    return std::string(prop.name) + " (compute capability " + std::to_string(prop.major) + "." +
           std::to_string(prop.minor) + ")";
}

Native query() {
    Native n;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        n.problem = "no CUDA device available";
        return n;
    }
    int dev = 0;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    cudaFuncAttributes image;
    if (cudaFuncGetAttributes(&image, probe_kernel) != cudaSuccess) {  // no code for this GPU
        (void)cudaGetLastError();
        n.problem = prop.major < 8 ? gpu_named(prop) + " is older than the CUDA engine supports (8.0: A100, RTX 30xx and newer)"
                                   : "this build has no code for " + gpu_named(prop) + " (built for CUDA_ARCHS=" +
                                         OLMO_CUDA_ARCHS + "; rebuild with make clean; make CUDA_ARCHS=\"" +
                                         std::to_string(prop.major) + std::to_string(prop.minor) + "\")";
        return n;
    }
    const bool sm90_code = image.ptxVersion >= 90;
    // A 9.0 GPU loads the build's sm_90a machine code when there is some (an exact match wins
    // over PTX), and only then has the kernels that need it.
    const bool sm90a = prop.major == 9 && prop.minor == 0 && std::string(" " OLMO_CUDA_ARCHS " ").find(" 90a ") != std::string::npos;
    n.caps = {prop.major, prop.minor, prop.clusterLaunch != 0 && sm90_code, prop.major >= 9 && sm90_code,
              (int)prop.sharedMemPerBlockOptin, sm90a};
    return n;
}

const Native& native() {
    static const Native n = query();
    return n;
}

Portable from_environment() {
    const char* v = std::getenv("OLMO_PORTABLE");
    const std::string s = v ? v : "";
    if (s.empty() || s == "0") return Portable::Off;
    if (s == "1" || s == "sm86" || s == "sm89") return Portable::Sm86;
    if (s == "sm80") return Portable::Sm80;
    fail("OLMO_PORTABLE=" + s + ": expected 1 (or sm86, sm89), sm80 or 0");
}

Portable& mode() {
    static Portable m = from_environment();
    return m;
}

}  // namespace

DeviceCaps device_caps() {
    DeviceCaps c = native().caps;
    if (mode() != Portable::Off) {
        c.clusters = c.pdl = c.sm90a = false;
        c.smem_per_block = std::min(c.smem_per_block, kSmemBytes[(int)mode()]);
    }
    return c;
}

std::string device_problem() { return native().problem; }

void set_portable(Portable m) { mode() = m; }
Portable portable() { return mode(); }

}  // namespace olmo
