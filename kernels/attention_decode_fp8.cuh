// attention_decode_fp8.cuh: the decode split kernel's flash steps on an FP8 KV cache, with the
// tensor cores reading the E4M3 codes as fp16 (exact) and the per-key scales applied outside
// the products.
// defines: attn::code_unit, attn::load_kv_codes_async, attn::QFp16, attn::warp_scores_fp8,
//          attn::warp_pv_fp8, attn::pv_dim
//
// A cached row of K or V is hd codes and one scale: k_j[d] = ks_j · code_j[d] (src/fp8.h). The
// warp's steps over its 16 keys of a tile (attention_steps.cuh) become
//     S   = (q̃ · code_Kᵀ) · ks_j / f          q̃ = q · f in fp16, f a power of two (below)
//     O  += vr · (P̃ · code_V)                 P̃_j = p_j · vs_j / vr in fp16, vr = max_j vs_j
// on m16n8k16 fp16 mma, whose operands the codes become with one instruction per two
// (cvt.rn.f16x2.e4m3x2; E4M3 is a subset of fp16). Nothing is dequantized into shared memory.
//   q̃: f = 2^(14 - ⌊log2 max|q|⌋) over the whole Q tile, so max|q̃| is in [2^14, 2^15) and every
//      value of q (bf16 or fp16) is exact in fp16: the scores are the dequantized ones up to the
//      order of the fp32 sums.
//   P̃: the online softmax keeps p ≤ 2^8 (attention_steps.cuh), and vs_j / vr ≤ 1, so P̃ fits
//      fp16 with 11 significant bits where a 16-bit cache's P has 8 (bf16) or 11 (fp16).
//      Dividing by the warp's largest scale keeps the P̃ of its largest values out of fp16's
//      subnormals whatever the values' range (a key whose scale lies 10^5 below the largest of
//      its 16 keeps about 1% of its own term's precision); each 16-key product is then added to
//      O times vr.
// Fragments with codes. mma wants B = Kᵀ with two consecutive dims of one key per register, and
// B = V with two keys of one dim; a lane loads 16 consecutive codes of a row at once, so the
// dims are permuted inside a product (a sum over dims, or over keys, does not care in which
// order its terms are paired, as long as both operands agree):
//   Q·Kᵀ: lane (n = lane/4, t = lane%4) loads dims 64G + 16t .. 64G + 16t + 15 of key n; slice
//         s (0..3) of group G takes its dims 16t+4s .. 16t+4s+3 as the k = 2t, 2t+1, 2t+8, 2t+9
//         of mma's fragments, and Q's A fragments take the same dims (QFp16).
//   P·V:  lane (g = lane/4, t) loads 16 codes of each of its keys 2t, 2t+1, 2t+8, 2t+9 (the keys
//         of its probabilities' fragments) at dims pv_dim(i, g), n-tile i = 0 .. HD/8-1, and
//         pairs the two keys of each dim with a byte permute. O's n-tile i, column n is then
//         dim pv_dim(i, n) of the output (merge_warps writes it there).
// Shared memory: the stage rows are HD codes in 16-byte units, unit u of row r stored at
// code_unit(r, u), so that both loads above are free of bank conflicts at HD 128 and 256 (Q·Kᵀ:
// the 8 lanes of a quarter warp read 4 units of two adjacent rows; P·V: units g, g+1 of rows 2t,
// or 2t+1). At HD 64 two rows share 128 bytes and the P·V loads conflict two ways.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "attention_params.cuh"
#include "paged_kv.cuh"
#include "tensor_core.cuh"

