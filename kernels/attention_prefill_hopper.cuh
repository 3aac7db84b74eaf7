// attention_prefill_hopper.cuh: flash attention for a chunk of queries of one sequence on Hopper
// (sm_90a): TMA copies, warpgroup MMA and warp specialization (after FlashAttention-3).
// defines: attn::HopperShape, attn::HopperArgs, attn::HopperSmem, attn::hopper_produce, attn::HopperConsumer,
//          attn::zero_rows_from, attn::attention_prefill_hopper_kernel,
//          attn::hopper_prefill_head_dim, attn::launch_prefill_hopper
//
// The math is that of attention_prefill.cuh: a block owns BM = 128 query rows (h heads of one
// KV head, for 128/h tokens: prefill_heads) and walks the keys it can see in tiles K_j, V_j of BN keys:
//     S = Q·K_jᵀ;  mask;  online softmax (m, l, P);  O = O·2^(c·(m - m')) + P·V_j;   out = O / l
// What changes is who does what:
//   producer   warp 0 of warpgroup 0 (the other three leave at once, and the group hands most of
//              its registers to the consumers). One thread loads the Q tile with TMA; then, per
//              K/V tile, once consumers have freed the stage, its lanes issue one TMA copy each:
//              a page of the block table (block_size keys, or BN when pages are larger) of one
//              64-dim panel, straight from the paged pool. When the tile's pages follow each
//              other in the pool and every key of it is visible, one copy per panel brings the
//              whole tile: sixteen 2 KB copies per tile (16-token pages) held the kernel at
//              590 TFLOP/s where whole-tile copies give 650 (docs/attention_notes.md). STAGES
//              tiles are in flight.
//   consumers  warpgroups 1 and 2, 64 query rows each. Per tile: S[64 x BN] = Q·K_jᵀ as HD/16
//              wgmma reading both operands from shared memory (once K_j has landed); mask and
//              online softmax in registers (the steps of attention_steps.cuh: wgmma leaves each
//              warp's 16 rows in the mma.sync layout); P packed to 16 bits as the A operand;
//              O[64 x HD] += P·V_j as BN/16 wgmma with A from registers (once V_j has landed);
//              then each warp arrives on the stage's "empty" barrier.
// Things overlap: the copy engine fills the next stages while the tensor cores work on this
// one, and the two consumer warpgroups share each SM sub-partition's tensor core, so that while
// one computes its softmax, the other's wgmma run. At HD 64 and 128 (Shape::PIPELINED) a group
// also keeps its tensor core busy across its own softmax over the run of tiles no row sees in
// part: S_j+1 and P_j·V_j are issued together (FlashAttention-3's intra-warpgroup pipelining):
// +19-33% at HD 64, +1-3% at HD 128 (three stages needed, see HopperShape). There the two
// groups also take turns to issue (FlashAttention-3's ping-pong, two named barriers): one issues
// its S_j+1 and P_j·V_j, then lets the other issue while it runs its softmax, so that the tensor
// core gets the groups' products one whole batch after another: +6% at HD 64, 0-3% at HD 128.
// After a group's first tile, the softmax makes its exponentials first, with each row's m as it
// stands, and takes the rows' maxima only when some lane's sum of p passed 255 (softmax_packed):
// +5-9% on the run of whole tiles, 1-2% more on the tiles seen in part and at HD 256.
// HD 256 walks one tile at a time (docs/attention_notes.md).
//
// Keys outside [lo, hi): a page wholly outside is copied from row -box (outside the tensor, so
// TMA writes zeros and reads nothing): released pages (table entry -1) and pages past the last
// key are never dereferenced. The last page may hold unwritten rows past hi - 1 (NaN in the
// tests): their scores are masked, but a NaN in V would poison P·V (0 · NaN), so the consumers
// zero those V rows of the last tile before its P·V.
//
// Shared memory (1 block per SM): Q 128 x HD + STAGES x (K, V) BN x HD, in panels (hopper.cuh),
// and the barriers: HD 64: 16 + 4·2·16 = 144 KB (4 stages); HD 128: 32 + 3·2·32 = 224 KB;
// HD 256 (BN 64): 64 + 2·2·32 = 192 KB.
// Registers: 168 per thread at launch (384 threads, one block per SM); the producer drops to 24
// and the consumers rise to 240: o (HD/2 fp32) + s (BN/2 fp32) + p (BN/4, twice when pipelined).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attention_params.cuh"
#include "attention_steps.cuh"
#include "cuda_common.cuh"
#include "hopper.cuh"
#include "attention_prefill.cuh"
#include "paged_kv.cuh"

