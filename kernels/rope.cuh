// rope.cuh: rotary position embedding fused with OLMo-2/3's QK-norm, the split of the qkv
// projection and the KV-cache write.
// defines: RopeParams, rope_qkv
//
// Input: the fused projection qkv [rows, (nH + 2 nKV) * hd] in X (T, or fp32: the engine passes
// its fp32 GEMM output), each row = nH query heads, then nKV key heads, then nKV value heads.
// Token r sits at position pos[r].
//   QK-norm (OLMo-2/3; skipped when q_norm is null, as in OLMo-1): the query part of the row
//     (Q = nH*hd values) and the key part (KV = nKV*hd) are each RMS-normalized over their
//     whole width, as norm.cuh's rmsnorm: x = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps).
//   RoPE, per head vector x (hd elements) and d < hd/2, "rotate_half" pairs element d with
//     d + hd/2:
//       angle = pos * inv_freq[d]                      (fp32, as transformers)
//       c = cos(angle) * attn_factor,  s = sin(angle) * attn_factor   (attn_factor: YaRN, else 1)
//       x'[d]        = x[d] * c - x[d + hd/2] * s
//       x'[d + hd/2] = x[d + hd/2] * c + x[d] * s
// Queries go to q_out [rows, nH*hd]; rotated keys to row cache_row[r] of the layer's K pool and
// values to the same row of the V pool (pools [blocks * block_size, nKV*hd]; the engine maps each
// token's position to its row through the sequence's block table, kv_cache.h). Outputs are T,
// each rounded once from fp32; the normalized q and k stay fp32 in between (not rounded).
//
// A token's row is handled by one or more blocks: each sums the squares of the whole q and k
// parts (block reductions; a few KB, read again from cache by every block of the row), then its
// threads take (head, d) pairs. cos/sin use the precise sincosf (not __sinf), so fp32 results
// match the CPU to ~1e-6 even at positions ~64k, where the angle is tens of thousands of radians.
// Positions and rows are read on the device so that a CUDA graph captured once replays decode
// steps at new positions. The kernel lets the next kernel in the stream launch as soon as it
// starts (allow_dependent_launch: the decode attention kernel does its set-up, then waits for us).
// It is itself an ordinary launch: launched as a dependent (with the norms and SwiGLU, in one
// experiment), 7B fp8 decode lost 11% (docs/fp8.md).
#pragma once
#include "cuda_common.cuh"
#include "norm.cuh"

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
    const T* q_norm = nullptr;   // QK-norm weights [nH*hd] and [nKV*hd]; null: no QK-norm (OLMo-1)
    const T* k_norm = nullptr;
    float eps = 0.0f;
    X* normed = nullptr;     // if set (the engine's tensor hooks): the normalized q|k written back
                             // here, laid out as qkv (the engine passes qkv itself)
};

// N: elements per load of the two sums of squares (a 16-byte Pack when the row allows it, else 1).
template <typename T, typename X, int N> __global__ void rope_qkv_kernel(RopeParams<T, X> p) {
    allow_dependent_launch();   // see the file comment
    const int half = p.head_dim / 2, Q = p.n_heads * p.head_dim, KV = p.n_kv_heads * p.head_dim;
    const int64_t r = blockIdx.x, pos = p.pos[r], row = p.cache_row[r];
    const X* x = p.qkv + r * (Q + 2 * KV);
    const bool norm = p.q_norm != nullptr;
    const float rstd_q = norm ? rms_rstd<N>(x, Q, p.eps) : 1.0f;
    const float rstd_k = norm ? rms_rstd<N>(x + Q, KV, p.eps) : 1.0f;
    for (int t = blockIdx.y * blockDim.x + threadIdx.x; t < (p.n_heads + 2 * p.n_kv_heads) * half;
         t += gridDim.y * blockDim.x) {
        const int head = t / half, d = t % half, i = head * p.head_dim + d;   // i: column of element d
        float a = to_float(x[i]), b = to_float(x[i + half]);
        if (head >= p.n_heads + p.n_kv_heads) {   // a value head: copied, not rotated
            T* v = p.v_cache + row * KV + (i - Q - KV);
            v[0] = from_float<T>(a);
            v[half] = from_float<T>(b);
            continue;
        }
        const bool query = head < p.n_heads;
        if (norm) {
            const T* w = query ? p.q_norm + i : p.k_norm + (i - Q);
            const float rstd = query ? rstd_q : rstd_k;
            a = to_float(w[0]) * (a * rstd);
            b = to_float(w[half]) * (b * rstd);
            if (p.normed) p.normed[r * (Q + 2 * KV) + i] = a, p.normed[r * (Q + 2 * KV) + i + half] = b;
        }
        float s, c;
        sincosf((float)pos * p.inv_freq[d], &s, &c);
        c *= p.attn_factor;
        s *= p.attn_factor;
        T* dst = query ? p.q_out + r * Q + i : p.k_cache + row * KV + (i - Q);
        dst[0] = from_float<T>(a * c - b * s);
        dst[half] = from_float<T>(b * c + a * s);
    }
}

template <typename T, typename X> void rope_qkv(const RopeParams<T, X>& p, cudaStream_t stream) {
    const int pairs = (p.n_heads + 2 * p.n_kv_heads) * (p.head_dim / 2);
    if (p.rows == 0 || pairs == 0) return;
    if (p.head_dim % 2 != 0) fail("rope_qkv: head_dim " + std::to_string(p.head_dim) + " is odd");
    // A few tokens (decode): each token's pairs spread over several blocks, one pair per thread,
    // each block repeating the two short reductions. Many tokens (prefill): one block per token.
    // Writing the normalized q|k back in place: one block per token too, so that the row's sums
    // are complete before any of it is overwritten (blocks of a grid do not wait for each other).
    constexpr int threads = 256, N = kVec<X>;
    const bool split = p.rows < 128 && p.normed == nullptr;
    const dim3 grid(p.rows, split ? (pairs + threads - 1) / threads : 1);
    const int Q = p.n_heads * p.head_dim, KV = p.n_kv_heads * p.head_dim;
    if (Q % N == 0 && KV % N == 0 && aligned16(p.qkv))
        rope_qkv_kernel<T, X, N><<<grid, threads, 0, stream>>>(p);
    else
        rope_qkv_kernel<T, X, 1><<<grid, threads, 0, stream>>>(p);
    cudaCheckLaunch();
}

}  // namespace olmo
