// attention.cuh: causal (optionally sliding-window) attention of new queries over a paged KV cache.
// defines: AttnParams, attention_supports_head_dim, attention_supported_head_dims,
//          attention_naive, attention_naive_workspace_bytes, attention_prefill,
//          attention_decode, attention_decode_workspace_bytes
//
// Every kernel computes, for query token t of sequence b (absolute position i = pos0[b] + t)
// and head h,
//     out[b, t, h] = Σ_j softmax_j(scale · q[b, t, h] · k_b[j, h / g]) · v_b[j, h / g],   g = nH / nKV,
// over the keys j it may see: j <= i, and j > i - window when window > 0. The cache is paged
// (src/kv_cache.h): the K/V of position j of sequence b is in row
//     block_table[b][j / block_size] * block_size + j % block_size
// of the layer's K and V pools. Softmax runs in fp32; 16-bit inputs are multiplied on tensor
// cores with fp32 accumulation. olmo::cpu::attention (src/cpu_ops.h) is the reference.
//
// Three families, from the readable oracle to the fast paths:
//   attention_naive    scores -> softmax -> P·V as three kernels over an fp32 score matrix.
//   attention_prefill  flash attention (FlashAttention-2): tiles of 128 query rows stream the
//                      cache in tiles of 64 keys with an online softmax, on mma.sync tensor cores.
//                      One sequence (batch 1), any chunk length, appended at any pos0.
//   attention_decode   flash-decoding for a few query rows per sequence, all sequences of a step
//                      in one launch: their keys are cut into splits that blocks process in
//                      parallel (long sequences get more splits), then a second kernel merges them.
// For T = float the prefill and decode entry points run a simple warp-per-row kernel instead
// (tensor cores take 16-bit operands; fp32 serves as the exact reference path).
//
// Head sizes. The flash kernels keep tiles of HD dims per row, for three tile widths HD = 64,
// 128 and 256 (the shared-memory swizzle works on groups of 8 16-byte chunks, so HD is a
// multiple of 64). A head size hd, any multiple of 8 up to 256, runs on the smallest HD >= hd
// (16, 32 -> 64; 80, 96 -> 128; 192 -> 256): its dims hd .. HD-1 exist only in shared memory and
// registers. Loads zero-fill them (cp.async with src-size 0, which reads nothing), so they add 0
// to every q·k, and the P·V columns they produce are never stored. Global memory is always
// addressed with the real hd (row strides nH*hd and nKV*hd); only shared memory and registers
// use HD. A multiple of 8 keeps every row 16-byte aligned in 16-bit types, as cp.async needs.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "common.h"
#include "cuda_common.cuh"