namespace olmo {
namespace attn {

template <int HD>
struct HopperShape {
    // STAGES: as many K/V tiles as fit in flight. The pipelined walk (HopperConsumer::whole_tiles)
    // asks for K_j+2 as soon as P_j·V_j frees its stage, so it needs three stages to find a tile landed.
    static constexpr int BM = 128, BN = HD <= 128 ? 128 : 64, STAGES = HD == 64 ? 4 : HD == 128 ? 3 : 2;
    // Whole tiles with S_j+1 and P_j·V_j in flight together (HopperConsumer::whole_tiles): faster
    // at HD 64 and 128; at HD 256 two stages are all that fit, and it starves (docs/attention_notes.md).
    static constexpr bool PIPELINED = HD <= 128;
    static constexpr int THREADS = 3 * 128, CONSUMER_WARPS = 8;
    static constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = 240;  // 128·24 + 256·240 <= 65536
    using QTile = Panels<BM, HD>;
    using KVTile = Panels<BN, HD>;
    static constexpr int kBarriers = 1 + 3 * STAGES;  // q_full, then per stage k_full, v_full, empty
    static constexpr int kSmem = 1024 /* alignment */ + QTile::kBytes + 2 * STAGES * KVTile::kBytes + 8 * kBarriers;
    static_assert(kSmem <= kMaxSmemBytes, "one block fits an SM");
};

template <typename T>
struct HopperArgs {
    AttnParams<T> p;
    CUtensorMap q;   // [n_q, nH, hd]: boxes of 64 dims x h heads x 128/h tokens (h: prefill_heads)
    CUtensorMap k;   // the K pool [rows, nKV*hd]: boxes of 64 dims x box_rows rows
    CUtensorMap v;   // the V pool, alike
    CUtensorMap k_tile, v_tile;  // the same pools in boxes of 64 dims x BN rows: a whole tile of
                                 // pages that lie one after another in the pool, in one copy
    int box_rows;  // min(block_size, BN): one page (or one tile of a larger page) per copy
    PrefillSchedule sched;  // which rows each block takes (prefill_block)
};

// Zeroes rows r0 .. BN-1 of every panel of a K/V tile (whole rows, so the swizzle does not matter),
// by the `threads` threads numbered `tid`.
template <int BN, int HD>
__device__ __forceinline__ void zero_rows_from(Panels<BN, HD> tile, int r0, int tid, int threads) {
    const int per_panel = (BN - r0) * 8;  // 16-byte chunks
    for (int i = tid; i < per_panel * (HD / 64); i += threads) {
        const uint32_t addr = tile.panel(i / per_panel) + r0 * 128 + i % per_panel * 16;
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0) : "memory");
    }
}

