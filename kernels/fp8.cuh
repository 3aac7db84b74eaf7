// fp8.cuh: FP8 (E4M3) weights: per-row quantization, and the matrix product for a few tokens.
// defines: quantize_rows_fp8, scale_rows_cols, fp8_gemv, fp8_gemv_swiglu, kFp8GemvMaxRows, kFp8GemvMaxWarps
//
// Storage (src/fp8.h has the format and the CPU reference): a weight W [N, K] becomes
//     q [N16, ld] E4M3 and scale [N16] fp32,   W[n, k] ≈ scale[n] · q[n, k]
// one scale per output channel (row), rows padded with zeros to N16 = N rounded up to 16 and
// ld = K rounded up to kFp8Cols (128), so the product below needs no bounds checks on q and
// every row starts 128-byte aligned (cuBLASLt's FP8 GEMM wants 16). Why per channel: docs/fp8.md.
//
// quantize_rows_fp8: one block per row: amax = max |x| (a block reduction), then
//     q = E4M3(x · 448/amax) with round-to-nearest-even and saturation (cvt.rn.satfinite).
// The engine quantizes weights once at load, and the activations of a prefill per token.
// scale_rows_cols: y[r, n] *= xs[r] · ws[n], the scales of such a product (src/fp8_gemm.h).
//
// fp8_gemv, for rows ≤ 16 tokens (decode): y[r, n] = scale[n] · Σ_k x[r, k] · q[n, k].
// Memory-bound: the weights are read once, copied 16 bytes per lane straight into shared memory
// (cp.async, past L1 and the registers), and widened to 16 bits in registers; the tensor cores
// then do the arithmetic (mma m16n8k16: 16 output channels times 8 tokens, fp32 accumulators),
// so 16 tokens cost no more reading than one. A block owns 16 output channels; its warps split
// K, walking chunks of 128 columns (warp w takes chunks w, w + warps, ...), each with a ring of D
// chunks of which D - 1 are in flight while it computes one, and add their partial sums
// through shared memory at the end. A chunk is 16 rows x 128 bytes, and each copy instruction
// of the warp reads four whole 128-byte rows of it (8 lanes a row), not the eight 64-byte
// halves it would read if each lane copied the bytes it multiplies: a pure stream of whole
// lines reads 4-7% faster (docs/fp8.md, "Whole lines"), so the lanes exchange the bytes through
// the ring.
// The copies carry L2's evict-first policy: a step streams the whole model through L2 once, and
// without it those lines push out what the step reads again (the activations, the norms'
// weights, the K/V rows RoPE has just written), layer after layer; with it, 7B decode is 2%
// faster and 1B 3.5% (docs/fp8.md). Decode reads a 16-bit cache's K/V rows with it too
// (paged_kv.cuh).
// The first D - 1 chunks are asked for before the kernel waits for the one ahead of it (a
// programmatic dependent launch): weights do not depend on it. D = 2 (one chunk in flight per
// warp) streamed fastest (docs/fp8.md). Once past that wait, a block lets the kernel behind it
// launch (allow_dependent_launch), so that kernel's blocks are placed as this grid's leave their
// SMs and only its own wait is left when the product ends. With the norm after the o product
// holding gate|up back (add_rmsnorm's `hold`), FP8 decode is 0.35% (32B) to 1.6% (1B) faster
// than with the trigger at the product's end (docs/fp8.md, "Session 35").
//
// fp8_gemv_swiglu: the same product of the fused gate | up weight [2I, K], with SwiGLU in its
// epilogue: a[r, i] = silu(y[r, i]) · y[r, I + i] in T, so the MLP needs no kernel between its
// two products. Block b takes gate rows 8b .. 8b+7 and the up rows I + 8b .. I + 8b + 7 in
// place of a tile's two halves, so each lane holds a gate and its up for the same tokens.
//
// Which column of the mma goes where: a dot product does not care about the order of its
// terms, so instead of the mma's own column order the lanes take contiguous bytes. In each
// 64-column half of a chunk, lane (g = lane/4, t = lane%4) reads columns [16t, 16t + 16) of rows
// g and g+8 from the ring, and mma step s (0..3) uses columns 16t + 4s + {0, 1, 2, 3} as its
// columns {2t, 2t+1, 2t+8, 2t+9}. The tokens' fragment gets the same permutation (lane g reads
// token g's 16 values at 16t), so A and B still meet column for column.
//
// The ring slot of a chunk holds its 16 rows of 128 bytes in order, with the 16-byte units of
// every odd row swapped by halves (unit u at u ^ 4), so that the 8 lanes of a shared-memory
// phase (rows g and g + 1, units 4h .. 4h+3) read 8 different banks' groups.
#pragma once
#include <cuda_fp8.h>