namespace olmo {

template <typename T>  // T = float, __half or __nv_bfloat16 (storage type)
struct AttnParams {
    const T* q;       // [batch * n_q, nH*hd]  sequence b's queries in rows b*n_q .. b*n_q+n_q-1,
                      //                       head h in columns h*hd .. h*hd+hd-1
    const T* k;       // this layer's K pool [num_blocks * block_size, nKV*hd] (RoPE applied)
    const T* v;       // V pool, same layout
    T* out;           // like q
    int n_q;          // query tokens per sequence (prefill chunk length; 1 for decode)
    const int* pos0;  // DEVICE [batch]: position of sequence b's first query; its keys are
                      // positions 0 .. pos0[b]+n_q-1 (read on the device, so a captured CUDA
                      // graph replays with new positions)
    int nH, nKV, hd;  // attention_supports_head_dim(hd) (the naive kernels take any); nH % nKV == 0
    int window;       // 0 = full causal; W > 0: query at position i sees keys i-W+1 .. i
    float scale;      // usually hd^-0.5
    int s_cap;        // max positions per sequence (an upper bound on pos0[b] + n_q); sets the
                      // number of decode splits, so it must not change between graph replays
    const int* block_table;  // DEVICE [batch, table_stride]: position p of sequence b is in pool
                      // row block_table[b*table_stride + p/block_size]*block_size + p%block_size.
                      // Entries of blocks wholly out of every query's window (released: may be
                      // -1) and entries past the last position are never used.
    int table_stride; // >= s_cap / block_size, rounded up
    int block_size;   // tokens per block: a power of two >= 8 (the engine uses 16)
    int batch;        // sequences (decode); 1 for prefill
};
// attention_decode reads pos0 and block_table before it waits for the kernel ahead of it in the
// stream (a programmatic dependent launch), so they must not be written by that kernel: the
// engine uploads them with a copy at the start of the step.

// The head sizes attention_prefill and attention_decode take (see "Head sizes" above), so that a
// caller can choose another path before loading a model.
inline bool attention_supports_head_dim(int hd) { return hd > 0 && hd <= 256 && hd % 8 == 0; }
inline std::string attention_supported_head_dims() { return "multiples of 8 up to 256"; }


namespace attn {

constexpr float kLog2e = 1.4426950408889634f;

// ------------------------------------------------------------------------------------------
// Small device helpers: PTX wrappers, a swizzled shared-memory tile (dtype conversion:
// to_float / from_float from cuda_common.cuh).
// ------------------------------------------------------------------------------------------

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

__device__ __forceinline__ float exp2_approx(float x) {  // 2^x on the SFU; 2^-inf = 0
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

__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// 16-byte global -> shared copy that bypasses registers (and L1); zero-fills when !valid.
// Shared memory is addressed by 32-bit shared-window addresses (`saddr`) throughout.
__device__ __forceinline__ void cp_async_16(uint32_t saddr, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>  // wait until at most N of this thread's committed groups are still in flight
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

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

// Rows of a query tile are (token, head) pairs. The g = nH/nKV query heads that share KV head
// `kvh` sit side by side, row r = token t0 + r/g, head kvh*g + r%g, so every K/V tile a block
// loads serves the whole group (GQA). Only the first `rows` rows are real.
struct RowMap {
    int g, kvh, t0, rows;
    __device__ int token(int r) const { return t0 + r / g; }
    __device__ int head(int r) const { return kvh * g + r % g; }
};

// Keys [lo, hi) that queries at positions first_pos .. last_pos may see.
struct KeyRange {
    int lo, hi;
};
__device__ __forceinline__ KeyRange visible_keys(int first_pos, int last_pos, int window) {
    return {window > 0 ? max(0, first_pos - window + 1) : 0, last_pos + 1};
}

// ------------------------------------------------------------------------------------------
// The paged cache. Sequence b's table row maps position j to pool row
//     table[j >> shift] << shift | (j & mask),   shift = log2(block_size), mask = block_size - 1.
// Pool rows are < 2^31. The simple kernels look entries up one by one (Pages::row).
// ------------------------------------------------------------------------------------------
struct Pages {
    const int* table;  // sequence b's row of the block table
    int shift, mask;
    __device__ int64_t row(int j) const { return (int64_t)table[j >> shift] << shift | (j & mask); }
};
template <typename T>
__device__ __forceinline__ Pages pages_of(const AttnParams<T>& p, int b) {
    return {p.block_table + (int64_t)b * p.table_stride, __ffs(p.block_size) - 1, p.block_size - 1};
}

// The flash kernels read the table a window of 32 entries at a time (32 blocks, >= 256 keys, so
// a 64-key tile never lies in two windows): lane i of every warp holds entry 32w + i of the
// current window w in a register, `cur`; the thread that copies row `key` takes its entry from
// lane (key >> shift) % 32 with one shuffle. The next windows are copied with cp.async into a
// per-warp ring of three in shared memory (window v in slot v % 3), two windows (>= 8 tiles)
// ahead: they arrive with the tile copies of their commit group, which has landed by the time
// `cur` is read from the ring as long as the K/V pipeline has at most 8 stages. The first two
// are waited for when the window is made (at the start of a block, where the first entries'
// latency is paid anyway). Loading them into registers instead (with plain loads) made ptxas wait for
// each fresh load right after issuing it (a register copy at the loop's merge point), and the
// decode kernel spent its largest stall there (ncu). Entries outside the keys a block reads,
// [lo, hi), are never loaded: those before lo may be released (-1), those past hi may lie past
// the sequence's blocks (the ring gets zeros for them, and they are never used).
constexpr int kTableRingBytes = 3 * 32 * 4;  // per warp

__device__ __forceinline__ void cp_async_4(uint32_t saddr, const void* gmem, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(saddr), "l"(gmem), "r"(valid ? 4 : 0));
}

struct TableWindow {
    Pages pg;
    int first, last;   // entries that may be read: the blocks of keys lo .. hi-1
    int lane, w, cur;
    uint32_t ring;     // this warp's ring (kTableRingBytes of shared memory)
    // Starts at the window of key lo, the first key read. Waits for every cp.async group of the
    // thread, so it comes before the block's first copies.
    __device__ TableWindow(const Pages& pages, int lo, int hi, int lane_, uint32_t ring_)
        : pg(pages), first(lo >> pages.shift), last((hi - 1) >> pages.shift), lane(lane_), w(first >> 5), ring(ring_) {
        const int e = w * 32 + lane;
        cur = e >= first && e <= last ? __ldg(pg.table + e) : -1;
        prefetch(w + 1);
        prefetch(w + 2);
        cp_async_commit();
        cp_async_wait<0>();
    }
    __device__ uint32_t slot(int v) const { return ring + (v % 3 * 32 + lane) * 4; }
    __device__ void prefetch(int v) const {
        const int e = v * 32 + lane;
        const bool used = e >= first && e <= last;
        cp_async_4(slot(v), pg.table + (used ? e : first), used);
    }
    // Makes the window holding `key` current. Keys arrive in order, a tile at a time, so that
    // window is w or w + 1 (the same key in every lane of the warp).
    __device__ __forceinline__ void advance(int key) {
        if (key >> pg.shift >> 5 == w) return;
        ++w;
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(cur) : "r"(slot(w)));
        prefetch(w + 2);
    }
    // Pool block of `key`, which must lie in the current window (a warp-wide shuffle).
    __device__ __forceinline__ uint32_t block_of(int key) const { return __shfl_sync(0xffffffffu, cur, (key >> pg.shift) & 31); }
};

// ------------------------------------------------------------------------------------------
// Warp-level flash-attention steps on tensor cores, shared by prefill and decode. A warp owns
// MT m-tiles of 16 query rows and sees NT n-tiles of 8 keys. Accumulator fragments give each
// lane rows lane/4 and lane/4+8 of an m-tile (index `half` 0/1 below), two columns each.
// ------------------------------------------------------------------------------------------

// s = Q·Kᵀ for this warp. q_frag(mt, kk, a) gives the A fragment of m-tile mt, dims kk .. kk+15
// (prefill: an ldmatrix from shared memory at each use; decode: registers filled once). One
// ldmatrix.x4 of K gives the B fragments of two n-tiles, reused by all MT m-tiles. K lane
// addresses: rows lane%8 + 8*(lane/16), chunk (lane/8)%2 (matrices: keys 0-7 dims 0-7, keys 0-7
// dims 8-15, keys 8-15 ...). With few accumulators (decode: one m-tile, two n-tiles) the even
// and odd 16-wide slices of HD accumulate in two separate chains, halving the chain of
// dependent mma; the prefill kernel has 8 or 16 independent ones already.
// In the prefill kernel at HD 128 and 256 the HD loop is unrolled by 2 only: fully unrolled,
// ptxas hoists so many fragment loads that it spills at 255 registers.
template <typename T, int HD, int MT, int NT, typename QFrag>
__device__ __forceinline__ void warp_scores(float (&s)[MT][NT][4], QFrag q_frag, SmemTile<HD> k, int lane) {
    using Tile = SmemTile<HD>;
    constexpr bool FEW = MT * NT < 8;  // accumulators
    constexpr int CHAINS = FEW ? 2 : 1, UNROLL = HD >= 128 && !FEW ? 2 : HD / 16;
    const uint32_t ka = k.at((lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1);
    float acc[CHAINS][MT][NT][4] = {};
#pragma unroll UNROLL
    for (int kk = 0; kk < HD; kk += 16) {
        float(&chain)[MT][NT][4] = acc[kk / 16 % CHAINS];
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) q_frag(mt, kk, a[mt]);
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            uint32_t b[4];  // keys n*8 .. n*8+15: {n-tile n: b0, b1}, {n-tile n+1: b0, b1}
            ldmatrix_x4(b, Tile::step(ka, n * 8, kk / 8));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_16x8x16<T>(chain[mt][n], a[mt], b[0], b[1]);
                mma_16x8x16<T>(chain[mt][n + 1], a[mt], b[2], b[3]);
            }
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) s[mt][n][i] = CHAINS == 1 ? acc[0][mt][n][i] : acc[0][mt][n][i] + acc[CHAINS - 1][mt][n][i];
}

// The A fragments of Q (rows lane%16, chunk lane/16 of each 16 x 16 block) straight from a
// shared-memory tile, one ldmatrix.x4 per use.
template <int HD>
struct QFromSmem {
    uint32_t qa;  // this lane's address in m-tile 0, dims 0..15
    __device__ QFromSmem(SmemTile<HD> q, int lane) : qa(q.at(lane & 15, lane >> 4)) {}
    __device__ void operator()(int mt, int kk, uint32_t (&a)[4]) const { ldmatrix_x4(a, SmemTile<HD>::step(qa, mt * 16, kk / 8)); }
};
// ... or all of them for one m-tile (HD/16 slices, 32 registers at HD 128), read once.
template <int HD>
struct QInRegisters {
    uint32_t f[HD / 16][4];
    __device__ QInRegisters(SmemTile<HD> q, int lane) {
        const QFromSmem<HD> src(q, lane);
#pragma unroll
        for (int kk = 0; kk < HD; kk += 16) src(0, kk, f[kk / 16]);
    }
    __device__ void operator()(int, int kk, uint32_t (&a)[4]) const {
#pragma unroll
        for (int i = 0; i < 4; i++) a[i] = f[kk / 16][i];
    }
};

// Sets s = -inf where key j is hidden from the row at position pos: j > pos, or j <= pos - window.
// key0 is the key of n-tile 0, column 0; row_pos(r) the position of the warp's row r.
template <int MT, int NT, typename RowPos>
__device__ __forceinline__ void mask_scores(float (&s)[MT][NT][4], RowPos row_pos, int key0, int window, int lane) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int pos = row_pos(mt * 16 + half * 8 + lane / 4);
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const int j = key0 + n * 8 + (lane & 3) * 2 + i;
                    if (j > pos || (window > 0 && j <= pos - window)) s[mt][n][2 * half + i] = -INFINITY;
                }
        }
}

