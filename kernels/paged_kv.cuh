// paged_kv.cuh: how the flash kernels fill their shared-memory tiles: K/V tiles from the paged
// cache through the block table, and Q tiles of GQA-packed query rows; and, for the Hopper
// prefill kernel, a copy of an FP8 cache's visible keys as 16-bit values.
// defines: attn::kTableRingBytes, attn::TableWindow, attn::RowMap, attn::load_kv_tile_async,
//          attn::kv_scale_bytes, attn::dequantize_kv_tile, attn::dequantized_kv_rows,
//          attn::dequantize_visible_kv_kernel, attn::dequantized_copy,
//          attn::load_q_tile_async
//
// Key j of a sequence is in pool row  table[j >> shift] << shift | (j & mask)  (attention_params.cuh).
// A tile of 64 keys spans at least one and at most 8 blocks, so a kernel needs one table entry
// per 8 or more keys, and it wants it before the tile's copies are issued. The table is read a
// window of 32 entries at a time (32 blocks, >= 256 keys): lane i of every warp holds entry
// 32w + i of the current window w in a register, and the thread that copies key j takes its
// block from lane (j >> shift) % 32 with one shuffle. Later windows stream into shared memory
// ahead of use with cp.async, with the tile copies.
#pragma once
#include <cuda_fp8.h>

#include <climits>
#include <cstdint>

#include "attention_params.cuh"
#include "tensor_core.cuh"

namespace olmo {
namespace attn {

// The table window of a warp. The next windows are copied with cp.async into a per-warp ring
// of three in shared memory (window v in slot v % 3), two windows (>= 8 tiles) ahead: they
// arrive with the tile copies of their commit group, which has landed by the time `cur` is read
// from the ring as long as the K/V pipeline has at most 8 stages. The first two are waited for
// when the window is made (at the start of a block, where the first entries' latency is paid
// anyway). Staging through shared memory keeps the fresh loads off the critical path: a load
// into a register would be waited for right where the window changes. Entries outside the keys
// a block reads, [lo, hi), are never loaded: those before lo may be released (-1), those past
// hi may lie past the sequence's blocks (the ring gets zeros for them, and they are never used).
constexpr int kTableRingBytes = 3 * 32 * 4;  // per warp

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
        cur = ld_shared_b32(slot(w));
        prefetch(w + 2);
    }
    // Pool block of `key`, which must lie in the current window (a warp-wide shuffle).
    __device__ __forceinline__ uint32_t block_of(int key) const { return __shfl_sync(0xffffffffu, cur, (key >> pg.shift) & 31); }
};

// Starts copying keys key0 .. key0+BN-1 of KV head kvh into a K and a V tile; `tw` must hold
// the tile's window (TableWindow::advance). Rows outside the keys [lo, hi) are zero-filled without
// touching the pool: their blocks may be released or unwritten, and even a masked row must not
// hold NaN (its probability 0 times NaN in P·V would be NaN). So are the chunks past the head
// (dims >= hd of a padded tile): the thread that copies one sees an empty key range and reads
// from inside the head. The K and V tiles share a layout, so a row's V chunk lands at the K
// chunk's address plus (sv - sk). Decode issues about one 16-byte copy per cycle per SM, so the
// few instructions per row around the two copies count: 32-bit row arithmetic and one unsigned
// 32x32->64 multiply-add per pointer.
// An FP8 cache (C = uint8_t) copies each chunk's 8 codes (8 bytes) into the first half of its
// 16-byte place, and the rows' scales into `scales` (BN floats of K, then BN of V, in shared
// memory: kv_scale_bytes per stage), all zero for rows outside [lo, hi); dequantize_kv_tile then
// makes the tile's values.
// Only the rows of keys [from, to) are touched (decode copies a tile's older keys before it
// waits for the kernel ahead, and the keys that kernel writes after).
// READ_ONCE (decode, which reads each row once a step): a 16-bit cache's copies carry L2's
// evict-first policy, as the weights' do: a layer's rows are read again only a step later, after
// the whole model and every other layer's rows have streamed through L2, so keeping them would
// only push out lines read sooner (FP8 decode +0.2% at the 7B shape, +0.4% at 1B: docs/fp8.md,
// "Session 43"). Prefill's query tiles read the same keys one after the other, so there the rows
// keep L2's default policy; so do an FP8 cache's codes in decode (load_kv_codes_async), where the
// policy was slower.
template <int BN, int THREADS, bool READ_ONCE = false, typename T, int HD, typename C>
__device__ __forceinline__ void load_kv_tile_async(SmemTile<HD> sk, SmemTile<HD> sv, const AttnParams<T, C>& p,
                                                   const TableWindow& tw, int kvh, int key0, int lo, int hi,
                                                   uint32_t scales = 0, int from = 0, int to = INT_MAX) {
    static_assert(BN <= 32 * 8, "a tile lies in one table window (block_size >= 8)");
    const uint32_t row_bytes = p.nKV * p.hd * sizeof(C), to_v = sv.base - sk.base;
    const uint64_t policy = READ_ONCE ? l2_evict_first_policy() : 0;
    for_each_tile_chunk<BN, THREADS>(sk, [&](int r, int c, uint32_t s) {
        const bool in_head = c * 8 < p.hd;  // the same for all of a chunk's rows
        const int col = kvh * p.hd + (in_head ? c * 8 : 0), n_keys = in_head ? hi - lo : 0;
        const char* k = reinterpret_cast<const char*>(p.k + col);
        const char* v = reinterpret_cast<const char*>(p.v + col);
        const int key = key0 + r;
        const uint32_t block = tw.block_of(key);   // (a warp-wide shuffle: before any lane skips)
        if (key < from || key >= to) return;
        const bool valid = (unsigned)(key - lo) < (unsigned)n_keys;  // lo <= key < hi, in the head
        const uint32_t row = valid ? block << tw.pg.shift | (key & tw.pg.mask) : 0;
        if constexpr (kFp8Cache<C>) {
            cp_async_8(s, k + mul_wide(row, row_bytes), valid);
            cp_async_8(s + to_v, v + mul_wide(row, row_bytes), valid);
            if (c == 0) {   // the row's two scales, by the thread that copies its first chunk
                const int64_t at = valid ? kv_scale_index(block, key & tw.pg.mask, kvh, p.nKV, p.block_size) : 0;
                cp_async_4(scales + r * 4, p.k_scale + at, valid);
                cp_async_4(scales + (BN + r) * 4, p.v_scale + at, valid);
            }
        } else if constexpr (READ_ONCE) {
            cp_async_16_policy(s, k + mul_wide(row, row_bytes), valid, policy);
            cp_async_16_policy(s + to_v, v + mul_wide(row, row_bytes), valid, policy);
        } else {
            cp_async_16(s, k + mul_wide(row, row_bytes), valid);
            cp_async_16(s + to_v, v + mul_wide(row, row_bytes), valid);
        }
    });
}

