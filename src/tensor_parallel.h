// tensor_parallel.h: how a model is split over `ranks` GPUs (--tp N), Megatron style. The one
// home of which rows and columns of each engine tensor (weights.h) rank r holds; the CUDA engine
// loads its shards with it and the CPU engine simulates the ranks with it (tests).
//
// Rank r of n holds query heads [r·nH/n, (r+1)·nH/n), KV heads [r·nKV/n, ...) (GQA: the KV
// heads its query heads read, since the groups split the same way) and intermediate channels
// [r·I/n, ...). So:
//   q|k|v  [Q+2KV, H]  column parallel: its q, k and v rows of those heads      -> [Q/n+2KV/n, H]
//   o      [H, Q]      row parallel: the columns of its heads; y is a partial sum -> [H, Q/n]
//   gate|up [2I, H]    column parallel: its gate rows and the same up rows        -> [2I/n, H]
//   down   [H, I]      row parallel: its columns; y is a partial sum              -> [H, I/n]
//   q_norm [Q], k_norm [KV]: its heads' entries; the norm's sum of squares spans the full width,
//                      so the ranks add their partial sums (an all-reduce of 2 numbers a token)
//   lm_head [V, H]     by vocabulary: rows [r·⌈V/n⌉, ...) (tp_vocab; the last rank may hold
//                      fewer); each rank makes its part of the logits, rank 0 gathers them
//   everything else (embedding, the residual norms): whole on every rank.
// The o and down partial sums are added over the ranks (an all-reduce of [tokens, H]) before
// the residual norm, so every rank carries the same residual stream.
// n must divide nH, nKV and I (tp_unsupported_reason says why not, in words).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config.h"
#include "weights.h"

namespace olmo {

// Why `c` cannot be split over `ranks` GPUs, or "" when it can.
std::string tp_unsupported_reason(const ModelConfig& c, int ranks);

// The fewest GPUs, 2 .. gpus, that can split c (for a hint when it does not fit one), or 0.
int tp_suggestion(const ModelConfig& c, int gpus);

// The model one rank runs: c with nH/n heads, nKV/n KV heads and I/n intermediate channels.
ModelConfig tp_shard_config(const ModelConfig& c, int ranks);

// The layers' tensors of which a rank holds a part (of the others, the output layer is split by
// vocabulary, the rest whole on every rank), and whether p is one of them.
inline constexpr Param kTpSplit[] = {Param::Wqkv, Param::Wo, Param::QNorm, Param::KNorm, Param::Wgu, Param::Wdown};
bool tp_split(Param p);

// A range of rows (or of columns) of a full engine tensor.
struct TpRange {
    int64_t first, count;
};
// The vocabulary rows of the output layer rank r holds: [r·⌈V/n⌉, ...), clipped to V.
TpRange tp_vocab(const ModelConfig& c, int rank, int ranks);
// What rank r holds of the full engine tensor p (param_shape(c, p)): rows, in order, and columns.
// Tensors not split: every row, every column. (The CPU engine's simulation of the ranks keeps the
// output layer whole: the split changes only where the logits are made, not their values.)
struct TpSlice {
    std::vector<TpRange> rows;   // the shard's rows, in this order
    TpRange cols;
};
TpSlice tp_slice(const ModelConfig& c, Param p, int rank, int ranks);

// The shard [rows, cols] of a full row-major tensor p of c, on the host.
std::vector<float> tp_shard(const float* full, const ModelConfig& c, Param p, int rank, int ranks);

}  // namespace olmo
