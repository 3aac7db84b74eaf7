// attention_decode.cuh: flash-decoding for a few query rows per sequence, every sequence of a
// decode step in one launch, on mma.sync tensor cores.
// defines: attn::kDecodeRows, attn::kDecodeBN, attn::kDecodeThreads, attn::kDecodeStages,
//          attn::kMaxSlots, attn::decode_row_blocks, attn::kMergeStride, attn::merge_at, attn::merge_warps,
//          attn::DecodeSmem, attn::DecodeStages, attn::attention_decode_kernel,
//          attn::attention_combine_kernel, attn::decode_smem_bytes, attn::decode_max_slots,
//          attn::decode_slot_count, attn::launch_decode
//
// One new token has too few query rows to fill the GPU with blocks of queries, so the keys are
// split instead: split s of a row's visible keys gives (c = scale·log2(e))
//     o_s = Σ_{j in s} 2^(c·s_j - c·m_s) v_j / l_s,   l_s = Σ_{j in s} 2^(c·s_j - c·m_s),
//     lse_s = c·m_s + log2(l_s)                       (the log2-sum-exp of its scaled scores)
// by the flash steps of attention_steps.cuh, and a second kernel merges them exactly:
//     out = Σ_s 2^(lse_s - M) · o_s / Σ_s 2^(lse_s - M),   M = max_s lse_s.
//
// Split kernel: a sequence's n_q*g query rows per KV head (one token: the g heads of a KV
//   group), in row blocks of 16 (decode_row_blocks: one, unless n_q*g > 16, as with 32 query
//   heads on one KV head, where each row block reads the keys again).
//   Grid (nKV · row blocks, S). Each (KV head, row block) has S split slots, a number fixed by
//   (nKV, row blocks, batch, s_cap) and the GPU, so every step launches the same grid and a CUDA
//   graph can replay it: S = max(2·batch, resident blocks / (nKV · row blocks)) (for one
//   sequence: one wave of blocks). At run time
//   the slots are dealt out in proportion to length (plan_slots): sequence b's visible keys
//   cover T_b tiles of 64 keys; with k = S - batch + 1 it gets n_b = min(T_b, ceil(T_b·k / ΣT))
//   consecutive slots, which split its tiles evenly (their sizes differ by one tile at most).
//   They always fit: Σ n_b < Σ (T_b·k / ΣT + 1) = S + 1. Slots past Σ n_b return at once.
//   Each block reads its keys of one KV head once for all the group's query heads (the 16-row
//   m-tile is the packed group). Inside a block, tiles of 64 keys stream through STAGES
//   cp.async buffers (3: 100 KB of shared memory at HD 128, 2 blocks per SM; at HD 256: 200 KB,
//   one block per SM, as it would be with 2 stages, and 3 keep as many bytes in flight per SM
//   as at HD 128; where a block may have less, 2 stages: attention.cuh). Warp w takes keys
//   16w .. 16w+15 of each tile and keeps its own online-softmax state (m, l, o) over them. At
//   the end the 4 warps' states merge through shared memory and the block writes, per row, o_s
//   and lse_s.
// An FP8 cache (AttnParams<T, uint8_t>): the stages hold the tiles' E4M3 codes and their scales,
//   copied 16 bytes at a time, and the warps multiply the codes as they are, on fp16 tensor
//   cores, with the scales applied to the scores and the probabilities
//   (attention_decode_fp8.cuh). 4 stages where they fit.
// Combine kernel: one block per (token, head) row, over its sequence's splits, in one pass with
//   a running max (the online softmax again, over splits). It is launched as a programmatic
//   dependent of the split kernel where the GPU has those (launch_dependent): its blocks start
//   while the split kernel drains and wait (grid_dependency_wait) until its writes are visible.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attention_params.cuh"
#include "attention_decode_fp8.cuh"
#include "attention_steps.cuh"
#include "cuda_common.cuh"
#include "paged_kv.cuh"
#include "tensor_core.cuh"

