// scoring.h: the perplexity of a token sequence under a model, in windows of a fixed length
// (./perplexity; the method of Hugging Face's "Perplexity of fixed-length models").
//
// Windows of ctx tokens start at multiples of the stride S (1 <= S < ctx). Window k feeds the
// tokens [k·S, min(k·S + ctx, n)) to the model from an empty context and scores those from the
// previous window's end (token 1 for the first window) to its own end; the last window is the
// first that reaches the end of the text. So every token after the first is scored exactly
// once, given the tokens before it in its window: all of them in the first window, at least
// ctx - S of them after. Perplexity = exp(mean NLL), NLL = -log p(token | its context).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine.h"

namespace olmo {

struct ScoreWindow {
    int64_t begin, first, end;   // tokens [begin, end) fed to the model; [first, end) scored
};

// The windows over n tokens: their count, and window k. Errors: n < 2, ctx < 2, S outside [1, ctx).
int64_t score_window_count(int64_t n, int ctx, int stride);
ScoreWindow score_window(int64_t n, int ctx, int stride, int64_t k);

struct PerplexityResult {
    int64_t windows = 0, scored = 0, evaluated = 0;   // windows run; tokens scored; tokens fed to the model
    double nll_sum = 0, nll_sq_sum = 0;               // sum over scored tokens of NLL and of NLL²
    double mean_nll() const;
    double perplexity() const;                        // exp(mean NLL)
    double mean_nll_stderr() const;                   // standard error of the mean NLL (sd / sqrt(scored))
};

// Called after each window: windows done so far (in `so_far`) out of `total`.
using PerplexityProgress = std::function<void(int64_t total, const PerplexityResult& so_far)>;

// The windows of `ids` run on `eng`, each in a fresh sequence (the engine's context must hold
// ctx tokens), its tokens scored with Engine::score.
PerplexityResult perplexity(Engine& eng, const std::vector<int>& ids, int ctx, int stride,
                            const PerplexityProgress& progress = nullptr);

}  // namespace olmo
