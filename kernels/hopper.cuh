// hopper.cuh: the sm_90a building blocks of the Hopper prefill kernel (attention_prefill_hopper.cuh):
// PTX wrappers for mbarriers, TMA copies, warpgroup MMA and register reallocation; the
// 128-byte-swizzled panel that TMA writes and wgmma reads; the host's tensor maps.
// defines: attn::mbar_*, attn::fence_proxy_async, attn::tma_load_2d, attn::tma_load_3d,
//          attn::named_barrier_sync, attn::named_barrier_arrive, attn::setmaxnreg_inc, attn::setmaxnreg_dec, attn::wgmma_fence,
//          attn::wgmma_commit, attn::wgmma_wait, attn::wgmma_ss, attn::wgmma_rs, attn::Panels,
//          attn::tensor_map
//
// What Hopper adds to the sm_80 toolkit of tensor_core.cuh:
//   TMA       one thread asks the copy engine for a box of a tensor (up to 256 rows of 128 bytes
//             here); it lands in shared memory swizzled, and its bytes are counted on an mbarrier.
//             Addresses, bounds and strides come from a 128-byte tensor map made on the host;
//             rows outside the tensor's bounds (negative coordinates too) land as zeros.
//   mbarrier  a 64-bit barrier in shared memory. A phase completes when `count` arrivals and all
//             expected transaction bytes have come in; a thread waits for the phase of a given
//             parity. Producer and consumers pass tiles through them: "full" (TMA bytes landed)
//             and "empty" (every consumer warp done with the stage).
//   wgmma     a warpgroup (4 warps, 128 threads) computes D[64 x N] += A[64 x 16] · B[16 x N] as
//             one asynchronous instruction; A from registers or shared memory, B from shared
//             memory through a 64-bit descriptor. Warp w of the group holds rows 16w .. 16w+15
//             of D in the mma.sync accumulator layout (tensor_core.cuh), 8 columns per 4
//             registers, so the flash steps of attention_steps.cuh apply unchanged.
//   setmaxnreg  moves registers between warpgroups: the producer gives its spare ones to the
//             consumers, which hold the score and output tiles.
//
// The panel. TMA and wgmma agree on the 128-byte swizzle: a [rows, 64] slice of 16-bit values
// with 128-byte rows, 16-byte chunk c of row r stored at chunk c ^ (r % 8), the panel 1024-byte
// aligned (the swizzle repeats every 8 rows). A [rows, HD] tile is HD/64 panels one after
// another. It is read by wgmma as a "K-major" operand when the reduced dimension runs along the
// row (Q and K in Q·Kᵀ: head dims) and, with the transpose flag, as an "MN-major" one when it
// runs down the rows (V in P·V: keys).
//
// Everything here needs sm_90a ("a": wgmma and setmaxnreg exist on Hopper alone): the device
// functions exist only in that compilation, the kernel's body too (__CUDA_ARCH_FEAT_SM90_ALL),
// and it is launched only where device_caps().sm90a says that code runs.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "common.h"
#include "cuda_common.cuh"

namespace olmo {
namespace attn {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)  // the PTX below exists only on sm_90a

// ---- mbarriers ----

// Sets up the barrier at shared address `bar` for `count` arrivals per phase.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes initialized barriers visible to the async proxy (TMA) before it is used.
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Arrives once and adds `bytes` to the transaction bytes the current phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Arrives once.
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` has completed (returns at once for the phase before a
// fresh barrier's first, parity 1: a producer's first wait on an empty stage).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// ---- copies and fences ----

// Orders this thread's earlier shared-memory writes before later async-proxy reads (wgmma, TMA).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// TMA: the box of `map` at coordinates (c0, c1[, c2]) (innermost first) into shared memory at
// `dst`; its bytes complete on barrier `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
        ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}

// Barrier `id` (1..15; 0 is __syncthreads) among `threads` threads, whole warps.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrives on barrier `id` without waiting (`threads` counts the arriving and the waiting warps).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- registers ----

// Every warp of a warpgroup raises (inc) or lowers (dec) its register limit to N per thread.
template <int N> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }

// ---- wgmma ----

// Before the first wgmma that reads registers written since the last one (accumulators, A).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes the group of wgmma issued so far.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N groups are in flight.
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Tells the compiler the accumulators may have changed (wgmma writes them behind its back).
template <int R, int C> __device__ __forceinline__ void wgmma_touch(float (&d)[R][C]) {
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int j = 0; j < C; j++) asm volatile("" : "+f"(d[i][j])::"memory");
}

// The asm text of one wgmma: m64nNk16, fp32 accumulators d (operands 0 .. N/2-1), then
//   SS: A and B descriptors, scale-d (0: d = A·B, else d += A·B), both operands K-major;
//   RS: A's 4 registers, B's descriptor, scale-d, B MN-major (transposed).
// (Generated lists of operand numbers.)
#define OLMO_WGMMA_SS_64(TY) "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, " \
    "%32, %33, p, 1, 1, 0, 0;\n}\n"
#define OLMO_WGMMA_RS_64(TY) "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, " \
    "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
#define OLMO_WGMMA_SS_128(TY) "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, " \
    "%64, %65, p, 1, 1, 0, 0;\n}\n"
#define OLMO_WGMMA_RS_128(TY) "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, " \
    "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
#define OLMO_WGMMA_SS_256(TY) "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " " \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, " \
    "%128, %129, p, 1, 1, 0, 0;\n}\n"
#define OLMO_WGMMA_RS_256(TY) "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " " \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, " \
    "{%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"