// Shared memory for one stage's K and V scales (an FP8 cache; none otherwise).
template <typename C>
constexpr int kv_scale_bytes(int bn) { return kFp8Cache<C> ? 2 * bn * 4 : 0; }

// 8 E4M3 codes (code j in byte j % 4 of word j / 4) -> the 8 values scale · code in T, packed
// as 16 bytes of a tile chunk (exact in fp32, then rounded once).
template <typename T>
__device__ __forceinline__ uint4 dequantize8(uint32_t lo, uint32_t hi, float scale) {
    uint32_t out[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {   // codes 2i (low byte) and 2i + 1
        const uint32_t two = (i < 2 ? lo : hi) >> (16 * (i % 2));
        const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3)));
        out[i] = pack2<T>(f.x * scale, f.y * scale);
    }
    return {out[0], out[1], out[2], out[3]};
}
__device__ __forceinline__ void st_shared_v4(uint32_t s, uint4 v) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(s), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// The 16-byte chunk at shared address s holds 8 E4M3 codes in its first 8 bytes: it becomes
// their 8 values in T, in place.
template <typename T>
__device__ __forceinline__ void dequantize_chunk(uint32_t s, float scale) {
    uint32_t lo, hi;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(lo), "=r"(hi) : "r"(s) : "memory");
    st_shared_v4(s, dequantize8<T>(lo, hi, scale));
}

// An FP8 cache's K and V tiles, as load_kv_tile_async left them, made into values of T in place:
// each thread converts the chunks it copied (the same for_each_tile_chunk walk), with the scales
// at `scales`. Call it once the copies have landed and a barrier has shown every thread the
// scales; a barrier must follow before any warp reads the tiles. Zero-filled rows stay zero.
template <int BN, int THREADS, typename T, int HD>
__device__ __forceinline__ void dequantize_kv_tile(SmemTile<HD> sk, SmemTile<HD> sv, uint32_t scales) {
    const uint32_t to_v = sv.base - sk.base;
    for_each_tile_chunk<BN, THREADS>(sk, [&](int r, int, uint32_t s) {
        dequantize_chunk<T>(s, __int_as_float(ld_shared_b32(scales + r * 4)));
        dequantize_chunk<T>(s + to_v, __int_as_float(ld_shared_b32(scales + (BN + r) * 4)));
    });
}

// Rows of the bf16 (or fp16) copy of a sequence's keys that an FP8 cache's prefill hands to the
// Hopper kernel (attention.cuh): keys 0 .. s_cap-1 in whole blocks.
inline int64_t dequantized_kv_rows(int s_cap, int block_size) { return ((int64_t)s_cap + block_size - 1) / block_size * block_size; }

