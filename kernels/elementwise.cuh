// elementwise.cuh: the memory-bound ops with no reduction.
// defines: ScaledRow, embedding, silu_times, swiglu, clip, copy_rows, convert
//
//   embedding  out[r, :] = table[ids[r], :]; x[r, :] = the same   one block per row, a copy in O
//                                                                  and one in fp32 (the residual)
//   swiglu     out[r, i] = silu(gu[r, i]) * gu[r, I + i]          silu(g) = g / (1 + exp(-g))
//   clip       x = clamp(x, -c, c)                                OLMo-1 clip_qkv, in place
//   copy_rows  dst[dst_rows[i], :] = src[src_rows[i], :]          one block per row; context parallel's K/V exchange
//   convert    out = in, from one dtype to another                 e.g. embeddings into the fp32 residual
// swiglu reads gu in T or fp32 (the engine passes its fp32 GEMM output, whose FP8 scales may
// still be pending: ScaledRow) and writes T; clip runs on any type (the engine's fp32 qkv).
//
// Each thread moves a Pack of N elements: N = kVec<T> (16 bytes of T; an fp32 input pack is
// N floats) when the row length and every pointer allow aligned accesses, else N = 1. Math in
// fp32, one rounding per output. swiglu lets the kernel behind it launch at once, as the norms
// do (norm.cuh says why).
#pragma once
#include <algorithm>

#include "cuda_common.cuh"
#include "fp8.h"

