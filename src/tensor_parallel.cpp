// tensor_parallel.cpp: the split of a model over GPUs (see tensor_parallel.h).
#include "tensor_parallel.h"

#include <algorithm>

#include "common.h"

namespace olmo {

std::string tp_unsupported_reason(const ModelConfig& c, int ranks) {
    if (ranks < 1) return "--tp must be at least 1";
    auto check = [&](int n, const char* what) {
        return n % ranks == 0 ? std::string()
                              : "--tp " + std::to_string(ranks) + " does not divide the " + what + " (" + std::to_string(n) + ")";
    };
    for (const std::string& why : {check(c.n_heads, "query heads"), check(c.n_kv_heads, "KV heads"),
                                   check(c.intermediate, "intermediate size")})
        if (!why.empty()) return why;
    return "";
}

int tp_suggestion(const ModelConfig& c, int gpus) {
    for (int n = 2; n <= gpus; n++)
        if (tp_unsupported_reason(c, n).empty()) return n;
    return 0;
}

ModelConfig tp_shard_config(const ModelConfig& c, int ranks) {
    if (std::string why = tp_unsupported_reason(c, ranks); !why.empty()) fail(why);
    ModelConfig s = c;
    s.n_heads /= ranks, s.n_kv_heads /= ranks, s.intermediate /= ranks;
    return s;
}

bool tp_split(Param p) { return std::find(std::begin(kTpSplit), std::end(kTpSplit), p) != std::end(kTpSplit); }

TpRange tp_vocab(const ModelConfig& c, int rank, int ranks) {
    const int64_t per = (c.vocab + ranks - 1) / ranks, first = std::min<int64_t>(rank * per, c.vocab);
    return {first, std::min<int64_t>(per, c.vocab - first)};
}

TpSlice tp_slice(const ModelConfig& c, Param p, int rank, int ranks) {
    const ParamShape full = param_shape(c, p);
    const int64_t Q = c.q_dim(), KV = c.kv_dim(), I = c.intermediate;
    const int64_t q = Q / ranks, kv = KV / ranks, i = I / ranks;
    TpSlice s{{{0, full.rows}}, {0, full.cols}};
    switch (p) {
        case Param::Wqkv: s.rows = {{rank * q, q}, {Q + rank * kv, kv}, {Q + KV + rank * kv, kv}}; break;
        case Param::Wo: s.cols = {rank * q, q}; break;
        case Param::QNorm: s.rows = {{rank * q, q}}; break;
        case Param::KNorm: s.rows = {{rank * kv, kv}}; break;
        case Param::Wgu: s.rows = {{rank * i, i}, {I + rank * i, i}}; break;
        case Param::Wdown: s.cols = {rank * i, i}; break;
        case Param::LmHead: s.rows = {tp_vocab(c, rank, ranks)}; break;
        default: break;   // whole on every rank
    }
    return s;
}

std::vector<float> tp_shard(const float* full, const ModelConfig& c, Param p, int rank, int ranks) {
    const TpSlice s = tp_slice(c, p, rank, ranks);
    const int64_t cols = param_shape(c, p).cols;
    std::vector<float> out;
    for (const TpRange& r : s.rows)
        for (int64_t row = r.first; row < r.first + r.count; row++) {
            const float* from = full + row * cols + s.cols.first;
            out.insert(out.end(), from, from + s.cols.count);
        }
    return out;
}

}  // namespace olmo
