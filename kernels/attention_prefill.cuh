// attention_prefill.cuh: flash attention (FlashAttention-2) for a chunk of queries of one
// sequence, on mma.sync tensor cores.
// defines: attn::kPrefillBM, attn::kPrefillBN, attn::PrefillShape, attn::PrefillBlock, attn::prefill_heads,
//          attn::PrefillSchedule, attn::prefill_schedule, attn::prefill_grid, attn::prefill_block, attn::store_rows,
//          attn::attention_prefill_kernel, attn::prefill_smem_bytes, attn::launch_prefill
//
// A block owns BM = 128 query rows Q_b (h of the g = nH/nKV heads of one KV head, for BM/h
// tokens; h = g unless g does not divide BM: prefill_heads) and never holds a score matrix:
// it walks the keys it can see in tiles of BN = 64,
//     for each tile j:  S = Q_b·K_jᵀ;  mask;  m, l, O updated by the online softmax;  O += P·V_j
//     out_b = O / l
// (the steps: attention_steps.cuh), so K and V are read once per block and the work is
// 4·BM·keys·hd flops for 2·keys·hd·2 bytes of K/V.
//
//   Grid: nKV x g/h x query blocks, in groups of KV heads whose K/V fit in the L2 together, the
//   latest tokens of a group first (prefill_block). At HD 64 and 128:
//   4 warps, each 32 rows = 2 m-tiles, so every K/V fragment read from shared memory feeds 2
//   mma. At HD 256 a warp's o would take 256 fp32 registers per lane that way, so the block has
//   8 warps of 16 rows (one m-tile) instead: still 128 rows, so each K/V tile serves as many
//   queries.
//   The keys the block can see, [lo, last position], are walked in tiles of BN keys; the tiles
//   before lo (sliding window) and after the diagonal (causal) are never loaded. K/V tiles are
//   double-buffered: tile i+1 is copied with cp.async while tile i is computed (and the table
//   entries of tile i+2 are read). Only tiles that some row sees partially (the diagonal, the
//   window's start) apply the element mask.
//   Shared memory: Q 128 x HD + 2 stages x (K, V) BN x HD = 96 KB at HD 128, BN 64 (and the
//   table rings, 1.5 KB): 2 blocks per SM; 192 KB at HD 256: one block (8 warps) per SM. GPUs
//   that allow a block less (sm_80: 163 KB) run HD 256 on key tiles of BN = 32 (attention.cuh).
//   Registers: o (16·MT x HD / 32 lanes = 128 fp32 at HD 128 and 256) + s (MT·BN/2 fp32): at
//   most 255 per thread, without spills.
//   An FP8 cache (AttnParams<T, uint8_t>): each 16-byte chunk of a K/V tile receives 8 codes, and
//   once a tile has landed the block turns them into values of T in place (dequantize_kv_tile,
//   paged_kv.cuh) between two barriers; the flash steps are unchanged.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attention_params.cuh"
#include "attention_steps.cuh"
#include "cuda_common.cuh"
#include "paged_kv.cuh"
#include "tensor_core.cuh"