// Where a block's tiles and barriers lie in shared memory (the base 1024-byte aligned): the Q
// tile, STAGES K tiles, STAGES V tiles, then the mbarriers q_full and, per stage, k_full,
// v_full ("the tile has landed") and empty ("every consumer warp is done with the stage").
template <int HD>
struct HopperSmem {
    using Shape = HopperShape<HD>;
    using KVTile = typename Shape::KVTile;
    static constexpr int STAGES = Shape::STAGES;
    uint32_t base;
    __device__ typename Shape::QTile q() const { return {base}; }
    __device__ KVTile k(int s) const { return {base + Shape::QTile::kBytes + s * KVTile::kBytes}; }
    __device__ KVTile v(int s) const { return {base + Shape::QTile::kBytes + (STAGES + s) * KVTile::kBytes}; }
    __device__ uint32_t q_full() const { return base + Shape::QTile::kBytes + 2 * STAGES * KVTile::kBytes; }
    __device__ uint32_t k_full(int s) const { return q_full() + 8 * (1 + s); }
    __device__ uint32_t v_full(int s) const { return q_full() + 8 * (1 + STAGES + s); }
    __device__ uint32_t empty(int s) const { return q_full() + 8 * (1 + 2 * STAGES + s); }
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The producer warp: the Q tile, then each K/V tile of the block once its stage is free, lane i
// copying page i % pages of panel i / pages (pages * HD/64 <= 32). When the tile's pages lie one
// after another in the pool (a fresh sequence's table counts up) and every key of the tile is
// visible, one copy per panel brings the whole tile (k_tile, v_tile: boxes of BN rows).
template <typename T, int HD>
__device__ __forceinline__ void hopper_produce(const HopperArgs<T>& args, const HopperSmem<HD>& sm, const PrefillBlock& blk,
                                               int lane) {
    using Shape = HopperShape<HD>;
    constexpr int BN = Shape::BN, STAGES = Shape::STAGES;
    const RowMap& map = blk.map;
    if (lane == 0) {
        mbar_arrive_expect_tx(sm.q_full(), Shape::BM / map.g * map.g * HD * 2);
        for (int c = 0; c < HD / 64; c++)
            tma_load_3d(sm.q().panel(c), &args.q, c * 64, map.h0, map.t0, sm.q_full());
    }
    const Pages pg = pages_of(args.p, 0);
    const int box = args.box_rows, pages = BN / box;
    const int page = lane % pages, panel = lane / pages;
    const bool copies = panel < HD / 64;
    const uint32_t offset = panel * Shape::KVTile::kPanelBytes + page * box * 128;
    const int tile_lo = blk.keys.lo / BN, tile_hi = (blk.keys.hi - 1) / BN;
    for (int tile = tile_lo, it = 0; tile <= tile_hi; tile++, it++) {
        const int s = it % STAGES, key = tile * BN + page * box;
        const int row = copies && key < blk.keys.hi && key + box > blk.keys.lo ? (int)pg.row(key) : -box;
        const bool whole = tile * BN >= blk.keys.lo && tile * BN + BN <= blk.keys.hi;
        const int row0 = __shfl_sync(~0u, row, 0);  // page 0's first row (every lane asks)
        const bool in_order = __all_sync(~0u, !copies || row == row0 + page * box);
        mbar_wait(sm.empty(s), (it / STAGES & 1) ^ 1);
        if (lane == 0) {
            mbar_arrive_expect_tx(sm.k_full(s), BN * HD * 2);
            mbar_arrive_expect_tx(sm.v_full(s), BN * HD * 2);
        }
        __syncwarp();
        const int col = map.kvh * HD + panel * 64;
        if (whole && in_order) {
            if (copies && page == 0) {
                tma_load_2d(sm.k(s).base + offset, &args.k_tile, col, row, sm.k_full(s));
                tma_load_2d(sm.v(s).base + offset, &args.v_tile, col, row, sm.v_full(s));
            }
        } else if (copies) {
            tma_load_2d(sm.k(s).base + offset, &args.k, col, row, sm.k_full(s));
            tma_load_2d(sm.v(s).base + offset, &args.v, col, row, sm.v_full(s));
        }
    }
}

// Consumer warp cw (0..7) of the two warpgroups: block rows 16cw .. 16cw+15, over every tile.
// It holds the warp's running o, m, l and the block walk's tile count `it` (tile it of the walk
// uses stage it % STAGES in phase it / STAGES & 1); run() is the walk. The tiles some row sees
// only in part (the diagonal; the window's start) take one_step: S, mask, softmax, P·V. The
// others, a run of whole tiles in the middle, go through whole_tiles: S of tile j+1 and P·V of
// tile j are in flight together, and the softmax of j+1 is written to run while P·V of j does
// (at HD 128 ptxas still waits for P·V after the row maxima).
template <typename T, int HD>
struct HopperConsumer {
    using Shape = HopperShape<HD>;
    static constexpr int BN = Shape::BN, STAGES = Shape::STAGES, NT = BN / 8, DT = HD / 8;
    using Scores = float[1][NT][4];  // a tile's scores, then its probabilities
    using Probs = uint32_t[NT / 2][4];  // the probabilities as P·V's A operand

    const AttnParams<T>& p;
    const HopperSmem<HD>& sm;
    const PrefillBlock& blk;
    const int cw, lane, wg_row0;  // wg_row0: the warpgroup's first row of the Q tile
    const float c;                // scale · log2(e): the softmax works in powers of 2
    float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
    int it = 0;

    __device__ __forceinline__ HopperConsumer(const AttnParams<T>& p_, const HopperSmem<HD>& sm_, const PrefillBlock& blk_,
                                              int cw_, int lane_)
        : p(p_), sm(sm_), blk(blk_), cw(cw_), lane(lane_), wg_row0(cw_ / 4 * 64), c(p_.scale * kLog2e) {}

