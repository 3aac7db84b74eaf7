// sampler.h: how the next token is picked, and the CPU sampler.
//
// One struct of sampling settings serves both engines: the CPU sampler below and the device
// sampler in kernels/sampling.cuh apply the same rules, in transformers' order: divide the
// logits by the temperature, keep the top_k largest, keep the smallest set of most likely
// tokens whose probability reaches top_p, keep the tokens whose probability is at least min_p
// times the largest one (MinPLogitsWarper; with p_max the largest, p_i >= min_p * p_max <=>
// depth_i = max_j(l_j / T) - l_i / T <= -ln(min_p)), then draw with a uniform number from a
// counter-based RNG of (seed, step), so a given seed always gives the same text. temperature 0
// is greedy (min-p never removes the most likely token, so it does not change greedy picks).
//
// The repetition penalty (RepetitionPenaltyLogitsProcessor) comes before all of these and needs
// the sequence's history: apply_repetition_penalty() rewrites the logits of every id already in
// the sequence (prompt and generated tokens), logit / penalty when positive, logit * penalty
// when not. The samplers themselves never see it: the decoding loop (decoding.cpp) asks the
// engine for logits, applies it and picks on the host when a penalty is set.
#pragma once
#include <cstdint>
#include <vector>

namespace olmo {

struct SamplingParams {
    float temperature = 0.0f;  // below kGreedyBelow = greedy (argmax, ties to the lowest id)
    int top_k = 0;             // 0 = off
    float top_p = 1.0f;        // 1 = off
    uint64_t seed = 0;
    float min_p = 0.0f;               // 0 = off
    float repetition_penalty = 1.0f;  // 1 = off; applied by the decoding loop, not the samplers
    // Temperatures this small are greedy, as transformers treats 0: dividing logits by them
    // would overflow to Inf. Both samplers decide here.
    static constexpr float kGreedyBelow = 1e-5f;
    bool greedy() const { return !(temperature >= kGreedyBelow); }
    bool operator==(const SamplingParams& o) const {
        return temperature == o.temperature && top_k == o.top_k && top_p == o.top_p && seed == o.seed &&
               min_p == o.min_p && repetition_penalty == o.repetition_penalty;
    }
};

// splitmix64's finalizer: a tiny, well-mixed hash of a 64-bit counter. The samplers draw
// uniform(seed, step) from splitmix64(seed + golden * (step + 1)); constexpr, so device code
// calls it too (nvcc --expt-relaxed-constexpr).
constexpr uint64_t kGolden64 = 0x9E3779B97F4A7C15ull;
constexpr uint64_t splitmix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Picks a token id from logits [V] on the CPU; `step` counts the draws of a sequence.
// Returns -1 when any logit is NaN or Inf (the device sampler does the same; Engine turns it
// into an error naming the step).
int sample_cpu(const float* logits, int V, const SamplingParams& s, uint64_t step);

// The tokens a draw with s.temperature > 0 chooses from, most likely first (ties: lower id), with
// their unnormalized probabilities exp(l_i / T - max_j l_j / T): sample_cpu draws the first one at
// which the running sum of weights exceeds uniform(seed, step) times their total.
struct Candidates {
    std::vector<int> ids;
    std::vector<double> weights;
};
Candidates sampling_candidates(const float* logits, int V, const SamplingParams& s);

// logits [V] of the next token, in place: each distinct id of `history` (prompt and generated
// tokens so far) gets logit / penalty if the logit is positive, else logit * penalty (fp32, as
// transformers computes it on the CPU). Ids outside [0, V) are ignored.
void apply_repetition_penalty(float* logits, int V, std::vector<int> history, float penalty);

}  // namespace olmo