namespace olmo {
namespace attn {

// Where unit u (16 codes) of stage row r lies in the row (see above).
template <int HD>
__device__ __forceinline__ int code_unit(int r, int u) {
    if constexpr (HD == 64) return u;
    else return u ^ ((r & 6) ^ ((r & 1) << 2));
}

// An FP8 cache: starts copying the codes of keys key0 .. key0+BN-1 of KV head kvh into a stage
// at `codes` (K's rows of HD bytes, then V's, BN·HD bytes on; units placed by code_unit) in
// 16-byte copies (two of 8 where hd is not a multiple of 16, as 16-byte copies need 16-byte
// aligned rows), and their scales to `scales` (BN of K, then BN of V). Keys outside [lo, hi)
// and bytes past hd are zero, scales too. Only the rows of keys [from, to) are touched (as
// load_kv_tile_async).
template <int BN, int THREADS, int HD, typename T>
__device__ __forceinline__ void load_kv_codes_async(uint32_t codes, uint32_t scales, const AttnParams<T, uint8_t>& p,
                                                    const TableWindow& tw, int kvh, int key0, int lo, int hi,
                                                    int from = 0, int to = INT_MAX) {
    constexpr int UNITS = HD / 16, STEP = THREADS / UNITS;   // 16-byte units a row; rows a pass
    static_assert(THREADS % UNITS == 0 && BN % STEP == 0 && THREADS == 2 * BN, "whole passes; a scale per thread");
    const uint32_t row_bytes = p.nKV * p.hd, to_v = BN * HD;
    const int u = threadIdx.x % UNITS, bytes = p.hd - u * 16;   // this thread's unit: bytes of it in the head
    const char* k = reinterpret_cast<const char*>(p.k) + kvh * p.hd + (bytes > 0 ? u * 16 : 0);
    const char* v = reinterpret_cast<const char*>(p.v) + kvh * p.hd + (bytes > 0 ? u * 16 : 0);
    const bool wide = p.hd % 16 == 0;
#pragma unroll
    for (int r = threadIdx.x / UNITS; r < BN; r += STEP) {
        const int key = key0 + r;
        const uint32_t block = tw.block_of(key);
        if (key < from || key >= to) continue;
        const bool valid = (unsigned)(key - lo) < (unsigned)(hi - lo) && bytes > 0;
        const uint64_t at = mul_wide(valid ? block << tw.pg.shift | (key & tw.pg.mask) : 0, row_bytes);
        const uint32_t dst = codes + r * HD + code_unit<HD>(r, u) * 16;
        if (wide) {
            cp_async_16(dst, k + at, valid);
            cp_async_16(dst + to_v, v + at, valid);
        } else {
            cp_async_8(dst, k + at, valid);
            cp_async_8(dst + to_v, v + at, valid);
            cp_async_8(dst + 8, k + at + 8, valid && bytes > 8);
            cp_async_8(dst + to_v + 8, v + at + 8, valid && bytes > 8);
        }
    }
    if (threadIdx.x < 2 * BN) {   // thread t: the scale of K row t, or of V row t - BN
        const int r = threadIdx.x % BN, key = key0 + r;
        const uint32_t block = tw.block_of(key);   // (a warp-wide shuffle: every lane of these warps takes part)
        if (key < from || key >= to) return;
        const bool valid = (unsigned)(key - lo) < (unsigned)(hi - lo);
        const int64_t at = valid ? kv_scale_index(block, key & tw.pg.mask, kvh, p.nKV, p.block_size) : 0;
        cp_async_4(scales + threadIdx.x * 4, (threadIdx.x < BN ? p.k_scale : p.v_scale) + at, valid);
    }
}

// Two E4M3 codes (the low one in the low byte) -> two fp16 values in one register, exactly.
__device__ __forceinline__ uint32_t e4m3x2_to_half2(uint32_t two) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two & 0xffffu), __NV_E4M3);
    return (uint32_t)h.x | (uint32_t)h.y << 16;
}

