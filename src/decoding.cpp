// decoding.cpp: batched generation and beam search over the Engine's sequences.
#include "decoding.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common.h"

namespace olmo {

namespace {

bool is_eos(const std::vector<int>& eos, int id) { return std::find(eos.begin(), eos.end(), id) != eos.end(); }

// KV blocks a request may need before it ends, over both kinds of layers.
int blocks_for(const Engine& eng, int tokens) {
    const KvCache& kv = eng.kv_cache();
    int n = 0;
    for (int k = 0; k < 2; k++)
        if (kv.total_blocks(k) > 0) n += kv.blocks_needed(tokens) + 1;
    return n;
}

int total_blocks(const Engine& eng) { return eng.kv_cache().total_blocks(0) + eng.kv_cache().total_blocks(1); }

bool penalized(const Request& r) { return r.sampling.repetition_penalty != 1.0f; }

// The next token of request r from its raw logits [V], on the host: the repetition penalty over
// prompt + generated, then sample_cpu (decoding.h says why).
int pick_on_host(const float* logits, int V, const Request& r, const std::vector<int>& generated) {
    std::vector<float> l(logits, logits + V);
    std::vector<int> history = r.prompt;
    history.insert(history.end(), generated.begin(), generated.end());
    apply_repetition_penalty(l.data(), V, std::move(history), r.sampling.repetition_penalty);
    return sample_cpu(l.data(), V, r.sampling, generated.size());
}

// A request being decoded: its index, engine sequence and last token.
struct Live {
    int req, seq, last;
};

// Prefills request r's prompt into seq: its first token, and in `logits` [V] the row it was
// drawn from when r needs it (else left empty).
int prefill_step(Engine& eng, const Request& r, int seq, std::vector<float>& logits) {
    if (!penalized(r)) return eng.prefill_sample(seq, r.prompt, r.sampling, 0, r.want_logits ? &logits : nullptr);
    logits = eng.prefill(seq, r.prompt);
    return pick_on_host(logits.data(), (int)logits.size(), r, {});
}

// One decode step for every live sequence: their next tokens, and in `logits` [B, V] the rows
// they were drawn from when a request needs them (else left empty).
std::vector<int> decode_step(Engine& eng, const std::vector<Request>& reqs, const std::vector<std::vector<int>>& out,
                             const std::vector<Live>& live, std::vector<float>& logits) {
    const int V = eng.config().vocab;
    std::vector<int> seqs, ids, got;
    std::vector<SamplingParams> sp;
    std::vector<uint64_t> steps;
    for (const Live& l : live) {
        seqs.push_back(l.seq);
        ids.push_back(l.last);
        sp.push_back(reqs[l.req].sampling);
        steps.push_back(out[l.req].size());
    }
    if (std::any_of(live.begin(), live.end(), [&](const Live& l) { return penalized(reqs[l.req]); })) {
        logits = eng.decode(seqs, ids);
        for (size_t b = 0; b < live.size(); b++)
            got.push_back(pick_on_host(logits.data() + b * V, V, reqs[live[b].req], out[live[b].req]));
        return got;
    }
    const bool want = std::any_of(live.begin(), live.end(), [&](const Live& l) { return reqs[l.req].want_logits; });
    return eng.decode_sample(seqs, ids, sp, steps, want ? &logits : nullptr);
}

}  // namespace

std::vector<std::vector<int>> generate(Engine& eng, const std::vector<Request>& reqs, const std::vector<int>& eos,
                                       const TokenCallback& on_token) {
    std::vector<std::vector<int>> out(reqs.size());
    std::vector<Live> live;
    size_t next = 0;
    int budget = total_blocks(eng);   // blocks not promised to a live request
    for (const Request& r : reqs) {
        if (r.prompt.empty()) fail("a prompt is empty");
        if ((int)r.prompt.size() + r.max_new_tokens > eng.max_seq())
            fail("a prompt of " + std::to_string(r.prompt.size()) + " tokens plus " + std::to_string(r.max_new_tokens) +
                 " new ones exceeds the context of " + std::to_string(eng.max_seq()) + " tokens");
        if (blocks_for(eng, (int)r.prompt.size() + r.max_new_tokens) > budget)
            fail("a request of " + std::to_string(r.prompt.size() + r.max_new_tokens) +
                 " tokens does not fit the KV pool even alone (raise --kv-pool-gb)");
    }
    auto finish = [&](const Live& l) {
        eng.free_sequence(l.seq);
        budget += blocks_for(eng, (int)reqs[l.req].prompt.size() + reqs[l.req].max_new_tokens);
    };
    const int V = eng.config().vocab;
    // Records a token; true when its request ends here. logits: the row it was drawn from.
    auto emit = [&](int req, int id, const float* logits) {
        out[req].push_back(id);
        const bool end = is_eos(eos, id), last = end || (int)out[req].size() >= reqs[req].max_new_tokens;
        const bool told = on_token && on_token(NewToken{req, id, end, last, reqs[req].want_logits ? logits : nullptr});
        return last || told;
    };
    while (next < reqs.size() || !live.empty()) {
        // Admit waiting requests while their worst-case blocks fit and the step has room (first
        // come, first served).
        while (next < reqs.size()) {
            const Request& r = reqs[next];
            const int need = blocks_for(eng, (int)r.prompt.size() + r.max_new_tokens);
            if (need > budget || (int)live.size() >= eng.max_batch()) break;
            budget -= need;
            Live l{(int)next, eng.new_sequence(), 0};
            std::vector<float> logits;
            l.last = prefill_step(eng, r, l.seq, logits);
            if (emit(l.req, l.last, logits.data())) finish(l);
            else live.push_back(l);
            next++;
        }
        if (live.empty()) continue;
        std::vector<float> logits;   // [B, V] when a request needs them
        const std::vector<int> got = decode_step(eng, reqs, out, live, logits);
        std::vector<Live> still;
        for (size_t b = 0; b < live.size(); b++) {
            live[b].last = got[b];
            if (emit(live[b].req, got[b], logits.empty() ? nullptr : logits.data() + b * V)) finish(live[b]);
            else still.push_back(live[b]);
        }
        live = std::move(still);
    }
    return out;
}

BeamResult beam_search(Engine& eng, const std::vector<int>& prompt, int num_beams, int max_new_tokens,
                       float length_penalty, const std::vector<int>& eos, float repetition_penalty) {
    const int N = num_beams, V = eng.config().vocab, K = std::max(2, 1 + (int)eos.size()) * N;
    if (N < 1) fail("--beams must be at least 1");
    if (K > V) fail("--beams " + std::to_string(N) + " is too large for a vocabulary of " + std::to_string(V));
    if (blocks_for(eng, (int)prompt.size() + max_new_tokens) * N > total_blocks(eng))
        fail("beam search with " + std::to_string(N) + " beams does not fit the KV pool (raise --kv-pool-gb)");
    constexpr float kNeg = -1.0e9f;

    struct Beam {
        int seq;                      // engine sequence holding prompt + tokens
        std::vector<int> tokens;      // generated so far
        std::vector<float> logprobs;  // each token's raw log-softmax
        float score;                  // summed log-probabilities (after the repetition penalty)
    };
    struct Finished {
        std::vector<int> tokens;
        std::vector<float> logprobs;
        float score = -1.0e9f;
        bool done = false;
    };
    // Like transformers: N beams start from the prompt with scores [0, -1e9, ...], so the first
    // step only expands beam 0. They all share the prompt's sequence at first.
    const int root = eng.new_sequence();
    std::vector<float> logits = eng.prefill(root, prompt);
    std::vector<Beam> running(N, Beam{root, {}, {}, kNeg});
    running[0].score = 0.0f;
    logits.resize((size_t)N * V);
    for (int b = 1; b < N; b++) std::copy_n(logits.begin(), V, logits.begin() + (size_t)b * V);
    std::vector<Finished> finished(N);
    bool improvable = true;

    for (int gen = 0;; gen++) {   // gen = tokens generated so far (cur_len - prompt_len)
        // Candidates: log_softmax of each beam's logits, the repetition penalty over prompt and
        // beam (as transformers: on the log-probabilities), plus the beam's score; top K over all.
        std::vector<float> cand((size_t)N * V), lse(N);
        for (int b = 0; b < N; b++) {
            const float* l = logits.data() + (size_t)b * V;
            float* c = cand.data() + (size_t)b * V;
            float mx = *std::max_element(l, l + V), sum = 0.0f;
            for (int i = 0; i < V; i++) sum += std::exp(l[i] - mx);
            lse[b] = mx + std::log(sum);
            for (int i = 0; i < V; i++) c[i] = l[i] - lse[b];
            if (repetition_penalty != 1.0f) {
                std::vector<int> history = prompt;
                history.insert(history.end(), running[b].tokens.begin(), running[b].tokens.end());
                apply_repetition_penalty(c, V, std::move(history), repetition_penalty);
            }
            for (int i = 0; i < V; i++) c[i] += running[b].score;
        }
        // The raw log-softmax of candidate t (beam t / V, token t % V).
        auto raw_logprob = [&](int t) { return logits[t] - lse[t / V]; };
        std::vector<int> top(cand.size());
        std::iota(top.begin(), top.end(), 0);
        std::partial_sort(top.begin(), top.begin() + K, top.end(), [&](int a, int b) {
            return cand[a] > cand[b] || (cand[a] == cand[b] && a < b);
        });
        top.resize(K);
        const bool last_step = gen + 1 >= max_new_tokens;   // max-length stopping criterion
        std::vector<bool> stops(K);
        for (int i = 0; i < K; i++) stops[i] = last_step || is_eos(eos, top[i] % V);

        // Finished hypotheses: the top-N candidates that stop, scored with the length penalty,
        // merged with the earlier ones; the best N stay.
        std::vector<Finished> merged = finished;
        for (int i = 0; i < K; i++) {   // the same additive -1e9 penalties, in fp32, as transformers
            Finished f{running[top[i] / V].tokens, running[top[i] / V].logprobs};
            f.tokens.push_back(top[i] % V);
            f.logprobs.push_back(raw_logprob(top[i]));
            f.done = stops[i] && i < N;
            f.score = cand[top[i]] / std::pow((float)(gen + 1), length_penalty);
            if (!improvable) f.score += kNeg;
            if (!f.done) f.score += kNeg;
            merged.push_back(f);
        }
        std::stable_sort(merged.begin(), merged.end(), [](const Finished& a, const Finished& b) { return a.score > b.score; });
        merged.resize(N);
        finished = merged;

        // Running beams for the next step: the best N candidates that did not stop.
        std::vector<int> order(K);
        std::iota(order.begin(), order.end(), 0);
        std::vector<float> run_score(K);
        for (int i = 0; i < K; i++) run_score[i] = cand[top[i]] + (stops[i] ? kNeg : 0.0f);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return run_score[a] > run_score[b]; });
        order.resize(N);

