// rope.cuh: rotary position embedding fused with OLMo-2/3's QK-norm, the split of the qkv
// projection and the KV-cache write.
// defines: RopeParams, QkNormWeights, qk_rstd, rope_qkv, qk_sumsq
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
// An FP8 cache (C = uint8_t, src/fp8.h) stores each head's keys and values as E4M3 codes with a
// scale made from the head's largest |value|: a warp takes a whole head, so that maximum is one
// warp reduction, and the threads' loop then covers only the query heads.
//
// A token's row is handled by one or more blocks: each sums the squares of the whole q and k
// parts (block reductions; a few KB, read again from cache by every block of the row) and
// computes the token's hd/2 angles once into shared memory (every head shares them), then its
// threads take runs of (head, d) pairs. cos/sin use the precise sincosf (not __sinf), so fp32
// results match the CPU to ~1e-6 even at positions ~64k, where the angle is tens of thousands of
// radians. qkv may be an FP8 GEMM's output with its scales still pending (ScaledRow).
// Tensor parallel (tensor_parallel.h): a rank holds some heads of q and k, and the QK-norm spans
// them all; qk_sumsq gives each token's two partial sums of squares, the engine adds them over
// the ranks, and rope_qkv takes the totals (sumsq) and the full widths instead of its own sums.
// Positions and rows are read on the device so that a CUDA graph captured once replays decode
// steps at new positions. The kernel lets the next kernel in the stream launch as soon as it
// starts (allow_dependent_launch: the decode attention kernel does its set-up, then waits for us).
// It is itself launched as a dependent of the product that writes qkv: its blocks are resident
// when that product ends (with the norms and SwiGLU: 7B fp8 decode +1%, 1B +4%; docs/fp8.md),
// and they read (or ask L2 for) what that product does not write before they wait for it.
#pragma once
#include <cuda_fp8.h>

#include "cuda_common.cuh"
#include "fp8.h"
#include "norm.cuh"