namespace olmo {

// Threads for a block that walks one row of `packs` packs: about one pack per thread.
inline int row_threads(int packs) { return std::min(512, (packs + 31) / 32 * 32); }

// Blocks for a grid-stride loop over n items with `threads` threads per block.
inline int grid_blocks(int64_t n, int threads) {
    return (int)std::min<int64_t>((n + threads - 1) / threads, 1 << 16);
}

// ---- reading a GEMM output ----

// Row r of a matrix y [rows, ld] (T or fp32) read as fp32, with the scales an FP8 GEMM left
// pending applied (fp8.h PendingScale; none for any other matrix): element c is
// y[r, c] * (row[r] * col[c]), the very product the GEMM's own scale pass would have stored.
// load<N>(c) reads elements [c, c + N) with one Pack load (c a multiple of N); it is raw<N>(c)
// then to_fp32(raw, c), for a loop that puts several loads in flight before using them.
// SCALED is whether s has scales (the launchers pick the kernel: with_flag), so that a kernel
// reading a final y carries no trace of them.
template <typename X, bool SCALED = false> struct ScaledRow {
    const X* y;
    const float* col;   // SCALED: col[c] is column c's scale
    float row_scale;
    __device__ ScaledRow(const X* m, int64_t r, int64_t ld, PendingScale s = {})
        : y(m + r * ld), col(s.col), row_scale(SCALED ? s.row[r] : 1.0f) {}
    // The same row seen from column c on.
    __device__ ScaledRow from(int64_t c) const {
        ScaledRow v = *this;
        v.y += c;
        v.col += SCALED ? c : 0;
        return v;
    }
    template <int N> __device__ Pack<X, N> raw(int64_t c) const { return *reinterpret_cast<const Pack<X, N>*>(y + c); }
    template <int N> __device__ Pack<float, N> to_fp32(const Pack<X, N>& p, int64_t c) const {
        Pack<float, N> f;
        for (int j = 0; j < N; j++) f.v[j] = to_float(p.v[j]);
        if constexpr (SCALED)   // (__fmul_rn: rounded here, never fused into an add that follows)
            for (int j = 0; j < N; j++) f.v[j] = __fmul_rn(f.v[j], row_scale * col[c + j]);
        return f;
    }
    template <int N> __device__ Pack<float, N> load(int64_t c) const { return to_fp32<N>(raw<N>(c), c); }
};

// ---- embedding ----

template <typename O, typename T, int N>
__global__ void embedding_kernel(O* out, float* x, const T* table, const int* ids, int H) {
    using P = Pack<T, N>;
    using PO = Pack<O, N>;
    using PX = Pack<float, N>;
    // A step fed its ids by the step before (pipelined decode) may get a sampler's -1 (non-finite
    // logits): it reads row 0, and the engine drops that step. Host ids are checked on upload.
    const int id = max(ids[blockIdx.x], 0);
    const P* src = reinterpret_cast<const P*>(table + (int64_t)id * H);
    PO* dst = reinterpret_cast<PO*>(out + (int64_t)blockIdx.x * H);
    PX* dst_x = reinterpret_cast<PX*>(x + (int64_t)blockIdx.x * H);
    for (int i = threadIdx.x; i < H / N; i += blockDim.x) {
        const P p = src[i];
        PO o;
        PX f;
        for (int j = 0; j < N; j++) f.v[j] = to_float(p.v[j]), o.v[j] = from_float<O>(f.v[j]);
        dst[i] = o;
        dst_x[i] = f;
    }
}

// out [rows, H] (O: T, or another type of T's size) = table [V, H] rows picked by ids [rows]
// (device), and x [rows, H] the same rows in fp32: a forward's first GEMM input and its fp32
// residual stream.
template <typename O, typename T>
void embedding(O* out, float* x, const T* table, const int* ids, int rows, int H, cudaStream_t stream) {
    static_assert(sizeof(O) == sizeof(T), "embedding: out's packs are as long as the table's");
    if (rows == 0) return;
    constexpr int N = kVec<T>;
    if (H % N == 0 && aligned16(out) && aligned16(table) && reinterpret_cast<uintptr_t>(x) % (N * sizeof(float)) == 0)
        embedding_kernel<O, T, N><<<rows, row_threads(H / N), 0, stream>>>(out, x, table, ids, H);
    else
        embedding_kernel<O, T, 1><<<rows, row_threads(H), 0, stream>>>(out, x, table, ids, H);
    cudaCheckLaunch();
}

// ---- swiglu ----

// silu(gate) · up, the one formula of every SwiGLU on the GPU (fp8_gemv's epilogue too).
__device__ __forceinline__ float silu_times(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

template <typename T, typename X, int N, bool SCALED>
__global__ void swiglu_kernel(T* out, const X* gu, PendingScale s, int rows, int I) {
    allow_dependent_launch();   // see the file comment
    grid_dependency_wait();     // launched as a dependent of the product that writes gu
    const int packs_per_row = I / N;
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < (int64_t)rows * packs_per_row;
         p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = p / packs_per_row, c = p % packs_per_row * N;
        const ScaledRow<X, SCALED> row(gu, r, 2 * I, s);
        const Pack<float, N> gate = row.template load<N>(c), up = row.template load<N>(I + c);
        Pack<T, N> o;
        for (int j = 0; j < N; j++) o.v[j] = from_float<T>(silu_times(gate.v[j], up.v[j]));
        reinterpret_cast<Pack<T, N>*>(out + r * I)[c / N] = o;
    }
}

// out [rows, I] (T) = silu(gate) * up, with gu [rows, 2I] = gate | up (T or fp32; s: the scales
// an FP8 GEMM left pending on it).
template <typename T, typename X>
void swiglu(T* out, const X* gu, int rows, int I, cudaStream_t stream, PendingScale s = {}) {
    if (rows == 0 || I == 0) return;
    constexpr int N = kVec<T>, threads = 256;
    with_flag(s.row != nullptr, [&](auto scaled) {
        constexpr bool S = decltype(scaled)::value;
        if (I % N == 0 && aligned(out, N * sizeof(T)) && aligned(gu, N * sizeof(X)))
            launch_dependent(swiglu_kernel<T, X, N, S>, dim3(grid_blocks((int64_t)rows * I / N, threads)), dim3(threads), 0, stream, out, gu, s, rows, I);
        else
            launch_dependent(swiglu_kernel<T, X, 1, S>, dim3(grid_blocks((int64_t)rows * I, threads)), dim3(threads), 0, stream, out, gu, s, rows, I);
    });
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

// ---- copy_rows ----

// dst row (dst_rows ? dst_rows[i] : i) = src row (src_rows ? src_rows[i] : i) for i < n, rows of
// `width` elements; a row index of -1 on either side skips row i. One block per row.
template <typename T> __global__ void copy_rows_kernel(T* dst, const T* src, const int* dst_rows, const int* src_rows,
                                                       int width) {
    const int i = blockIdx.x;
    const int d = dst_rows ? dst_rows[i] : i, s = src_rows ? src_rows[i] : i;
    if (d < 0 || s < 0) return;
    for (int c = threadIdx.x; c < width; c += blockDim.x) dst[(int64_t)d * width + c] = src[(int64_t)s * width + c];
}

// Rows [n, width] between a paged pool and a packed buffer (context parallel's K/V exchange):
// dst[dst_rows[i]] = src[src_rows[i]], either map null for "row i"; -1 skips a row.
template <typename T> void copy_rows(T* dst, const T* src, const int* dst_rows, const int* src_rows, int n, int width,
                                     cudaStream_t stream) {
    if (n == 0) return;
    copy_rows_kernel<T><<<n, 256, 0, stream>>>(dst, src, dst_rows, src_rows, width);
    cudaCheckLaunch();
}

// An FP8 cache's scales (fp8.h: nKV a pool row, at kv_scale_index) between the pools and a packed
// buffer [n, nKV], as copy_rows moves the codes: a rows map names pool rows, a null one packed
// row i; -1 skips row i. One thread per (row, KV head).
static __global__ void copy_scale_rows_kernel(float* dst, const float* src, const int* dst_rows, const int* src_rows,
                                              int n, int nKV, int block_size) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= (int64_t)n * nKV) return;
    const int i = (int)(j / nKV), h = (int)(j % nKV);
    const int d = dst_rows ? dst_rows[i] : i, s = src_rows ? src_rows[i] : i;
    if (d < 0 || s < 0) return;
    auto at = [&](const int* rows, int row) { return rows ? kv_scale_index(row, h, nKV, block_size) : (int64_t)row * nKV + h; };
    dst[at(dst_rows, d)] = src[at(src_rows, s)];
}

inline void copy_scale_rows(float* dst, const float* src, const int* dst_rows, const int* src_rows, int n, int nKV,
                            int block_size, cudaStream_t stream) {
    if (n == 0) return;
    constexpr int threads = 256;
    copy_scale_rows_kernel<<<grid_blocks((int64_t)n * nKV, threads), threads, 0, stream>>>(dst, src, dst_rows, src_rows, n,
                                                                                            nKV, block_size);
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
