// attention_params.cuh: what every attention kernel reads, which keys a query sees, where a key
// lies in the paged cache, and the head sizes the flash kernels take.
// defines: AttnParams, attention_supports_head_dim, attention_supported_head_dims,
//          attn::dispatch_hd, attn::KeyRange, attn::visible_keys, attn::Pages, attn::pages_of
//
// The query at absolute position i sees the keys j in [lo, hi):
//     lo = max(0, i - W + 1) if the window W > 0, else 0;      hi = i + 1.
// Sequence b keeps the K/V of its position j in row
//     block_table[b][j >> shift] << shift | (j & mask),   shift = log2(block_size), mask = block_size - 1
// of the layer's K and V pools (src/kv_cache.h); pool rows are < 2^31.
//
// Head sizes. The flash kernels keep tiles of HD dims per row, for three tile widths HD = 64,
// 128 and 256 (the shared-memory swizzle works on groups of 8 16-byte chunks, so HD is a
// multiple of 64). A head size hd, any multiple of 8 up to 256, runs on the smallest HD >= hd
// (16, 32 -> 64; 80, 96 -> 128; 192 -> 256): its dims hd .. HD-1 exist only in shared memory and
// registers. Loads zero-fill them (cp.async with src-size 0, which reads nothing), so they add 0
// to every q·k, and the P·V columns they produce are never stored. Global memory is always
// addressed with the real hd (row strides nH*hd and nKV*hd); only shared memory and registers
// use HD. A multiple of 8 keeps every row 16-byte aligned in 16-bit types, as cp.async needs.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda_common.cuh"
#include "fp8.h"

namespace olmo {

// T = float, __half or __nv_bfloat16: the storage type of q and out. C: the K/V pools', T, or
// uint8_t for an FP8 cache (E4M3 codes, a scale per key and KV head: src/fp8.h), which the
// flash kernels dequantize into T as the tiles land (paged_kv.cuh); T is then 16-bit.
template <typename T, typename C = T>
struct AttnParams {
    const T* q;       // [batch * n_q, nH*hd]  sequence b's queries in rows b*n_q .. b*n_q+n_q-1,
                      //                       head h in columns h*hd .. h*hd+hd-1
    const C* k;       // this layer's K pool [num_blocks * block_size, nKV*hd] (RoPE applied)
    const C* v;       // V pool, same layout
    T* out;           // like q
    int n_q;          // query tokens per sequence (prefill chunk length; 1 for decode)
    const int* pos0;  // DEVICE [batch]: position of sequence b's first query; its keys are
                      // positions 0 .. pos0[b]+n_q-1 (read on the device, so a captured CUDA
                      // graph replays with new positions)
    int nH, nKV, hd;  // attention_supports_head_dim(hd) (the naive kernels take any); nH % nKV == 0
    int window;       // 0 = full causal; W > 0: query at position i sees keys i-W+1 .. i
    float scale;      // usually hd^-0.5
    int s_cap;        // max positions per sequence (an upper bound on pos0[b] + n_q); sets the
                      // number of decode splits, so it must not change between graph replays
    const int* block_table;  // DEVICE [batch, table_stride]: position p of sequence b is in pool
                      // row block_table[b*table_stride + p/block_size]*block_size + p%block_size.
                      // Entries of blocks wholly out of every query's window (released: may be
                      // -1) and entries past the last position are never used.
    int table_stride; // >= s_cap / block_size, rounded up
    int block_size;   // tokens per block: a power of two >= 8 (the engine uses 16)
    int batch;        // sequences (decode); 1 for prefill
    const float* k_scale = nullptr;   // C = uint8_t: the K and V pools' scales [num_blocks * nKV *
    const float* v_scale = nullptr;   //   block_size], in kv_scale_index order (fp8.h)
    __half* out16 = nullptr;          // 16-bit T: when set, the output goes here in fp16, like out,
                                      //   and out is not written (the FP8 engine's o product reads
                                      //   fp16: src/cuda_engine.cu, CudaEngine::A)
    bool prefill_keys = false;        // the kernel ahead also wrote keys below pos0 (the rows of a
                                      //   prefill chunk): attention_decode copies no K/V before its wait
};

// The decode kernels take AttnParams as `const __grid_constant__`: they then read its fields
// where the launch put them (the kernel's constant bank), also through the references that
// plan_slots, seq_tiles and the loaders take. Without it nvcc compiled the combine kernel's part
// before its wait into 609 SASS instructions instead of under 300, and 7B fp8 decode was 0.45%
// slower (1B 0.65%; docs/fp8.md, "Session 40"). rope_qkv's RopeParams are taken the same way.

// attention_decode reads pos0 and block_table before it waits for the kernel ahead of it in the
// stream (a programmatic dependent launch), so they must not be written by that kernel: the
// engine uploads them with a copy at the start of the step. It also copies the K/V rows of keys
// below pos0 before that wait, which in a decode step were written steps ago (RoPE, the kernel
// ahead, writes keys pos0 ..); a caller whose kernel ahead wrote older keys too sets
// prefill_keys.

// The head sizes attention_prefill and attention_decode take (see "Head sizes" above), so that a
// caller can choose another path before loading a model.
inline bool attention_supports_head_dim(int hd) { return hd > 0 && hd <= 256 && hd % 8 == 0; }
inline std::string attention_supported_head_dims() { return "multiples of 8 up to 256"; }

namespace attn {

// Calls f(std::integral_constant<int, HD>) for the tile width HD of head size hd (checked by
// check_params): the smallest of 64, 128, 256 that holds it.
template <typename F>
void dispatch_hd(int hd, F&& f) {
    if (hd <= 64) f(std::integral_constant<int, 64>{});
    else if (hd <= 128) f(std::integral_constant<int, 128>{});
    else f(std::integral_constant<int, 256>{});
}

// Keys [lo, hi) that queries at positions first_pos .. last_pos may see.
struct KeyRange {
    int lo, hi;
};
__device__ __forceinline__ KeyRange visible_keys(int first_pos, int last_pos, int window) {
    return {window > 0 ? max(0, first_pos - window + 1) : 0, last_pos + 1};
}

// Sequence b's page lookup, one entry at a time (the simple kernels; the flash kernels read
// the table a window at a time: paged_kv.cuh).
struct Pages {
    const int* table;  // sequence b's row of the block table
    int shift, mask;
    __device__ int64_t row(int j) const { return (int64_t)table[j >> shift] << shift | (j & mask); }
};
template <typename T, typename C>
__device__ __forceinline__ Pages pages_of(const AttnParams<T, C>& p, int b) {
    return {p.block_table + (int64_t)b * p.table_stride, __ffs(p.block_size) - 1, p.block_size - 1};
}

}  // namespace attn
}  // namespace olmo