#include <vector>

#include "cuda_common.cuh"
#include "elementwise.cuh"
#include "fp8.h"
#include "tensor_core.cuh"

namespace olmo {

constexpr int kFp8GemvMaxRows = 16;
constexpr int kFp8GemvMaxWarps = 16;   // per block (the kernel's launch bounds: 512 threads)
// Slots of 16 rows x 128 weight bytes in each fp8_gemv warp's shared-memory ring (its D): D - 1
// chunks are in flight while the warp computes one (docs/fp8.md has the sweep).
constexpr int kFp8GemvDepth = 2;
// A chunk is as wide as the column padding (fp8.h), so ld holds whole chunks.
constexpr int kFp8ChunkCols = kFp8Cols, kFp8SlotBytes = 16 * kFp8ChunkCols;

// ---- quantization ----

// A block walks its row in Packs of N elements (N = 8 when K and the pointer allow 16-byte
// loads, else 1): once for amax, once to convert, writing zeros over the padding K..ld.
template <typename T, int N>
__global__ void quantize_rows_fp8_kernel(uint8_t* q, float* scale, const T* x, int K, int ld) {
    using P = Pack<T, N>;
    using Q = Pack<uint8_t, N>;
    const P* row = reinterpret_cast<const P*>(x + (int64_t)blockIdx.x * K);
    Q* out = reinterpret_cast<Q*>(q + (int64_t)blockIdx.x * ld);
    float amax = 0.0f;
    for (int i = threadIdx.x; i < K / N; i += blockDim.x) {
        const P p = row[i];
        for (int j = 0; j < N; j++) amax = fmaxf(amax, fabsf(to_float(p.v[j])));
    }
    amax = block_reduce(amax, MaxOp{});
    const float inv = amax < kFp8TinyRow ? 0.0f : kFp8Max / amax;   // fp8.h: fp8_row_inverse_scale
    for (int i = threadIdx.x; i < ld / N; i += blockDim.x) {
        Q o = {};
        if (i < K / N) {
            const P p = row[i];
            for (int j = 0; j < N; j++) o.v[j] = __nv_cvt_float_to_fp8(to_float(p.v[j]) * inv, __NV_SATFINITE, __NV_E4M3);
        }
        out[i] = o;
    }
    if (threadIdx.x == 0) scale[blockIdx.x] = amax < kFp8TinyRow ? 0.0f : amax / kFp8Max;
}

// q [rows, ld], scale [rows] <- x [rows, K] (T: any storage type).
template <typename T>
void quantize_rows_fp8(uint8_t* q, float* scale, const T* x, int rows, int K, int ld, cudaStream_t stream) {
    if (rows == 0) return;
    if (K % 8 == 0 && aligned16(x)) quantize_rows_fp8_kernel<T, 8><<<rows, 256, 0, stream>>>(q, scale, x, K, ld);
    else quantize_rows_fp8_kernel<T, 1><<<rows, 256, 0, stream>>>(q, scale, x, K, ld);
    cudaCheckLaunch();
}

template <int N>
__global__ void scale_rows_cols_kernel(float* y, const float* xs, const float* ws, int64_t rows, int cols) {
    const int64_t packs = rows * (cols / N);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < packs; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / (cols / N);
        const int c = (int)(i % (cols / N)) * N;
        Pack<float, N> p = reinterpret_cast<Pack<float, N>*>(y)[i];
        for (int j = 0; j < N; j++) p.v[j] *= xs[r] * ws[c + j];
        reinterpret_cast<Pack<float, N>*>(y)[i] = p;
    }
}

