// gpu_loader.h: checkpoint tensors -> device memory, at the speed of the PCIe link.
//
// load_to_device() copies every slot of a weight table (weights.h) into the device pointer the
// caller gives for it, in the engine's dtype. Worker threads pread chunks of the files into
// pinned staging buffers and cudaMemcpyAsync them on their own streams, several copies in
// flight; a tensor stored in another dtype is uploaded raw into a device scratch chunk and
// converted there by the `convert` kernel (the same rounding as from_float<T>(to_f32(x)) on the
// host; FP8 codes are dequantized with their scales, fp8_checkpoint.h). gpu_loader.cu explains
// the design.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <vector>

#include "engine.h"
#include "weights.h"

namespace olmo {

// The DeviceDType of a storage type T.
template <typename T> constexpr DeviceDType device_dtype();
template <> constexpr DeviceDType device_dtype<float>() { return DeviceDType::F32; }
template <> constexpr DeviceDType device_dtype<__half>() { return DeviceDType::F16; }
template <> constexpr DeviceDType device_dtype<__nv_bfloat16>() { return DeviceDType::BF16; }

// The pinned host staging and the device scratch a load copies through, grown on demand.
// load_to_device makes its own for one call; a load made of many calls (FP8 quantization or the
// tensor-parallel split, a layer at a time) passes one to all of them. Pinning and freeing 256 MB
// of host staging at every call made a 7B checkpoint's --tp 2 load (about 200 calls per GPU)
// take 31-39 s, and its --dtype fp8 load 6 s; with one set, 2.4 s and 0.83 s (README).
class LoadBuffers {
public:
    LoadBuffers() = default;
    LoadBuffers(const LoadBuffers&) = delete;
    LoadBuffers& operator=(const LoadBuffers&) = delete;
    ~LoadBuffers();
    char* host(size_t bytes);     // pinned, at least `bytes`
    char* device(size_t bytes);   // on the current GPU, at least `bytes`

private:
    char *host_ = nullptr, *device_ = nullptr;
    size_t host_bytes_ = 0, device_bytes_ = 0;
};

struct GpuLoadOptions {
    int threads = 0;                      // worker threads; 0 = min(8, cores)
    size_t staging_bytes = 16 << 20;      // one pinned buffer = the largest chunk read at once
    int buffers_per_thread = 2;           // one is filled while the other is in flight
    bool part_of_load = false;            // one of several calls: the caller starts and finishes progress
    LoadBuffers* buffers = nullptr;       // kept across the calls of one load (null: this call's own)
};

// dst[i]: device memory for table[i].numel() elements of dtype dt. dt FP8: every slot must be
// F8_E4M3, and its codes are copied as stored, [rows, cols] unpadded (the caller places them and
// their scales in the engine's layout). Every tensor is checked
// (present, shape, dtype) before the first copy; errors name the file and tensor. Returns once
// every byte is in place and checked: a NaN or Inf in any tensor, as stored on the device, is
// an error naming it. progress may be null.
void load_to_device(const Checkpoint& ck, const std::vector<WeightSlot>& table, const std::vector<void*>& dst,
                    DeviceDType dt, LoadProgress* progress = nullptr, const GpuLoadOptions& opt = {});

}  // namespace olmo
