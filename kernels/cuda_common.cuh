// cuda_common.cuh: what every CUDA file of the engine shares.
// defines: cudaCheck, cublasCheck, cudaCheckLaunch, to_float, from_float, Pack, kVec, store_pack,
//          with_flag, aligned16,
//          aligned, SumOp, MaxOp, MinOp, warp_reduce, block_reduce, grid_dependency_wait,
//          allow_dependent_launch, prefetch_l2, prefetch_l2_block, launch_with, launch_dependent,
//          allow_smem, kSmemPerSmBytes,
//          kSmemReservedBytes, kMaxSmemBytes (and, from src/device_caps.h, what the GPU offers)
//
// Errors: every CUDA / cuBLAS call is wrapped, and a failure throws olmo::Error naming
// file:line, the statement's text and the library's message. After each kernel launch,
// cudaCheckLaunch() reports a bad launch configuration; built with -DOLMO_SYNC_CHECK it also
// synchronizes the device, so a fault inside a kernel is reported at the launch that caused it
// (debugging only: slow, and not allowed while a CUDA graph is being captured).
//
// Dtypes: tensors are stored as float, __half or __nv_bfloat16 (T); kernels load with
// to_float, compute in fp32 and round once with from_float<T> (round to nearest even).
// Pack<T, N> moves N elements as one aligned load/store; kVec<T> elements make 16 bytes.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>

#include "common.h"
#include "device_caps.h"

namespace olmo {

inline void cuda_check(cudaError_t err, const char* stmt, const char* file, int line) {
    if (err != cudaSuccess)
        fail(std::string(file) + ":" + std::to_string(line) + ": " + stmt + ": " +
             cudaGetErrorString(err));
}

inline void cublas_check(cublasStatus_t status, const char* stmt, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS)
        fail(std::string(file) + ":" + std::to_string(line) + ": " + stmt + ": " +
             cublasGetStatusString(status));
}

}  // namespace olmo

#define cudaCheck(stmt) ::olmo::cuda_check((stmt), #stmt, __FILE__, __LINE__)
#define cublasCheck(stmt) ::olmo::cublas_check((stmt), #stmt, __FILE__, __LINE__)
#ifdef OLMO_SYNC_CHECK
#define cudaCheckLaunch()                      \
    do {                                       \
        cudaCheck(cudaGetLastError());         \
        cudaCheck(cudaDeviceSynchronize());    \
    } while (0)
#else
#define cudaCheckLaunch() cudaCheck(cudaGetLastError())
#endif

