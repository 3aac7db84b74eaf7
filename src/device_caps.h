// device_caps.h: what the GPU offers the kernels that pick a path by it, and portable mode.
// defines: DeviceCaps, device_caps, device_problem, Portable, kSmemBytes, set_portable, portable,
//          PortableScope
//
// The engine is built for sm_80, sm_86, sm_89 and sm_90a (Makefile: CUDA_ARCHS) and chooses at
// run time where the GPUs differ:
//   thread-block clusters (sm_90 and newer): the device sampler spreads over a cluster of 8
//       blocks; without them one block samples (kernels/sampling.cuh);
//   programmatic dependent launch (sm_90 and newer): the decode attention kernels start while
//       the kernel ahead of them drains; without it they wait in stream order (launch_dependent
//       in kernels/cuda_common.cuh);
//   shared memory a block may opt in to (227 KB on sm_90, 163 KB on sm_80, 99 KB on sm_86 and
//       sm_89): the attention tiles that fit (kernels/attention.cuh, attention_device_problem);
//   sm_90a code (wgmma, TMA, setmaxnreg; Hopper alone, and only where the build has sm_90a
//       machine code): the Hopper prefill attention (kernels/attention_prefill_hopper.cuh).
// Portable mode makes a Hopper GPU choose as a GPU without those features does, so that their
// paths are tested where only Hopper GPUs are at hand: no clusters, no dependent launch, no
// sm_90a kernels, and the
// shared memory of an sm_86 (Portable::Sm86) or an sm_80 (Portable::Sm80). It is read once from
// the environment, OLMO_PORTABLE=1 (or sm86, sm89: Sm86; sm80: Sm80; 0 or unset: off), and tests
// set it with PortableScope.
#pragma once
#include <string>

namespace olmo {

struct DeviceCaps {
    int major = 0, minor = 0;  // compute capability (0.0: no device this build runs on)
    bool clusters = false;     // thread-block clusters
    bool pdl = false;          // programmatic dependent launch
    int smem_per_block = 0;    // bytes of shared memory a block may opt in to
    bool sm90a = false;        // runs this build's sm_90a machine code (compute capability 9.0)
};

enum class Portable { Off, Sm86, Sm80 };
constexpr int kSmemBytes[] = {0, 99 * 1024, 163 * 1024};  // per block, by Portable (Off: the GPU's)

// The current device's capabilities (queried once, at the first call), as portable mode limits them.
DeviceCaps device_caps();
// Why this build cannot run on the current device (none, too old, no code for its
// architecture), or "" when it can.
std::string device_problem();
void set_portable(Portable mode);
Portable portable();

// Portable mode `mode` for the life of the object (tests), then the mode before it.
class PortableScope {
public:
    explicit PortableScope(Portable mode) : before_(portable()) { set_portable(mode); }
    ~PortableScope() { set_portable(before_); }
    PortableScope(const PortableScope&) = delete;
    PortableScope& operator=(const PortableScope&) = delete;

private:
    Portable before_;
};

}  // namespace olmo