#define OLMO_D4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define OLMO_D32(i) OLMO_D4(i), OLMO_D4(i + 1), OLMO_D4(i + 2), OLMO_D4(i + 3), OLMO_D4(i + 4), OLMO_D4(i + 5), OLMO_D4(i + 6), OLMO_D4(i + 7)
#define OLMO_D64 OLMO_D32(0), OLMO_D32(8)
#define OLMO_D128 OLMO_D32(0), OLMO_D32(8), OLMO_D32(16), OLMO_D32(24)

// d[64 x N] (+)= A[64 x 16] · B[16 x N], A and B K-major in shared memory (descriptors a, b).
// The flags are immediates, so no register is shared between a wgmma in flight and other code.
template <typename T, int N, bool ACCUMULATE>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t a, uint64_t b) {
    static_assert(N == 64 || N == 128, "the SS shapes the kernel uses");
    constexpr int acc = ACCUMULATE;
    if constexpr (N == 64 && std::is_same_v<T, __half>) asm volatile(OLMO_WGMMA_SS_64("f16") : OLMO_D32(0) : "l"(a), "l"(b), "n"(acc));
    else if constexpr (N == 64) asm volatile(OLMO_WGMMA_SS_64("bf16") : OLMO_D32(0) : "l"(a), "l"(b), "n"(acc));
    else if constexpr (std::is_same_v<T, __half>) asm volatile(OLMO_WGMMA_SS_128("f16") : OLMO_D64 : "l"(a), "l"(b), "n"(acc));
    else asm volatile(OLMO_WGMMA_SS_128("bf16") : OLMO_D64 : "l"(a), "l"(b), "n"(acc));
}

// d[64 x N] += A[64 x 16] · B[16 x N], A in registers (the mma.sync A fragment of the warp's
// 16 rows), B MN-major in shared memory (descriptor b).
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b) {
    static_assert(N == 64 || N == 128 || N == 256, "the RS shapes the kernel uses");
    constexpr int acc = 1;
#define OLMO_A "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(acc)
    if constexpr (N == 64 && std::is_same_v<T, __half>) asm volatile(OLMO_WGMMA_RS_64("f16") : OLMO_D32(0) : OLMO_A);
    else if constexpr (N == 64) asm volatile(OLMO_WGMMA_RS_64("bf16") : OLMO_D32(0) : OLMO_A);
    else if constexpr (N == 128 && std::is_same_v<T, __half>) asm volatile(OLMO_WGMMA_RS_128("f16") : OLMO_D64 : OLMO_A);
    else if constexpr (N == 128) asm volatile(OLMO_WGMMA_RS_128("bf16") : OLMO_D64 : OLMO_A);
    else if constexpr (std::is_same_v<T, __half>) asm volatile(OLMO_WGMMA_RS_256("f16") : OLMO_D128 : OLMO_A);
    else asm volatile(OLMO_WGMMA_RS_256("bf16") : OLMO_D128 : OLMO_A);
#undef OLMO_A
}
#undef OLMO_D4
#undef OLMO_D32
#undef OLMO_D64
#undef OLMO_D128

#endif  // sm_90a or host

// ---- the panel layout ----

// A [ROWS, HD] tile of 16-bit values as HD/64 swizzled panels of ROWS x 128 bytes (see above).
template <int ROWS, int HD>
struct Panels {
    static_assert(HD % 64 == 0 && ROWS % 8 == 0, "whole panels of whole swizzle atoms");
    static constexpr int kPanelBytes = ROWS * 128, kBytes = kPanelBytes * (HD / 64);
    uint32_t base;  // shared address, 1024-byte aligned
    __device__ uint32_t panel(int i) const { return base + i * kPanelBytes; }
    // The descriptor of the K-major operand at (row, dim) (row % 8 == 0, dim % 16 == 0): 8-row
    // groups 1024 bytes apart; the next 16 dims of a panel are 32 bytes further along its rows.
    __device__ uint64_t kmajor(int row, int dim) const {
        return descriptor(panel(dim / 64) + row * 128 + dim % 64 * 2, 16);
    }
    // The descriptor of the MN-major operand of rows (keys) row .. row+15: 8-row groups 1024 bytes
    // apart, and the next 64 columns (dims) a panel further on.
    __device__ uint64_t mnmajor(int row) const { return descriptor(base + row * 128, kPanelBytes); }
    // Start address, leading byte offset, stride byte offset 1024, 128-byte swizzle.
    static __device__ uint64_t descriptor(uint32_t addr, uint32_t lead_bytes) {
        return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)(lead_bytes >> 4) << 16 | (uint64_t)(1024 >> 4) << 32 | 1ull << 62;
    }
};

// ---- tensor maps (host) ----

// The tensor map (TMA descriptor, passed to a kernel by value as __grid_constant__) of a 16-bit tensor of `rank` dims (innermost first: sizes dims[i] elements,
// byte strides strides[i - 1] of dims 1..), read in boxes of box[i] elements with the 128-byte
// swizzle (box[0] = 64). The driver's encoder is fetched once through the runtime, so nothing
// links against libcuda.
inline CUtensorMap tensor_map(const void* base, int rank, const uint64_t* dims, const uint64_t* strides, const uint32_t* box,
                            bool half) {
    using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    static const Encode encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found{};
        cudaCheck(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || fn == nullptr) fail("the CUDA driver has no cuTensorMapEncodeTiled (TMA)");
        return reinterpret_cast<Encode>(fn);
    }();
    CUtensorMap m;
    const cuuint32_t unit[3] = {1, 1, 1};  // no element strides
    const CUresult r = encode(&m, half ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank,
                              const_cast<void*>(base), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) fail("cuTensorMapEncodeTiled failed (CUresult " + std::to_string((int)r) + ")");
    return m;
}

}  // namespace attn
}  // namespace olmo
