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

int sample_cpu(const float* logits, int V, const SamplingParams& s, uint64_t step) {
    for (int i = 0; i < V; i++)
        if (!std::isfinite(logits[i])) return -1;   // NaN would also break the sort's ordering
    if (s.temperature <= 0.0f) return cpu::argmax(logits, V);
    std::vector<int> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    int k = (s.top_k > 0 && s.top_k < V) ? s.top_k : V;
    // Sort the candidates by logit, descending (ties: lower id first); only the top k matter.
    auto by_logit = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), by_logit);
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
    double total = std::accumulate(p.begin(), p.begin() + keep, 0.0);
    double u = uniform(s.seed, step) * total, cum = 0;
    for (int i = 0; i < keep; i++) {
        cum += p[i];
        if (u < cum) return idx[i];
    }
    return idx[keep - 1];
}

}  // namespace olmo