    // S = Q·K_tileᵀ for tile t of the walk: HD/16 wgmma, both operands in shared memory.
    __device__ __forceinline__ void issue_scores(int t, Scores& s) {
        mbar_wait(sm.k_full(t % STAGES), t / STAGES & 1);
        wgmma_fence();
        wgmma_ss<T, BN, false>(s[0], sm.q().kmajor(wg_row0, 0), sm.k(t % STAGES).kmajor(0, 0));
#pragma unroll
        for (int d = 16; d < HD; d += 16) wgmma_ss<T, BN, true>(s[0], sm.q().kmajor(wg_row0, d), sm.k(t % STAGES).kmajor(0, d));
        wgmma_commit();
    }
    // Until V of tile t of the walk has landed.
    __device__ __forceinline__ void wait_v(int t) { mbar_wait(sm.v_full(t % STAGES), t / STAGES & 1); }
    // O += P·V_tile for tile t of the walk (after wait_v): BN/16 wgmma, P from registers.
    __device__ __forceinline__ void issue_pv(int t, const Probs& a) {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < NT / 2; kk++) wgmma_rs<T, HD>(o[0], a[kk], sm.v(t % STAGES).mnmajor(kk * 16));
        wgmma_commit();
    }
    // This warp is done with the stage of the walk's current tile: on to the next.
    __device__ __forceinline__ void release() {
        __syncwarp();
        if (lane == 0) mbar_arrive(sm.empty(it % STAGES));
        it++;
    }

    // One tile, one step after the other (the mask where some row sees it in part).
    __device__ __forceinline__ void one_step(int tile) {
        const int key0 = tile * BN;
        Scores s;
        Probs a;
        issue_scores(it, s);
        wgmma_wait<0>();
        wgmma_touch(s[0]);
        if (blk.partial(key0, BN, p.window)) {
            auto row_pos = [&](int r) { return blk.pos0 + blk.map.token(cw * 16 + r); };
            mask_scores<1, NT>(s, row_pos, key0, p.window, lane);
        }
        float corr[1][2];
        if (!softmax_packed<T, NT>(s, m, l, corr, c, a)) rescale_o<1, DT>(o, corr);
        wait_v(it);
        if (blk.keys.hi - key0 < BN) {  // the last tile ends inside a page: rows past hi - 1 may be NaN
            zero_rows_from(sm.v(it % STAGES), blk.keys.hi - key0, cw * 32 + lane, 256);
            fence_proxy_async();
            named_barrier_sync(1, 256);
        }
        issue_pv(it, a);
        wgmma_wait<0>();
        wgmma_touch(o[0]);
        release();
    }

    // Tiles lo .. hi, each seen whole by every row: no mask, and no V row past keys.hi to zero.
    // P of the tile in flight and P of the next one take turns in pa[0] and pa[1], so the
    // registers P·V reads are never written while it runs (a copy between two buffers made
    // ptxas serialize the wgmma, warning C7513). o is rescaled once P·V has landed.
    // Ping-pong: group g issues after named barrier 2 + g and then opens the other group's
    // barrier. Both groups take the same steps (the whole tiles are the block's), so the
    // arrivals and the waits pair up.
    __device__ __forceinline__ void whole_tiles(int lo, int hi) {
        const int group = cw / 4;
        Probs pa[2];
        {
            Scores s;
            issue_scores(it, s);
            wgmma_wait<0>();
            wgmma_touch(s[0]);
            online_softmax<1, NT, DT>(s, m, l, o, c);
            pack_probabilities<T, NT>(pa[0], s[0]);
        }
        // P·V of tile `it` (P in cur) with S of the tile after it, whose P goes to next.
        auto step = [&](const Probs& cur, Probs& next) {
            Scores s;
            float corr[1][2];
            named_barrier_sync(2 + group, 256);  // this group's turn at the tensor cores
            issue_scores(it + 1, s);
            wait_v(it);
            issue_pv(it, cur);
            named_barrier_arrive(3 - group, 256);  // the other group's turn
            wgmma_wait<1>();  // the scores (P·V may still run)
            wgmma_touch(s[0]);
            const bool same = softmax_packed<T, NT>(s, m, l, corr, c, next);
            wgmma_wait<0>();
            wgmma_touch(o[0]);
            if (!same) rescale_o<1, DT>(o, corr);
            release();
        };
        auto last_pv = [&](const Probs& cur) {
            wait_v(it);
            issue_pv(it, cur);
            wgmma_wait<0>();
            wgmma_touch(o[0]);
            release();
        };
        if (group == 1) named_barrier_arrive(2, 256);  // group 0 goes first
        for (int t = lo + 1;; t += 2) {
            if (t > hi) { last_pv(pa[0]); break; }
            step(pa[0], pa[1]);
            if (t + 1 > hi) { last_pv(pa[1]); break; }
            step(pa[1], pa[0]);
        }
        if (group == 0) named_barrier_sync(2, 256);  // group 1's last opening of barrier 2
    }