// Online softmax (FlashAttention-2), per row, with c = scale·log2(e) so exp(scale·x) = 2^(c·x):
//   m' = max(m, max_j s_j)                 running max of the raw scores
//   p_j = 2^(c·s_j - c·m')                 this tile's probabilities (overwrite s)
//   l' = l·2^(c·(m - m')) + Σ_j p_j        running denominator (a per-lane partial sum;
//                                          the 4 lanes of a row add theirs at the end)
//   o' = o·2^(c·(m - m'))                  rescaled before P·V is added
// A row that has seen only masked (-inf) keys keeps m = -inf and uses 0 as its reference, so
// no (-inf) - (-inf) = NaN appears; its p and l stay 0. Once the maxima settle, most tiles
// change no row's max: the warp then skips the rescale of o (exact: the factor would be 1).
template <int MT, int NT, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                               float (&o)[MT][DT][4], float c) {
    float corr[MT][2];
    bool same = true;  // no max of this lane's rows changed
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            float mx = m[mt][half];
#pragma unroll
            for (int n = 0; n < NT; n++) mx = fmaxf(mx, fmaxf(s[mt][n][2 * half], s[mt][n][2 * half + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float ref = mx == -INFINITY ? 0.0f : mx * c;
            same = same && mx == m[mt][half];
            corr[mt][half] = mx == m[mt][half] ? 1.0f : exp2_approx(m[mt][half] * c - ref);
            m[mt][half] = mx;
            float sum = 0.0f;
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int i = 2 * half; i < 2 * half + 2; i++) {
                    s[mt][n][i] = exp2_approx(fmaf(s[mt][n][i], c, -ref));
                    sum += s[mt][n][i];
                }
            l[mt][half] = l[mt][half] * corr[mt][half] + sum;
        }
    if (__all_sync(0xffffffffu, same)) return;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int d = 0; d < DT; d++)
#pragma unroll
            for (int i = 0; i < 4; i++) o[mt][d][i] *= corr[mt][i >> 1];
}

// o += P·V: the probabilities' accumulator fragments of n-tiles 2kk, 2kk+1 are exactly the A
// fragment of a 16-key slice once packed to 16 bits (all packed first, so the fp32 scores die
// before the loop); V's B fragments come from ldmatrix.trans with lane rows lane%16 (keys),
// chunk lane/16 (matrices: keys 0-7 dims 0-7, keys 8-15 dims 0-7, keys 0-7 dims 8-15, ...).
template <typename T, int HD, int MT, int NT>
__device__ __forceinline__ void warp_pv(float (&o)[MT][HD / 8][4], const float (&p)[MT][NT][4], SmemTile<HD> v,
                                        int lane) {
    using Tile = SmemTile<HD>;
    uint32_t a[MT][NT / 2][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kk = 0; kk < NT / 2; kk++) {
            a[mt][kk][0] = pack2<T>(p[mt][2 * kk][0], p[mt][2 * kk][1]);
            a[mt][kk][1] = pack2<T>(p[mt][2 * kk][2], p[mt][2 * kk][3]);
            a[mt][kk][2] = pack2<T>(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
            a[mt][kk][3] = pack2<T>(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
        }
    const uint32_t va = v.at(lane & 15, lane >> 4);
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
#pragma unroll
        for (int d = 0; d < HD / 8; d += 2) {
            uint32_t b[4];  // dims d*8 .. d*8+15: {n-tile d: b0, b1}, {n-tile d+1: b0, b1}
            ldmatrix_x4_trans(b, Tile::step(va, kk * 16, d));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_16x8x16<T>(o[mt][d], a[mt][kk], b[0], b[1]);
                mma_16x8x16<T>(o[mt][d + 1], a[mt][kk], b[2], b[3]);
            }
        }
    }
}

// Starts copying keys key0 .. key0+BN-1 of KV head kvh into a K and a V tile; `tw` must hold
// the tile's window (TableWindow::advance). Rows outside the keys [lo, hi) are zero-filled without
// touching the pool: their blocks may be released or unwritten, and even a masked row must not
// hold NaN (its probability 0 times NaN in P·V would be NaN). So are the chunks past the head
// (dims >= hd of a padded tile): the thread that copies one sees an empty key range and reads
// from inside the head. The K and V tiles share a layout, so a row's V chunk lands at the K
// chunk's address plus (sv - sk).
// Decode issues about one 16-byte copy per cycle per SM, so the ~10 instructions per row
// around the two copies count: 32-bit row arithmetic and one unsigned 32x32->64 multiply-add
// per pointer (signed 64-bit math here measured 3% slower prefill, 6-10% slower decode at one
// block per SM and in batched decode).
template <int BN, int THREADS, typename T, int HD>
__device__ __forceinline__ void load_kv_tile_async(SmemTile<HD> sk, SmemTile<HD> sv, const AttnParams<T>& p,
                                                   const TableWindow& tw, int kvh, int key0, int lo, int hi) {
    static_assert(BN <= 32 * 8, "a tile lies in one table window (block_size >= 8)");
    const uint32_t row_bytes = p.nKV * p.hd * sizeof(T), to_v = sv.base - sk.base;
    for_each_tile_chunk<BN, THREADS>(sk, [&](int r, int c, uint32_t s) {
        const bool in_head = c * 8 < p.hd;  // the same for all of a chunk's rows
        const int col = kvh * p.hd + (in_head ? c * 8 : 0), n_keys = in_head ? hi - lo : 0;
        const char* k = reinterpret_cast<const char*>(p.k + col);
        const char* v = reinterpret_cast<const char*>(p.v + col);
        const int key = key0 + r;
        const uint32_t block = tw.block_of(key);
        const bool valid = (unsigned)(key - lo) < (unsigned)n_keys;  // lo <= key < hi, in the head
        const uint32_t row = valid ? block << tw.pg.shift | (key & tw.pg.mask) : 0;
        cp_async_16(s, k + mul_wide(row, row_bytes), valid);
        cp_async_16(s + to_v, v + mul_wide(row, row_bytes), valid);
    });
}

// Starts copying the query rows of `map` into a tile; rows past map.rows and dims past hd are
// zero-filled.
template <int ROWS, int THREADS, typename T, int HD>
__device__ __forceinline__ void load_q_tile_async(SmemTile<HD> sq, const AttnParams<T>& p, const RowMap& map) {
    for_each_tile_chunk<ROWS, THREADS>(sq, [&](int r, int c, uint32_t s) {
        const bool valid = r < map.rows && c * 8 < p.hd;
        cp_async_16(s, valid ? p.q + ((int64_t)map.token(r) * p.nH + map.head(r)) * p.hd + c * 8 : p.q, valid);
    });
}

