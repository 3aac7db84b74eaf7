// attention.cuh: causal (optionally sliding-window) attention of new queries over a paged KV
// cache: the entry points, their argument checks and the choice of kernel. Include this file;
// it includes the kernels, which read best in this order:
//   attention_params.cuh   AttnParams, the keys a query sees, the page lookup, head sizes
//   attention_naive.cuh    the readable oracle (scores -> softmax -> P·V) and the fp32 path
//   tensor_core.cuh        PTX wrappers (mma.sync, ldmatrix, cp.async), the swizzled tile
//   paged_kv.cuh           K/V tiles from the paged cache through the block table; Q tiles
//   attention_steps.cuh    the warp-level flash steps: Q·Kᵀ, mask, online softmax, P·V
//   attention_prefill.cuh  flash attention for a chunk of one sequence
//   hopper.cuh             sm_90a building blocks: mbarriers, TMA, wgmma, the swizzled panel
//   attention_prefill_hopper.cuh  the same on Hopper: TMA producer, wgmma consumers
//   attention_decode_fp8.cuh  decode's flash steps on an FP8 cache's codes (fp16 mma)
//   attention_decode.cuh   flash-decoding for a step of many sequences, then the merge
// defines: attention_device_problem, attention_naive, attention_naive_workspace_bytes,
//          attention_prefill, attention_decode, attention_decode_workspace_bytes (and, from
//          attention_params.cuh, AttnParams, attention_supports_head_dim,
//          attention_supported_head_dims)
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
// Three entry points, from the readable oracle to the fast paths:
//   attention_naive    scores -> softmax -> P·V as three kernels over an fp32 score matrix.
//   attention_prefill  flash attention (FlashAttention-2): tiles of 128 query rows stream the
//                      cache in tiles of 64 keys with an online softmax, on mma.sync tensor cores.
//                      One sequence (batch 1), any chunk length, appended at any pos0. On Hopper
//                      (sm_90a code, head sizes 64, 128, 256) the warp-specialized kernel of
//                      attention_prefill_hopper.cuh (FlashAttention-3's design) instead.
//   attention_decode   flash-decoding for a few query rows per sequence, all sequences of a step
//                      in one launch: their keys are cut into splits that blocks process in
//                      parallel (long sequences get more splits), then a second kernel merges them.
// For T = float the prefill and decode entry points run a simple warp-per-row kernel instead
// (tensor cores take 16-bit operands; fp32 serves as the exact reference path).
//
// GPUs. Everything here runs on sm_80 and newer (mma.sync, ldmatrix, cp.async). The flash tiles
// are chosen by the shared memory the GPU allows a block ("Tiles by shared memory" below), and
// decode launches as a programmatic dependent only where the GPU has that (src/device_caps.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>

#include "attention_decode.cuh"
#include "attention_naive.cuh"
#include "attention_params.cuh"
#include "attention_prefill.cuh"
#include "attention_prefill_hopper.cuh"
#include "common.h"
#include "cuda_common.cuh"