        // Stop: nothing left to continue, or no running beam can beat the worst finished one.
        const bool all_stop = std::all_of(stops.begin(), stops.end(), [](bool b) { return b; });
        const float best_running = run_score[order[0]] / std::pow((float)(gen + 1), length_penalty);
        float min_finished = finished[0].score;
        for (const Finished& f : finished) min_finished = std::min(min_finished, f.score);
        bool can_improve = false;   // any slot whose worst finished score the best running beam beats
        for (const Finished& f : finished) can_improve |= best_running > (f.done ? min_finished : kNeg);
        improvable = improvable && can_improve;
        if (all_stop || !improvable) break;

        // Reorder the caches by beam index: the first child of a parent takes its sequence over,
        // further children fork it (sharing blocks; the partial last block is copied on write).
        std::vector<Beam> next(N);
        std::vector<int> children(N, 0);
        for (int j = 0; j < N; j++) {
            const int parent = top[order[j]] / V;
            const Beam& p = running[parent];
            const bool shared_root = p.seq == root && gen == 0;   // all beams hold the root at first
            next[j].seq = (children[parent]++ == 0 && !shared_root) ? p.seq : eng.fork_sequence(p.seq);
            next[j].tokens = p.tokens;
            next[j].tokens.push_back(top[order[j]] % V);
            next[j].logprobs = p.logprobs;
            next[j].logprobs.push_back(raw_logprob(top[order[j]]));
            next[j].score = run_score[order[j]];
        }
        for (int b = 0; b < N; b++)
            if (children[b] == 0 && running[b].seq != root) eng.free_sequence(running[b].seq);
        if (gen == 0) eng.free_sequence(root);
        running = std::move(next);
        std::vector<int> seqs, ids;
        for (const Beam& b : running) seqs.push_back(b.seq), ids.push_back(b.tokens.back());
        logits = eng.decode(seqs, ids);
    }
    for (const Beam& b : running)
        if (eng.kv_cache().alive(b.seq)) eng.free_sequence(b.seq);
    if (eng.kv_cache().alive(root)) eng.free_sequence(root);
    return {finished[0].tokens, finished[0].logprobs, finished[0].score};
}

}  // namespace olmo