// ------------------------------------------------------------------------------------------
// Prefill: FlashAttention-2 on mma.sync.
//   Grid (nKV, query blocks). A block owns 128 query rows (BM/g tokens of one GQA group). The
//   latest tokens go first, across all heads: causal blocks at the end of the sequence have the
//   most work, so the light ones fill the tail (the other order, heads one after another,
//   measured 257 instead of 312 TFLOP/s at S = 4096). At HD 64 and 128: 4 warps, each 32 rows
//   = 2 m-tiles, so every K/V fragment read from shared memory feeds 2 mma. At HD 256 a warp's
//   o would take 256 fp32 registers per lane that way, so the block has 8 warps of 16 rows (one
//   m-tile) instead: still 128 rows, so each K/V tile serves as many queries.
//   The keys the block can see, [lo, last position], are walked in tiles of BN keys; the tiles
//   before lo (sliding window) and after the diagonal (causal) are never loaded. K/V tiles are
//   double-buffered: tile i+1 is copied with cp.async while tile i is computed (and the table
//   entries of tile i+2 are read). Only tiles that some row sees partially (the diagonal, the
//   window's start) apply the element mask.
//   Shared memory: Q 128 x HD + 2 stages x (K, V) BN x HD = 96 KB at HD 128, BN 64 (and the
//   table rings, 1.5 KB): 2 blocks per SM; 192 KB at HD 256: one block (8 warps) per SM.
//   Registers: o (16·MT x HD / 32 lanes = 128 fp32 at HD 128 and 256) + s (MT·BN/2 fp32): at
//   most 255, no spill with the paged loader's 32-bit address math (before it: 20 bytes spilled
//   at HD 128, 7% slower). BN = 32 measured 15% slower.
// ------------------------------------------------------------------------------------------
constexpr int kPrefillBM = 128, kPrefillBN = 64;
// Shared memory on sm_90: per SM, of which each block takes a reserved 1 KB, and per block.
constexpr int kSmemPerSmBytes = 228 * 1024, kSmemReservedBytes = 1024, kMaxSmemBytes = 227 * 1024;

// The prefill block of tile width HD: kPrefillBM rows in WARPS warps of MT m-tiles each.
template <int HD>
struct PrefillShape {
    static constexpr int MT = HD <= 128 ? 2 : 1, WARPS = kPrefillBM / (16 * MT), THREADS = 32 * WARPS;
    static constexpr int MIN_BLOCKS = HD <= 128 ? 2 : 1;  // per SM, as shared memory allows
};

template <typename T, int HD, int BN>
__global__ void __launch_bounds__(PrefillShape<HD>::THREADS, PrefillShape<HD>::MIN_BLOCKS)
    attention_prefill_kernel(const AttnParams<T> p) {
    using Shape = PrefillShape<HD>;
    constexpr int BM = kPrefillBM, MT = Shape::MT, WM = 16 * MT, THREADS = Shape::THREADS, NT = BN / 8, DT = HD / 8;
    extern __shared__ __align__(128) uint4 smem[];
    const SmemTile<HD> sq{(uint32_t)__cvta_generic_to_shared(smem)};  // then stage s: K, V at rows BM + 2s*BN
    auto k_stage = [&](int s) { return sq.rows_from(BM + 2 * s * BN); };
    auto v_stage = [&](int s) { return sq.rows_from(BM + (2 * s + 1) * BN); };
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    const int g = p.nH / p.nKV, tokens = BM / g;
    const int t0 = (gridDim.y - 1 - blockIdx.y) * tokens, t_end = min(p.n_q, t0 + tokens);
    const RowMap map{g, (int)blockIdx.x, t0, (t_end - t0) * g};
    const int pos0 = p.pos0[0], pos_lo = pos0 + t0, pos_hi = pos0 + t_end - 1;
    const KeyRange keys = visible_keys(pos_lo, pos_hi, p.window);
    const int tile_lo = keys.lo / BN, tile_hi = (keys.hi - 1) / BN;

    auto row_pos = [&](int r) { return pos0 + map.token(warp * WM + r); };  // position of the warp's row r
    float o[MT][DT][4] = {}, m[MT][2], l[MT][2] = {};
#pragma unroll
    for (int mt = 0; mt < MT; mt++) m[mt][0] = m[mt][1] = -INFINITY;
    const float c = p.scale * kLog2e;

    TableWindow tw(pages_of(p, 0), keys.lo, keys.hi, lane, sq.base + (BM + 4 * BN) * SmemTile<HD>::kRowBytes + warp * kTableRingBytes);
    load_q_tile_async<BM, THREADS>(sq, p, map);
    cp_async_commit();
    load_kv_tile_async<BN, THREADS>(k_stage(0), v_stage(0), p, tw, map.kvh, tile_lo * BN, keys.lo, keys.hi);
    cp_async_commit();
    for (int tile = tile_lo; tile <= tile_hi; tile++) {
        const int stage = (tile - tile_lo) & 1, key0 = tile * BN;
        if (tile < tile_hi) {
            tw.advance(key0 + BN);
            load_kv_tile_async<BN, THREADS>(k_stage(stage ^ 1), v_stage(stage ^ 1), p, tw, map.kvh, key0 + BN, keys.lo,
                                            keys.hi);
        }
        cp_async_commit();
        cp_async_wait<1>();  // everything but the prefetch just issued has landed
        __syncthreads();

        float s[MT][NT][4];
        warp_scores<T, HD, MT, NT>(s, QFromSmem<HD>(sq.rows_from(warp * WM), lane), k_stage(stage), lane);
        const bool partial = key0 + BN - 1 > pos_lo || (p.window > 0 && key0 <= pos_hi - p.window);
        if (partial) mask_scores<MT, NT>(s, row_pos, key0, p.window, lane);
        online_softmax<MT, NT, DT>(s, m, l, o, c);
        warp_pv<T, HD, MT, NT>(o, s, v_stage(stage), lane);
        __syncthreads();  // all warps are done with this stage before it is refilled
    }

    // out = o / l, with l summed over the 4 lanes that share a row.
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            float sum = l[mt][half];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
            const int r = warp * WM + mt * 16 + half * 8 + lane / 4;
            if (r >= map.rows) continue;
            T* dst = p.out + ((int64_t)map.token(r) * p.nH + map.head(r)) * p.hd + (lane & 3) * 2;
#pragma unroll
            for (int d = 0; d < DT; d++)
                if (d * 8 < p.hd)  // dims past hd (a padded tile) are not stored
                    *reinterpret_cast<uint32_t*>(dst + d * 8) =
                        pack2<T>(o[mt][d][2 * half] * inv, o[mt][d][2 * half + 1] * inv);
        }
}

