// scoring.cpp: windows and the perplexity over them (scoring.h).
#include "scoring.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common.h"

namespace olmo {

int64_t score_window_count(int64_t n, int ctx, int stride) {
    if (n < 2) fail("the text is " + std::to_string(n) + " token long: at least 2 are needed to score one");
    if (ctx < 2) fail("ctx " + std::to_string(ctx) + ": a window needs at least 2 tokens (one to condition on, one to score)");
    if (stride < 1 || stride >= ctx)
        fail("stride " + std::to_string(stride) + " is outside [1, " + std::to_string(ctx - 1) + "] (ctx " +
             std::to_string(ctx) + "): a stride of ctx or more would leave tokens unscored");
    return n <= ctx ? 1 : (n - ctx + stride - 1) / stride + 1;   // the first k with k·S + ctx >= n, plus one
}

ScoreWindow score_window(int64_t n, int ctx, int stride, int64_t k) {
    const int64_t begin = k * stride, end = std::min(begin + ctx, n);
    return {begin, k == 0 ? 1 : (k - 1) * stride + ctx, end};   // a later window scores from the previous end
}

double PerplexityResult::mean_nll() const { return nll_sum / scored; }
double PerplexityResult::perplexity() const { return std::exp(mean_nll()); }
double PerplexityResult::mean_nll_stderr() const {
    if (scored < 2) return 0.0;
    const double m = mean_nll(), var = std::max(0.0, (nll_sq_sum - scored * m * m) / (scored - 1));
    return std::sqrt(var / scored);
}

PerplexityResult perplexity(Engine& eng, const std::vector<int>& ids, int ctx, int stride,
                            const PerplexityProgress& progress) {
    const int64_t n = ids.size(), total = score_window_count(n, ctx, stride);
    if (ctx > eng.max_seq())
        fail("ctx " + std::to_string(ctx) + " is longer than the engine's context of " + std::to_string(eng.max_seq()));
    PerplexityResult r;
    for (int64_t k = 0; k < total; k++) {
        const ScoreWindow w = score_window(n, ctx, stride, k);
        const int seq = eng.new_sequence();
        const std::vector<float> lp = eng.score(seq, std::vector<int>(ids.begin() + w.begin, ids.begin() + w.end));
        eng.free_sequence(seq);
        for (int64_t i = w.first; i < w.end; i++) {   // lp[j] scores token begin + j + 1
            const double nll = -(double)lp[i - w.begin - 1];
            r.nll_sum += nll;
            r.nll_sq_sum += nll * nll;
        }
        r.windows++;
        r.scored += w.end - w.first;
        r.evaluated += w.end - w.begin;
        if (progress) progress(total, r);
    }
    return r;
}

}  // namespace olmo
