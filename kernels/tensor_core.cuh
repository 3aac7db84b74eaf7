// tensor_core.cuh: the building blocks of the flash kernels on sm_80+ tensor cores (mma.sync):
// small PTX wrappers, a swizzled shared-memory tile and the copy pattern that fills it.
// defines: attn::pack2, attn::unpack2, attn::exp2_approx, attn::mul_wide, attn::cp_async_16, attn::l2_evict_first_policy,
//          attn::cp_async_16_policy, attn::cp_async_8, attn::cp_async_4,
//          attn::cp_async_commit, attn::cp_async_wait, attn::ld_shared_b32, attn::ld_shared_v2,
//          attn::ld_shared_v4, attn::ldmatrix_x4,
//          attn::ldmatrix_x4_trans, attn::mma_16x8x16, attn::mma_16x8x16_new, attn::SmemTile, attn::for_each_tile_chunk
//
// One warp-wide instruction multiplies tiles:
//     D[16x8] += A[16x16] · B[16x8]     (16-bit A and B, fp32 D)
// with each operand spread over the 32 lanes as a "fragment" of a few registers per lane.
// ldmatrix reads such fragments from shared memory (8x8 matrices of 16-bit values, one row
// address per lane), cp.async fills shared memory from global memory without passing through
// registers, and the tile layout below keeps both free of bank conflicts.
// Shared memory is addressed by 32-bit shared-window addresses (`saddr`) throughout.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace olmo {
namespace attn {

// ---- PTX wrappers ----

// Two floats -> one 32-bit register of two 16-bit values (lo in the low half), as mma wants.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    uint32_t u;
    if constexpr (std::is_same_v<T, __half>) {
        const __half2 h = __floats2half2_rn(lo, hi);
        memcpy(&u, &h, 4);
    } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        memcpy(&u, &h, 4);
    }
    return u;
}

// The inverse: one register of two 16-bit values -> two floats (lo first).
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t u) {
    if constexpr (std::is_same_v<T, __half>) {
        __half2 h;
        memcpy(&h, &u, 4);
        return __half22float2(h);
    } else {
        __nv_bfloat162 h;
        memcpy(&h, &u, 4);
        return __bfloat1622float2(h);
    }
}

// 2^x on the SFU; 2^-inf = 0.
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// a * b as a 64-bit product of two 32-bit unsigned values (one IMAD.WIDE.U32 with the add
// that usually follows; NVVM does not always find it for (size_t)a * b).
__device__ __forceinline__ uint64_t mul_wide(uint32_t a, uint32_t b) {
    uint64_t r;
    asm("mul.wide.u32 %0, %1, %2;" : "=l"(r) : "r"(a), "r"(b));
    return r;
}

// 16-byte global -> shared copy that bypasses registers (and L1); zero-fills when !valid.
__device__ __forceinline__ void cp_async_16(uint32_t saddr, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem), "r"(valid ? 16 : 0));
}
// An L2 policy for data read once per pass over far more bytes than L2 holds (a decode step's
// weights, and its K/V rows): its lines are the first L2 evicts, so the step's other data (the
// activations, the norms' weights, the rows RoPE has just written) stays there from one kernel,
// and one step, to the next.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}
// cp_async_16 of valid data, with an L2 policy (l2_evict_first_policy).
__device__ __forceinline__ void cp_async_16_policy(uint32_t saddr, const void* gmem, uint64_t policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem), "l"(policy));
}
// cp_async_16 with an L2 policy; zero-fills when !valid.
__device__ __forceinline__ void cp_async_16_policy(uint32_t saddr, const void* gmem, bool valid, uint64_t policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(saddr), "l"(gmem),
                 "r"(valid ? 16 : 0), "l"(policy));
}
// 8-byte global -> shared copy (through L1); zero-fills when !valid.
__device__ __forceinline__ void cp_async_8(uint32_t saddr, const void* gmem, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(saddr), "l"(gmem), "r"(valid ? 8 : 0));
}
// 4-byte global -> shared copy (through L1); zero-fills when !valid.
__device__ __forceinline__ void cp_async_4(uint32_t saddr, const void* gmem, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(saddr), "l"(gmem), "r"(valid ? 4 : 0));
}
// Closes this thread's current group of cp.async copies.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// One 32-bit value from shared memory.
__device__ __forceinline__ int ld_shared_b32(uint32_t saddr) {
    int x;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(x) : "r"(saddr));
    return x;
}
// 8 and 16 bytes from shared memory (8- and 16-byte aligned).
__device__ __forceinline__ uint2 ld_shared_v2(uint32_t saddr) {
    uint2 c;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(c.x), "=r"(c.y) : "r"(saddr) : "memory");
    return c;
}
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t saddr) {
    uint4 c;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(c.x), "=r"(c.y), "=r"(c.z), "=r"(c.w) : "r"(saddr) : "memory");
    return c;
}

