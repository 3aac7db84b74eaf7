// engine.cpp: what both engines share: argument checks, KV-cache reservation (with copy on
// write) around each compute call, and the single-sequence convenience API.
#include "engine.h"

#include <algorithm>
#include <cmath>

#include "common.h"

namespace olmo {

int kv_pool_blocks(int max_seq, int kv_blocks) {
    return kv_blocks > 0 ? kv_blocks : (max_seq + kKvBlockSize - 1) / kKvBlockSize + 1;   // +1: a copy-on-write spare
}

void Engine::init_kv(const ModelConfig& c, int max_seq, int kv_blocks) {
    max_seq_ = max_seq;
    bool kinds[2] = {false, false};
    for (int l = 0; l < c.n_layers; l++) kinds[c.layer_sliding[l] ? KvCache::kSliding : KvCache::kFull] = true;
    const int n = kv_pool_blocks(max_seq, kv_blocks);
    kv_ = std::make_unique<KvCache>(std::array<int, 2>{kinds[0] ? n : 0, kinds[1] ? n : 0}, kKvBlockSize, c.sliding_window);
    seq0_ = kv_->new_sequence();
}

MemoryUse Engine::with_pool_use(MemoryUse m) const {
    m.blocks_total = kv_->total_blocks(0) + kv_->total_blocks(1);
    m.blocks_free = kv_->free_blocks(0) + kv_->free_blocks(1);
    m.blocks_peak_used = peak_used_;
    m.block_size = kv_->block_size();
    return m;
}

// A prefill of w.prompt_len tokens (at most 512: the kernels and GEMM shapes of short prompts
// exactly; CudaEngine::warm_up adds the GEMM shapes of a longer prompt), then one decode
// step of w.batch sequences forked from it (two when drawing: the second started ahead), then
// everything is freed. Each fork beyond the first needs one block of its own for the new
// tokens, so the batch shrinks to what the pool holds (a pool too small for even one sequence
// is left for the real request to report).
void Engine::rehearse(const WarmUp& w) {
    const int len = std::min({w.prompt_len, 512, max_seq_ - 2});
    int room = INT32_MAX;
    for (int k = 0; k < 2; k++)
        if (kv_->total_blocks(k) > 0) room = std::min(room, kv_->free_blocks(k) - kv_->blocks_needed(len + 2));
    const int batch = std::min({w.batch, room + 1, max_batch()});
    if (len < 1 || batch < 1) return;
    const int root = new_sequence();
    std::vector<int> seqs{root};
    if (w.sampling.empty()) prefill(root, std::vector<int>(len, 0));
    else prefill_sample(root, std::vector<int>(len, 0), w.sampling[0], 0);
    while ((int)seqs.size() < batch) seqs.push_back(fork_sequence(root));
    const std::vector<int> ids(batch, 0);
    if (w.sampling.empty()) {
        decode(seqs, ids);
    } else {   // with a step started ahead (pipelined decode), which has a graph of its own
        const std::vector<SamplingParams> s(w.sampling.begin(), w.sampling.begin() + batch);
        const std::vector<int> got = decode_sample(seqs, ids, s, std::vector<uint64_t>(batch, 0), nullptr, true);
        decode_sample(seqs, got, s, std::vector<uint64_t>(batch, 1));
    }
    for (int s : seqs) free_sequence(s);
    peak_used_ = 0;
}

void Engine::check_ids(const std::vector<int>& ids) const {
    const int V = config().vocab;
    for (int id : ids)
        if (id < 0 || id >= V) fail("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
}

void Engine::reserve(int seq, size_t n) {
    if (!kv_->alive(seq)) fail("sequence " + std::to_string(seq) + " does not exist");
    if (n == 0) fail("nothing to run: the token list is empty");
    if (kv_->len(seq) + n > (size_t)max_seq_)
        fail("sequence of " + std::to_string(kv_->len(seq) + n) + " tokens does not fit the context of " +
             std::to_string(max_seq_) + " tokens (raise --max-seq-len, up to max_position_embeddings)");
    for (const KvCache::Copy& c : kv_->reserve(seq, (int)n)) copy_block(c.kind, c.src, c.dst);
    int used = 0;
    for (int k = 0; k < 2; k++) used += kv_->total_blocks(k) - kv_->free_blocks(k);
    peak_used_ = std::max(peak_used_, used);
}

// Non-finite logits (NaN or Inf) end the run: argmax or sampling over them would pick an
// arbitrary token without a word. The samplers of both engines return -1 for them; logits that
// leave the engine are checked here. `at` names the step (or the position).
[[noreturn]] static void fail_non_finite(const std::string& at) {
    fail(at + ": the logits are not finite (NaN or Inf); the model or its config produces non-finite values");
}

static void check_finite(const std::vector<float>& logits, int V, const std::vector<int>& positions) {
    for (size_t i = 0; i < logits.size(); i++)
        if (!std::isfinite(logits[i])) fail_non_finite("position " + std::to_string(positions[i / V]));
}

std::vector<float> Engine::prefill(int seq, const std::vector<int>& ids) {
    drop_ahead();
    check_ids(ids);
    reserve(seq, ids.size());
    std::vector<float> logits(config().vocab);
    prefill_impl(seq, ids, logits.data(), nullptr, SamplingParams{}, 0);
    kv_->commit(seq, (int)ids.size());
    check_finite(logits, config().vocab, {kv_->len(seq)});
    return logits;
}

int Engine::prefill_sample(int seq, const std::vector<int>& ids, const SamplingParams& s, uint64_t step,
                           std::vector<float>* logits) {
    drop_ahead();
    check_ids(ids);
    reserve(seq, ids.size());
    int id = -1;
    if (logits) logits->resize(config().vocab);
    prefill_impl(seq, ids, logits ? logits->data() : nullptr, &id, s, step);
    kv_->commit(seq, (int)ids.size());
    if (id < 0) fail_non_finite("step " + std::to_string(step));
    return id;
}

std::vector<float> Engine::decode(const std::vector<int>& seqs, const std::vector<int>& ids) {
    drop_ahead();
    if (seqs.size() != ids.size()) fail("decode: one token per sequence");
    check_ids(ids);
    for (int s : seqs) reserve(s, 1);
    std::vector<float> logits(seqs.size() * (size_t)config().vocab);
    decode_impl(seqs, ids, logits.data(), nullptr, {}, {});
    std::vector<int> positions;
    for (int s : seqs) kv_->commit(s, 1), positions.push_back(kv_->len(s));
    check_finite(logits, config().vocab, positions);
    return logits;
}

std::vector<int> Engine::decode_sample(const std::vector<int>& seqs, const std::vector<int>& ids,
                                       const std::vector<SamplingParams>& s, const std::vector<uint64_t>& steps,
                                       std::vector<float>* logits, bool ahead) {
    if (seqs.size() != ids.size() || s.size() != ids.size() || steps.size() != ids.size())
        fail("decode: one token, one sampler and one step per sequence");
    check_ids(ids);
    const std::vector<int> at = logits ? std::vector<int>{} : find_ahead(seqs, ids, s, steps);
    if (at.empty()) drop_ahead();
    std::vector<int> out(seqs.size());
    if (!at.empty() || (ahead && pipelined() && !logits)) {
        out = decode_pipelined(seqs, ids, s, steps, at, ahead);
    } else {   // one step, start to finish
        for (int q : seqs) reserve(q, 1);
        if (logits) logits->resize(seqs.size() * (size_t)config().vocab);
        decode_impl(seqs, ids, logits ? logits->data() : nullptr, out.data(), s, steps);
        for (int q : seqs) kv_->commit(q, 1);
    }
    for (size_t b = 0; b < out.size(); b++)
        if (out[b] < 0) drop_ahead(), fail_non_finite("step " + std::to_string(steps[b]));   // (it was fed the -1)
    return out;
}

// The step is running (at: where each of seqs is in it), or starts now. The step after it
// starts before this one's ids are waited for when it can be fed them on the device (the same
// sequences in the same order), else right after, from the host's ids.
std::vector<int> Engine::decode_pipelined(const std::vector<int>& seqs, const std::vector<int>& ids,
                                          const std::vector<SamplingParams>& s, const std::vector<uint64_t>& steps,
                                          const std::vector<int>& at, bool ahead) {
    const bool running = !at.empty();
    if (!running) {
        for (int q : seqs) reserve(q, 1);
        decode_start(seqs, ids.data(), s, steps);
    }
    const size_t flight = running ? ahead_->seqs.size() : seqs.size();   // the sequences it serves
    bool same = !running || at.size() == flight;
    for (size_t b = 0; same && b < at.size(); b++) same = at[b] == (int)b;
    ahead_.reset();
    for (int q : seqs) kv_->commit(q, 1);
    const bool next = ahead && room_for_next(seqs);
    if (next && same) start_ahead(seqs, nullptr, s, steps);
    std::vector<int> got(flight), out(seqs.size());
    decode_finish(got.data());
    for (size_t b = 0; b < seqs.size(); b++) out[b] = got[running ? at[b] : b];
    if (next && same) ahead_->ids = out;   // what it was fed
    if (next && !same) start_ahead(seqs, out.data(), s, steps);
    return out;
}

// Starts the step after `steps` for seqs, fed `ids` (null: those the step in flight draws).
void Engine::start_ahead(const std::vector<int>& seqs, const int* ids, const std::vector<SamplingParams>& s,
                         const std::vector<uint64_t>& steps) {
    std::vector<uint64_t> next = steps;
    for (uint64_t& k : next) k++;
    for (int q : seqs) reserve(q, 1);
    decode_start(seqs, ids, s, next);
    ahead_ = Ahead{seqs, ids ? std::vector<int>(ids, ids + seqs.size()) : std::vector<int>{}, s, next};
}

std::vector<int> Engine::find_ahead(const std::vector<int>& seqs, const std::vector<int>& ids,
                                    const std::vector<SamplingParams>& s, const std::vector<uint64_t>& steps) const {
    if (!ahead_ || ahead_->ids.size() != ahead_->seqs.size()) return {};   // (ids: set once the step before ended)
    std::vector<int> at;
    for (size_t b = 0; b < seqs.size(); b++) {
        const size_t j = std::find(ahead_->seqs.begin(), ahead_->seqs.end(), seqs[b]) - ahead_->seqs.begin();
        if (j == ahead_->seqs.size() || ahead_->ids[j] != ids[b] || !(ahead_->s[j] == s[b]) || ahead_->steps[j] != steps[b])
            return {};
        at.push_back((int)j);
    }
    return at;
}

void Engine::drop_ahead() {
    if (!ahead_) return;
    decode_drop();
    ahead_.reset();
}

bool Engine::room_for_next(const std::vector<int>& seqs) const {
    int need[2] = {0, 0};
    for (int q : seqs) {
        if (kv_->len(q) + 1 > max_seq_) return false;
        for (int k = 0; k < 2; k++) need[k] += kv_->blocks_to_reserve(q, 1, k);
    }
    return need[0] <= kv_->free_blocks(0) && need[1] <= kv_->free_blocks(1);
}

void Engine::free_sequence(int seq) {
    if (ahead_)   // the step ahead runs on; this sequence's part of it is never asked for
        std::replace(ahead_->seqs.begin(), ahead_->seqs.end(), seq, -1);
    kv_->free(seq);
}

std::vector<float> Engine::score(int seq, const std::vector<int>& ids) {
    drop_ahead();
    check_ids(ids);
    reserve(seq, ids.size());
    const int pos0 = kv_->len(seq);
    std::vector<float> logprobs(ids.size() - 1);
    score_impl(seq, ids, logprobs.data());
    kv_->commit(seq, (int)ids.size());
    for (size_t i = 0; i < logprobs.size(); i++)
        if (!std::isfinite(logprobs[i])) fail_non_finite("position " + std::to_string(pos0 + i + 1));   // as prefill's
    return logprobs;
}

void Engine::reset() {
    drop_ahead();
    kv_->clear();
    seq0_ = kv_->new_sequence();
}

std::vector<float> Engine::forward(const std::vector<int>& ids) {
    if (ids.size() == 1 && n_past() > 0 && !hook) return decode({seq0_}, ids);
    return prefill(seq0_, ids);
}

int Engine::forward_sample(const std::vector<int>& ids, const SamplingParams& s, uint64_t step, bool ahead) {
    if (ids.size() == 1 && n_past() > 0 && !hook) return decode_sample({seq0_}, ids, {s}, {step}, nullptr, ahead)[0];
    return prefill_sample(seq0_, ids, s, step);
}

}  // namespace olmo