// y [rows, cols] fp32, xs [rows], ws [cols].
inline void scale_rows_cols(float* y, const float* xs, const float* ws, int rows, int cols, cudaStream_t stream) {
    const int64_t n = (int64_t)rows * cols;
    if (n == 0) return;
    const int blocks = grid_blocks(n / 4 + 1, 256);
    if (cols % 4 == 0 && aligned16(y)) scale_rows_cols_kernel<4><<<blocks, 256, 0, stream>>>(y, xs, ws, rows, cols);
    else scale_rows_cols_kernel<1><<<blocks, 256, 0, stream>>>(y, xs, ws, rows, cols);
    cudaCheckLaunch();
}

// ---- the product for a few tokens ----

namespace fp8 {

// Byte pair p (0..7) of 16 weight bytes, as two 16-bit values of type T (exact: every E4M3
// value is a half and a bfloat16).
template <typename T>
__device__ __forceinline__ uint32_t widen_pair(const uint4& w, int p) {
    const uint32_t word = (&w.x)[p / 2];
    const __half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(word >> (p % 2 * 16)), __NV_E4M3));
    if constexpr (std::is_same_v<T, __half>) {
        return *reinterpret_cast<const uint32_t*>(&h);
    } else {
        const float2 f = __half22float2(h);
        return attn::pack2<T>(f.x, f.y);
    }
}

// Token `r`'s 16 values x[r, k .. k+16) as 8 pairs (zeros past K or for r >= rows).
template <typename T>
__device__ __forceinline__ void load_token16(uint32_t (&v)[8], const T* x, int r, int k, int rows, int K) {
    if (r >= rows) {
        for (int i = 0; i < 8; i++) v[i] = 0;
        return;
    }
    if (k + 16 <= K && K % 8 == 0) {
        const uint4* p = reinterpret_cast<const uint4*>(x + (int64_t)r * K + k);
        const uint4 a = p[0], b = p[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        return;
    }
    for (int i = 0; i < 8; i++) {
        const int k0 = k + 2 * i;
        const T* row = x + (int64_t)r * K;
        const float lo = k0 < K ? to_float(row[k0]) : 0.0f;
        const float hi = k0 + 1 < K ? to_float(row[k0 + 1]) : 0.0f;
        v[i] = attn::pack2<T>(lo, hi);
    }
}

}  // namespace fp8

// The offset in a ring slot of row r's 16-byte unit u (0..7): the rows in order, the units of odd
// rows swapped by halves (the bank note above).
__device__ __forceinline__ uint32_t fp8_slot_offset(int r, int u) { return r * kFp8ChunkCols + 16 * (u ^ 4 * (r & 1)); }

// acc += the weights of one 64-column half (lo, hi: this lane's 16 bytes of rows g and g + 8)
// times the tokens' values for those columns (xv: 8 pairs per group of 8 tokens), in 4 mma
// steps per group (the column order in the file comment).
template <typename T, int GROUPS>
__device__ __forceinline__ void fp8_mma_half(float (&acc)[GROUPS][4], const uint4& lo, const uint4& hi,
                                             const uint32_t (&xv)[GROUPS][8]) {
#pragma unroll
    for (int gr = 0; gr < GROUPS; gr++)
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const uint32_t a[4] = {fp8::widen_pair<T>(lo, 2 * s), fp8::widen_pair<T>(hi, 2 * s),
                                   fp8::widen_pair<T>(lo, 2 * s + 1), fp8::widen_pair<T>(hi, 2 * s + 1)};
            attn::mma_16x8x16<T>(acc[gr], a, xv[gr][2 * s], xv[gr][2 * s + 1]);
        }
}

// The sum of value i over the block's warps, part: [warps][values][32] in shared memory, for
// this lane. Every warp's value is loaded first (one wait for shared memory, not one per warp:
// this is the kernel's last step), then added in warp order.
__device__ __forceinline__ float fp8_sum_warps(const float* part, int warps, int values, int i, int lane) {
    float p[kFp8GemvMaxWarps];
#pragma unroll
    for (int w = 0; w < kFp8GemvMaxWarps; w++) p[w] = w < warps ? part[(w * values + i) * 32 + lane] : 0.0f;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kFp8GemvMaxWarps; w++)
        if (w < warps) sum += p[w];
    return sum;
}