namespace olmo {

// ---- dtype conversions (host and device) ----

__host__ __device__ inline float to_float(float x) { return x; }
__host__ __device__ inline float to_float(__half x) { return __half2float(x); }
__host__ __device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __host__ __device__ T from_float(float x);
template <> __host__ __device__ inline float from_float<float>(float x) { return x; }
template <> __host__ __device__ inline __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __host__ __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// ---- vectorized access ----

// N consecutive elements loaded or stored with one instruction (16 bytes when N == kVec<T>).
template <typename T, int N> struct alignas(sizeof(T) * N) Pack {
    T v[N];
};
template <typename T> constexpr int kVec = 16 / sizeof(T);

// N fp32 values stored at dst as one Pack of T, each rounded once.
template <int N, typename T> __device__ __forceinline__ void store_pack(T* dst, const Pack<float, N>& f) {
    Pack<T, N> o;
    for (int j = 0; j < N; j++) o.v[j] = from_float<T>(f.v[j]);
    *reinterpret_cast<Pack<T, N>*>(dst) = o;
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// f(std::true_type{}) or f(std::false_type{}): a run-time flag handed to f as a compile-time one
// (a launcher picking between two instances of a kernel).
template <typename F> void with_flag(bool flag, F f) {
    if (flag) f(std::true_type{});
    else f(std::false_type{});
}
inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// ---- launches with attributes; programmatic dependent launch (griddepcontrol) ----

// kernel<<<grid, block, smem, stream>>>(args...) with n launch attributes (a cluster shape, a
// programmatic dependent launch; n may be 0).
template <typename... Params, typename... Args>
void launch_with(cudaLaunchAttribute* attrs, int n, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                 cudaStream_t stream, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attrs;
    cfg.numAttrs = n;
    cudaCheck(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may start before
// the kernel ahead of it in the stream finishes, once that one allows it (or exits):
// grid_dependency_wait() blocks until the kernel ahead has finished and its writes are visible;
// allow_dependent_launch() lets the kernel behind start early (it must wait before reading us).
// Before sm_90 there are no dependent launches (device_caps().pdl is false): the kernel ahead
// has finished when a kernel starts, and both are no-ops.
__device__ __forceinline__ void grid_dependency_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_launch() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}

// Asks L2 for the 128-byte line that holds p, without waiting for it: nothing is read into
// registers, and a later write to the line (by any kernel) is seen as usual, so it is only ever a
// hint. A dependent kernel asks, before its grid_dependency_wait(), for what the kernel ahead does
// not write (its weights, older rows), so that its first reads after the wait find them in L2
// instead of paying a trip to memory on the step's critical path.
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }
// Every line of bytes [p, p + bytes), spread over the block's threads.
__device__ __forceinline__ void prefetch_l2_block(const void* p, int64_t bytes) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(p) / 128 * 128, end = reinterpret_cast<uintptr_t>(p) + bytes;
    for (uintptr_t a = first + threadIdx.x * 128; a < end; a += blockDim.x * 128) prefetch_l2(reinterpret_cast<const void*>(a));
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent launch where
// the GPU has them (device_caps().pdl), else as a plain one: its blocks may start before the
// previous kernel in the stream has finished, and must execute grid_dependency_wait() before
// touching what that kernel writes.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, int smem, cudaStream_t stream, Args... args) {
    cudaLaunchAttribute pdl;
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    launch_with(&pdl, device_caps().pdl ? 1 : 0, kernel, grid, block, smem, stream, args...);
}

// ---- dynamic shared memory ----
// On sm_90 an SM has 228 KB of shared memory, of which each resident block takes a reserved
// 1 KB, and one block may use up to 227 KB (other GPUs allow a block less:
// device_caps().smem_per_block). A kernel gets more than the default 48 KB of dynamic shared
// memory only after it opts in: allow_smem<kernel>(bytes), once per kernel and GPU (the
// attribute is the current device's; the first call's bytes stay). Threads driving different
// GPUs (--tp) may call it at once.
constexpr int kSmemPerSmBytes = 228 * 1024, kSmemReservedBytes = 1024, kMaxSmemBytes = 227 * 1024;

template <auto Kernel>
void allow_smem(int bytes) {
    static std::mutex m;
    static uint64_t done = 0;   // bit d: done on device d
    int device = 0;
    cudaCheck(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(m);
    if (device < 64 && (done >> device & 1)) return;
    cudaCheck(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    if (device < 64) done |= uint64_t(1) << device;
}

// ---- reductions (blockDim.x must be a multiple of 32) ----

struct SumOp {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
    template <typename T> __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
struct MinOp {
    template <typename T> __device__ T operator()(T a, T b) const { return a < b ? a : b; }
};

// Butterfly over the 32 lanes: every lane ends with op over the whole warp.
template <typename T, typename Op> __device__ T warp_reduce(T v, Op op) {
    for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Every thread of the block gets op over all threads' v: each warp reduces, lane 0 parks the
// warp's result in shared memory, then every thread combines the partials in warp order (the
// same order on every run, so results are deterministic).
template <typename T, typename Op> __device__ T block_reduce(T v, Op op) {
    __shared__ T partial[32];
    v = warp_reduce(v, op);
    __syncthreads();  // a previous call may still be reading `partial`
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    // The warps' values are combined in warp order, loaded 8 at a time before any of them is
    // combined: one wait for shared memory per 8 warps, not one per warp (a norm's last step).
    constexpr int kBatch = 8;
    const int warps = blockDim.x / 32;
    for (int w0 = 0; w0 < warps; w0 += kBatch) {
        T p[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; j++)
            if (w0 + j < warps) p[j] = partial[w0 + j];
#pragma unroll
        for (int j = 0; j < kBatch; j++)
            if (w0 + j < warps) v = w0 + j == 0 ? p[0] : op(v, p[j]);
    }
    return v;
}

}  // namespace olmo
