// norm.cuh: row normalizations, one thread block per row.
// defines: layernorm, rmsnorm, add_layernorm, add_rmsnorm
//
//   layernorm      out = (x - mean) / sqrt(var + eps)             OLMo-1: no weight, no bias
//   rmsnorm        out = w * (x / sqrt(mean(x²) + eps))           OLMo-2/3 (also QK-norm)
//   add_layernorm  x += y;  xn = layernorm(x)                      OLMo-1 residual + next norm
//   add_rmsnorm    x += w * (y / sqrt(mean(y²) + eps)); xb = x     OLMo-2/3 post-norm residual
// Types: inputs x, y in T or fp32 (the engine passes the fp32 residual and fp32 GEMM outputs,
// whose FP8 scales the add_* kernels may apply as they read: elementwise.cuh ScaledRow);
// weights w in T; outputs xn, xb in T, or in another 16-bit type of their own (add_rmsnorm,
// rmsnorm: the FP8 engine's products read fp16, cuda_engine.cu); add_*'s residual x is fp32;
// rmsnorm's out is T or fp32 (the QK-norm runs in place on the engine's fp32 qkv).
//
// The residual stream x is kept in fp32 whatever the storage type T of weights and other
// activations (as llama.cpp does): it carries the sum of every layer's output, and rounding
// it to bf16 after each add is the largest error source of a bf16 forward. The fused kernels
// hand the next GEMM its input in T (xn, or xb = x rounded once).
//
// A block walks its row in Packs of N elements (N = kVec<T> when the row length, strides and
// pointers allow, else N = 1), each thread always taking the same packs, so a thread only ever
// re-reads what it wrote itself. Sums are reduced with warp shuffles and shared memory
// (block_reduce); the row is read again from cache for each pass instead of being held in
// registers. LayerNorm takes two passes over x for the statistics (mean, then the squared
// deviations from it) as the CPU reference does, which stays accurate when |mean| >> std.
// All math in fp32; each output is rounded once. rmsnorm and add_rmsnorm follow the
// operation order of cpu::rmsnorm: w * (x * rstd).
// Every kernel lets the kernel behind it in the stream launch at once (allow_dependent_launch):
// one launched as a dependent (fp8_gemv) then streams its weights while we run, and waits for
// our output before it reads it; an ordinary launch still waits for us to finish. add_rmsnorm
// and rmsnorm are themselves launched as dependents of the kernel ahead: they ask L2 for what
// it does not write (add_rmsnorm's residual row and weight, rmsnorm's weight: prefetch_l2), and
// then wait for it. add_rmsnorm can instead hold the kernel behind until its own wait is over
// (`hold`): the engine does so after the o product, which itself lets the norm launch early
// (fp8.cuh), so that gate|up does not start its weights while o still streams. Of the ways
// measured (docs/fp8.md, "Session 35"), holding there and not after the down product is the
// one that made FP8 decode faster at the 1B, 7B and 32B shapes alike.
#pragma once
#include "cuda_common.cuh"
#include "elementwise.cuh"