// GROUPS: tokens in groups of 8 (1 or 2). D: slots of this warp's ring (D - 1 chunks in flight
// while one is computed). The block's warps (blockDim.x / 32, up to 16) split K: warp w takes
// chunks w, w + warps, ... Lane l copies unit l % 8 of rows l / 8, 4 + l / 8, 8 + l / 8 and
// 12 + l / 8 of a chunk into the warp's ring (cp.async: no registers held while the bytes
// travel), and once every lane's copies have landed (cp.async.wait, then a warp barrier) reads
// the units it multiplies. The tokens' 16 values for each 64-column half are loaded one chunk
// ahead of their use.
// SWIGLU: the output is a [rows, N/2] in T (fp8_gemv_swiglu above), y is unused.
template <typename T, int GROUPS, int D, bool SWIGLU>
__global__ void __launch_bounds__(kFp8GemvMaxWarps * 32, 1)
    fp8_gemv_kernel(float* __restrict__ y, T* __restrict__ a, const T* __restrict__ x, const uint8_t* __restrict__ q,
                    const float* __restrict__ scale, int rows, int N, int K, int ld) {
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int chunks = ld / kFp8ChunkCols;
    const int mine = warp < chunks ? (chunks - warp + warps - 1) / warps : 0;   // this warp's chunks
    // The block's two halves of 8 rows: n_lo .. n_lo+7 and n_hi .. n_hi+7 (a gate and its up).
    const int n_lo = blockIdx.x * (SWIGLU ? 8 : 16), n_hi = n_lo + (SWIGLU ? N / 2 : 8);
    const int cr = lane / 8, cu = lane % 8;   // the rows (cr + 4p) and unit this lane copies
    const uint8_t* w_lo = q + (int64_t)(n_lo + cr) * ld + 16 * cu;   // tile rows cr, cr + 4: chunk 0
    const uint8_t* w_hi = q + (int64_t)(n_hi + cr) * ld + 16 * cu;   // tile rows 8 + cr, 12 + cr
    // smem: the rings [warps][D] of kFp8SlotBytes, then the partial sums.
    extern __shared__ uint4 smem[];
    const uint64_t evict_first = attn::l2_evict_first_policy();   // the weights: read once a step
    const uint32_t ring = (uint32_t)__cvta_generic_to_shared(smem) + warp * D * kFp8SlotBytes;
    auto slot = [&](int i) { return ring + (i % D) * kFp8SlotBytes; };
    auto fetch = [&](int i) {   // this warp's chunk i into slot i % D (past the last: an empty group)
        if (i < mine) {
            const int64_t c = (warp + i * warps) * kFp8ChunkCols;
#pragma unroll
            for (int p = 0; p < 4; p++) {   // tile row r = 4p + cr
                const uint8_t* src = (p < 2 ? w_lo : w_hi) + (p % 2) * 4 * (int64_t)ld + c;
                attn::cp_async_16_policy(slot(i) + fp8_slot_offset(4 * p + cr, cu), src, evict_first);
            }
        }
        attn::cp_async_commit();
    };
    auto load_x = [&](uint32_t(&xv)[GROUPS][8], int i, int h) {   // the tokens' 16 values for half h of chunk i
#pragma unroll
        for (int gr = 0; gr < GROUPS; gr++)
            fp8::load_token16(xv[gr], x, gr * 8 + g, (warp + i * warps) * kFp8ChunkCols + 64 * h + 16 * t, rows, K);
    };

    for (int i = 0; i < D - 1; i++) fetch(i);
    // The scales of this lane's two output channels (row n_lo + g, n_hi + g of the padded [N16]),
    // read now: at the end, after the sums, their trip to memory would be the kernel's last step.
    const float scale_lo = scale[n_lo + g], scale_hi = scale[n_hi + g];
    grid_dependency_wait();   // the weights are in flight; x comes from the kernel ahead
    allow_dependent_launch();   // (see the file comment)
    float acc[GROUPS][4] = {};
    // The tokens' values one chunk ahead: x0, x1 hold chunk i's two halves; chunk i + 1's first
    // half is loaded into xn while half 0 is multiplied, its second into x0 (free by then) while
    // half 1 is, so every load has a whole chunk's products (and its weights' wait) to land.
    uint32_t x0[GROUPS][8], x1[GROUPS][8], xn[GROUPS][8];
    if (mine > 0) load_x(x0, 0, 0), load_x(x1, 0, 1);
    for (int i = 0; i < mine; i++) {
        __syncwarp();                  // every lane has read the slot chunk i - 1 left
        fetch(i + D - 1);              // into that slot
        attn::cp_async_wait<D - 1>();  // this lane's copies of chunk i have landed
        __syncwarp();                  // and every lane's
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint4 lo = attn::ld_shared_v4(slot(i) + fp8_slot_offset(g, 4 * h + t));
            const uint4 hi = attn::ld_shared_v4(slot(i) + fp8_slot_offset(g + 8, 4 * h + t));
            if (i + 1 < mine) {
                if (h == 0) load_x(xn, i + 1, 0);
                else load_x(x0, i + 1, 1);
            }
            fp8_mma_half<T>(acc, lo, hi, h == 0 ? x0 : x1);
        }
#pragma unroll
        for (int gr = 0; gr < GROUPS; gr++)
#pragma unroll
            for (int j = 0; j < 8; j++) x1[gr][j] = x0[gr][j], x0[gr][j] = xn[gr][j];
    }

    // Sum the warps' partial products. acc[gr][i] is output channel n_lo + g (n_hi + g for i >= 2)
    // of token 8gr + 2t + i%2. part: [warps][GROUPS * 4][32]. Warp w adds up values w, w + warps,
    // ... (a SwiGLU gate with its up), each in warp order, so the bits do not depend on which warp
    // adds them: the block's last step is one value per warp rather than all of them in warp 0,
    // whose serial tail every block of a one-wave grid ends with (1B fp8 decode +0.8%, 7B +0.5%,
    // batch 8 +2.2%: docs/fp8.md, "Session 36").
    float* part = reinterpret_cast<float*>(smem + warps * D * kFp8SlotBytes / 16);
