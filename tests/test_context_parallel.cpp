// test_context_parallel.cpp: ring attention's reference (src/context_parallel.h), on the CPU.
// - the chunks: every token held by exactly one rank, two mirrored chunks per rank, and the
//   causal work (keys seen, summed over a rank's queries) balanced over the ranks;
// - merging partials: attention over a key set cut in two, merged, equals attention over it
//   whole, in either order and with a part that a query cannot see;
// - the simulated ring with 2 and 4 ranks equals cpu::attention (the engines' reference) on
//   awkward lengths (1, fewer tokens than chunks, odd), GQA ratios 1..8, head sizes, windows
//   narrower than a chunk: rel-L2 <= 1e-5 (fp32).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "context_parallel.h"
#include "cpu_ops.h"

using namespace olmo;

namespace {

std::vector<float> randn(size_t n, std::mt19937& rng) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
    double e = 0, r = 0;
    for (size_t i = 0; i < want.size(); i++) e += (got[i] - want[i]) * (got[i] - want[i]), r += want[i] * want[i];
    return std::sqrt(e / std::max(r, 1e-30));
}

TEST(CpTokens, EveryTokenOnceTwoMirroredChunksBalancedWork) {
    for (int ranks : {1, 2, 3, 4, 8})
        for (int T : {1, 5, 7, 8, 63, 1000, 4097}) {
            std::vector<int> owner(T, -1);
            std::vector<double> work(ranks, 0);
            for (int r = 0; r < ranks; r++) {
                const std::vector<CpRange> c = cp_tokens(T, r, ranks);
                ASSERT_EQ(c.size(), 2u);
                EXPECT_LE(std::abs(c[0].count - c[1].count), 1) << "T=" << T << " rank " << r;
                EXPECT_LE(c[0].first + c[0].count, c[1].first) << "the early chunk comes first";
                for (const CpRange& x : c)
                    for (int t = x.first; t < x.first + x.count; t++) {
                        ASSERT_EQ(owner[t], -1) << "token " << t << " held twice";
                        owner[t] = r;
                        work[r] += t + 1;   // the keys a causal query at position t sees
                    }
            }
            for (int t = 0; t < T; t++) EXPECT_GE(owner[t], 0) << "token " << t << " held by no rank (T=" << T << ")";
            if (T >= 64 * ranks) {   // long prompts: every rank within 2% of the mean
                const double mean = (double)T * (T + 1) / 2 / ranks;
                for (int r = 0; r < ranks; r++) EXPECT_NEAR(work[r] / mean, 1.0, 0.02) << "T=" << T << " rank " << r;
            }
        }
}

TEST(CpMerge, PartsMergedEqualTheWhole) {
    std::mt19937 rng(3);
    const int nq = 5, nk = 12, nH = 4, nKV = 2, hd = 8;
    const std::vector<float> q = randn(nq * nH * hd, rng), k = randn(nk * nKV * hd, rng), v = randn(nk * nKV * hd, rng);
    const std::vector<int> qpos = {0, 3, 6, 9, 11};
    std::vector<int> kpos(nk);
    for (int j = 0; j < nk; j++) kpos[j] = j;
    std::vector<float> whole(nq * nH * hd), lw(nq * nH);
    attention_partial(whole.data(), lw.data(), q.data(), qpos.data(), nq, k.data(), v.data(), kpos.data(), nk, nH, nKV, hd,
                      0, 0.3f);
    for (int cut : {1, 4, 8}) {   // keys [0, cut) and [cut, nk): query 0 sees nothing of the second part
        std::vector<float> a(whole.size()), la(lw.size()), b(whole.size()), lb(lw.size());
        attention_partial(a.data(), la.data(), q.data(), qpos.data(), nq, k.data(), v.data(), kpos.data(), cut, nH, nKV,
                          hd, 0, 0.3f);
        attention_partial(b.data(), lb.data(), q.data(), qpos.data(), nq, k.data() + cut * nKV * hd,
                          v.data() + cut * nKV * hd, kpos.data() + cut, nk - cut, nH, nKV, hd, 0, 0.3f);
        std::vector<float> ab = a, lab = la, ba = b, lba = lb;
        merge_partial(ab.data(), lab.data(), b.data(), lb.data(), nq, nH, hd);
        merge_partial(ba.data(), lba.data(), a.data(), la.data(), nq, nH, hd);
        EXPECT_LE(rel_l2(ab, whole), 1e-6) << "cut " << cut;
        EXPECT_LE(rel_l2(ba, whole), 1e-6) << "cut " << cut << ", merged the other way";
        EXPECT_LE(rel_l2(lab, lw), 1e-6) << "cut " << cut << ": log-sum-exp";
    }
}

TEST(RingAttention, EqualsCausalAttention) {
    std::mt19937 rng(11);
    struct Case {
        int T, nH, nKV, hd, window;
    };
    const Case cases[] = {{1, 4, 4, 16, 0},   {3, 4, 2, 16, 0},   {7, 8, 1, 32, 0},   {63, 8, 8, 64, 0},
                          {100, 8, 4, 16, 0}, {100, 5, 5, 8, 5},  {257, 8, 2, 16, 33}, {130, 16, 2, 32, 0},
                          {97, 6, 3, 128, 0}, {65, 8, 8, 256, 7}};
    for (const Case& c : cases)
        for (int ranks : {2, 4}) {
            const std::vector<float> q = randn((size_t)c.T * c.nH * c.hd, rng), k = randn((size_t)c.T * c.nKV * c.hd, rng),
                                     v = randn((size_t)c.T * c.nKV * c.hd, rng);
            const float scale = 1.0f / std::sqrt((float)c.hd);
            std::vector<float> want((size_t)c.T * c.nH * c.hd), got(want.size(), NAN);
            cpu::attention(want.data(), q.data(), k.data(), v.data(), c.T, 0, c.nH, c.nKV, c.hd, c.window, scale);
            ring_attention(got.data(), q.data(), k.data(), v.data(), c.T, c.nH, c.nKV, c.hd, c.window, scale, ranks);
            const double e = rel_l2(got, want);
            std::printf("  ring of %d, T=%d heads %d/%d hd %d window %d: rel-L2 %.2e\n", ranks, c.T, c.nH, c.nKV, c.hd,
                        c.window, e);
            EXPECT_LE(e, 1e-5) << "T=" << c.T << " ranks " << ranks;
        }
}

}  // namespace
