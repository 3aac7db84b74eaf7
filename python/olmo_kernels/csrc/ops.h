// ops.h: the engine's kernel entry points on untyped pointers, where the two halves of the
// extension meet. ops.cu includes kernels/*.cuh and is compiled by nvcc with the engine's flags
// (-std=c++17, sm_90a); binding.cpp includes the torch headers and is compiled by the host
// compiler with torch's flags. Neither includes the other's headers, so this file holds only
// plain C++ types (no std::string or std::vector cross it: the two halves may be built with
// different -std levels). Kernel errors (olmo::Error, a std::runtime_error) pass through
// unchanged and reach Python as RuntimeError.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace olmo::ext {

enum class DType { F32, F16, BF16 };

// olmo::AttnParams<T> (kernels/attention.cuh) with the storage type T as a value: the same
// fields, copied one by one by name in ops.cu.
struct AttnArgs {
    DType dtype;
    const void* q;          // [batch * n_q, nH * hd]
    const void* k;          // K pool [rows, nKV * hd]
    const void* v;          // V pool, same layout
    void* out;              // like q
    int n_q;                // query tokens per sequence
    const int* pos0;        // device [batch]: position of each sequence's first query
    int nH, nKV, hd;
    int window;             // 0 = full causal
    float scale;
    int s_cap;              // >= pos0[b] + n_q for every b
    const int* block_table; // device [batch, table_stride]
    int table_stride, block_size, batch;
};

void attention_prefill(const AttnArgs& a, cudaStream_t stream);
void attention_decode(const AttnArgs& a, void* workspace, cudaStream_t stream);
size_t attention_decode_workspace_bytes(int nH, int hd, int s_cap, int batch, int n_q);
bool attention_supports_head_dim(int hd);
// The query rows per KV head one decode launch takes (n_q * nH / nKV at most this).
int attention_decode_max_rows();

// An empty kernel launched in stream order. attention_decode reads pos0 and the block table
// before it waits for the kernel ahead of it (a programmatic dependent launch); with this
// kernel ahead of it, everything written before the call has landed.
void stream_fence(cudaStream_t stream);

// out [rows, H] = LayerNorm(x [rows, H]) without weight or bias; out and x of type t.
void layernorm(DType t, void* out, const void* x, int rows, int H, float eps, cudaStream_t stream);

// out [rows, H] (type x_type, rows ld_out apart) = RMSNorm(x [rows, H], rows ld_in apart) * w
// (w of type w_type).
void rmsnorm(DType x_type, DType w_type, void* out, const void* x, const void* w, int rows, int H, int64_t ld_in,
             int64_t ld_out, float eps, cudaStream_t stream);

// olmo::RopeParams<T, X> (kernels/rope.cuh): T = cache_type (q_out, K/V pools), X = qkv_type
// (qkv_type is cache_type or F32).
struct RopeArgs {
    DType cache_type, qkv_type;
    const void* qkv;        // [rows, (nH + 2 nKV) * hd]
    void* q_out;            // [rows, nH * hd]
    void* k_cache;          // K pool [pool rows, nKV * hd]
    void* v_cache;          // V pool
    int rows;
    const int* pos;         // device [rows]
    const int* cache_row;   // device [rows]
    int n_heads, n_kv_heads, head_dim;
    const float* inv_freq;  // device [head_dim / 2]
    float attn_factor;
};
void rope_qkv(const RopeArgs& a, cudaStream_t stream);

}  // namespace olmo::ext