#pragma unroll
    for (int i = 0; i < GROUPS * 4; i++) part[(warp * GROUPS * 4 + i) * 32 + lane] = acc[i / 4][i % 4];
    __syncthreads();
    auto total = [&](int i) {   // y of acc[i / 4][i % 4], scaled
        return fp8_sum_warps(part, warps, GROUPS * 4, i, lane) * (i % 4 >= 2 ? scale_hi : scale_lo);
    };
    constexpr int kValues = SWIGLU ? GROUPS * 2 : GROUPS * 4;   // SwiGLU: the gates (i % 4 < 2), each with its up i + 2
    for (int k = warp; k < kValues; k += warps) {
        const int i = SWIGLU ? k / 2 * 4 + k % 2 : k, r = i / 4 * 8 + 2 * t + i % 2;
        if constexpr (SWIGLU) {
            const int n = n_lo + g, I = N / 2;
            if (n < I && r < rows) a[(int64_t)r * I + n] = from_float<T>(silu_times(total(i), total(i + 2)));
        } else {
            const int n = (i % 4 >= 2 ? n_hi : n_lo) + g;
            if (n < N && r < rows) y[(int64_t)r * N + n] = total(i);
        }
    }
}

// Shared memory a block of `warps` warps needs: its rings and the partial sums.
template <int GROUPS, int D>
constexpr int fp8_gemv_smem(int warps) { return warps * (D * kFp8SlotBytes + GROUPS * 4 * 32 * (int)sizeof(float)); }

struct Fp8GemvShape {
    int warps;   // per block
    int smem;    // bytes per block, at least fp8_gemv_smem
};