// q̃ = q · f of the 16-row Q tile (a SmemTile of T) in fp16, as the A fragments of the permuted
// dims above (HD/16 slices, 32 registers at HD 128), and 1/f. Every warp makes the same.
template <int HD, typename T>
struct QFp16 {
    uint32_t f[HD / 16][4];
    float inv;   // 1/f
    __device__ QFp16(SmemTile<HD> q, int lane) {
        const int g = lane / 4, t = lane % 4;
        float x[HD / 64][2][16];   // [group][row g, g+8][its 16 dims]
        float amax = 0.0f;
#pragma unroll
        for (int G = 0; G < HD / 64; G++)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int c = 0; c < 2; c++) {   // chunks 8G + 2t and 8G + 2t + 1: dims 64G + 16t + 8c ..
                    const uint4 w = ld_shared_v4(q.at(g + 8 * h, 8 * G + 2 * t + c));
                    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float2 v = unpack2<T>(words[i]);
                        x[G][h][8 * c + 2 * i] = v.x, x[G][h][8 * c + 2 * i + 1] = v.y;
                        amax = fmaxf(amax, fmaxf(fabsf(v.x), fabsf(v.y)));
                    }
                }
        amax = warp_reduce(amax, MaxOp{});
        // f = 2^(14 - e), e = ⌊log2 amax⌋, held to 2^±100 (an all-zero tile: f = 1).
        const int shift = amax > 0.0f ? min(100, max(-100, 14 - ilogbf(amax))) : 0;
        const float scale = ldexpf(1.0f, shift);
        inv = ldexpf(1.0f, -shift);
#pragma unroll
        for (int G = 0; G < HD / 64; G++)
#pragma unroll
            for (int s = 0; s < 4; s++)   // slice 4G + s: dims 16t + 4s .. 16t + 4s + 3 of group G
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    f[4 * G + s][h] = pack2<__half>(x[G][h][4 * s] * scale, x[G][h][4 * s + 1] * scale);
                    f[4 * G + s][h + 2] = pack2<__half>(x[G][h][4 * s + 2] * scale, x[G][h][4 * s + 3] * scale);
                }
    }
};

// This lane's keys of the warp's 16 (its columns of the scores and rows of P·V): 2t, 2t+1 of
// n-tile 0 and the same of n-tile 1, i.e. keys 2t, 2t+1, 2t+8, 2t+9; their scales in `scales`
// (floats, the warp's first key at row0).
__device__ __forceinline__ void lane_key_scales(float (&s)[2][2], uint32_t scales, int row0, int lane) {
#pragma unroll
    for (int nt = 0; nt < 2; nt++) {
        const uint2 w = ld_shared_v2(scales + (row0 + 8 * nt + 2 * (lane % 4)) * 4);
        s[nt][0] = __uint_as_float(w.x), s[nt][1] = __uint_as_float(w.y);
    }
}

// s = Q·Kᵀ over the warp's 16 keys, stage rows row0 .. row0+15 of the K codes at `codes` and
// their scales at `scales`.
template <int HD, typename T>
__device__ __forceinline__ void warp_scores_fp8(float (&s)[1][2][4], const QFp16<HD, T>& q, uint32_t codes,
                                                uint32_t scales, int row0, int lane) {
    const int n = lane / 4, t = lane % 4;
    float acc[2][2][4] = {};   // [chain: even, odd slice][n-tile]
#pragma unroll
    for (int nt = 0; nt < 2; nt++) {
        const int r = row0 + 8 * nt + n;
#pragma unroll
        for (int G = 0; G < HD / 64; G++) {
            const uint4 c = ld_shared_v4(codes + r * HD + code_unit<HD>(r, 4 * G + t) * 16);
            const uint32_t words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
            for (int sl = 0; sl < 4; sl++)   // slice 4G + sl: codes 4sl, 4sl+1 (b0) and 4sl+2, 4sl+3 (b1)
                mma_16x8x16<__half>(acc[sl % 2][nt], q.f[4 * G + sl], e4m3x2_to_half2(words[sl]),
                                    e4m3x2_to_half2(words[sl] >> 16));
        }
    }
    float ks[2][2];
    lane_key_scales(ks, scales, row0, lane);
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) s[0][nt][i] = (acc[0][nt][i] + acc[1][nt][i]) * (ks[nt][i % 2] * q.inv);
}