    // The walk over the block's tiles, then out = o / l.
    __device__ __forceinline__ void run() {
        const int tile_lo = blk.keys.lo / BN, tile_hi = (blk.keys.hi - 1) / BN;
        mbar_wait(sm.q_full(), 0);
        int tile = tile_lo;
        if constexpr (Shape::PIPELINED) {
            int lo = tile_lo, hi;  // the whole tiles: lo .. hi (none if hi < lo)
            while (lo <= tile_hi && blk.partial(lo * BN, BN, p.window)) lo++;
            for (hi = lo - 1; hi < tile_hi && !blk.partial((hi + 1) * BN, BN, p.window);) hi++;
            for (; tile < lo && tile <= tile_hi; tile++) one_step(tile);
            if (lo <= hi) {
                whole_tiles(lo, hi);
                tile = hi + 1;
            }
        }
        for (; tile <= tile_hi; tile++) one_step(tile);
        store_rows<T, 1, DT>(p, blk.map, o, l, cw * 16, lane);
    }
};

#endif  // sm_90a

template <typename T, int HD>
__global__ void __launch_bounds__(HopperShape<HD>::THREADS, 1)
    attention_prefill_hopper_kernel(const __grid_constant__ HopperArgs<T> args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Shape = HopperShape<HD>;
    extern __shared__ __align__(128) uint4 smem[];
    const HopperSmem<HD> sm{((uint32_t)__cvta_generic_to_shared(smem) + 1023) & ~1023u};
    const PrefillBlock blk = prefill_block(args.p, args.sched);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
        mbar_init(sm.q_full(), 1);
        for (int s = 0; s < Shape::STAGES; s++) {
            mbar_init(sm.k_full(s), 1);
            mbar_init(sm.v_full(s), 1);
            mbar_init(sm.empty(s), Shape::CONSUMER_WARPS);
        }
        mbar_fence_init();
    }
    __syncthreads();
    if (warp < 4) {  // warpgroup 0 gives its registers away; its warp 0 is the producer
        setmaxnreg_dec<Shape::PRODUCER_REGS>();
        if (warp == 0) hopper_produce<T, HD>(args, sm, blk, lane);
    } else {
        setmaxnreg_inc<Shape::CONSUMER_REGS>();
        HopperConsumer<T, HD>(args.p, sm, blk, warp - 4, lane).run();
    }
#endif
}

// The head sizes the Hopper kernel takes: whole panels (others run attention_prefill_kernel).
inline bool hopper_prefill_head_dim(int hd) { return hd == 64 || hd == 128 || hd == 256; }

template <typename T, int HD>
void launch_prefill_hopper(const AttnParams<T>& p, cudaStream_t stream) {
    static_assert(!std::is_same_v<T, float>, "16-bit operands");
    using Shape = HopperShape<HD>;
    const PrefillSchedule sched = prefill_schedule(p, Shape::BM);
    const bool half = std::is_same_v<T, __half>;
    HopperArgs<T> a;
    a.p = p;
    a.box_rows = std::min(p.block_size, Shape::BN);
    a.sched = sched;
    const uint64_t q_dims[3] = {(uint64_t)HD, (uint64_t)p.nH, (uint64_t)p.n_q};
    const uint64_t q_strides[2] = {HD * 2ull, (uint64_t)p.nH * HD * 2};
    const uint32_t q_box[3] = {64, (uint32_t)sched.heads, (uint32_t)sched.tokens};
    a.q = tensor_map(p.q, 3, q_dims, q_strides, q_box, half);
    // The pools' row count is not known here; rows are < 2^31 (attention_params.cuh), and only
    // the rows of the sequence's table are read.
    const uint64_t kv_dims[2] = {(uint64_t)p.nKV * HD, 0x7fffffffull};
    const uint64_t kv_strides[1] = {(uint64_t)p.nKV * HD * 2};
    const uint32_t kv_box[2] = {64, (uint32_t)a.box_rows};
    a.k = tensor_map(p.k, 2, kv_dims, kv_strides, kv_box, half);
    a.v = tensor_map(p.v, 2, kv_dims, kv_strides, kv_box, half);
    const uint32_t tile_box[2] = {64, (uint32_t)Shape::BN};
    a.k_tile = tensor_map(p.k, 2, kv_dims, kv_strides, tile_box, half);
    a.v_tile = tensor_map(p.v, 2, kv_dims, kv_strides, tile_box, half);
    constexpr auto kernel = attention_prefill_hopper_kernel<T, HD>;
    allow_smem<kernel>(Shape::kSmem);
    kernel<<<prefill_grid(sched, p.nKV), Shape::THREADS, Shape::kSmem, stream>>>(a);
    cudaCheckLaunch();
}

}  // namespace attn
}  // namespace olmo