namespace olmo {
namespace attn {

constexpr int kPrefillBM = 128, kPrefillBN = 64;

// The prefill block of tile width HD: kPrefillBM rows in WARPS warps of MT m-tiles each.
template <int HD>
struct PrefillShape {
    static constexpr int MT = HD <= 128 ? 2 : 1, WARPS = kPrefillBM / (16 * MT), THREADS = 32 * WARPS;
    static constexpr int MIN_BLOCKS = HD <= 128 ? 2 : 1;  // per SM, as shared memory allows
};

// The query rows and keys of the prefill block, shared by this kernel and the Hopper one. The
// grid (prefill_grid) is one row of nKV x g/h x query-blocks blocks, handed out in groups of KV
// heads whose K and V fit together in kL2GroupKiB, so that the blocks resident at one time share
// them in the L2 (a 32/32-head S 16384 prefill's K/V come to 256 MB: all heads at once thrash
// it); inside a group, the latest query blocks first: causal blocks at the end of the sequence
// have the most work, so the light ones fill the tail (FlashAttention-3's LPT schedule).
struct PrefillBlock {
    RowMap map;
    int pos0, pos_lo, pos_hi;  // positions of token 0 and of the block's first and last token
    KeyRange keys;             // the keys some row of the block sees
    // Whether some row sees the tile of BN keys from key0 only in part (the diagonal, the
    // window's start): only those tiles are masked.
    __device__ bool partial(int key0, int bn, int window) const {
        return key0 + bn - 1 > pos_lo || (window > 0 && key0 <= pos_hi - window);
    }
};
constexpr int kL2GroupKiB = 32 << 10;  // about half the L2 of an H100 or H200

// How many of the g query heads of a KV head share a block's BM rows (a set of heads). A chunk
// shorter than BM tokens fills the rows with all g (when they fit). A longer one takes the most
// that divide BM (BM is a power of two: the largest power of two that divides g, at most BM), so
// that no row is empty: all g when g divides BM, else fewer, and the group's sets go to
// different blocks that read the same K/V (g = 5, the 40/8 shape: one head of 128 tokens, not
// five of 25 = 125 rows, whose diagonal also falls across two key tiles a fifth of the time: +3%
// there, docs/attention_notes.md). More than BM heads per KV head take BM or fewer at a time.
inline int prefill_heads(int g, int n_q, int bm) { return n_q < bm && g <= bm ? g : std::min(g & -g, bm); }

// How a prefill's blocks share out its rows, worked out once on the host (prefill_schedule): a
// block then only finds its own part (prefill_block), and every division there runs in every
// block before its first copy, which shows at hd 64, S 4096 (short blocks: a version that did
// six more divisions there cost 4%).
struct PrefillSchedule {
    int heads;   // query heads per block (prefill_heads)
    int tokens;  // tokens per block: BM / heads
    int sets;    // sets of heads per KV head: g / heads
    int blocks;  // query blocks per set of heads
};
template <typename T, typename C>
PrefillSchedule prefill_schedule(const AttnParams<T, C>& p, int bm) {
    const int g = p.nH / p.nKV, heads = prefill_heads(g, p.n_q, bm), tokens = bm / heads;
    return {heads, tokens, g / heads, (p.n_q + tokens - 1) / tokens};
}
inline dim3 prefill_grid(const PrefillSchedule& s, int nKV) { return dim3(s.blocks * s.sets * nKV); }

// Block blockIdx.x of the grid: a set of heads (set s: query heads s·heads .. s·heads + heads-1,
// of KV head s / sets) and `tokens` of their tokens.
template <typename T, typename C>
__device__ __forceinline__ PrefillBlock prefill_block(const AttnParams<T, C>& p, const PrefillSchedule& s) {
    const int pos0 = p.pos0[0];
    // One KV head's K and V over pos0 + n_q keys, in KiB: 32-bit arithmetic, as every block of
    // the grid pays for it before its first copy (a 64-bit division cost 4% at hd 64, S 4096).
    const int head_kib = (pos0 + p.n_q) / 16 * p.hd * (int)sizeof(C) / 32;
    const int group = min(p.nKV, max(1, kL2GroupKiB / max(head_kib, 1))) * s.sets;  // in sets of heads
    const int set0 = (int)blockIdx.x / (group * s.blocks) * group, n = min(group, p.nKV * s.sets - set0);
    const int i = (int)blockIdx.x - set0 * s.blocks;  // in the group: query block i / n of set set0 + i % n
    const int set = set0 + i % n, t0 = (s.blocks - 1 - i / n) * s.tokens, t_end = min(p.n_q, t0 + s.tokens);
    const int kvh = s.sets == 1 ? set : set / s.sets;  // (a division saved where it is by 1)
    const int pos_lo = pos0 + t0, pos_hi = pos0 + t_end - 1;
    const RowMap map{s.heads, kvh, t0, (t_end - t0) * s.heads, 0, set * s.heads};
    return {map, pos0, pos_lo, pos_hi, visible_keys(pos_lo, pos_hi, p.window)};
}

// out = o / l for a warp's MT m-tiles from block row row0, with l summed over the 4 lanes that
// share a row. Rows past map.rows and dims past hd (a padded tile) are not stored. O: the
// output's type (p.out's T, or fp16 for p.out16).
template <typename O, int MT, int DT, typename T, typename C>
__device__ __forceinline__ void store_rows_to(O* out, const AttnParams<T, C>& p, const RowMap& map,
                                              const float (&o)[MT][DT][4], const float (&l)[MT][2], int row0, int lane) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const float sum = quad_sum(l[mt][half]);
            const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
            const int r = row0 + mt * 16 + half * 8 + lane / 4;
            if (r >= map.rows) continue;
            O* dst = out + ((int64_t)map.token(r) * p.nH + map.head(r)) * p.hd + (lane & 3) * 2;
#pragma unroll
            for (int d = 0; d < DT; d++)
                if (d * 8 < p.hd)
                    *reinterpret_cast<uint32_t*>(dst + d * 8) =
                        pack2<O>(o[mt][d][2 * half] * inv, o[mt][d][2 * half + 1] * inv);
        }
}
template <typename T, int MT, int DT, typename C>
__device__ __forceinline__ void store_rows(const AttnParams<T, C>& p, const RowMap& map, const float (&o)[MT][DT][4],
                                           const float (&l)[MT][2], int row0, int lane) {
    if (p.out16) store_rows_to<__half, MT, DT>(p.out16, p, map, o, l, row0, lane);
    else store_rows_to<T, MT, DT>(p.out, p, map, o, l, row0, lane);
}

