// memory_check.cpp: the fit check of both engines, and the fp32 CPU engine's memory need.
#include "memory_check.h"

#include <cstdio>
#include <fstream>

#include "common.h"
#include "engine.h"
#include "weights.h"

namespace olmo {

namespace {

std::string gib(size_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", bytes / 1073741824.0);
    return buf;
}

}  // namespace

void check_fits(const MemoryNeed& need, size_t free_bytes, const std::string& where) {
    if (need.total() <= free_bytes) return;
    fail("needs " + gib(need.total()) + " GiB, " + gib(free_bytes) + " GiB " + where + " (weights " + gib(need.weights) +
         ", KV cache " + gib(need.kv_cache) + ", buffers " + gib(need.buffers) + ")");
}

size_t host_available_bytes() {
    std::ifstream f("/proc/meminfo");
    std::string key, unit;
    size_t kib = 0;
    while (f >> key >> kib >> unit)
        if (key == "MemAvailable:") return kib * 1024;
    fail("/proc/meminfo: no MemAvailable line");
}

size_t kv_block_bytes(const ModelConfig& c, KvDType kv, size_t elt_bytes) {
    const size_t rows = kKvBlockSize;
    const size_t pool = kv == KvDType::FP8 ? rows * c.kv_dim() + rows * c.n_kv_heads * sizeof(float)
                                           : rows * c.kv_dim() * elt_bytes;
    return 2 * pool;
}

MemoryNeed cpu_memory_need(const ModelConfig& c, int max_seq, int kv_blocks) {
    size_t params = 0;
    for (const WeightSlot& w : weight_table(c, !c.tie_embeddings)) params += (size_t)w.numel();
    const size_t H = c.hidden, I = c.intermediate, Q = c.q_dim(), KV = c.kv_dim(), T = max_seq;
    MemoryNeed m;
    m.weights = params * sizeof(float);
    const size_t block = kv_block_bytes(c, KvDType::Same, sizeof(float));   // fp32 pools whatever the KvDType
    m.kv_cache = (size_t)kv_pool_blocks(max_seq, kv_blocks) * block * c.n_layers;
    // cpu_engine.cpp's run(): x, xn, o [T, H]; qkv, q, k, v, att; gate|up and swiglu; logits.
    m.buffers = (T * (3 * H + 2 * (Q + 2 * KV) + Q + 3 * I) + c.vocab) * sizeof(float);
    return m;
}

void check_fits_cpu(const ModelConfig& c, int max_seq, int kv_blocks) {
    check_fits(cpu_memory_need(c, max_seq, kv_blocks), host_available_bytes(), "available in host memory");
}

}  // namespace olmo
