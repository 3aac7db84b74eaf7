// cp_engine.cuh: context parallel over several GPUs of one host (--cp N; context_parallel.h has
// the split of a prompt): a long prompt's prefill shared by N GPUs, each holding the whole model.
// Included by cuda_engine.cu only, after tp_engine.cuh (MultiGpuEngine).
//
// A prompt that starts a sequence (of at least 2N tokens: a token per chunk) runs in rounds of
// about N · chunk tokens at most (each rank's share fits its buffers); each round is cut into 2N
// chunks, rank r taking chunk r and its mirror 2N-1-r (cp_tokens: the causal work balanced). Every
// rank runs its tokens through every layer; after each layer's RoPE has put their K/V in its cache,
// the ranks exchange those rows (CudaEngine::exchange_kv, an all-gather; an FP8 cache's codes and
// scales, each rank's made by its own RoPE as one GPU would make them), so that each then attends
// its queries over all the keys before them with the ordinary prefill kernel, and ends the prompt
// holding the whole cache. Rank 0 holds the prompt's last token (the mirror of chunk 0), so it
// makes the logits; decode, scoring and short or continued prompts then run on rank 0 alone.
// Not yet the ring of context_parallel.h (K/V passed on while the flash kernel computes, partials
// merged by their log-sum-exp): the exchange here is not overlapped (docs/tensor_parallel.md costs
// it).
#pragma once

#include <algorithm>
#include <vector>

#include "context_parallel.h"

namespace olmo {
namespace {

template <typename T, typename G>
class CpEngine : public MultiGpuEngine<T, G> {
    using Base = MultiGpuEngine<T, G>;
    using Base::c_, Base::group_, Base::ranks_, Base::kv_;

public:
    CpEngine(const ModelConfig& c, const Checkpoint* ck, int max_seq, int kv_blocks, int max_batch, bool fp8,
             LoadProgress* progress, int max_chunk, int n, bool kv_fp8)
        : Base(c, n, max_seq, kv_blocks, ", on each of " + std::to_string(n) + " GPUs (context parallel)",
               [&](int r, TpRank cp) {
                   cp.cp_rank = r, cp.cp_ranks = n;
                   return std::make_unique<CudaEngine<T, G>>(c, ck, max_seq, kv_blocks, max_batch, fp8,
                                                             r == 0 ? progress : nullptr, max_chunk, cp, kv_fp8);
               }) {}

protected:
    void prefill_impl(int seq, const std::vector<int>& ids, float* logits, int* id, const SamplingParams& s,
                      uint64_t step) override {
        const int n = group_.size(), total = (int)ids.size();
        if (kv_->len(seq) > 0 || total < 2 * n) return on_rank0([&] { ranks_[0]->prefill_impl(seq, ids, logits, id, s, step); });
        // Rounds of near-equal lengths, each at most 2n · (chunk / 2) tokens: a rank's two chunks
        // then fit its chunk rows, and every chunk of every round holds a token at least.
        const int per_round = 2 * n * (ranks_[0]->chunk_ / 2), rounds = (total + per_round - 1) / per_round;
        for (int k = 0, first = 0; k < rounds; k++) {
            const int len = total / rounds + (k < total % rounds ? 1 : 0);
            run_round(seq, ids, first, len, /*last=*/k + 1 == rounds, s, step);
            first += len;
        }
        on_rank0([&] { ranks_[0]->sync_out(1, logits, id); });
    }
    void decode_impl(const std::vector<int>& seqs, const std::vector<int>& ids, float* logits, int* ids_out,
                     const std::vector<SamplingParams>& s, const std::vector<uint64_t>& steps) override {
        on_rank0([&] { ranks_[0]->decode_impl(seqs, ids, logits, ids_out, s, steps); });
    }
    void score_impl(int seq, const std::vector<int>& ids, float* logprobs) override {
        on_rank0([&] { ranks_[0]->score_impl(seq, ids, logprobs); });
    }

private:
    // f() on rank 0's thread (its GPU current); the other ranks idle.
    template <typename F> void on_rank0(F f) {
        group_.on_every_rank([&](int r) {
            if (r == 0) f();
        });
    }

    // Whether some layer keeps its K/V in the pools of `kind` (KvCache::kFull, kSliding).
    bool uses_kind(int kind) const {
        for (int l = 0; l < c_.n_layers; l++)
            if ((c_.layer_sliding[l] ? KvCache::kSliding : KvCache::kFull) == kind) return true;
        return false;
    }

    // One round: tokens [first, first + len) of the prompt, split over the ranks.
    void run_round(int seq, const std::vector<int>& ids, int first, int len, bool last, const SamplingParams& s,
                   uint64_t step) {
        const int n = group_.size();
        std::vector<std::vector<int>> pos(n);   // each rank's tokens' positions, its two chunks in order
        std::vector<int> split(n);              // how many of them are in its first chunk
        for (int r = 0; r < n; r++) {
            const std::vector<CpRange> chunks = cp_tokens(len, r, n);
            split[r] = chunks[0].count;
            for (const CpRange& c : chunks)
                for (int t = 0; t < c.count; t++) pos[r].push_back(first + c.first + t);
        }
        int cmax = 0;
        for (const auto& p : pos) cmax = std::max(cmax, (int)p.size());
        group_.on_every_rank([&](int r) {
            std::vector<int> rows[2];   // every rank's tokens' pool rows, [n][cmax], per kind; -1: none (or this rank's)
            for (int k = 0; k < 2; k++) {
                rows[k].assign((size_t)n * cmax, -1);
                for (int q = 0; q < n; q++)
                    if (q != r && uses_kind(k))
                        for (size_t i = 0; i < pos[q].size(); i++) rows[k][(size_t)q * cmax + i] = kv_->row(seq, k, pos[q][i]);
            }
            std::vector<int> my_ids;
            for (int p : pos[r]) my_ids.push_back(ids[p]);
            const int pos0[2] = {pos[r][0], split[r] < (int)pos[r].size() ? pos[r][split[r]] : 0};
            CudaEngine<T, G>& e = *ranks_[r];
            const bool logits = last && r == 0;   // rank 0's second chunk ends the prompt
            e.cp_round(seq, my_ids, pos[r], split[r], cmax, rows, pos0, step, logits);
            if (logits) e.draw({s});
        });
    }
};

}  // namespace
}  // namespace olmo