// Output dim of P·V's n-tile i, column n (see above): lane n loads 16 consecutive codes of a row
// per 128 dims (8 at HD 64).
template <int HD>
__host__ __device__ constexpr int pv_dim(int i, int n) {
    constexpr int RUN = HD >= 128 ? 16 : HD / 8;
    return i / 16 * 128 + n * RUN + i % 16;
}

// o += P·V over the warp's 16 keys: p the probabilities (fp32 accumulator fragments), stage rows
// row0 .. row0+15 of the V codes at `codes`, their scales at `scales`.
template <int HD>
__device__ __forceinline__ void warp_pv_fp8(float (&o)[1][HD / 8][4], const float (&p)[1][2][4], uint32_t codes,
                                            uint32_t scales, int row0, int lane) {
    const int g = lane / 4, t = lane % 4;
    float vs[2][2];
    lane_key_scales(vs, scales, row0, lane);
    // vr: the largest scale of the warp's 16 keys (its 4 lanes of a row hold them all).
    float vr = fmaxf(fmaxf(vs[0][0], vs[0][1]), fmaxf(vs[1][0], vs[1][1]));
    vr = fmaxf(vr, __shfl_xor_sync(0xffffffffu, vr, 1));
    vr = fmaxf(vr, __shfl_xor_sync(0xffffffffu, vr, 2));
    const float inv = vr > 0.0f ? 1.0f / vr : 0.0f;   // no live key: every p is 0 as well
    uint32_t a[4];   // P̃ as the A fragment of the 16 keys (pack_probabilities' order)
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            a[2 * nt + h] = pack2<__half>(p[0][nt][2 * h] * (vs[nt][0] * inv), p[0][nt][2 * h + 1] * (vs[nt][1] * inv));
    // Rows 2t, 2t+1 (x) and 2t+8, 2t+9 (y) of the warp's 16, RUN codes of each per 128 dims.
    const int rows[4] = {row0 + 2 * t, row0 + 2 * t + 1, row0 + 2 * t + 8, row0 + 2 * t + 9};
#pragma unroll
    for (int k = 0; k < (HD + 127) / 128; k++) {
        uint32_t w[4][4];   // [row][word]
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int r = rows[j];
            if constexpr (HD == 64) {   // 8 codes: dims 8g .. 8g+7, bytes 8(g%2) of unit g/2
                const uint2 c = ld_shared_v2(codes + r * HD + g * 8);
                w[j][0] = c.x, w[j][1] = c.y, w[j][2] = w[j][3] = 0;
            } else {
                const uint4 c = ld_shared_v4(codes + r * HD + code_unit<HD>(r, 8 * k + g) * 16);
                w[j][0] = c.x, w[j][1] = c.y, w[j][2] = c.z, w[j][3] = c.w;
            }
        }
#pragma unroll
        for (int word = 0; word < (HD == 64 ? 2 : 4); word++) {
            // Byte b of the word of two keys, paired: (x0.b, x1.b) for b0, (y0.b, y1.b) for b1.
            const uint32_t x01 = __byte_perm(w[0][word], w[1][word], 0x5140), x23 = __byte_perm(w[0][word], w[1][word], 0x7362);
            const uint32_t y01 = __byte_perm(w[2][word], w[3][word], 0x5140), y23 = __byte_perm(w[2][word], w[3][word], 0x7362);
            const uint32_t b0[4] = {x01, x01 >> 16, x23, x23 >> 16}, b1[4] = {y01, y01 >> 16, y23, y23 >> 16};
#pragma unroll
            for (int b = 0; b < 4; b++) {   // n-tile i: dims pv_dim(i, ·)
                const int i = 16 * k + 4 * word + b;
                float d[4];
                mma_16x8x16_new<__half>(d, a, e4m3x2_to_half2(b0[b]), e4m3x2_to_half2(b1[b]));
#pragma unroll
                for (int e = 0; e < 4; e++) o[0][i][e] = fmaf(vr, d[e], o[0][i][e]);
            }
        }
    }
}

}  // namespace attn
}  // namespace olmo