namespace olmo {

template <typename T, typename X = T, typename C = T> struct RopeParams {
    const X* qkv;            // [rows, (nH + 2*nKV) * hd], T or fp32
    T* q_out;                // [rows, nH * hd]
    C* k_cache;              // K pool [pool rows, nKV * hd] (T, or E4M3 codes): row cache_row[r]
    C* v_cache;              //   receives token r's keys; the V pool, same layout: its values
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
    PendingScale scale = {}; // the scales an FP8 GEMM left pending on qkv (fp8.h)
    const float2* sumsq = nullptr;   // tensor parallel: [rows] the q and k parts' sums of squares over
    int q_width = 0, k_width = 0;    // every rank's heads, and those full widths (the means' divisors)
    float* k_scale = nullptr;        // an FP8 cache (C = uint8_t): the pools' scales [pool blocks *
    float* v_scale = nullptr;        //   nKV * block_size] in kv_scale_index order (fp8.h)
    int block_size = 0;              //   and the pools' block size
};

// The warps whose threads rotate a token's query heads (n elements and their partners a thread).
template <typename T, typename X, typename C>
__host__ __device__ inline int rope_query_warps(const RopeParams<T, X, C>& p, int n) {
    return (p.n_heads * (p.head_dim / 2) / n + 31) / 32;
}

// An FP8 cache: a token's K and V heads into row `row` of the pools, a warp a head: the head's
// values(head, e, lo, hi), as rope_qkv_kernel makes them, at most 32·N·P pairs of them a warp;
// their largest |value|, one warp reduction; then the codes and the scale (fp8.h). Where the
// grid has a warp for each K/V head besides those whose threads rotate the query heads (decode:
// rope_qkv sizes it so), warp q_warps + j takes head j alone; otherwise warp w takes heads w,
// w + warps, ... (a warp with two heads waits for their loads one after the other: the FP8
// cache's decode step paid for it: 1B +2.2%, 7B +1.7% with one head a warp, docs/fp8.md).
template <int N, typename T, typename X, typename Values>
__device__ __forceinline__ void store_kv_heads_fp8(const RopeParams<T, X, uint8_t>& p, int64_t row, Values& values) {
    constexpr int P = 128 / (32 * N);   // packs per lane (hd/2 <= 128)
    const int half = p.head_dim / 2, KV = p.n_kv_heads * p.head_dim;
    const int lane = threadIdx.x % 32, warps = gridDim.y * blockDim.x / 32, warp = (blockIdx.y * blockDim.x + threadIdx.x) / 32;
    const int q_warps = rope_query_warps(p, N), first = warps >= q_warps + 2 * p.n_kv_heads ? q_warps : 0;
    for (int j = (warp + warps - first) % warps; j < 2 * p.n_kv_heads; j += warps) {
        const int h = j % p.n_kv_heads;   // KV head h of the K pool (j < nKV), then of the V pool
        Pack<float, N> lo[P], hi[P];
        float amax = 0.0f;
#pragma unroll
        for (int k = 0; k < P; k++) {
            const int e = (k * 32 + lane) * N;
            if (e >= half) continue;
            values(p.n_heads + j, e, lo[k], hi[k]);
            for (int n = 0; n < N; n++) amax = fmaxf(amax, fmaxf(fabsf(lo[k].v[n]), fabsf(hi[k].v[n])));
        }
        amax = warp_reduce(amax, MaxOp{});
        const float inv = fp8_row_inverse_scale(amax);
        uint8_t* dst = (j < p.n_kv_heads ? p.k_cache : p.v_cache) + row * KV + h * p.head_dim;
#pragma unroll
        for (int k = 0; k < P; k++) {
            const int e = (k * 32 + lane) * N;
            if (e >= half) continue;
            Pack<uint8_t, N> ql, qh;
            for (int n = 0; n < N; n++) {
                ql.v[n] = __nv_cvt_float_to_fp8(lo[k].v[n] * inv, __NV_SATFINITE, __NV_E4M3);
                qh.v[n] = __nv_cvt_float_to_fp8(hi[k].v[n] * inv, __NV_SATFINITE, __NV_E4M3);
            }
            *reinterpret_cast<Pack<uint8_t, N>*>(dst + e) = ql;
            *reinterpret_cast<Pack<uint8_t, N>*>(dst + e + half) = qh;
        }
        if (lane == 0)
            (j < p.n_kv_heads ? p.k_scale : p.v_scale)[kv_scale_index(row / p.block_size, (int)(row % p.block_size), h,
                                                                      p.n_kv_heads, p.block_size)] = fp8_row_scale(amax);
    }
}

// The QK-norm weights of elements e .. e+N-1 of a q or k head (heads numbered as in qkv) and of
// their partners e+hd/2 ..
template <typename T, int N>
struct QkNormWeights {
    Pack<T, N> a = {}, b = {};
    QkNormWeights() = default;
    template <typename X, typename C>
    __device__ QkNormWeights(const RopeParams<T, X, C>& p, int head, int e) {
        const int i = head * p.head_dim + e;
        const T* w = head < p.n_heads ? p.q_norm + i : p.k_norm + (i - p.n_heads * p.head_dim);
        a = *reinterpret_cast<const Pack<T, N>*>(w), b = *reinterpret_cast<const Pack<T, N>*>(w + p.head_dim / 2);
    }
};

// The QK-norm's 1/rms of the q and k parts of token r's row x, or (1, 1) without a QK-norm;
// tensor parallel, from every rank's sums added (p.sumsq). A block reduction: every thread calls it.
template <int N, typename T, typename X, typename C, typename Row>
__device__ float2 qk_rstd(const RopeParams<T, X, C>& p, const Row& x, int64_t r) {
    if (!p.q_norm) return {1.0f, 1.0f};
    if (p.sumsq) return {1.0f / sqrtf(p.sumsq[r].x / p.q_width + p.eps), 1.0f / sqrtf(p.sumsq[r].y / p.k_width + p.eps)};
    const int Q = p.n_heads * p.head_dim;
    return rms_rstd2<N>(x, Q, x.from(Q), p.n_kv_heads * p.head_dim, p.eps);
}

// N: consecutive elements per thread (4 when the head size and the pointers allow Pack
// accesses, else 1): a thread takes elements d .. d+N-1 of a head's first half and their
// partners d+hd/2 .. d+hd/2+N-1.
// (p is __grid_constant__, as AttnParams is: attention_params.cuh says why.)
template <typename T, typename X, typename C, int N, bool SCALED>
__global__ void rope_qkv_kernel(const __grid_constant__ RopeParams<T, X, C> p) {
    allow_dependent_launch();   // see the file comment
    extern __shared__ float cs[];   // [hd]: this token's cos, then its sin, per d < hd/2 (times attn_factor)
    const int half = p.head_dim / 2, Q = p.n_heads * p.head_dim, KV = p.n_kv_heads * p.head_dim;
    // What the product ahead does not write is read (or asked of L2) before waiting for it: the
    // positions and pool rows (copied in at the step's start), the frequencies, the norms' weights.
    const int64_t r = blockIdx.x, row = p.cache_row[r];
    const float pos = (float)p.pos[r];
    const int d = threadIdx.x;   // (hd/2 <= blockDim.x): thread d computes angle d once, every head shares it
    const float freq = d < half ? p.inv_freq[d] : 0.0f;
    const bool norm = p.q_norm != nullptr;
    if (norm) {
        prefetch_l2_block(p.q_norm, Q * (int64_t)sizeof(T));
        prefetch_l2_block(p.k_norm, KV * (int64_t)sizeof(T));
    }
    // This thread's first pair of packs (in decode its only one): its QK-norm weights are read
    // before the wait too, into registers, so that no trip to L2 is left after the sums (FP8
    // decode: 1B +0.17%, 7B +0.27%; docs/fp8.md, "Session 37").
    constexpr bool kFp8 = kFp8Cache<C>;
    const int heads = kFp8 ? p.n_heads : p.n_heads + 2 * p.n_kv_heads;   // the threads' share
    const int t0 = blockIdx.y * blockDim.x + threadIdx.x, head0 = t0 * N / half;
    const bool early = norm && t0 < heads * half / N && head0 < p.n_heads + p.n_kv_heads;
    const QkNormWeights<T, N> w0 = early ? QkNormWeights<T, N>(p, head0, t0 * N % half) : QkNormWeights<T, N>{};
    if (d < half) {   // the angles need only the position: computed before the wait too
        float s, c;
        sincosf(pos * freq, &s, &c);
        cs[d] = c * p.attn_factor, cs[half + d] = s * p.attn_factor;
    }
    grid_dependency_wait();     // launched as a dependent of the product that writes qkv
    const ScaledRow<X, SCALED> x(p.qkv, r, Q + 2 * KV, p.scale);
    const float2 rstd = qk_rstd<N>(p, x, r);
    const float rstd_q = rstd.x, rstd_k = rstd.y;
    __syncthreads();   // the cos/sin table is complete
    // Elements e .. e+N-1 of head `head` (q heads, then k heads, then v heads) and their partners
    // e+half ..: q and k normalized and rotated, v as it is.
    // (first: the thread's first pair, whose weights w0 holds)
    auto values = [&](int head, int e, Pack<float, N>& lo, Pack<float, N>& hi, bool first = false) {
        const int i = head * p.head_dim + e;   // i: column of element e
        Pack<float, N> a = x.template load<N>(i), b = x.template load<N>(i + half);
        if (head >= p.n_heads + p.n_kv_heads) {   // a value head: copied, not rotated
            lo = a, hi = b;
            return;
        }
        const bool query = head < p.n_heads;
        if (norm) {
            const QkNormWeights<T, N> w = first ? w0 : QkNormWeights<T, N>(p, head, e);
            const float rstd = query ? rstd_q : rstd_k;
            for (int j = 0; j < N; j++) {
                a.v[j] = to_float(w.a.v[j]) * (a.v[j] * rstd);
                b.v[j] = to_float(w.b.v[j]) * (b.v[j] * rstd);
            }
            if (p.normed) {
                X* out = p.normed + r * (Q + 2 * KV) + i;
                store_pack<N>(out, a);
                store_pack<N>(out + half, b);
            }
        }
        for (int j = 0; j < N; j++) {
            const float c = cs[e + j], s = cs[half + e + j];
            lo.v[j] = a.v[j] * c - b.v[j] * s;
            hi.v[j] = b.v[j] * c + a.v[j] * s;
        }
    };
    for (int t = t0; t < heads * half / N; t += gridDim.y * blockDim.x) {
        const int head = t * N / half, e = t * N % half, i = head * p.head_dim + e;
        Pack<float, N> lo, hi;
        values(head, e, lo, hi, t == t0 && early);
        if constexpr (kFp8) {
            store_pack<N>(p.q_out + r * Q + i, lo), store_pack<N>(p.q_out + r * Q + i + half, hi);
        } else {
            T* dst = head < p.n_heads ? p.q_out + r * Q + i
                   : head < p.n_heads + p.n_kv_heads ? p.k_cache + row * KV + (i - Q) : p.v_cache + row * KV + (i - Q - KV);
            store_pack<N>(dst, lo);
            store_pack<N>(dst + half, hi);
        }
    }
    if constexpr (kFp8) store_kv_heads_fp8<N>(p, row, values);   // the warps' share
}

// sumsq[r] = (Σ q², Σ k²) over token r's q part [Q] and k part [KV] of qkv (one block per token).
template <typename X, int N, bool SCALED>
__global__ void qk_sumsq_kernel(float2* sumsq, const X* qkv, PendingScale scale, int Q, int KV) {
    const ScaledRow<X, SCALED> x(qkv, blockIdx.x, Q + 2 * KV, scale);
    const float2 s = row_sumsq2<N>(x, Q, x.from(Q), KV);
    if (threadIdx.x == 0) sumsq[blockIdx.x] = s;
}

// sumsq [rows] of qkv [rows, Q + 2KV] (X: T or fp32, with the scales an FP8 GEMM left pending).
template <typename X>
void qk_sumsq(float2* sumsq, const X* qkv, PendingScale scale, int rows, int Q, int KV, cudaStream_t stream) {
    if (rows == 0) return;
    const bool packed = Q % 4 == 0 && KV % 4 == 0 && aligned(qkv, 4 * sizeof(X));
    with_flag(scale.row != nullptr, [&](auto scaled) {
        constexpr bool S = decltype(scaled)::value;
        if (packed) qk_sumsq_kernel<X, 4, S><<<rows, 256, 0, stream>>>(sumsq, qkv, scale, Q, KV);
        else qk_sumsq_kernel<X, 1, S><<<rows, 256, 0, stream>>>(sumsq, qkv, scale, Q, KV);
    });
    cudaCheckLaunch();
}

template <typename T, typename X, typename C> void rope_qkv(const RopeParams<T, X, C>& p, cudaStream_t stream) {
    const int half = p.head_dim / 2, pairs = (p.n_heads + 2 * p.n_kv_heads) * half;
    if (p.rows == 0 || pairs == 0) return;
    constexpr int threads = 256;
    if (p.head_dim % 2 != 0 || p.head_dim / 2 > threads)
        fail("rope_qkv: head_dim " + std::to_string(p.head_dim) + " is odd or above " + std::to_string(2 * threads));
    if (kFp8Cache<C> && (p.head_dim > 256 || !p.k_scale || !p.v_scale || p.block_size <= 0))
        fail("rope_qkv: an FP8 cache takes head_dim up to 256 (got " + std::to_string(p.head_dim) + "), its scales and block size");
    // A few tokens (decode): each token's pairs spread over several blocks, each block repeating
    // the two short reductions. Many tokens (prefill): one block per token. Writing the
    // normalized q|k back in place: one block per token too, so that the row's sums are
    // complete before any of it is overwritten (blocks of a grid do not wait for each other).
    const bool split = p.rows < 128 && p.normed == nullptr;
    const bool packed = half % 4 == 0 && aligned(p.qkv, 4 * sizeof(X)) && aligned(p.q_out, 4 * sizeof(T)) &&
                        aligned(p.k_cache, 4 * sizeof(C)) && aligned(p.v_cache, 4 * sizeof(C)) &&
                        aligned(p.q_norm, 4 * sizeof(T)) && aligned(p.k_norm, 4 * sizeof(T)) &&
                        aligned(p.normed, 4 * sizeof(X));
    const int N = packed ? 4 : 1, packs = pairs / N;
    // Split, an FP8 cache's grid has a warp for each K/V head besides the query heads' threads.
    const int split_threads = kFp8Cache<C> ? (rope_query_warps(p, N) + 2 * p.n_kv_heads) * 32 : packs;
    const dim3 grid(p.rows, split ? (split_threads + threads - 1) / threads : 1);
    const size_t smem = p.head_dim * sizeof(float);
    with_flag(p.scale.row != nullptr, [&](auto scaled) {
        constexpr bool S = decltype(scaled)::value;
        if (packed) launch_dependent(rope_qkv_kernel<T, X, C, 4, S>, grid, dim3(threads), (int)smem, stream, p);
        else launch_dependent(rope_qkv_kernel<T, X, C, 1, S>, grid, dim3(threads), (int)smem, stream, p);
    });
    cudaCheckLaunch();
}

}  // namespace olmo
