// rope.cuh: rotary position embedding fused with the split of the qkv projection and the
// KV-cache write.
// defines: RopeParams, rope_qkv
//
// Input: the fused projection qkv [rows, (nH + 2 nKV) * hd] in X (T, or fp32: the engine passes
// its fp32 GEMM output), each row = nH query heads, then nKV key heads, then nKV value heads.
// Token r sits at position pos[r]. Per head vector x (hd elements) and d < hd/2, "rotate_half"
// RoPE pairs element d with d + hd/2:
//     angle = pos * inv_freq[d]                      (fp32, as transformers)
//     c = cos(angle) * attn_factor,  s = sin(angle) * attn_factor   (attn_factor: YaRN, else 1)
//     x'[d]        = x[d] * c - x[d + hd/2] * s
//     x'[d + hd/2] = x[d + hd/2] * c + x[d] * s
// Queries go to q_out [rows, nH*hd]; rotated keys to row cache_row[r] of the layer's K pool and
// values to the same row of the V pool (pools [blocks * block_size, nKV*hd]; the engine maps each
// token's position to its row through the sequence's block table, kv_cache.h). Outputs are T,
// each rounded once from fp32. One thread per (row, head, d) pair.
// cos/sin use the precise sincosf (not __sinf), so fp32 results match the CPU to ~1e-6 even at
// positions ~64k, where the angle is tens of thousands of radians. Positions and rows are read
// on the device so that a CUDA graph captured once replays decode steps at new positions.
// The kernel lets the next kernel in the stream launch as soon as it starts
// (allow_dependent_launch: the decode attention kernel does its set-up, then waits for us).
#pragma once
#include "cuda_common.cuh"

namespace olmo {

template <typename T, typename X = T> struct RopeParams {
    const X* qkv;            // [rows, (nH + 2*nKV) * hd], T or fp32
    T* q_out;                // [rows, nH * hd]
    T* k_cache;              // K pool [pool rows, nKV * hd]: row cache_row[r] receives token r's keys
    T* v_cache;              // V pool, same layout: its values
    int rows;
    const int* pos;          // device [rows]: position of each token
    const int* cache_row;    // device [rows]: pool row of each token's K/V
    int n_heads, n_kv_heads, head_dim;
    const float* inv_freq;   // device [head_dim / 2]
    float attn_factor;       // multiplies cos and sin (YaRN attention factor; 1 otherwise)
};

template <typename T, typename X> __global__ void rope_qkv_kernel(RopeParams<T, X> p) {
    allow_dependent_launch();
    const int half = p.head_dim / 2, heads = p.n_heads + 2 * p.n_kv_heads;
    const int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (t >= (int64_t)p.rows * heads * half) return;
    const int d = t % half, head = t / half % heads, r = t / half / heads;
    const int64_t pos = p.pos[r], row = p.cache_row[r], kv_width = (int64_t)p.n_kv_heads * p.head_dim;
    const X* x = p.qkv + ((int64_t)r * heads + head) * p.head_dim;
    T* dst;
    if (head < p.n_heads) dst = p.q_out + ((int64_t)r * p.n_heads + head) * p.head_dim;
    else if (head < p.n_heads + p.n_kv_heads) dst = p.k_cache + row * kv_width + (head - p.n_heads) * p.head_dim;
    else {  // a value head: copied, not rotated
        T* v = p.v_cache + row * kv_width + (head - p.n_heads - p.n_kv_heads) * p.head_dim;
        v[d] = from_float<T>(to_float(x[d]));
        v[d + half] = from_float<T>(to_float(x[d + half]));
        return;
    }
    float s, c;
    sincosf((float)pos * p.inv_freq[d], &s, &c);
    c *= p.attn_factor;
    s *= p.attn_factor;
    const float a = to_float(x[d]), b = to_float(x[d + half]);
    dst[d] = from_float<T>(a * c - b * s);
    dst[d + half] = from_float<T>(b * c + a * s);
}

template <typename T, typename X> void rope_qkv(const RopeParams<T, X>& p, cudaStream_t stream) {
    const int64_t pairs = (int64_t)p.rows * (p.n_heads + 2 * p.n_kv_heads) * (p.head_dim / 2);
    if (pairs == 0) return;
    if (p.head_dim % 2 != 0) fail("rope_qkv: head_dim " + std::to_string(p.head_dim) + " is odd");
    const int threads = 256;
    rope_qkv_kernel<<<(unsigned)((pairs + threads - 1) / threads), threads, 0, stream>>>(p);
    cudaCheckLaunch();
}

}  // namespace olmo