// The block shape for W: as many warps (up to 16, each taking a share of K) as still lets every
// block of the grid be resident at once, so the grid runs in one wave; the registers (75 a
// thread) allow about 24 warps an SM, which 12 warps a block fill where the grid needs 2 blocks
// an SM (the 7B o and down products: +4% each over 8 warps). The shared memory is then
// padded so that no more blocks fit an SM than the wave needs: launched early (as a dependent),
// the blocks would otherwise pile onto the SMs that are free first and leave others idle. When
// no shape fits one wave (the output layer; gate | up from the 32B shape on), 4 warps and as many
// blocks per SM as fit: faster than 2, 3, 6 or 8 warps end to end (docs/fp8.md).
template <typename T, int GROUPS, int D, bool SWIGLU = false>
Fp8GemvShape fp8_gemv_shape(const Fp8Matrix& W) {
    constexpr auto kernel = fp8_gemv_kernel<T, GROUPS, D, SWIGLU>;
    static const int sms = [] {
        int device = 0, n = 0;
        cudaCheck(cudaGetDevice(&device));
        cudaCheck(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
        return n;
    }();
    static const std::vector<int> per_sm = [] {   // resident blocks per SM, by warps per block
        std::vector<int> n(kFp8GemvMaxWarps + 1);
        for (int w = 1; w <= kFp8GemvMaxWarps; w++)
            if (fp8_gemv_smem<GROUPS, D>(w) <= kMaxSmemBytes)
                cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n[w], kernel, w * 32, fp8_gemv_smem<GROUPS, D>(w)));
        return n;
    }();
    auto padded = [](int w, int per) {   // the shared memory that lets at most `per` blocks fit an SM
        const int fit = (kSmemPerSmBytes / per - kSmemReservedBytes) / 1024 * 1024;
        return std::max(fp8_gemv_smem<GROUPS, D>(w), std::min(fit, kMaxSmemBytes));
    };
    const int64_t tiles = fp8_padded_rows(W.N) / 16, chunks = W.ld / kFp8ChunkCols;
    for (int w : {16, 12, 8, 6, 4, 3, 2})
        if ((w <= chunks || w == 2) && tiles <= (int64_t)per_sm[w] * sms) return {w, padded(w, (int)((tiles + sms - 1) / sms))};
    const int w = chunks >= 4 ? 4 : 2;   // several waves: as many blocks per SM as fit
    return {w, fp8_gemv_smem<GROUPS, D>(w)};
}

// y [rows, N] fp32 = x [rows, K] (T = __half or __nv_bfloat16) times W [N, K]ᵀ in FP8, for
// 1 <= rows <= kFp8GemvMaxRows; or with SWIGLU a [rows, N/2] in T (fp8_gemv_swiglu). Launched
// as a dependent launch: the weights start streaming before the kernel ahead (which writes x)
// has finished. warps: per block, 1..16 (0: fp8_gemv_shape). Either way the grid has one block
// per 16 rows of W.
template <typename T, int GROUPS, int D = kFp8GemvDepth, bool SWIGLU = false>
void fp8_gemv_launch(float* y, T* a, const T* x, const Fp8Matrix& W, int rows, cudaStream_t stream, int warps) {
    constexpr auto kernel = fp8_gemv_kernel<T, GROUPS, D, SWIGLU>;
    allow_smem<kernel>(kMaxSmemBytes);   // before the occupancy queries: padded blocks pass 48 KB
    const Fp8GemvShape shape =
        warps == 0 ? fp8_gemv_shape<T, GROUPS, D, SWIGLU>(W) : Fp8GemvShape{warps, fp8_gemv_smem<GROUPS, D>(warps)};
    launch_dependent(kernel, dim3(fp8_padded_rows(W.N) / 16), dim3(shape.warps * 32), shape.smem, stream, y, a, x,
                     (const uint8_t*)W.q, (const float*)W.scale, rows, W.N, W.K, W.ld);
}
template <typename T>
void fp8_gemv(float* y, const T* x, const Fp8Matrix& W, int rows, cudaStream_t stream, int warps = 0) {
    if (rows <= 8) fp8_gemv_launch<T, 1>(y, (T*)nullptr, x, W, rows, stream, warps);
    else fp8_gemv_launch<T, 2>(y, (T*)nullptr, x, W, rows, stream, warps);
}
// a [rows, I] (T) = silu(gate) · up of y = x · Wᵀ, W [2I, K] the fused gate | up weight.
template <typename T>
void fp8_gemv_swiglu(T* a, const T* x, const Fp8Matrix& W, int rows, cudaStream_t stream, int warps = 0) {
    if (W.N % 2 != 0) fail("fp8_gemv_swiglu: the gate | up weight has an odd row count");
    if (rows <= 8) fp8_gemv_launch<T, 1, kFp8GemvDepth, true>(nullptr, a, x, W, rows, stream, warps);
    else fp8_gemv_launch<T, 2, kFp8GemvDepth, true>(nullptr, a, x, W, rows, stream, warps);
}

}  // namespace olmo