// ------------------------------------------------------------------------------------------
// Decode: flash-decoding for n_q*g <= 16 query rows per sequence (one token: the g heads of a
// KV group), every sequence of a batch in one launch.
//   Splits: grid (nKV, S). Each KV head has S split slots, a number fixed by (nKV, batch, s_cap)
//   and the GPU, so every step launches the same grid and a CUDA graph can replay it:
//   S = max(2·batch, resident blocks / nKV) (for one sequence: one wave of blocks). At run time
//   the slots are dealt out in proportion to length (plan_slots): sequence b's visible keys
//   cover T_b tiles of 64 keys; with k = S - batch + 1 it gets n_b = min(T_b, ceil(T_b·k / ΣT))
//   consecutive slots, which split its tiles evenly (their sizes differ by one tile at most).
//   They always fit: Σ n_b < Σ (T_b·k / ΣT + 1) = S + 1. Slots past Σ n_b return at once.
//   Each block reads its keys of one KV head once for all the group's query heads (the 16-row
//   m-tile is the packed group). Inside a block, tiles of 64 keys stream through STAGES
//   cp.async buffers (3: 100 KB of shared memory at HD 128, 2 blocks per SM; measured best of
//   2/3/4. At HD 256: 200 KB, one block per SM, as it would be with 2 stages; 3 keep as many
//   bytes in flight per SM as at HD 128). Warp w takes keys 16w .. 16w+15 of each tile and
//   keeps its own online-softmax state (m, l, o) over them. At the end the 4 warps' states
//   merge through shared memory and the block writes, per row, o_s = o/l and
//   lse_s = c·m + log2(l) (the log2-sum-exp of its scaled scores).
// Combine: per (token, head) row, over its sequence's splits s, with M = max_s lse_s:
//   out = Σ_s 2^(lse_s - M) · o_s / Σ_s 2^(lse_s - M),
// computed in one pass with a running max (the online softmax again, over splits). It is
// launched as a programmatic dependent of the split kernel: its blocks start while the split
// kernel drains and wait (griddepcontrol.wait) until its writes are visible.
// ------------------------------------------------------------------------------------------
constexpr int kDecodeRows = 16, kDecodeBN = 64, kDecodeThreads = 128, kDecodeStages = 3, kMaxSlots = 1024;

// The keys sequence b's queries see, [lo, hi), and the 64-key tiles that hold them.
struct SeqTiles {
    int lo, hi, tile_lo, tiles;
};
template <typename T>
__device__ __forceinline__ SeqTiles seq_tiles(const AttnParams<T>& p, int b) {
    const int pos0 = p.pos0[b];
    const KeyRange k = visible_keys(pos0, pos0 + p.n_q - 1, p.window);
    const int tile_lo = k.lo / kDecodeBN;
    return {k.lo, k.hi, tile_lo, (k.hi - 1) / kDecodeBN - tile_lo + 1};
}

// Sequence b owns slots first .. first+n-1, which split its tiles evenly (b = -1: no one).
struct SlotRun {
    int b, first, n;
    // Slot first + j covers tiles [tile_begin(j), tile_begin(j + 1)) of the sequence's `tiles`.
    __device__ int tile_begin(int j, int tiles) const { return (int)((int64_t)j * tiles / n); }
};
// The deal described above, run by a whole warp (lanes take 32 sequences at a time): returns
// the run of sequence want_b, or with want_b < 0 the run that holds `slot`.
template <typename T>
__device__ SlotRun plan_slots(const AttnParams<T>& p, int slots, int want_b, int slot) {
    const int lane = threadIdx.x % 32;
    int total = 0;
    for (int b = lane; b < p.batch; b += 32) total += seq_tiles(p, b).tiles;
    for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
    const int64_t k = slots - p.batch + 1;
    int first = 0;  // slots taken by the sequences before this group of 32
    for (int b0 = 0; b0 < p.batch; b0 += 32) {
        const int b = b0 + lane, t = b < p.batch ? seq_tiles(p, b).tiles : 0;
        const int n = (int)min((int64_t)t, (t * k + total - 1) / total);  // min(T_b, ceil(T_b·k / ΣT))
        int end = n;  // inclusive prefix sum over the lanes: b's slots end at first + end
        for (int o = 1; o < 32; o <<= 1) {
            const int x = __shfl_up_sync(0xffffffffu, end, o);
            if (lane >= o) end += x;
        }
        end += first;
        const unsigned hit = __ballot_sync(0xffffffffu, n > 0 && (want_b >= 0 ? b == want_b : slot >= end - n && slot < end));
        if (hit) {
            const int src = __ffs(hit) - 1;
            return {b0 + src, __shfl_sync(0xffffffffu, end - n, src), __shfl_sync(0xffffffffu, n, src)};
        }
        first = __shfl_sync(0xffffffffu, end, 31);
    }
    return {-1, 0, 0};
}

// o_part [S][n_q*nH][hd] and lse_part [S][n_q*nH]: slot s holds rows (t*nH + h) of its sequence.
template <typename T, int HD, int STAGES>
__global__ void __launch_bounds__(kDecodeThreads) attention_decode_kernel(const AttnParams<T> p, int slots,
                                                                          float* o_part, float* lse_part) {
    constexpr int BN = kDecodeBN, WN = 16, NT = WN / 8, DT = HD / 8, WARPS = kDecodeThreads / 32;
    static_assert(STAGES <= 8, "the table ring runs 8 tiles ahead (TableWindow)");
    static_assert(WARPS * kDecodeRows * (HD + 2) * 4 <= 2 * STAGES * BN * HD * 2, "the merge fits in the K/V stages");
    extern __shared__ __align__(128) uint4 smem[];
    const SmemTile<HD> sq{(uint32_t)__cvta_generic_to_shared(smem)};  // then stage s: K, V at rows 16 + 2s*BN
    auto k_stage = [&](int s) { return sq.rows_from(kDecodeRows + 2 * s * BN); };
    auto v_stage = [&](int s) { return sq.rows_from(kDecodeRows + (2 * s + 1) * BN); };
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, slot = blockIdx.y;

    const SlotRun run = plan_slots(p, slots, -1, slot);
    if (run.b < 0) return;  // an idle slot (same for the whole block)
    const SeqTiles seq = seq_tiles(p, run.b);
    const int tile_lo = seq.tile_lo + run.tile_begin(slot - run.first, seq.tiles);
    const int tile_hi = seq.tile_lo + run.tile_begin(slot - run.first + 1, seq.tiles) - 1;
    const int lo = max(seq.lo, tile_lo * BN), hi = min(seq.hi, (tile_hi + 1) * BN);
    const int g = p.nH / p.nKV, pos0 = p.pos0[run.b];
    const RowMap map{g, (int)blockIdx.x, run.b * p.n_q, p.n_q * g};
    // Positions of this lane's two rows (lane/4 and lane/4 + 8), for the mask.
    const int my_pos[2] = {pos0 + (lane / 4) / g, pos0 + (lane / 4 + 8) / g};
    auto row_pos = [&](int r) { return my_pos[(r >> 3) & 1]; };
    float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
    const float c = p.scale * kLog2e;

    // Prologue: Q and the first STAGES-1 tiles in flight (one commit group each, maybe empty).
    // Everything so far read only pos0 and the table, which exist before the kernel ahead of
    // this one in the stream runs (rope, which writes q and this step's K/V rows); the launch is
    // a programmatic dependent one, so this much overlaps that kernel's tail.
    TableWindow tw(pages_of(p, run.b), lo, hi, lane, sq.base + (kDecodeRows + 2 * STAGES * BN) * SmemTile<HD>::kRowBytes + warp * kTableRingBytes);
    grid_dependency_wait();
    allow_dependent_launch();  // the combine kernel may start; it waits for our writes anyway
    load_q_tile_async<kDecodeRows, kDecodeThreads>(sq, p, map);
    cp_async_commit();
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) {
        if (tile_lo + i <= tile_hi) {
            tw.advance((tile_lo + i) * BN);
            load_kv_tile_async<BN, kDecodeThreads>(k_stage(i), v_stage(i), p, tw, map.kvh, (tile_lo + i) * BN, lo, hi);
        }
        cp_async_commit();
    }
    const int pos_hi = pos0 + p.n_q - 1;  // the last query's position
    cp_async_wait<STAGES - 1>();           // Q has landed
    __syncthreads();
    // Q's fragments are read once into registers (32 at HD 128); at HD 256 they would take 64
    // next to o's 128, so they are read from shared memory at each use instead.
    const std::conditional_t<HD <= 128, QInRegisters<HD>, QFromSmem<HD>> q(sq, lane);
    for (int tile = tile_lo; tile <= tile_hi; tile++) {
        const int stage = (tile - tile_lo) % STAGES, next = tile + STAGES - 1, key0 = tile * BN + warp * WN;
        if (next <= tile_hi) {
            tw.advance(next * BN);
            load_kv_tile_async<BN, kDecodeThreads>(k_stage((next - tile_lo) % STAGES), v_stage((next - tile_lo) % STAGES), p,
                                                   tw, map.kvh, next * BN, lo, hi);
        }
        cp_async_commit();
        cp_async_wait<STAGES - 1>();  // tile `tile` (and Q) have landed
        __syncthreads();

        float s[1][NT][4];
        warp_scores<T, HD, 1, NT>(s, q, k_stage(stage).rows_from(warp * WN), lane);
        // Only the tiles that some row sees in part (the last one; the window's first) need the mask.
        if (tile * BN + BN - 1 > pos0 || (p.window > 0 && tile * BN <= pos_hi - p.window))
            mask_scores<1, NT>(s, row_pos, key0, p.window, lane);
        online_softmax<1, NT, DT>(s, m, l, o, c);
        warp_pv<T, HD, 1, NT>(o, s, v_stage(stage).rows_from(warp * WN), lane);
        __syncthreads();
    }
    cp_async_wait<0>();

    // Merge the warps: each writes (m, l, o) of its 16 rows to shared memory (reusing the K/V
    // stages), then the block combines them per row and writes this split's o/l and lse.
    float* so = reinterpret_cast<float*>(smem) + kDecodeRows * HD / 2;  // [WARPS][16][HD], over the K/V stages
    float* sm = so + WARPS * kDecodeRows * HD;          // [WARPS][16]
    float* sl = sm + WARPS * kDecodeRows;               // [WARPS][16]