namespace olmo {
namespace attn {

constexpr int kDecodeRows = 16, kDecodeBN = 64, kDecodeThreads = 128, kDecodeStages = 3, kMaxSlots = 1024;

// The keys sequence b's queries see, [lo, hi), and the 64-key tiles that hold them.
struct SeqTiles {
    int lo, hi, tile_lo, tiles;
};
template <typename T, typename C>
__device__ __forceinline__ SeqTiles seq_tiles(const AttnParams<T, C>& p, int b) {
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
template <typename T, typename C>
__device__ SlotRun plan_slots(const AttnParams<T, C>& p, int slots, int want_b, int slot) {
    const int lane = threadIdx.x % 32;
    int total = 0;
    for (int b = lane; b < p.batch; b += 32) total += seq_tiles(p, b).tiles;
    total = warp_reduce(total, SumOp{});
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

// The merge's rows of o in shared memory: dim d of row r at r·kMergeStride + d + d/32, the
// stride 4 banks past a multiple of 32, so that the fragments' stores (8 rows, 4 lanes a row,
// 32 or, with an FP8 cache's dims, 16 dims apart: pv_dim) fall in different banks.
template <int HD> constexpr int kMergeStride = (HD + HD / 32 + 27) / 32 * 32 + 4;
template <int HD> __device__ __forceinline__ int merge_at(int r, int d) { return r * kMergeStride<HD> + d + d / 32; }

// The end of a split block: each warp writes its (m, l, o) of the map's rows (of the tile's 16)
// to `scratch` (shared memory over the K/V stages, no longer in use), then the block combines
// them per row and writes this split's o_s = o/l and lse_s = c·m + log2(l) to slot `slot` of
// o_part and lse_part. The accumulator fragments' column n of n-tile d is dim 8d + n, or with
// an FP8 cache pv_dim(d, n).
template <typename T, int HD, typename C>
__device__ __forceinline__ void merge_warps(float* scratch, const float (&o)[1][HD / 8][4], const float (&m)[1][2],
                                            const float (&l)[1][2], const AttnParams<T, C>& p, const RowMap& map,
                                            int slot, float c, float* o_part, float* lse_part) {
    constexpr int DT = HD / 8, WARPS = kDecodeThreads / 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* so = scratch;                                     // [WARPS][16] rows at merge_at
    float* sm = so + WARPS * kDecodeRows * kMergeStride<HD>;  // [WARPS][16]
    float* sl = sm + WARPS * kDecodeRows;       // [WARPS][16]
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const float sum = quad_sum(l[0][half]);
        const int r = half * 8 + lane / 4;
        if (r >= map.rows) continue;   // a padded row (15 of the 16 at MHA): nothing reads it
#pragma unroll
        for (int d = 0; d < DT; d++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int n = (lane & 3) * 2 + j;
                so[merge_at<HD>(warp * kDecodeRows + r, kFp8Cache<C> ? pv_dim<HD>(d, n) : d * 8 + n)] = o[0][d][2 * half + j];
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
            osum += wt * so[merge_at<HD>(w * kDecodeRows + r, d)];
        }
        const int64_t row = (int64_t)slot * rows_slot + map.local_token(r) * p.nH + map.head(r);
        o_part[row * p.hd + d] = lsum > 0.0f ? osum / lsum : 0.0f;
        if (d == 0) lse_part[row] = lsum > 0.0f ? mx * c + log2f(lsum) : -INFINITY;
    }
}

// Row blocks of 16 that a sequence's n_q*g query rows per KV head take.
template <typename T, typename C>
__host__ __device__ inline int decode_row_blocks(const AttnParams<T, C>& p) {
    return (p.n_q * (p.nH / p.nKV) + kDecodeRows - 1) / kDecodeRows;
}

// The split kernel's shared memory, in bytes from its base: the Q tile (16 rows), then STAGES
// stages, then the table rings; at the end the merge's rows (merge_warps) lie over the stages
// and rings. A stage holds a K and a V tile in T, straight from a 16-bit pool;
// from an FP8 pool it holds their codes (BN rows of HD bytes each, load_kv_codes_async) and
// scales (BN of K, BN of V). Why the FP8 cache stages its codes instead of copying 8 of them
// into each 16-byte chunk of a tile, as prefill does (load_kv_tile_async): a decode block's
// stream is bound by how many copies it issues (paged_kv.cuh), so its copies must carry 16
// bytes each.
template <typename C, int HD, int STAGES>
struct DecodeSmem {
    static constexpr bool kFp8 = kFp8Cache<C>;
    static constexpr int kTile = kDecodeBN * HD * 2, kCodes = kDecodeBN * HD;   // a tile in T; its codes
    static constexpr int kStage = kFp8 ? 2 * kCodes + kv_scale_bytes<C>(kDecodeBN) : 2 * kTile;
    static constexpr int kStages = kDecodeRows * HD * 2;   // after the Q tile
    static constexpr int kRings = kStages + STAGES * kStage;
    static constexpr int kMerge = kDecodeThreads / 32 * kDecodeRows * (kMergeStride<HD> + 2) * 4;
    static constexpr int kBytes = std::max(kRings + kDecodeThreads / 32 * kTableRingBytes, kStages + kMerge);
};

// The split kernel's STAGES stages in shared memory (DecodeSmem's layout, from `base`), and the
// copies of K/V tiles into them.
template <typename T, typename C, int HD, int STAGES>
struct DecodeStages {
    using Smem = DecodeSmem<C, HD, STAGES>;
    static constexpr int BN = kDecodeBN;
    const AttnParams<T, C>& p;
    uint32_t base;
    __device__ SmemTile<HD> k(int s) const { return {base + s * Smem::kStage}; }   // 16-bit cache: the tiles
    __device__ SmemTile<HD> v(int s) const { return {base + s * Smem::kStage + Smem::kTile}; }
    __device__ uint32_t codes(int s) const { return base + s * Smem::kStage; }                   // FP8 cache: the codes
    __device__ uint32_t scales(int s) const { return base + s * Smem::kStage + 2 * Smem::kCodes; }   // and scales
    // Starts copying the rows of keys [from, to) of tile `tile` into stage s.
    __device__ void load(int s, int tile, const TableWindow& tw, int kvh, int lo, int hi, int from = 0,
                         int to = INT_MAX) const {
        if constexpr (Smem::kFp8)
            load_kv_codes_async<BN, kDecodeThreads, HD>(codes(s), scales(s), p, tw, kvh, tile * BN, lo, hi, from, to);
        else
            load_kv_tile_async<BN, kDecodeThreads, true>(k(s), v(s), p, tw, kvh, tile * BN, lo, hi, 0, from, to);
    }
};

// o_part [S][n_q*nH][hd] and lse_part [S][n_q*nH]: slot s holds rows (t*nH + h) of its sequence.
template <typename T, typename C, int HD, int STAGES>
__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_kernel(const __grid_constant__ AttnParams<T, C> p, int slots, float* o_part, float* lse_part) {
    constexpr int BN = kDecodeBN, WN = 16, NT = WN / 8, DT = HD / 8;
    using Smem = DecodeSmem<C, HD, STAGES>;
    constexpr bool kFp8 = Smem::kFp8;
    static_assert(STAGES <= 8, "the table ring runs 8 tiles ahead (TableWindow)");
    extern __shared__ __align__(128) uint4 smem[];
    const SmemTile<HD> sq{(uint32_t)__cvta_generic_to_shared(smem)};   // the layout: DecodeSmem
    const DecodeStages<T, C, HD, STAGES> st{p, sq.base + Smem::kStages};
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, slot = blockIdx.y;
    const SlotRun run = plan_slots(p, slots, -1, slot);
    if (run.b < 0) return;  // an idle slot (same for the whole block)
    const SeqTiles seq = seq_tiles(p, run.b);
    const int tile_lo = seq.tile_lo + run.tile_begin(slot - run.first, seq.tiles);
    const int tile_hi = seq.tile_lo + run.tile_begin(slot - run.first + 1, seq.tiles) - 1;
    const int lo = max(seq.lo, tile_lo * BN), hi = min(seq.hi, (tile_hi + 1) * BN);
    const int g = p.nH / p.nKV, pos0 = p.pos0[run.b], blocks = decode_row_blocks(p);
    const int r0 = blockIdx.x % blocks * kDecodeRows;   // this block's first row of the group's n_q*g
    const RowMap map{g, (int)blockIdx.x / blocks, run.b * p.n_q, min(kDecodeRows, p.n_q * g - r0), r0};
    // Positions of this lane's two rows (lane/4 and lane/4 + 8), for the mask.
    const int my_pos[2] = {pos0 + map.local_token(lane / 4), pos0 + map.local_token(lane / 4 + 8)};
    auto row_pos = [&](int r) { return my_pos[(r >> 3) & 1]; };
    float o[1][DT][4] = {}, m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {};
    const float c = p.scale * kLog2e;

    // Prologue: Q and the first STAGES-1 tiles (stages 0 .. STAGES-2). Everything so far read
    // only pos0 and the table, which exist before the kernel ahead of this one in the stream runs
    // (rope, which writes q and this step's K/V rows, keys pos0 ..); the launch is a programmatic
    // dependent one, so this much overlaps that kernel's tail. So do the copies of the older keys'
    // rows: where this step's keys lie in the prologue's last tile or later (one token a
    // sequence: always), every row of an older key is copied before the wait, and only Q and
    // this step's rows after it; otherwise (or after a prefill chunk's RoPE, prefill_keys) the
    // whole prologue waits. (FP8 decode: 1B +0.7%, 7B +0.4%; docs/fp8.md, "Session 37".)
    TableWindow tw(pages_of(p, run.b), lo, hi, lane, sq.base + Smem::kRings + warp * kTableRingBytes);
    const int last = min(tile_hi, tile_lo + STAGES - 2);   // the prologue's last tile
    const bool early = !p.prefill_keys && pos0 >= last * BN;
    auto prologue = [&](int to) {   // tiles tile_lo .. last into stages 0 .., the rows of keys below `to`
#pragma unroll
        for (int i = 0; i < STAGES - 1; i++)
            if (tile_lo + i <= last) {
                tw.advance((tile_lo + i) * BN);
                st.load(i, tile_lo + i, tw, map.kvh, lo, hi, 0, to);
            }
    };
    if (early) prologue(pos0);
    grid_dependency_wait();
    // Past our wait, the combine kernel may launch (it waits for our writes anyway), and with it
    // the product after it (fp8_gemv), whose weights then stream while we run. Launched at our
    // start instead, that product asked for its first weights while RoPE and our own set-up
    // still waited for theirs: FP8 decode was 0.5% slower at the 1B shape, 0.1% at 7B, 0.2% at
    // 32B (docs/fp8.md, "Session 41").
    allow_dependent_launch();
    load_q_tile_async<kDecodeRows, kDecodeThreads>(sq, p, map);
    if (!early) prologue(INT_MAX);
    else if (pos0 < (last + 1) * BN) st.load(last - tile_lo, last, tw, map.kvh, lo, hi, pos0);   // (tw holds last's window)
    cp_async_commit();
    const int pos_hi = pos0 + p.n_q - 1;  // the last query's position
    cp_async_wait<0>();                    // Q and the prologue's tiles have landed
    __syncthreads();
    // Q's fragments are read once into registers (32 at HD 128); at HD 256 they would take 64
    // next to o's 128, so they are read from shared memory at each use instead. For an FP8 cache
    // they are q̃ in fp16 (QFp16), in registers.
    using Q = std::conditional_t<kFp8, QFp16<HD, T>, std::conditional_t<HD <= 128, QInRegisters<HD>, QFromSmem<HD>>>;
    const Q q(sq, lane);
    for (int tile = tile_lo; tile <= tile_hi; tile++) {
        const int stage = (tile - tile_lo) % STAGES, next = tile + STAGES - 1, key0 = tile * BN + warp * WN;
        if (next <= tile_hi) {
            tw.advance(next * BN);
            st.load((next - tile_lo) % STAGES, next, tw, map.kvh, lo, hi);
        }
        cp_async_commit();
        cp_async_wait<STAGES - 1>();  // tile `tile` (and Q) have landed
        __syncthreads();
        float s[1][NT][4];
        if constexpr (kFp8) warp_scores_fp8<HD>(s, q, st.codes(stage), st.scales(stage), warp * WN, lane);
        else warp_scores<T, HD, 1, NT>(s, q, st.k(stage).rows_from(warp * WN), lane);
        // Only the tiles that some row sees in part (the last one; the window's first) need the mask.
        if (tile * BN + BN - 1 > pos0 || (p.window > 0 && tile * BN <= pos_hi - p.window))
            mask_scores<1, NT>(s, row_pos, key0, p.window, lane);
        online_softmax<1, NT, DT>(s, m, l, o, c);
        if constexpr (kFp8) warp_pv_fp8<HD>(o, s, st.codes(stage) + kDecodeBN * HD, st.scales(stage) + kDecodeBN * 4, warp * WN, lane);
        else warp_pv<T, HD, 1, NT>(o, s, st.v(stage).rows_from(warp * WN), lane);
        __syncthreads();   // every warp is done with the stage before it is refilled
    }
    cp_async_wait<0>();
    merge_warps<T, HD>(reinterpret_cast<float*>(smem) + Smem::kStages / 4, o, m, l, p, map, slot, c, o_part, lse_part);
}

template <typename T, typename C, int HD>
__global__ void __launch_bounds__(256)
    attention_combine_kernel(const __grid_constant__ AttnParams<T, C> p, int slots, const float* o_part, const float* lse_part) {
    constexpr int COLS = HD / 4, GROUPS = 256 / COLS;  // float4 columns x groups of splits
    __shared__ float4 part[GROUPS][COLS];
    __shared__ float part_m[GROUPS], part_l[GROUPS];
    const int row = blockIdx.x, rows_slot = p.n_q * p.nH;  // row = (b * n_q + t) * nH + head
    const int seq = row / rows_slot, local = row % rows_slot;
    const int col = threadIdx.x % COLS, grp = threadIdx.x / COLS;
    const bool live = col < p.hd / 4;  // columns past hd (a padded tile) have nothing to merge
    // pos0 is written before the split kernel starts (stream order), so the plan needs no wait.
    allow_dependent_launch();  // the kernel behind us (the o product) waits for our output before reading it
    const SlotRun run = plan_slots(p, slots, seq, -1);
    grid_dependency_wait();

    // Each group merges splits grp, grp + GROUPS, ... with a running max m and sum l, one after
    // another: not unrolled, since a short context (one sequence, up to GROUPS tiles of keys)
    // gives a group one split, and unrolled by 4 the longer code cost 7B fp8 decode 0.3%; at 4096
    // keys (16 splits at the 1B shape, 33 at the 32B) it was as fast or faster (docs/fp8.md,
    // "Session 40").
    float m = -INFINITY, l = 0.0f;
    float4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 1
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
    const int64_t at = (int64_t)row * p.hd + col * 4;
    const float out[4] = {acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv};
    for (int j = 0; j < 4; j++) {
        if (p.out16) p.out16[at + j] = __float2half_rn(out[j]);
        else p.out[at + j] = from_float<T>(out[j]);
    }
}

template <int HD, int STAGES = kDecodeStages, typename C = void>
constexpr int decode_smem_bytes() {
    constexpr int bytes = DecodeSmem<C, HD, STAGES>::kBytes;
    static_assert(bytes <= kMaxSmemBytes, "shared memory per block");
    return bytes;
}

// The most split slots per KV head a decode of `batch` sequences of up to s_cap positions uses
// (the workspace is sized for it): kMaxSlots or 2·batch, and never more than one per tile.
inline int decode_max_slots(int s_cap, int batch) {
    const int64_t tiles = (s_cap + kDecodeBN - 1) / kDecodeBN;
    return (int)std::min<int64_t>(batch * tiles, std::max(2 * batch, kMaxSlots));
}

// Split slots per (KV head, row block), see the split kernel: max(2·batch, resident blocks /
// (nKV · row blocks)), within decode_max_slots. Fixed by the model, the batch size, s_cap and
// the GPU. heads: nKV · row blocks.
template <typename T, typename C, int HD, int STAGES = kDecodeStages>
int decode_slot_count(int s_cap, int heads, int batch) {
    constexpr auto kernel = attention_decode_kernel<T, C, HD, STAGES>;
    allow_smem<kernel>(decode_smem_bytes<HD, STAGES, C>());
    static const int resident = [] {
        int dev = 0, sms = 0, per_sm = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kDecodeThreads, decode_smem_bytes<HD, STAGES, C>()));
        return sms * per_sm;
    }();
    return std::min(decode_max_slots(s_cap, batch), std::max(2 * batch, resident / heads));
}

// slots: split slots per KV head (decode_slot_count; the workspace must hold that many).
template <typename T, typename C, int HD, int STAGES = kDecodeStages>
void launch_decode(const AttnParams<T, C>& p, void* workspace, int slots, cudaStream_t stream) {
    float* o_part = static_cast<float*>(workspace);
    float* lse_part = o_part + (size_t)slots * p.n_q * p.nH * p.hd;
    launch_dependent(attention_decode_kernel<T, C, HD, STAGES>, dim3(p.nKV * decode_row_blocks(p), slots), dim3(kDecodeThreads),
                     decode_smem_bytes<HD, STAGES, C>(), stream, p, slots, o_part, lse_part);
    launch_dependent(attention_combine_kernel<T, C, HD>, dim3(p.batch * p.n_q * p.nH), dim3(256), 0, stream, p, slots,
                     (const float*)o_part, (const float*)lse_part);
}

}  // namespace attn
}  // namespace olmo