template <typename T, typename C, int HD, int BN>
__global__ void __launch_bounds__(PrefillShape<HD>::THREADS, PrefillShape<HD>::MIN_BLOCKS)
    attention_prefill_kernel(const AttnParams<T, C> p, const PrefillSchedule sched) {
    using Shape = PrefillShape<HD>;
    constexpr int BM = kPrefillBM, MT = Shape::MT, WM = 16 * MT, THREADS = Shape::THREADS, NT = BN / 8, DT = HD / 8;
    extern __shared__ __align__(128) uint4 smem[];
    const SmemTile<HD> sq{(uint32_t)__cvta_generic_to_shared(smem)};  // then stage s: K, V at rows BM + 2s*BN
    auto k_stage = [&](int s) { return sq.rows_from(BM + 2 * s * BN); };
    auto v_stage = [&](int s) { return sq.rows_from(BM + (2 * s + 1) * BN); };
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    const PrefillBlock blk = prefill_block(p, sched);
    const RowMap& map = blk.map;
    const KeyRange keys = blk.keys;
    const int tile_lo = keys.lo / BN, tile_hi = (keys.hi - 1) / BN;

    auto row_pos = [&](int r) { return blk.pos0 + map.token(warp * WM + r); };  // position of the warp's row r
    float o[MT][DT][4] = {}, m[MT][2], l[MT][2] = {};
#pragma unroll
    for (int mt = 0; mt < MT; mt++) m[mt][0] = m[mt][1] = -INFINITY;
    const float c = p.scale * kLog2e;

    const uint32_t rings = sq.base + (BM + 4 * BN) * SmemTile<HD>::kRowBytes;
    // An FP8 cache's scales, after the table rings: stage s's K and V scales at scales(s).
    auto scales = [&](int s) { return rings + Shape::WARPS * kTableRingBytes + s * kv_scale_bytes<C>(BN); };
    TableWindow tw(pages_of(p, 0), keys.lo, keys.hi, lane, rings + warp * kTableRingBytes);
    load_q_tile_async<BM, THREADS>(sq, p, map);
    cp_async_commit();
    load_kv_tile_async<BN, THREADS>(k_stage(0), v_stage(0), p, tw, map.kvh, tile_lo * BN, keys.lo, keys.hi, scales(0));
    cp_async_commit();
    for (int tile = tile_lo; tile <= tile_hi; tile++) {
        const int stage = (tile - tile_lo) & 1, key0 = tile * BN;
        if (tile < tile_hi) {
            tw.advance(key0 + BN);
            load_kv_tile_async<BN, THREADS>(k_stage(stage ^ 1), v_stage(stage ^ 1), p, tw, map.kvh, key0 + BN, keys.lo,
                                            keys.hi, scales(stage ^ 1));
        }
        cp_async_commit();
        cp_async_wait<1>();  // everything but the prefetch just issued has landed
        __syncthreads();
        if constexpr (kFp8Cache<C>) {
            dequantize_kv_tile<BN, THREADS, T>(k_stage(stage), v_stage(stage), scales(stage));
            __syncthreads();
        }

        float s[MT][NT][4];
        warp_scores<T, HD, MT, NT>(s, QFromSmem<HD>(sq.rows_from(warp * WM), lane), k_stage(stage), lane);
        if (blk.partial(key0, BN, p.window)) mask_scores<MT, NT>(s, row_pos, key0, p.window, lane);
        online_softmax<MT, NT, DT>(s, m, l, o, c);
        warp_pv<T, HD, MT, NT>(o, s, v_stage(stage), lane);
        __syncthreads();  // all warps are done with this stage before it is refilled
    }

    store_rows<T, MT, DT>(p, map, o, l, warp * WM, lane);
}

// Shared memory of a prefill block: the Q tile, 2 stages of K and V tiles, the table rings and
// (an FP8 cache) the stages' scales.
template <int HD, int BN, typename C = void>
constexpr int prefill_smem_bytes() {
    return (kPrefillBM + 4 * BN) * HD * 2 + PrefillShape<HD>::WARPS * kTableRingBytes + 2 * kv_scale_bytes<C>(BN);
}

template <typename T, typename C, int HD, int BN = kPrefillBN>
void launch_prefill(const AttnParams<T, C>& p, cudaStream_t stream) {
    using Shape = PrefillShape<HD>;
    constexpr auto kernel = attention_prefill_kernel<T, C, HD, BN>;
    constexpr int smem = prefill_smem_bytes<HD, BN, C>();
    static_assert(smem <= kMaxSmemBytes && (smem + kSmemReservedBytes) * Shape::MIN_BLOCKS <= kSmemPerSmBytes,
                  "MIN_BLOCKS blocks fit in an SM's shared memory");
    allow_smem<kernel>(smem);
    const PrefillSchedule sched = prefill_schedule(p, kPrefillBM);
    kernel<<<prefill_grid(sched, p.nKV), Shape::THREADS, smem, stream>>>(p, sched);
    cudaCheckLaunch();
}

}  // namespace attn
}  // namespace olmo