#pragma unroll
    for (int half = 0; half < 2; half++) {
        float sum = l[0][half];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int r = half * 8 + lane / 4;
        float* row = so + (warp * kDecodeRows + r) * HD + (lane & 3) * 2;
#pragma unroll
        for (int d = 0; d < DT; d++) {
            row[d * 8] = o[0][d][2 * half];
            row[d * 8 + 1] = o[0][d][2 * half + 1];
        }
        if ((lane & 3) == 0) {
            sm[warp * kDecodeRows + r] = m[0][half];
            sl[warp * kDecodeRows + r] = sum;
        }
    }
    __syncthreads();
    const int rows_slot = p.n_q * p.nH;
    for (int i = threadIdx.x; i < map.rows * HD; i += kDecodeThreads) {
        const int r = i / HD, d = i % HD;
        if (d >= p.hd) continue;  // a padded tile's dims past hd
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < WARPS; w++) mx = fmaxf(mx, sm[w * kDecodeRows + r]);
        float lsum = 0.0f, osum = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; w++) {
            const float mw = sm[w * kDecodeRows + r];
            const float wt = mw == -INFINITY ? 0.0f : exp2_approx((mw - mx) * c);
            lsum += wt * sl[w * kDecodeRows + r];
            osum += wt * so[(w * kDecodeRows + r) * HD + d];
        }
        const int64_t row = (int64_t)slot * rows_slot + r / g * p.nH + map.head(r);
        o_part[row * p.hd + d] = lsum > 0.0f ? osum / lsum : 0.0f;
        if (d == 0) lse_part[row] = lsum > 0.0f ? mx * c + log2f(lsum) : -INFINITY;
    }
}

template <typename T, int HD>
__global__ void __launch_bounds__(256) attention_combine_kernel(const AttnParams<T> p, int slots, const float* o_part,
                                                                const float* lse_part) {
    constexpr int COLS = HD / 4, GROUPS = 256 / COLS;  // float4 columns x groups of splits
    __shared__ float4 part[GROUPS][COLS];
    __shared__ float part_m[GROUPS], part_l[GROUPS];
    const int row = blockIdx.x, rows_slot = p.n_q * p.nH;  // row = (b * n_q + t) * nH + head
    const int seq = row / rows_slot, local = row % rows_slot;
    const int col = threadIdx.x % COLS, grp = threadIdx.x / COLS;
    const bool live = col < p.hd / 4;  // columns past hd (a padded tile) have nothing to merge
    // pos0 is written before the split kernel starts (stream order), so the plan needs no wait.
    const SlotRun run = plan_slots(p, slots, seq, -1);
    grid_dependency_wait();
    allow_dependent_launch();  // e.g. the next step's split kernel: it waits for us before using our output

    // Each group merges splits grp, grp + GROUPS, ... with a running max m and sum l.
    float m = -INFINITY, l = 0.0f;
    float4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
    for (int s = grp; live && s < run.n; s += GROUPS) {
        const int64_t r = (int64_t)(run.first + s) * rows_slot + local;
        const float x = lse_part[r];
        const float4 v = reinterpret_cast<const float4*>(o_part + r * p.hd)[col];
        const float m_new = fmaxf(m, x);
        const float a = m == -INFINITY ? 0.0f : exp2f(m - m_new), b = x == -INFINITY ? 0.0f : exp2f(x - m_new);
        acc = {acc.x * a + v.x * b, acc.y * a + v.y * b, acc.z * a + v.z * b, acc.w * a + v.w * b};
        l = l * a + b;
        m = m_new;
    }
    part[grp][col] = acc;
    if (col == 0) part_m[grp] = m, part_l[grp] = l;
    __syncthreads();
    if (grp != 0 || !live) return;
    float mx = -INFINITY, lsum = 0.0f;
    for (int j = 0; j < GROUPS; j++) mx = fmaxf(mx, part_m[j]);
    acc = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < GROUPS; j++) {
        const float w = part_m[j] == -INFINITY ? 0.0f : exp2f(part_m[j] - mx);
        const float4 v = part[j][col];
        acc = {acc.x + w * v.x, acc.y + w * v.y, acc.z + w * v.z, acc.w + w * v.w};
        lsum += w * part_l[j];
    }
    const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
    T* dst = p.out + (int64_t)row * p.hd + col * 4;
    dst[0] = from_float<T>(acc.x * inv);
    dst[1] = from_float<T>(acc.y * inv);
    dst[2] = from_float<T>(acc.z * inv);
    dst[3] = from_float<T>(acc.w * inv);
}

