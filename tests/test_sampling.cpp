// test_sampling.cpp: the CPU sampler's rules (greedy ties, top-k, top-p, seeds, frequencies)
// and the streaming decoder's UTF-8 safety.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "engine.h"
#include "tokenizer.h"

using namespace olmo;

namespace {

TEST(Sampler, GreedyTakesLowestIdOnTies) {
    std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
    EXPECT_EQ(sample_cpu(l.data(), 4, SamplingParams{}, 0), 1);
}

TEST(Sampler, TopKOneIsGreedyAndSeedsRepeat) {
    std::mt19937 rng(3);
    std::normal_distribution<float> n(0, 2);
    std::vector<float> l(1000);
    for (auto& x : l) x = n(rng);
    SamplingParams topk1{1.0f, 1, 1.0f, 42};
    int best = std::max_element(l.begin(), l.end()) - l.begin();
    for (int step = 0; step < 20; step++) EXPECT_EQ(sample_cpu(l.data(), 1000, topk1, step), best);
    SamplingParams s{1.0f, 0, 1.0f, 42};
    for (int step = 0; step < 20; step++) EXPECT_EQ(sample_cpu(l.data(), 1000, s, step), sample_cpu(l.data(), 1000, s, step));
}

// Draw frequencies follow softmax(l / temperature) restricted to the top-k / nucleus set.
TEST(Sampler, FrequenciesMatchTheFilteredSoftmax) {
    std::vector<float> l = {1.0f, 2.0f, 0.5f, 3.0f, -1.0f, 2.5f};
    const float temp = 0.7f;
    auto expected = [&](int k, float p) {
        std::vector<int> idx = {3, 5, 1, 0, 2, 4};   // descending logits
        std::vector<double> w(6, 0.0);
        double z = 0;
        for (int i : idx) z += std::exp(l[i] / temp);
        double cum = 0;
        int kept = 0;
        for (int i : idx) {
            if (kept == k) break;
            w[i] = std::exp(l[i] / temp) / z;
            kept++;
            cum += w[i];
            if (cum >= p) break;
        }
        double tot = 0;
        for (double x : w) tot += x;
        for (double& x : w) x /= tot;
        return w;
    };
    for (auto [k, p] : std::vector<std::pair<int, float>>{{0, 1.0f}, {3, 1.0f}, {0, 0.8f}, {4, 0.9f}}) {
        SamplingParams s{temp, k, p, 1234};
        std::vector<double> count(6, 0);
        const int N = 40000;
        for (int step = 0; step < N; step++) count[sample_cpu(l.data(), 6, s, step)]++;
        std::vector<double> want = expected(k ? k : 6, p);
        for (int i = 0; i < 6; i++) {
            if (want[i] == 0) EXPECT_EQ(count[i], 0) << "token " << i << " outside the kept set (k=" << k << " p=" << p << ")";
            else EXPECT_NEAR(count[i] / N, want[i], 4 * std::sqrt(want[i] * (1 - want[i]) / N) + 1e-3) << i;
        }
    }
}

// A byte tokenizer: id = byte value. Enough to exercise UTF-8 handling in StreamDecoder.
struct ByteTokenizer : Tokenizer {
    std::vector<int> encode(const std::string& t) const override { return {t.begin(), t.end()}; }
    std::string decode(const std::vector<int>& ids, bool) const override { return {ids.begin(), ids.end()}; }
    int vocab_size() const override { return 256; }
};

TEST(StreamDecoder, NeverEmitsBrokenUtf8) {
    ByteTokenizer tok;
    const std::string text = "héllo 世界 👩‍💻!";
    StreamDecoder sd(tok, tok.encode("> "));
    std::string out;
    for (unsigned char b : text) {
        std::string piece = sd.push((int)(b < 128 ? b : (int)(signed char)b) & 0xff);
        EXPECT_EQ(utf8_complete_prefix(piece), piece.size()) << "partial character emitted";
        out += piece;
    }
    out += sd.flush();
    EXPECT_EQ(out, text);
}

TEST(StreamDecoder, CompletePrefix) {
    EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
    EXPECT_EQ(utf8_complete_prefix("a\xE4\xB8"), 1u);           // 世 cut after 2 of 3 bytes
    EXPECT_EQ(utf8_complete_prefix("a\xE4\xB8\x96"), 4u);
    EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x91"), 0u);        // 4-byte emoji, 3 bytes
    EXPECT_EQ(utf8_complete_prefix("\xC3"), 0u);
}

}  // namespace
