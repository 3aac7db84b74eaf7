// memory_check.h: does a model fit? Each engine adds up what it is about to allocate (weights,
// KV pool, working buffers) before it allocates any of it and compares that with the free
// memory where it will live, so that a model too large gives one clear line instead of a
// failed cudaMalloc halfway through loading or the kernel's OOM killer.
#pragma once
#include <cstddef>
#include <string>

#include "config.h"
#include "engine.h"

namespace olmo {

// Bytes an engine will allocate, by part.
struct MemoryNeed {
    size_t weights = 0, kv_cache = 0, buffers = 0;
    size_t total() const { return weights + kv_cache + buffers; }
};

// Fails with one line, e.g. "needs 151.2 GiB, 139.1 GiB free on the GPU (weights 149.0, KV
// cache 1.2, buffers 1.0)", when `need` is more than `free_bytes`. `where`: "free on the GPU".
void check_fits(const MemoryNeed& need, size_t free_bytes, const std::string& where);

// MemAvailable of /proc/meminfo in bytes: what can be allocated without swapping.
size_t host_available_bytes();
// Free memory on the current GPU (cudaMemGetInfo); 0 in a build without CUDA.
size_t gpu_free_bytes();

// Bytes of one KV block of one layer, K and V pools together: for each pool, kKvBlockSize rows of
// c.kv_dim() elements of elt_bytes (KvDType::Same: the engine's storage type), or with FP8 rows
// of one-byte codes plus an fp32 scale per row and KV head (fp8.h). c: what one engine holds (a
// tensor-parallel rank: its shard's config).
size_t kv_block_bytes(const ModelConfig& c, KvDType kv, size_t elt_bytes);

// What the fp32 CPU engine allocates for `c`: every parameter in fp32, a KV pool of
// kv_pool_blocks(max_seq, kv_blocks) blocks per layer (fp32 whatever its KvDType), and the
// activations of a prefill of max_seq tokens.
MemoryNeed cpu_memory_need(const ModelConfig& c, int max_seq, int kv_blocks);
// Fails (see check_fits) when cpu_memory_need() is more than MemAvailable.
void check_fits_cpu(const ModelConfig& c, int max_seq, int kv_blocks);

}  // namespace olmo