// ------------------------------------------------------------------------------------------
// Warp-per-row kernel (the fp32 path of prefill and decode): one warp walks the visible keys
// of one (sequence, token, head) row in order with the online softmax, lane i holding dims
// i, i+32, ... below hd (HD / 32 slots per lane, HD the tile width of hd).
// ------------------------------------------------------------------------------------------
template <typename T, int HD>
__global__ void attention_rowwise_kernel(const AttnParams<T> p) {
    constexpr int E = HD / 32;
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (row >= p.batch * p.n_q * p.nH) return;
    const int b = row / (p.n_q * p.nH), t = row / p.nH % p.n_q, h = row % p.nH, kvh = h / (p.nH / p.nKV);
    const int pos = p.pos0[b] + t, ld = p.nKV * p.hd;
    const KeyRange keys = visible_keys(pos, pos, p.window);
    const Pages pg = pages_of(p, b);
    auto has = [&](int e) { return lane + 32 * e < p.hd; };  // slot e holds a dim of the head
    const T* qr = p.q + (int64_t)row * p.hd + lane;
    float q[E], o[E] = {}, m = -INFINITY, l = 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++) q[e] = has(e) ? to_float(qr[32 * e]) : 0.0f;
    for (int j = keys.lo; j < keys.hi; j++) {
        const int64_t at = pg.row(j) * ld + kvh * p.hd + lane;
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++)
            if (has(e)) dot += q[e] * to_float(p.k[at + 32 * e]);
        const float s = warp_sum(dot) * p.scale, m_new = fmaxf(m, s);
        const float corr = expf(m - m_new), pj = expf(s - m_new);
        l = l * corr + pj;
#pragma unroll
        for (int e = 0; e < E; e++)
            if (has(e)) o[e] = o[e] * corr + pj * to_float(p.v[at + 32 * e]);
        m = m_new;
    }
    T* out = p.out + (int64_t)row * p.hd + lane;
#pragma unroll
    for (int e = 0; e < E; e++)
        if (has(e)) out[32 * e] = from_float<T>(o[e] / l);
}

// ------------------------------------------------------------------------------------------
// Naive: the oracle. One score row per (sequence b, token t, head h), row = (b*n_q + t)*nH + h:
// scores[row][j] (fp32, row stride s_cap) for j < pos0[b] + n_q, -inf where masked; then an
// in-place softmax per row; then out = P·V over the visible keys, one thread per output.
// ------------------------------------------------------------------------------------------
template <typename T>
struct NaiveRow {  // what a score row is about
    int b, h, kvh, pos, n_keys;
    KeyRange keys;  // the keys it sees
    __device__ NaiveRow(const AttnParams<T>& p, int row) {
        b = row / (p.n_q * p.nH), h = row % p.nH, kvh = h / (p.nH / p.nKV);
        pos = p.pos0[b] + row / p.nH % p.n_q, n_keys = p.pos0[b] + p.n_q;
        keys = visible_keys(pos, pos, p.window);
    }
};

template <typename T>
__global__ void naive_scores_kernel(const AttnParams<T> p, float* scores) {
    const int row = blockIdx.x, j = blockIdx.y * blockDim.x + threadIdx.x;
    const NaiveRow<T> r(p, row);
    if (j >= r.n_keys) return;
    float s = -INFINITY;
    if (j >= r.keys.lo && j < r.keys.hi) {
        const T* qr = p.q + (int64_t)row * p.hd;
        const T* kr = p.k + pages_of(p, r.b).row(j) * p.nKV * p.hd + r.kvh * p.hd;
        float dot = 0.0f;
        for (int d = 0; d < p.hd; d++) dot += to_float(qr[d]) * to_float(kr[d]);
        s = dot * p.scale;
    }
    scores[(int64_t)row * p.s_cap + j] = s;
}

template <typename T>
__global__ void naive_softmax_kernel(const AttnParams<T> p, float* scores) {
    __shared__ float red[32];
    float* x = scores + (int64_t)blockIdx.x * p.s_cap;
    const int n = NaiveRow<T>(p, blockIdx.x).n_keys, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    auto block_reduce = [&](float v, bool is_max) {  // over all threads of the block
        v = is_max ? warp_max(v) : warp_sum(v);
        if (lane == 0) red[warp] = v;
        __syncthreads();
        v = lane < (int)blockDim.x / 32 ? red[lane] : (is_max ? -INFINITY : 0.0f);
        v = is_max ? warp_max(v) : warp_sum(v);
        __syncthreads();
        return v;
    };
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, x[j]);
    mx = block_reduce(mx, true);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) sum += (x[j] = expf(x[j] - mx));
    const float inv = 1.0f / block_reduce(sum, false);
    for (int j = threadIdx.x; j < n; j += blockDim.x) x[j] *= inv;
}

template <typename T>
__global__ void naive_pv_kernel(const AttnParams<T> p, const float* probs) {
    const int row = blockIdx.x, d = threadIdx.x;
    const NaiveRow<T> r(p, row);
    const Pages pg = pages_of(p, r.b);
    const float* pr = probs + (int64_t)row * p.s_cap;
    float acc = 0.0f;
    for (int j = r.keys.lo; j < r.keys.hi; j++) acc += pr[j] * to_float(p.v[pg.row(j) * p.nKV * p.hd + r.kvh * p.hd + d]);
    p.out[(int64_t)row * p.hd + d] = from_float<T>(acc);
}

// ------------------------------------------------------------------------------------------
// Host side: argument checks and launches.
// ------------------------------------------------------------------------------------------
template <typename T>
void check_params(const AttnParams<T>& p, const char* who, bool any_hd) {
    const std::string w = std::string(who) + ": ";
    auto str = [](int x) { return std::to_string(x); };
    if (p.nKV <= 0 || p.nH % p.nKV != 0) fail(w + "nH (" + str(p.nH) + ") is not a multiple of nKV (" + str(p.nKV) + ")");
    if (!any_hd && !attention_supports_head_dim(p.hd))
        fail(w + "head_dim " + str(p.hd) + " is not supported (" + attention_supported_head_dims() + ")");
    if (p.n_q > p.s_cap) fail(w + str(p.n_q) + " queries do not fit " + str(p.s_cap) + " positions (s_cap)");
    if (p.window < 0) fail(w + "negative window");
    if (p.batch < 1 || p.batch > 32767) fail(w + "batch " + str(p.batch) + " is not in 1 .. 32767");
    if (p.block_size < 8 || (p.block_size & (p.block_size - 1)) != 0)
        fail(w + "block_size " + str(p.block_size) + " is not a power of two >= 8");
    if (p.block_table == nullptr) fail(w + "no block table");
    if ((int64_t)p.table_stride * p.block_size < p.s_cap)
        fail(w + "table_stride " + str(p.table_stride) + " blocks of " + str(p.block_size) + " do not cover s_cap = " + str(p.s_cap));
}

// Calls f(std::integral_constant<int, HD>) for the tile width HD of head size hd (checked by
// check_params): the smallest of 64, 128, 256 that holds it.
template <typename F>
void dispatch_hd(int hd, F&& f) {
    if (hd <= 64) f(std::integral_constant<int, 64>{});
    else if (hd <= 128) f(std::integral_constant<int, 128>{});
    else f(std::integral_constant<int, 256>{});
}

