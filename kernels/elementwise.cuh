// elementwise.cuh: the memory-bound ops with no reduction.
// defines: embedding, swiglu, clip, convert
//
//   embedding  out[r, :] = table[ids[r], :]                      one block per row, a plain copy
//   swiglu     out[r, i] = silu(gu[r, i]) * gu[r, I + i]          silu(g) = g / (1 + exp(-g))
//   clip       x = clamp(x, -c, c)                                OLMo-1 clip_qkv, in place
//   convert    out = in, from one dtype to another                 e.g. embeddings into the fp32 residual
// swiglu reads gu in T or fp32 (the engine passes its fp32 GEMM output) and writes T; clip runs
// on any type (the engine's fp32 qkv).
//
// Each thread moves a Pack of N elements: N = kVec<T> (16 bytes of T; an fp32 input pack is
// N floats) when the row length and every pointer allow aligned accesses, else N = 1. Math in
// fp32, one rounding per output. swiglu lets the kernel behind it launch at once, as the norms
// do (norm.cuh says why).
#pragma once
#include <algorithm>

#include "cuda_common.cuh"

namespace olmo {

// Threads for a block that walks one row of `packs` packs: about one pack per thread.
inline int row_threads(int packs) { return std::min(512, (packs + 31) / 32 * 32); }

// Blocks for a grid-stride loop over n items with `threads` threads per block.
inline int grid_blocks(int64_t n, int threads) {
    return (int)std::min<int64_t>((n + threads - 1) / threads, 1 << 16);
}

// ---- embedding ----

template <typename T, int N>
__global__ void embedding_kernel(T* out, const T* table, const int* ids, int H) {
    using P = Pack<T, N>;
    const P* src = reinterpret_cast<const P*>(table + (int64_t)ids[blockIdx.x] * H);
    P* dst = reinterpret_cast<P*>(out + (int64_t)blockIdx.x * H);
    for (int i = threadIdx.x; i < H / N; i += blockDim.x) dst[i] = src[i];
}

// out [rows, H] = table [V, H] rows picked by ids [rows] (device).
template <typename T>
void embedding(T* out, const T* table, const int* ids, int rows, int H, cudaStream_t stream) {
    if (rows == 0) return;
    constexpr int N = kVec<T>;
    if (H % N == 0 && aligned16(out) && aligned16(table))
        embedding_kernel<T, N><<<rows, row_threads(H / N), 0, stream>>>(out, table, ids, H);
    else
        embedding_kernel<T, 1><<<rows, row_threads(H), 0, stream>>>(out, table, ids, H);
    cudaCheckLaunch();
}

// ---- swiglu ----

template <typename T, typename X, int N>
__global__ void swiglu_kernel(T* out, const X* gu, int rows, int I) {
    allow_dependent_launch();   // see the file comment
    using P = Pack<X, N>;
    const int packs_per_row = I / N;
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < (int64_t)rows * packs_per_row;
         p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = p / packs_per_row, c = p % packs_per_row;
        const P gate = reinterpret_cast<const P*>(gu + r * 2 * I)[c];
        const P up = reinterpret_cast<const P*>(gu + r * 2 * I + I)[c];
        Pack<T, N> o;
        for (int j = 0; j < N; j++) {
            const float g = to_float(gate.v[j]);
            o.v[j] = from_float<T>(g / (1.0f + expf(-g)) * to_float(up.v[j]));
        }
        reinterpret_cast<Pack<T, N>*>(out + r * I)[c] = o;
    }
}

// out [rows, I] (T) = silu(gate) * up, with gu [rows, 2I] = gate | up (T or fp32).
template <typename T, typename X> void swiglu(T* out, const X* gu, int rows, int I, cudaStream_t stream) {
    if (rows == 0 || I == 0) return;
    constexpr int N = kVec<T>, threads = 256;
    if (I % N == 0 && aligned(out, N * sizeof(T)) && aligned(gu, N * sizeof(X)))
        swiglu_kernel<T, X, N><<<grid_blocks((int64_t)rows * I / N, threads), threads, 0, stream>>>(out, gu, rows, I);
    else
        swiglu_kernel<T, X, 1><<<grid_blocks((int64_t)rows * I, threads), threads, 0, stream>>>(out, gu, rows, I);
    cudaCheckLaunch();
}

// ---- clip ----

template <typename T, int N> __global__ void clip_kernel(T* x, int64_t packs, float c) {
    using P = Pack<T, N>;
    P* xp = reinterpret_cast<P*>(x);
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < packs; p += (int64_t)gridDim.x * blockDim.x) {
        P v = xp[p];
        for (int j = 0; j < N; j++) v.v[j] = from_float<T>(fminf(fmaxf(to_float(v.v[j]), -c), c));
        xp[p] = v;
    }
}

// x [n] = clamp(x, -c, c), in place.
template <typename T> void clip(T* x, int64_t n, float c, cudaStream_t stream) {
    if (n == 0) return;
    constexpr int N = kVec<T>, threads = 256;
    if (n % N == 0 && aligned16(x))
        clip_kernel<T, N><<<grid_blocks(n / N, threads), threads, 0, stream>>>(x, n / N, c);
    else
        clip_kernel<T, 1><<<grid_blocks(n, threads), threads, 0, stream>>>(x, n, c);
    cudaCheckLaunch();
}

// ---- convert ----

template <typename O, typename I> __global__ void convert_kernel(O* out, const I* in, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = from_float<O>(to_float(in[i]));
}

// out [n] (O) = in [n] (I), one rounding.
template <typename O, typename I> void convert(O* out, const I* in, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    constexpr int threads = 256;
    convert_kernel<O, I><<<grid_blocks(n, threads), threads, 0, stream>>>(out, in, n);
    cudaCheckLaunch();
}

}  // namespace olmo
