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
// they were drawn from when a request needs them (else left empty). ahead: start the step after
// it too (Engine::decode_sample), when no live request ends with this one's token for sure.
std::vector<int> decode_step(Engine& eng, const std::vector<Request>& reqs, const std::vector<std::vector<int>>& out,
                             const std::vector<Live>& live, std::vector<float>& logits, bool ahead) {
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
    const bool more = std::all_of(live.begin(), live.end(),
                                  [&](const Live& l) { return (int)out[l.req].size() + 1 < reqs[l.req].max_new_tokens; });
    return eng.decode_sample(seqs, ids, sp, steps, want ? &logits : nullptr, ahead && more);
}

}  // namespace

std::vector<std::vector<int>> generate(Engine& eng, const std::vector<Request>& reqs, const std::vector<int>& eos,
                                       const TokenCallback& on_token, bool pipelined) {
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
        // The step after this one is started ahead unless requests wait: one admitted when this
        // step ends a request would change the batch, and that step would be dropped.
        const std::vector<int> got = decode_step(eng, reqs, out, live, logits, pipelined && next == reqs.size());
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

namespace {

constexpr float kNeg = -1.0e9f;   // transformers' additive "impossible" in beam scores

struct Beam {
    int seq;                      // engine sequence holding prompt + tokens
    std::vector<int> tokens;      // generated so far
    std::vector<float> logprobs;  // each token's raw log-softmax
    float score;                  // summed log-probabilities (after the repetition penalty)
};
struct Finished {
    std::vector<int> tokens;
    std::vector<float> logprobs;
    float score = kNeg;
    bool done = false;
};

// One step's candidates, t = beam * V + token over the running beams.
struct BeamCandidates {
    std::vector<float> score;   // [N * V] log_softmax (repetition penalty applied) + the beam's score
    std::vector<float> lse;     // [N] logsumexp of each beam's logits
    std::vector<int> top;       // the K best t, best first (ties: the lower t)
    std::vector<bool> stops;    // [K] top[i] ends its hypothesis (eos, or the last step)
};

// The candidates: log_softmax of each beam's logits [N, V], the repetition penalty over prompt and
// beam (as transformers: on the log-probabilities), plus the beam's score; then the top K.
BeamCandidates score_candidates(const std::vector<float>& logits, const std::vector<Beam>& running,
                                const std::vector<int>& prompt, int V, int K, float repetition_penalty) {
    const int N = (int)running.size();
    BeamCandidates c{std::vector<float>((size_t)N * V), std::vector<float>(N), {}, {}};
    for (int b = 0; b < N; b++) {
        const float* l = logits.data() + (size_t)b * V;
        float* x = c.score.data() + (size_t)b * V;
        float mx = *std::max_element(l, l + V), sum = 0.0f;
        for (int i = 0; i < V; i++) sum += std::exp(l[i] - mx);
        c.lse[b] = mx + std::log(sum);
        for (int i = 0; i < V; i++) x[i] = l[i] - c.lse[b];
        if (repetition_penalty != 1.0f) {
            std::vector<int> history = prompt;
            history.insert(history.end(), running[b].tokens.begin(), running[b].tokens.end());
            apply_repetition_penalty(x, V, std::move(history), repetition_penalty);
        }
        for (int i = 0; i < V; i++) x[i] += running[b].score;
    }
    c.top.resize(c.score.size());
    std::iota(c.top.begin(), c.top.end(), 0);
    std::partial_sort(c.top.begin(), c.top.begin() + K, c.top.end(), [&](int a, int b) {
        return c.score[a] > c.score[b] || (c.score[a] == c.score[b] && a < b);
    });
    c.top.resize(K);
    return c;
}

// Finished hypotheses: the top-N candidates that stop, scored score / denom (the length
// penalty), merged with the earlier ones; the best N stay. raw_logprob(t): candidate t's raw
// log-softmax.
template <typename F>
std::vector<Finished> merge_finished(const std::vector<Finished>& finished, const std::vector<Beam>& running,
                                     const BeamCandidates& c, int V, float denom, bool improvable, F raw_logprob) {
    const int N = (int)running.size(), K = (int)c.top.size();
    std::vector<Finished> merged = finished;
    for (int i = 0; i < K; i++) {   // the same additive -1e9 penalties, in fp32, as transformers
        const int t = c.top[i];
        Finished f{running[t / V].tokens, running[t / V].logprobs};
        f.tokens.push_back(t % V);
        f.logprobs.push_back(raw_logprob(t));
        f.done = c.stops[i] && i < N;
        f.score = c.score[t] / denom;
        if (!improvable) f.score += kNeg;
        if (!f.done) f.score += kNeg;
        merged.push_back(f);
    }
    std::stable_sort(merged.begin(), merged.end(), [](const Finished& a, const Finished& b) { return a.score > b.score; });
    merged.resize(N);
    return merged;
}

// transformers' early-stopping heuristic: whether the best running beam (its length-penalized
// score) beats the worst finished hypothesis of any slot.
bool can_improve(const std::vector<Finished>& finished, float best_running) {
    float min_finished = finished[0].score;
    for (const Finished& f : finished) min_finished = std::min(min_finished, f.score);
    bool can = false;
    for (const Finished& f : finished) can |= best_running > (f.done ? min_finished : kNeg);
    return can;
}

// The running beams of the next step: candidate c.top[order[j]] for beam j. The caches follow by
// beam index: the first child of a parent takes its sequence over, further children fork it
// (sharing blocks; the partial last block is copied on write); parents without children are freed.
template <typename F>
std::vector<Beam> reorder_beams(Engine& eng, const std::vector<Beam>& running, const BeamCandidates& c,
                                const std::vector<int>& order, const std::vector<float>& run_score, int V, int root,
                                int gen, F raw_logprob) {
    const int N = (int)running.size();
    std::vector<Beam> next(N);
    std::vector<int> children(N, 0);
    for (int j = 0; j < N; j++) {
        const int t = c.top[order[j]], parent = t / V;
        const Beam& p = running[parent];
        const bool shared_root = p.seq == root && gen == 0;   // all beams hold the root at first
        next[j].seq = (children[parent]++ == 0 && !shared_root) ? p.seq : eng.fork_sequence(p.seq);
        next[j].tokens = p.tokens;
        next[j].tokens.push_back(t % V);
        next[j].logprobs = p.logprobs;
        next[j].logprobs.push_back(raw_logprob(t));
        next[j].score = run_score[order[j]];
    }
    for (int b = 0; b < N; b++)
        if (children[b] == 0 && running[b].seq != root) eng.free_sequence(running[b].seq);
    if (gen == 0) eng.free_sequence(root);
    return next;
}

}  // namespace

BeamResult beam_search(Engine& eng, const std::vector<int>& prompt, int num_beams, int max_new_tokens,
                       float length_penalty, const std::vector<int>& eos, float repetition_penalty) {
    const int N = num_beams, V = eng.config().vocab, K = std::max(2, 1 + (int)eos.size()) * N;
    if (N < 1) fail("--beams must be at least 1");
    if (K > V) fail("--beams " + std::to_string(N) + " is too large for a vocabulary of " + std::to_string(V));
    if (blocks_for(eng, (int)prompt.size() + max_new_tokens) * N > total_blocks(eng))
        fail("beam search with " + std::to_string(N) + " beams does not fit the KV pool (raise --kv-pool-gb)");

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
        BeamCandidates c = score_candidates(logits, running, prompt, V, K, repetition_penalty);
        auto raw_logprob = [&](int t) { return logits[t] - c.lse[t / V]; };
        const bool last_step = gen + 1 >= max_new_tokens;   // max-length stopping criterion
        c.stops.resize(K);
        for (int i = 0; i < K; i++) c.stops[i] = last_step || is_eos(eos, c.top[i] % V);
        const float denom = std::pow((float)(gen + 1), length_penalty);
        finished = merge_finished(finished, running, c, V, denom, improvable, raw_logprob);

        // Running beams for the next step: the best N candidates that did not stop.
        std::vector<int> order(K);
        std::iota(order.begin(), order.end(), 0);
        std::vector<float> run_score(K);
        for (int i = 0; i < K; i++) run_score[i] = c.score[c.top[i]] + (c.stops[i] ? kNeg : 0.0f);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return run_score[a] > run_score[b]; });
        order.resize(N);

        // Stop: nothing left to continue, or no running beam can beat the worst finished one.
        const bool all_stop = std::all_of(c.stops.begin(), c.stops.end(), [](bool b) { return b; });
        improvable = improvable && can_improve(finished, run_score[order[0]] / denom);
        if (all_stop || !improvable) break;

        running = reorder_beams(eng, running, c, order, run_score, V, root, gen, raw_logprob);
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