namespace olmo {

namespace attn {

template <typename T, typename C>
void check_params(const AttnParams<T, C>& p, const char* who, bool any_hd) {
    const std::string w = std::string(who) + ": ";
    auto str = [](int x) { return std::to_string(x); };
    if constexpr (kFp8Cache<C>)
        if (p.k_scale == nullptr || p.v_scale == nullptr) fail(w + "an FP8 KV cache without its scales");
    if (std::is_same_v<T, float> && p.out16) fail(w + "an fp16 output (out16) goes with 16-bit queries");
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

// Tiles by shared memory. A block may opt in to device_caps().smem_per_block bytes; the shapes
// of attention_prefill.cuh and attention_decode.cuh where they fit (sm_90: 227 KB), else prefill
// key tiles of 32 at HD 256 and 2 decode stages at HD 128 and 256. Per block, in KB:
//                 prefill BN 64 | BN 32 | decode 3 stages | 2 stages
//     HD 64            49.5     |       |      51.5       |
//     HD 128           97.5     |       |     101.5       |   69.5
//     HD 256          195       |  131  |     201.5       |  137.5
// So sm_80 (163 KB) runs HD 256 on BN 32 and 2 stages, sm_86 and sm_89 (99 KB) HD 128 in 2
// stages and no HD 256 (attention_device_problem). The smaller shapes are instantiated only
// where some GPU needs them.
// An FP8 cache (C = uint8_t) adds 1 KB of scales to a prefill block; its decode stages hold
// codes, half a 16-bit stage (attention_decode_fp8.cuh), so it takes 4 stages where they fit
// (HD 128: 71.5 KB), else 3 or 2.
template <int HD, typename C = void> int prefill_bn(int smem) {  // the prefill key tile that fits smem bytes; 0: none
    return prefill_smem_bytes<HD, 64, C>() <= smem ? 64 : HD > 128 && prefill_smem_bytes<HD, 32, C>() <= smem ? 32 : 0;
}
template <int HD, typename C = void> int decode_stages(int smem) {  // the decode stages that fit smem bytes; 0: none
    if constexpr (kFp8Cache<C>)
        if (decode_smem_bytes<HD, 4, C>() <= smem) return 4;
    return decode_smem_bytes<HD, 3, C>() <= smem ? 3 : HD > 64 && decode_smem_bytes<HD, 2, C>() <= smem ? 2 : 0;
}

}  // namespace attn

// Why the flash kernels cannot run head size hd (attention_supports_head_dim) on this GPU: their
// smallest tiles need more shared memory per block than it allows (see "Tiles by shared
// memory"); "" when they can. C: the cache's storage (void: not an FP8 cache).
template <typename C = void>
std::string attention_device_problem(int hd) {
    const int smem = device_caps().smem_per_block;
    int need = 0;
    attn::dispatch_hd(hd, [&](auto tile) {
        constexpr int HD = decltype(tile)::value;
        if (attn::prefill_bn<HD, C>(smem) == 0 || attn::decode_stages<HD, C>(smem) == 0)
            need = std::max(attn::prefill_smem_bytes<HD, HD <= 128 ? 64 : 32, C>(),
                            attn::decode_smem_bytes<HD, HD <= 64 ? 3 : 2, C>());
    });
    if (need == 0) return "";
    char why[160];
    std::snprintf(why, sizeof why, "head_dim %d needs %.1f KiB of shared memory per block, this GPU allows %.1f KiB%s",
                  hd, need / 1024.0, smem / 1024.0, portable() == Portable::Off ? "" : " (portable mode)");
    return why;
}

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
    attn::launch_naive(p, scores, stream);
}

// Which prefill kernel runs: the fastest this GPU and head size have (Best), or one by name (the
// tests and the dev/ ladder run both on Hopper).
enum class PrefillKernel { Best, MmaSync, Hopper };

// Whether the Hopper prefill kernel can run head size hd here.
inline bool attention_prefill_hopper_runs(int hd) { return device_caps().sm90a && attn::hopper_prefill_head_dim(hd); }

// Bytes of the workspace attention_prefill takes to run the Hopper kernel over an FP8 cache: a
// copy of one sequence's keys and values in T (attn::dequantized_kv_rows rows of nKV·hd each)
// and its block table.
template <typename T>
size_t attention_prefill_fp8_workspace_bytes(int nKV, int hd, int s_cap, int block_size) {
    const int64_t rows = attn::dequantized_kv_rows(s_cap, block_size);
    return 2 * rows * nKV * hd * sizeof(T) + rows / block_size * sizeof(int);
}

// Flash attention over n_q >= 1 new queries of one sequence (any chunk of a prompt, appended
// at pos0[0]). An FP8 cache (C = uint8_t): with a workspace (attention_prefill_fp8_workspace_bytes)
// where the Hopper kernel runs, the keys the chunk sees are first copied into it as values of T
// (dequantize_visible_kv_kernel: one pass over them) and the Hopper kernel reads the copy, whose
// TMA copies land where its wgmma reads them; else the mma.sync kernel dequantizes its tiles in
// shared memory.
template <typename T, typename C>
void attention_prefill(const AttnParams<T, C>& p, cudaStream_t stream, PrefillKernel which = PrefillKernel::Best,
                       void* workspace = nullptr) {
    attn::check_params(p, "attention_prefill", false);
    if (p.batch != 1) fail("attention_prefill: batch " + std::to_string(p.batch) + " (one sequence per call)");
    if (p.n_q <= 0) return;
    static_assert(!kFp8Cache<C> || !std::is_same_v<T, float>, "an FP8 cache goes with 16-bit queries");
    if constexpr (std::is_same_v<T, float>) {
        attn::launch_rowwise(p, stream);
    } else {
        const bool hopper = attention_prefill_hopper_runs(p.hd) && (!kFp8Cache<C> || workspace != nullptr);
        if (which == PrefillKernel::Hopper && !hopper)
            fail("attention_prefill: the Hopper kernel needs sm_90a code on a compute capability 9.0 GPU (portable mode off), "
                 "head_dim 64, 128 or 256 (got " + std::to_string(p.hd) + "), and with an FP8 KV cache a workspace");
        if (hopper && which != PrefillKernel::MmaSync) {
            auto run = [&](const AttnParams<T>& a) {
                attn::dispatch_hd(p.hd, [&](auto hd) { attn::launch_prefill_hopper<T, decltype(hd)::value>(a, stream); });
            };
            if constexpr (kFp8Cache<C>) return run(attn::dequantized_copy(p, workspace, stream));
            else return run(p);
        }
        using Cache = std::conditional_t<kFp8Cache<C>, C, void>;
        if (std::string why = attention_device_problem<Cache>(p.hd); !why.empty()) fail("attention_prefill: " + why);
        attn::dispatch_hd(p.hd, [&](auto hd) {
            constexpr int HD = decltype(hd)::value;
            if (attn::prefill_bn<HD, Cache>(device_caps().smem_per_block) == 64) attn::launch_prefill<T, C, HD, 64>(p, stream);
            else if constexpr (HD > 128) attn::launch_prefill<T, C, HD, 32>(p, stream);
        });
    }
}

// Workspace of attention_decode for `batch` sequences of up to max_n_q queries each: per split
// slot, per (token, head) row, hd fp32 partial outputs and one log-sum-exp.
inline size_t attention_decode_workspace_bytes(int nH, int hd, int s_cap, int batch, int max_n_q = 1) {
    return sizeof(float) * attn::decode_max_slots(s_cap, batch) * max_n_q * nH * (hd + 1);
}

// Flash-decoding for a few query rows per sequence (n_q tokens; tiles of 16 (token, head) rows
// per KV head, so a GQA group up to 16 is read once per key), for all `batch` sequences in one
// launch. The launch shape depends on (nH, nKV, hd, n_q, batch, s_cap) only: a captured graph
// replays with new pos0 and tables.
template <typename T, typename C>
void attention_decode(const AttnParams<T, C>& p, void* workspace, cudaStream_t stream) {
    attn::check_params(p, "attention_decode", false);
    if (p.n_q <= 0) return;
    static_assert(!kFp8Cache<C> || !std::is_same_v<T, float>, "an FP8 cache goes with 16-bit queries");
    if constexpr (std::is_same_v<T, float>) {
        (void)workspace;
        attn::launch_rowwise(p, stream);
    } else {
        using Cache = std::conditional_t<kFp8Cache<C>, C, void>;
        if (std::string why = attention_device_problem<Cache>(p.hd); !why.empty()) fail("attention_decode: " + why);
        attn::dispatch_hd(p.hd, [&](auto hd) {
            constexpr int HD = decltype(hd)::value;
            auto launch = [&](auto stages) {
                constexpr int S = decltype(stages)::value;
                const int heads = p.nKV * attn::decode_row_blocks(p);
                attn::launch_decode<T, C, HD, S>(p, workspace, attn::decode_slot_count<T, C, HD, S>(p.s_cap, heads, p.batch),
                                                 stream);
            };
            const int stages = attn::decode_stages<HD, Cache>(device_caps().smem_per_block);
            if constexpr (kFp8Cache<C>)
                if (stages == 4) return launch(std::integral_constant<int, 4>{});
            if (stages == 3) launch(std::integral_constant<int, 3>{});
            else if constexpr (HD > 64) launch(std::integral_constant<int, 2>{});
        });
    }
}

}  // namespace olmo