namespace olmo {

// Sum over one row of f(x_j), where x_j are the row's elements as fp32. All threads get it.
// A thread loads up to B of its packs before it adds any of them: one wait for memory per B
// packs instead of one per pack (a short row is latency: decode's QK-norm sums 16 KB rows).
// The additions keep the order of a plain loop.
template <int N, typename Row, typename F> __device__ float row_sum(const Row& row, int H, F f) {
    constexpr int B = 4;
    const int packs = H / N;
    float s = 0.0f;
    for (int i0 = threadIdx.x; i0 < packs; i0 += B * blockDim.x) {
        decltype(row.template raw<N>(0)) p[B];
        for (int b = 0; b < B; b++)
            if (i0 + b * (int)blockDim.x < packs) p[b] = row.template raw<N>((int64_t)(i0 + b * blockDim.x) * N);
        for (int b = 0; b < B; b++)
            if (i0 + b * (int)blockDim.x < packs) {
                const Pack<float, N> v = row.template to_fp32<N>(p[b], (int64_t)(i0 + b * blockDim.x) * N);
                for (int j = 0; j < N; j++) s += f(v.v[j]);
            }
    }
    return block_reduce(s, SumOp{});
}

// 1 / sqrt(mean(x²) + eps) over one row of H elements: the RMSNorm factor. All threads get it.
template <int N, typename Row> __device__ float rms_rstd(const Row& row, int H, float eps) {
    return 1.0f / sqrtf(row_sum<N>(row, H, [](float v) { return v * v; }) / H + eps);
}

// The sums of squares of two rows at once (the QK-norm's q and k parts of one token): each
// thread's loads of both rows go out before any of them is added, so the two sums wait for
// memory once. Each sum's additions are row_sum's, in the same order. All threads get them.
template <int N, typename Row> __device__ float2 row_sumsq2(const Row& a, int Ha, const Row& b, int Hb) {
    constexpr int B = 4;
    const int pa = Ha / N, pb = Hb / N;
    float sa = 0.0f, sb = 0.0f;
    for (int i0 = threadIdx.x; i0 < max(pa, pb); i0 += B * blockDim.x) {
        decltype(a.template raw<N>(0)) ra[B], rb[B];
        for (int k = 0; k < B; k++) {
            const int i = i0 + k * blockDim.x;
            if (i < pa) ra[k] = a.template raw<N>((int64_t)i * N);
            if (i < pb) rb[k] = b.template raw<N>((int64_t)i * N);
        }
        for (int k = 0; k < B; k++) {
            const int i = i0 + k * blockDim.x;
            if (i < pa) {
                const Pack<float, N> v = a.template to_fp32<N>(ra[k], (int64_t)i * N);
                for (int j = 0; j < N; j++) sa += v.v[j] * v.v[j];
            }
            if (i < pb) {
                const Pack<float, N> v = b.template to_fp32<N>(rb[k], (int64_t)i * N);
                for (int j = 0; j < N; j++) sb += v.v[j] * v.v[j];
            }
        }
    }
    return {block_reduce(sa, SumOp{}), block_reduce(sb, SumOp{})};
}

// rms_rstd of two rows at once (row_sumsq2): bit for bit rms_rstd's factors.
template <int N, typename Row> __device__ float2 rms_rstd2(const Row& a, int Ha, const Row& b, int Hb, float eps) {
    const float2 s = row_sumsq2<N>(a, Ha, b, Hb);
    return {1.0f / sqrtf(s.x / Ha + eps), 1.0f / sqrtf(s.y / Hb + eps)};
}

// out_row (T) = (x_row - mean) * rstd over one row; x_row may be fp32 (the residual stream).
template <int N, typename T, typename X> __device__ void layernorm_row(T* out_row, const X* x_row, int H, float eps) {
    const ScaledRow<X> x(x_row, 0, 0);   // (no scales)
    const float mean = row_sum<N>(x, H, [](float v) { return v; }) / H;
    const float var = row_sum<N>(x, H, [mean](float v) { return (v - mean) * (v - mean); }) / H;
    const float rstd = 1.0f / sqrtf(var + eps);
    for (int i = threadIdx.x; i < H / N; i += blockDim.x) {
        const Pack<float, N> in = x.template load<N>((int64_t)i * N);
        Pack<T, N> o;
        for (int j = 0; j < N; j++) o.v[j] = from_float<T>((in.v[j] - mean) * rstd);
        reinterpret_cast<Pack<T, N>*>(out_row)[i] = o;
    }
}

template <typename T, typename X, int N> __global__ void layernorm_kernel(T* out, const X* x, int H, float eps) {
    allow_dependent_launch();   // see the file comment
    layernorm_row<N>(out + (int64_t)blockIdx.x * H, x + (int64_t)blockIdx.x * H, H, eps);
}

// x (fp32 residual) += y (T or fp32, ys pending); xn = LayerNorm(x) in T.
template <typename T, typename Y, int N, bool SCALED>
__global__ void add_layernorm_kernel(float* x, const Y* y, PendingScale ys, T* xn, int H, float eps) {
    allow_dependent_launch();   // see the file comment
    using PX = Pack<float, N>;
    float* x_row = x + (int64_t)blockIdx.x * H;
    const ScaledRow<Y, SCALED> y_row(y, blockIdx.x, H, ys);
    for (int i = threadIdx.x; i < H / N; i += blockDim.x) {  // the residual add, in fp32
        PX a = reinterpret_cast<PX*>(x_row)[i];
        const PX b = y_row.template load<N>((int64_t)i * N);
        for (int j = 0; j < N; j++) a.v[j] += b.v[j];
        reinterpret_cast<PX*>(x_row)[i] = a;
    }
    layernorm_row<N>(xn + (int64_t)blockIdx.x * H, x_row, H, eps);  // each thread re-reads its own packs
}

// Rows of x and out are ld_in and ld_out elements apart; out may be x (in place).
template <typename O, typename X, typename T, int N>
__global__ void rmsnorm_kernel(O* out, const X* x, const T* w, int H, int64_t ld_in, int64_t ld_out, float eps) {
    allow_dependent_launch();   // see the file comment
    prefetch_l2_block(w, H * (int64_t)sizeof(T));   // not written by the kernel ahead
    grid_dependency_wait();     // launched as a dependent of the kernel that writes x
    const ScaledRow<X> x_row(x, blockIdx.x, ld_in);
    O* out_row = out + blockIdx.x * ld_out;
    const float rstd = rms_rstd<N>(x_row, H, eps);
    for (int i = threadIdx.x; i < H / N; i += blockDim.x) {
        const Pack<float, N> in = x_row.template load<N>((int64_t)i * N);
        const Pack<T, N> wp = reinterpret_cast<const Pack<T, N>*>(w)[i];
        Pack<O, N> o;
        for (int j = 0; j < N; j++) o.v[j] = from_float<O>(to_float(wp.v[j]) * (in.v[j] * rstd));
        reinterpret_cast<Pack<O, N>*>(out_row)[i] = o;
    }
}

// x (fp32 residual) += RMSNorm(y) * w, y in T or fp32 (ys pending); xb = x rounded to O (the
// next GEMM's input). hold: the kernel behind launches once our wait is over, not at our start
// (an argument, not a template parameter: a layer's two residual norms run one kernel).
template <typename T, typename O, typename Y, int N, bool SCALED>
__global__ void add_rmsnorm_kernel(float* x, const Y* y, PendingScale ys, const T* w, O* xb, int H, float eps, bool hold) {
    if (!hold) allow_dependent_launch();   // see the file comment
    float* x_row = x + (int64_t)blockIdx.x * H;
    prefetch_l2_block(x_row, H * (int64_t)sizeof(float));   // not written by the product ahead
    prefetch_l2_block(w, H * (int64_t)sizeof(T));
    grid_dependency_wait();     // launched as a dependent of the product that writes y
    if (hold) allow_dependent_launch();
    using PX = Pack<float, N>;
    using P = Pack<T, N>;
    using PO = Pack<O, N>;
    const ScaledRow<Y, SCALED> y_row(y, blockIdx.x, H, ys);
    auto apply = [&](int i, PX a, const PX& b, const P& wp, float rstd) {   // pack i: x += w · (y · rstd)
        PO o;
        for (int j = 0; j < N; j++) {
            a.v[j] += to_float(wp.v[j]) * (b.v[j] * rstd);
            o.v[j] = from_float<O>(a.v[j]);
        }
        reinterpret_cast<PX*>(x_row)[i] = a;
        reinterpret_cast<PO*>(xb + (int64_t)blockIdx.x * H)[i] = o;
    };
    if (H / N <= (int)blockDim.x) {   // a pack per thread (row_threads, up to 512 packs): y, x and w read once, together
        const int i = threadIdx.x;
        const bool mine = i < H / N;
        PX a = {}, b = {};
        P wp = {};
        float s = 0.0f;   // the sum of squares as row_sum adds it
        if (mine) {
            b = y_row.template load<N>((int64_t)i * N), a = reinterpret_cast<PX*>(x_row)[i], wp = reinterpret_cast<const P*>(w)[i];
            for (int j = 0; j < N; j++) s += b.v[j] * b.v[j];
        }
        const float rstd = 1.0f / sqrtf(block_reduce(s, SumOp{}) / H + eps);
        if (mine) apply(i, a, b, wp, rstd);
        return;
    }
    const float rstd = rms_rstd<N>(y_row, H, eps);
    for (int i = threadIdx.x; i < H / N; i += blockDim.x)
        apply(i, reinterpret_cast<PX*>(x_row)[i], y_row.template load<N>((int64_t)i * N), reinterpret_cast<const P*>(w)[i], rstd);
}

// ---- launchers: 16-byte packs of T (kVec<T> elements) when every row start is aligned for
// them, in T and in fp32; else one element at a time ----

template <typename T> bool packable(int64_t H, std::initializer_list<const void*> ptrs) {
    constexpr int N = kVec<T>;
    if (H % N) return false;
    for (const void* p : ptrs)
        if (reinterpret_cast<uintptr_t>(p) % (N * sizeof(float))) return false;   // fp32 rows need N*4 bytes
    return true;
}

// out [rows, H] (T) = LayerNorm(x [rows, H]), no weight or bias; x is T or fp32.
template <typename T, typename X> void layernorm(T* out, const X* x, int rows, int H, float eps, cudaStream_t stream) {
    if (rows == 0) return;
    constexpr int N = kVec<T>;
    if (packable<T>(H, {out, x}))
        layernorm_kernel<T, X, N><<<rows, row_threads(H / N), 0, stream>>>(out, x, H, eps);
    else
        layernorm_kernel<T, X, 1><<<rows, row_threads(H), 0, stream>>>(out, x, H, eps);
    cudaCheckLaunch();
}

// out[r, 0:H] = RMSNorm(x[r, 0:H]) * w for r < rows, where row r of x starts at x + r*ld_in and
// of out at out + r*ld_out: this normalizes a column range of a wider buffer (the q or k part
// of a fused qkv projection), in place when out == x. x and out are T or fp32 (the residual
// stream, the fp32 qkv projection); w is T.
template <typename O, typename X, typename T>
void rmsnorm(O* out, const X* x, const T* w, int rows, int H, int64_t ld_in, int64_t ld_out, float eps,
             cudaStream_t stream) {
    if (rows == 0) return;
    constexpr int N = kVec<T>;
    if (packable<T>(H, {out, x, w}) && ld_in % N == 0 && ld_out % N == 0)
        launch_dependent(rmsnorm_kernel<O, X, T, N>, dim3(rows), dim3(row_threads(H / N)), 0, stream, out, x, w, H, ld_in, ld_out, eps);
    else
        launch_dependent(rmsnorm_kernel<O, X, T, 1>, dim3(rows), dim3(row_threads(H)), 0, stream, out, x, w, H, ld_in, ld_out, eps);
    cudaCheckLaunch();
}

// x [rows, H] (fp32) += y (T or fp32; ys: the scales an FP8 GEMM left pending on it);
// xn [rows, H] (T) = LayerNorm(x).
template <typename T, typename Y>
void add_layernorm(float* x, const Y* y, T* xn, int rows, int H, float eps, cudaStream_t stream, PendingScale ys = {}) {
    if (rows == 0) return;
    constexpr int N = kVec<T>;
    with_flag(ys.row != nullptr, [&](auto scaled) {
        constexpr bool S = decltype(scaled)::value;
        if (packable<T>(H, {x, y, xn}))
            add_layernorm_kernel<T, Y, N, S><<<rows, row_threads(H / N), 0, stream>>>(x, y, ys, xn, H, eps);
        else
            add_layernorm_kernel<T, Y, 1, S><<<rows, row_threads(H), 0, stream>>>(x, y, ys, xn, H, eps);
    });
    cudaCheckLaunch();
}

// x [rows, H] (fp32) += RMSNorm(y [rows, H], T or fp32; ys pending as above) * w, in fp32;
// xb [rows, H] = x rounded to O (T, or another type of T's size). hold: the kernel behind may
// launch only once this one has waited for y (see the file comment).
template <typename T, typename O, typename Y>
void add_rmsnorm(float* x, const Y* y, const T* w, O* xb, int rows, int H, float eps, cudaStream_t stream,
                 PendingScale ys = {}, bool hold = false) {
    static_assert(sizeof(O) == sizeof(T), "add_rmsnorm: xb's packs are as long as w's");
    if (rows == 0) return;
    constexpr int N = kVec<T>;
    with_flag(ys.row != nullptr, [&](auto scaled) {
        constexpr bool S = decltype(scaled)::value;
        if (packable<T>(H, {x, y, w, xb}))
            launch_dependent(add_rmsnorm_kernel<T, O, Y, N, S>, dim3(rows), dim3(row_threads(H / N)), 0, stream, x, y, ys, w, xb,
                             H, eps, hold);
        else
            launch_dependent(add_rmsnorm_kernel<T, O, Y, 1, S>, dim3(rows), dim3(row_threads(H)), 0, stream, x, y, ys, w, xb, H,
                             eps, hold);
    });
    cudaCheckLaunch();
}

}  // namespace olmo
