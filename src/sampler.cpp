// sampler.cpp: picking the next token on the CPU (the rules are in sampler.h).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cpu_ops.h"
#include "sampler.h"

namespace olmo {

// (seed, step) -> uniform in [0, 1): the top 53 bits of splitmix64 (sampler.h).
static double uniform(uint64_t seed, uint64_t step) {
    return (splitmix64(seed + kGolden64 * (step + 1)) >> 11) * (1.0 / 9007199254740992.0);
}

Candidates sampling_candidates(const float* logits, int V, const SamplingParams& s) {
    // Sort the candidates by logit, descending (ties: lower id first); only the top k matter.
    // (logit, id) pairs sort faster than ids compared through the logits.
    std::vector<std::pair<float, int>> order(V);
    for (int i = 0; i < V; i++) order[i] = {logits[i], i};
    const int k = (s.top_k > 0 && s.top_k < V) ? s.top_k : V;
    auto by_logit = [](const std::pair<float, int>& a, const std::pair<float, int>& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    if (k == V) std::sort(order.begin(), order.end(), by_logit);
    else std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
    std::vector<int> idx(k);
    for (int i = 0; i < k; i++) idx[i] = order[i].second;
    std::vector<double> p(k);
    const double mx = logits[idx[0]] / s.temperature;
    double sum = 0;
    for (int i = 0; i < k; i++) sum += p[i] = std::exp(logits[idx[i]] / s.temperature - mx);
    // Nucleus: keep tokens until the cumulative probability reaches top_p (at least one).
    int keep = k;
    if (s.top_p < 1.0f) {
        double cum = 0;
        for (int i = 0; i < k; i++) {
            cum += p[i] / sum;
            if (cum >= s.top_p) { keep = i + 1; break; }
        }
    }
    // Min-p: keep the tokens within depth -ln(min_p) of the most likely one (computed in fp32,
    // as the device sampler does). The first token has depth 0, so at least one stays.
    if (s.min_p > 0.0f) {
        const float top = logits[idx[0]] / s.temperature, max_depth = -std::log(s.min_p);
        int within = 1;
        while (within < keep && top - logits[idx[within]] / s.temperature <= max_depth) within++;
        keep = within;
    }
    idx.resize(keep);
    p.resize(keep);
    return {idx, p};
}

int sample_cpu(const float* logits, int V, const SamplingParams& s, uint64_t step) {
    for (int i = 0; i < V; i++)
        if (!std::isfinite(logits[i])) return -1;   // NaN would also break the sort's ordering
    if (s.greedy()) return cpu::argmax(logits, V);
    const Candidates c = sampling_candidates(logits, V, s);
    const double total = std::accumulate(c.weights.begin(), c.weights.end(), 0.0);
    const double u = uniform(s.seed, step) * total;
    double cum = 0;
    for (size_t i = 0; i < c.ids.size(); i++) {
        cum += c.weights[i];
        if (u < cum) return c.ids[i];
    }
    return c.ids.back();
}

void apply_repetition_penalty(float* logits, int V, std::vector<int> history, float penalty) {
    std::sort(history.begin(), history.end());
    history.erase(std::unique(history.begin(), history.end()), history.end());
    for (int id : history) {
        if (id < 0 || id >= V) continue;
        float& x = logits[id];
        x = x < 0.0f ? x * penalty : x / penalty;
    }
}

}  // namespace olmo