// That copy: the keys and values sequence 0 of p reads with its n_q queries, from the first
// block of the visible keys [lo, hi) up to hi, as values of T in row j of k_out and v_out
// [dequantized_kv_rows, nKV*hd] for key j (the whole first block, as the kernel reading the copy
// loads whole blocks; rows it does not read are left alone), and table_out[i] = i, the identity
// block table of the copy, for the blocks before hi. Each thread makes 8 values (16 bytes) at a
// time, grid-stride.
template <typename T>
__global__ void dequantize_visible_kv_kernel(const AttnParams<T, uint8_t> p, T* k_out, T* v_out, int* table_out) {
    const int pos0 = p.pos0[0], stride = gridDim.x * blockDim.x, tid = blockIdx.x * blockDim.x + threadIdx.x;
    const KeyRange keys = visible_keys(pos0, pos0 + p.n_q - 1, p.window);
    const Pages pages = pages_of(p, 0);
    const int first = keys.lo / p.block_size * p.block_size, units = p.nKV * p.hd / 8;   // 8-value units a row
    for (int i = tid; i <= (keys.hi - 1) / p.block_size; i += stride) table_out[i] = i;
    for (int64_t i = tid; i < (int64_t)(keys.hi - first) * units; i += stride) {
        const int key = first + (int)(i / units), u = (int)(i % units), h = u * 8 / p.hd;
        const int block = pages.table[key >> pages.shift], slot = key & pages.mask;
        const int64_t at = (int64_t)(block * p.block_size + slot) * p.nKV * p.hd + u * 8, to = (int64_t)key * p.nKV * p.hd + u * 8;
        const int64_t scale = kv_scale_index(block, slot, h, p.nKV, p.block_size);
        const uint2 k = *reinterpret_cast<const uint2*>(p.k + at), v = *reinterpret_cast<const uint2*>(p.v + at);
        *reinterpret_cast<uint4*>(k_out + to) = dequantize8<T>(k.x, k.y, p.k_scale[scale]);
        *reinterpret_cast<uint4*>(v_out + to) = dequantize8<T>(v.x, v.y, p.v_scale[scale]);
    }
}

// Makes that copy in `workspace` (attention_prefill_fp8_workspace_bytes: K's rows, V's rows,
// the table) and returns the parameters that read it: p over a 16-bit cache.
template <typename T>
AttnParams<T> dequantized_copy(const AttnParams<T, uint8_t>& p, void* workspace, cudaStream_t stream) {
    const int64_t rows = dequantized_kv_rows(p.s_cap, p.block_size), row = (int64_t)p.nKV * p.hd;
    T* k = static_cast<T*>(workspace);
    T* v = k + rows * row;
    int* table = reinterpret_cast<int*>(v + rows * row);
    dequantize_visible_kv_kernel<T><<<512, 256, 0, stream>>>(p, k, v, table);   // (grid-stride)
    cudaCheckLaunch();
    AttnParams<T> copy = {p.q, k, v, p.out, p.n_q, p.pos0, p.nH, p.nKV, p.hd, p.window, p.scale, p.s_cap, table,
                          (int)(rows / p.block_size), p.block_size, 1};
    copy.out16 = p.out16;
    return copy;
}

// Rows of a query tile are (token, head) pairs: g query heads that share KV head `kvh`, from
// head h0, sit side by side, row r = token t0 + r/g, head h0 + r%g, so every K/V tile a block
// loads serves them all (GQA). Usually they are the whole group, g = nH/nKV and h0 = kvh*g; a
// long prefill may take fewer (prefill_heads). Only the first `rows` rows are real. A decode
// tile that holds only part of a larger group starts at row r0 of that packing (attention_decode.cuh).
struct RowMap {
    int g, kvh, t0, rows, r0 = 0, h0 = kvh * g;
    __device__ int local_token(int r) const { return (r0 + r) / g; }   // token of row r, from t0
    __device__ int token(int r) const { return t0 + local_token(r); }
    __device__ int head(int r) const { return h0 + (r0 + r) % g; }
};

// Starts copying the query rows of `map` into a tile; rows past map.rows and dims past hd are
// zero-filled.
template <int ROWS, int THREADS, typename T, int HD, typename C>
__device__ __forceinline__ void load_q_tile_async(SmemTile<HD> sq, const AttnParams<T, C>& p, const RowMap& map) {
    for_each_tile_chunk<ROWS, THREADS>(sq, [&](int r, int c, uint32_t s) {
        const bool valid = r < map.rows && c * 8 < p.hd;
        cp_async_16(s, valid ? p.q + ((int64_t)map.token(r) * p.nH + map.head(r)) * p.hd + c * 8 : p.q, valid);
    });
}

}  // namespace attn
}  // namespace olmo
