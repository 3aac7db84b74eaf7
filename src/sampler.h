// sampler.h: how the next token is picked, and the CPU sampler.
//
// One struct of sampling settings serves both engines: the CPU sampler below and the device
// sampler in kernels/sampling.cuh apply the same rules, in transformers' order: divide the
// logits by the temperature, keep the top_k largest, keep the smallest set of most likely
// tokens whose probability reaches top_p, then draw with a uniform number from a counter-based
// RNG of (seed, step), so a given seed always gives the same text. temperature 0 is greedy.
#pragma once
#include <cstdint>

namespace olmo {

struct SamplingParams {
    float temperature = 0.0f;  // 0 = greedy (argmax, ties to the lowest id)
    int top_k = 0;             // 0 = off
    float top_p = 1.0f;        // 1 = off
    uint64_t seed = 0;
    bool operator==(const SamplingParams& o) const {
        return temperature == o.temperature && top_k == o.top_k && top_p == o.top_p && seed == o.seed;
    }
};

// Picks a token id from logits [V] on the CPU; `step` counts the draws of a sequence.
// splitmix64's finalizer: a tiny, well-mixed hash of a 64-bit counter. The samplers draw
// uniform(seed, step) from splitmix64(seed + golden * (step + 1)); constexpr, so device code
// calls it too (nvcc --expt-relaxed-constexpr).
constexpr uint64_t kGolden64 = 0x9E3779B97F4A7C15ull;
constexpr uint64_t splitmix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Returns -1 when any logit is NaN or Inf (the device sampler does the same; Engine turns it
// into an error naming the step).
int sample_cpu(const float* logits, int V, const SamplingParams& s, uint64_t step);

}  // namespace olmo