// Raises a kernel's dynamic shared-memory limit, once per kernel.
template <auto Kernel>
void allow_smem(int bytes) {
    static const bool done = [&] {
        cudaCheck(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        return true;
    }();
    (void)done;
}

template <typename T, int HD, int BN = kPrefillBN>
void launch_prefill(const AttnParams<T>& p, cudaStream_t stream) {
    using Shape = PrefillShape<HD>;
    const int g = p.nH / p.nKV, tokens = kPrefillBM / g;
    if (tokens == 0) fail("attention_prefill: more than 128 query heads per KV head");
    constexpr auto kernel = attention_prefill_kernel<T, HD, BN>;
    constexpr int smem = (kPrefillBM + 4 * BN) * HD * 2 + Shape::WARPS * kTableRingBytes;
    static_assert(smem <= kMaxSmemBytes && (smem + kSmemReservedBytes) * Shape::MIN_BLOCKS <= kSmemPerSmBytes,
                  "MIN_BLOCKS blocks fit in an SM's shared memory");
    allow_smem<kernel>(smem);
    kernel<<<dim3(p.nKV, (p.n_q + tokens - 1) / tokens), Shape::THREADS, smem, stream>>>(p);
    cudaCheckLaunch();
}

template <int HD, int STAGES = kDecodeStages>
constexpr int decode_smem_bytes() {
    constexpr int bytes = (kDecodeRows + 2 * STAGES * kDecodeBN) * HD * 2 + kDecodeThreads / 32 * kTableRingBytes;
    static_assert(bytes <= kMaxSmemBytes, "shared memory per block");
    return bytes;
}

// The most split slots per KV head a decode of `batch` sequences of up to s_cap positions uses
// (the workspace is sized for it): kMaxSlots or 2·batch, and never more than one per tile.
inline int decode_max_slots(int s_cap, int batch) {
    const int64_t tiles = (s_cap + kDecodeBN - 1) / kDecodeBN;
    return (int)std::min<int64_t>(batch * tiles, std::max(2 * batch, kMaxSlots));
}

// Split slots per KV head (see the decode kernel): max(2·batch, resident blocks / nKV), within
// decode_max_slots. Fixed by the model, the batch size, s_cap and the GPU.
template <typename T, int HD, int STAGES = kDecodeStages>
int decode_slot_count(int s_cap, int nKV, int batch) {
    constexpr auto kernel = attention_decode_kernel<T, HD, STAGES>;
    allow_smem<kernel>(decode_smem_bytes<HD, STAGES>());
    static const int resident = [] {
        int dev = 0, sms = 0, per_sm = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kDecodeThreads, decode_smem_bytes<HD, STAGES>()));
        return sms * per_sm;
    }();
    return std::min(decode_max_slots(s_cap, batch), std::max(2 * batch, resident / nKV));
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent launch: its
// blocks may start before the previous kernel in the stream has finished, and must execute
// griddepcontrol.wait before touching what that kernel writes.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, int smem, cudaStream_t stream, Args... args) {
    cudaLaunchAttribute pdl;
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = &pdl;
    cfg.numAttrs = 1;
    cudaCheck(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// slots: split slots per KV head (decode_slot_count; the workspace must hold that many).
template <typename T, int HD, int STAGES = kDecodeStages>
void launch_decode(const AttnParams<T>& p, void* workspace, int slots, cudaStream_t stream) {
    float* o_part = static_cast<float*>(workspace);
    float* lse_part = o_part + (size_t)slots * p.n_q * p.nH * p.hd;
    launch_dependent(attention_decode_kernel<T, HD, STAGES>, dim3(p.nKV, slots), dim3(kDecodeThreads),
                     decode_smem_bytes<HD, STAGES>(), stream, p, slots, o_part, lse_part);
    launch_dependent(attention_combine_kernel<T, HD>, dim3(p.batch * p.n_q * p.nH), dim3(256), 0, stream, p, slots,
                     (const float*)o_part, (const float*)lse_part);
}

template <typename T>
void launch_rowwise(const AttnParams<T>& p, cudaStream_t stream) {
    const int rows = p.batch * p.n_q * p.nH, threads = 128;
    dispatch_hd(p.hd, [&](auto hd) {
        attention_rowwise_kernel<T, decltype(hd)::value><<<(rows * 32 + threads - 1) / threads, threads, 0, stream>>>(p);
        cudaCheckLaunch();
    });
}

}  // namespace attn

// Bytes of fp32 scores attention_naive needs: [batch * n_q * nH, s_cap].
inline size_t attention_naive_workspace_bytes(int batch, int n_q, int nH, int s_cap) {
    return sizeof(float) * batch * n_q * nH * s_cap;
}

// The readable oracle: three kernels over an fp32 score matrix `scores` (see above for size).
// Any batch; each sequence's n_q queries at its pos0.
template <typename T>
void attention_naive(const AttnParams<T>& p, float* scores, cudaStream_t stream) {
    attn::check_params(p, "attention_naive", true);
    if (p.n_q <= 0) return;
    const int rows = p.batch * p.n_q * p.nH;
    attn::naive_scores_kernel<T><<<dim3(rows, (p.s_cap + 127) / 128), 128, 0, stream>>>(p, scores);
    cudaCheckLaunch();
    attn::naive_softmax_kernel<T><<<rows, 256, 0, stream>>>(p, scores);
    cudaCheckLaunch();
    attn::naive_pv_kernel<T><<<rows, p.hd, 0, stream>>>(p, scores);
    cudaCheckLaunch();
}

// Flash attention over n_q >= 1 new queries of one sequence (any chunk of a prompt, appended
// at pos0[0]).
template <typename T>
void attention_prefill(const AttnParams<T>& p, cudaStream_t stream) {
    attn::check_params(p, "attention_prefill", false);
    if (p.batch != 1) fail("attention_prefill: batch " + std::to_string(p.batch) + " (one sequence per call)");
    if (p.n_q <= 0) return;
    if constexpr (std::is_same_v<T, float>) {
        attn::launch_rowwise(p, stream);
    } else {
        attn::dispatch_hd(p.hd, [&](auto hd) { attn::launch_prefill<T, decltype(hd)::value>(p, stream); });
    }
}

// Workspace of attention_decode for `batch` sequences of up to max_n_q queries each: per split
// slot, per (token, head) row, hd fp32 partial outputs and one log-sum-exp.
inline size_t attention_decode_workspace_bytes(int nH, int hd, int s_cap, int batch, int max_n_q = 1) {
    return sizeof(float) * attn::decode_max_slots(s_cap, batch) * max_n_q * nH * (hd + 1);
}

// Flash-decoding for n_q * (nH / nKV) <= 16 query rows per sequence and KV head (one token: any
// GQA group up to 16), for all `batch` sequences in one launch. The launch shape depends on
// (nH, nKV, hd, n_q, batch, s_cap) only: a captured graph replays with new pos0 and tables.
template <typename T>
void attention_decode(const AttnParams<T>& p, void* workspace, cudaStream_t stream) {
    attn::check_params(p, "attention_decode", false);
    if (p.n_q <= 0) return;
    if constexpr (std::is_same_v<T, float>) {
        (void)workspace;
        attn::launch_rowwise(p, stream);
    } else {
        if (p.n_q * (p.nH / p.nKV) > attn::kDecodeRows)
            fail("attention_decode: n_q * nH / nKV = " + std::to_string(p.n_q * (p.nH / p.nKV)) +
                 " query rows per KV head exceed 16; use attention_prefill");
        attn::dispatch_hd(p.hd, [&](auto hd) {
            constexpr int HD = decltype(hd)::value;
            attn::launch_decode<T, HD>(p, workspace, attn::decode_slot_count<T, HD>(p.s_cap, p.nKV, p.batch), stream);
        });
    }
}

}  // namespace olmo