// Four 8x8 b16 matrices from shared memory; lane l gives the address of row l%8 of matrix l/8
// and receives in r[i] elements (l/4, 2(l%4) .. 2(l%4)+1) of matrix i (transposed with .trans).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t saddr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(saddr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t saddr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(saddr));
}

// d[16x8] += a[16x16] · b[16x8], 16-bit operands, fp32 accumulators. Fragments (g = lane/4,
// c = 2*(lane%4)): a = {(g, c), (g+8, c), (g, c+8), (g+8, c+8)}, b = {(k=c, n=g), (k=c+8, n=g)},
// d = {(g, c), (g, c+1), (g+8, c), (g+8, c+1)}.
template <typename T>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same_v<T, __half>)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d = a · b alone (no accumulator to add: zero, which needs no register).
template <typename T>
__device__ __forceinline__ void mma_16x8x16_new(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    static_assert(std::is_same_v<T, __half>, "fp16 operands (the FP8 cache's codes)");
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// ---- the swizzled tile ----

// A [rows, HD] tile of 16-bit values in shared memory, kept as 16-byte chunks (8 elements)
// with chunk c of row r stored at chunk position (c ^ r) % 8 + c / 8 * 8: the 8 rows that one
// ldmatrix reads at the same column fall in 8 different bank groups, so neither the row-wise
// (Q, K) nor the transposed (V) reads conflict. The base is 128-byte aligned and rows are
// 128, 256 or 512 bytes, so address bits 4..6 hold exactly the swizzled chunk bits; that makes
//   addr(row + dr, chunk + dc) = (addr(row, chunk) ^ (dc % 8) * 16) + dr * row_bytes + dc / 8 * 128
// for dr a multiple of 8 and either dc even with chunk in {0, 1} or dc a multiple of 8: a
// per-lane base address, an XOR with a constant and an immediate offset, instead of a swizzle
// per fragment load.
template <int HD>
struct SmemTile {
    static_assert(HD % 64 == 0, "rows of whole groups of 8 chunks");
    static constexpr int kRowBytes = HD * 2;
    uint32_t base;  // shared-window address
    __device__ uint32_t at(int row, int chunk) const {
        return base + row * kRowBytes + ((((chunk ^ row) & 7) | (chunk & ~7)) << 4);
    }
    __device__ SmemTile rows_from(int row0) const { return {base + row0 * kRowBytes}; }
    static __device__ uint32_t step(uint32_t addr, int dr, int dc) {
        return (addr ^ ((dc & 7) << 4)) + dr * kRowBytes + ((dc & ~7) << 4);
    }
};

// The copy pattern of a ROWS x HD tile by THREADS threads, in passes of STEP rows x CW chunks:
// thread i copies chunk c0 = i % CW of row r0 = i / CW, then the same place of the following
// passes, rows r0 + k*STEP and chunks c0 + j*CW. A pass spans whole rows (CW = HD/8) when that
// still covers 8 rows or more, else 8 rows of CW = THREADS/8 chunks (HD 256 with 128 threads:
// half a row, so each thread copies two chunks per row). STEP is a multiple of 8, and so is CW
// when a row takes several passes: by SmemTile's rule all of a thread's destinations then share
// the swizzle of its first and differ by immediate offsets. Calls copy(row, chunk, shared address).
template <int ROWS, int THREADS, int HD, typename Copy>
__device__ __forceinline__ void for_each_tile_chunk(SmemTile<HD> dst, Copy copy) {
    constexpr int CHUNKS = HD / 8, CW = THREADS / CHUNKS >= 8 ? CHUNKS : THREADS / 8, STEP = THREADS / CW;
    static_assert(THREADS % CW == 0 && CHUNKS % CW == 0 && (CW == CHUNKS || CW % 8 == 0),
                  "a row is copied in whole passes that keep the swizzle");
    static_assert(STEP % 8 == 0 && ROWS % STEP == 0, "every thread copies the same rows of each group of 8");
    const int r0 = threadIdx.x / CW, c0 = threadIdx.x % CW;
    const uint32_t s0 = dst.at(r0, c0);
#pragma unroll
    for (int it = 0; it < ROWS / STEP; it++)
#pragma unroll
        for (int j = 0; j < CHUNKS / CW; j++)
            copy(r0 + it * STEP, c0 + j * CW, s0 + it * STEP * SmemTile<HD>::kRowBytes + j * CW * 16);
}

}  // namespace attn
}  // namespace olmo
