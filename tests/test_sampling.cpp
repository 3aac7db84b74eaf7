// test_sampling.cpp: the CPU sampler's rules (greedy ties, top-k, top-p, min-p, seeds,
// frequencies), min-p and the repetition penalty against transformers' processors (their rules
// written out below, and their own output from tests/fixtures/sampler_refs.json when present),
// and the streaming decoder's UTF-8 safety.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "engine.h"
#include "golden.h"
#include "tokenizer.h"

using namespace olmo;
using namespace olmo::test;

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

// ---- min-p and the repetition penalty, as transformers defines them ----

// The ids transformers' warpers keep, applied as generate() orders them to scores = logits / T:
// TopKLogitsWarper (scores below the k-th largest go), TopPLogitsWarper (sorted ascending, the
// tokens whose cumulative probability is <= 1 - top_p go, the best always stays),
// MinPLogitsWarper (probabilities below min_p times the largest go). In double; no ties assumed.
std::set<int> transformers_kept(const std::vector<float>& logits, const SamplingParams& s) {
    const int V = (int)logits.size();
    std::vector<double> z(V);
    for (int i = 0; i < V; i++) z[i] = logits[i] / s.temperature;
    std::vector<int> asc(V);
    std::iota(asc.begin(), asc.end(), 0);
    std::sort(asc.begin(), asc.end(), [&](int a, int b) { return z[a] < z[b]; });
    std::vector<bool> gone(V, false);
    for (int r = 0; s.top_k > 0 && r < V - s.top_k; r++) gone[asc[r]] = true;
    auto probs = [&] {   // softmax over the tokens still in
        std::vector<double> p(V, 0.0);
        double sum = 0;
        for (int i = 0; i < V; i++) sum += p[i] = gone[i] ? 0.0 : std::exp(z[i] - z[asc[V - 1]]);
        for (double& x : p) x /= sum;
        return p;
    };
    std::vector<double> p = probs();
    double cum = 0;
    for (int r = 0; s.top_p < 1.0f && r < V - 1; r++)
        if ((cum += p[asc[r]]) <= 1.0 - s.top_p) gone[asc[r]] = true;
    p = probs();
    for (int i = 0; i < V; i++)
        if (p[i] < s.min_p * p[asc[V - 1]]) gone[i] = true;
    std::set<int> kept;
    for (int i = 0; i < V; i++)
        if (!gone[i]) kept.insert(i);
    return kept;
}

// A draw from the kept tokens with sample_cpu's uniform number (sampler.h): the first token, in
// order of probability, where the running probability exceeds u.
int reference_draw(const std::vector<float>& logits, const std::set<int>& kept, const SamplingParams& s, uint64_t step) {
    std::vector<int> order(kept.begin(), kept.end());
    std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    const double top = logits[order[0]] / s.temperature;
    std::vector<double> w;
    for (int i : order) w.push_back(std::exp(logits[i] / s.temperature - top));
    const double u = (splitmix64(s.seed + kGolden64 * (step + 1)) >> 11) * 0x1p-53;
    double target = u * std::accumulate(w.begin(), w.end(), 0.0), cum = 0;
    for (size_t r = 0; r < order.size(); r++)
        if (target < (cum += w[r])) return order[r];
    return order.back();
}

// (temperature, top_k, top_p, min_p): the settings tests/make_sampler_refs.py also runs.
const SamplingParams kWarperSettings[] = {{1.0f, 0, 1.0f, 0, 0.05f}, {0.7f, 0, 1.0f, 0, 0.2f}, {1.3f, 50, 0.9f, 0, 0.1f},
                                          {0.8f, 0, 0.95f, 0, 0.02f}, {1.0f, 0, 1.0f, 0, 1.0f}};

// Logits to sample from: random ones, and the golden fixtures' (the model's last prompt position).
std::vector<std::pair<std::string, std::vector<float>>> logit_cases() {
    std::mt19937 rng(11);
    std::normal_distribution<float> n(0, 2.5f);
    std::vector<float> random(1000);
    for (float& x : random) x = n(rng);
    std::vector<std::pair<std::string, std::vector<float>>> cases = {{"random", random}};
    for (const std::string& name : list_fixtures()) cases.push_back({name, last_prompt_logits(Fixture(name).golden)});
    cases.push_back({"default_model", last_prompt_logits(SafeTensorsFile("tests/default_model/golden.safetensors"))});
    return cases;
}

// sample_cpu with min-p (and temperature, top-k, top-p) keeps exactly transformers' set and,
// drawing with the same uniform numbers, picks the same ids for 100 steps.
TEST(MinP, KeepsTransformersSetAndDrawsTheSameIds) {
    for (const auto& [name, logits] : logit_cases())
        for (SamplingParams s : kWarperSettings) {
            const std::string what = name + " t=" + std::to_string(s.temperature) + " k=" + std::to_string(s.top_k) +
                                     " p=" + std::to_string(s.top_p) + " min_p=" + std::to_string(s.min_p);
            const std::vector<int> ids = sampling_candidates(logits.data(), (int)logits.size(), s).ids;
            const std::set<int> want = transformers_kept(logits, s);
            EXPECT_EQ(std::set<int>(ids.begin(), ids.end()), want) << what;
            s.seed = 5;
            for (uint64_t step = 0; step < 100; step++)
                ASSERT_EQ(sample_cpu(logits.data(), (int)logits.size(), s, step), reference_draw(logits, want, s, step))
                    << what << " step " << step;
        }
}

// min_p cuts the tail: with min_p = 1 only the most likely token is left (greedy); min_p = 0 is off.
TEST(MinP, OneIsGreedyAndZeroIsOff) {
    std::vector<float> l = {0.3f, 2.0f, 1.9f, -1.0f, 1.0f};
    for (uint64_t step = 0; step < 50; step++) EXPECT_EQ(sample_cpu(l.data(), 5, {1.0f, 0, 1.0f, 3, 1.0f}, step), 1);
    EXPECT_EQ(sampling_candidates(l.data(), 5, {1.0f, 0, 1.0f, 3, 0.0f}).ids.size(), 5u);
    // p_i / p_max = exp(l_i - 2): 1, 0.905, 0.368, 0.183, 0.050
    EXPECT_EQ(sampling_candidates(l.data(), 5, {1.0f, 0, 1.0f, 3, 0.3f}).ids, (std::vector<int>{1, 2, 4}));
    EXPECT_EQ(sampling_candidates(l.data(), 5, {1.0f, 0, 1.0f, 3, 0.1f}).ids, (std::vector<int>{1, 2, 4, 0}));
}

// transformers' own kept sets (tests/fixtures/sampler_refs.json) on every fixture's logits.
TEST(MinP, KeepsTheSetTransformersKept) {
    const nlohmann::json refs = sampler_refs();
    if (refs.is_null()) GTEST_SKIP() << kNoSamplerRefs;
    for (const auto& [name, logits] : logit_cases()) {
        if (!refs["fixtures"].contains(name)) continue;
        for (const auto& k : refs["fixtures"][name]["kept"]) {
            const std::vector<float> t = k["setting"].get<std::vector<float>>();
            const SamplingParams s{t[0], (int)t[1], t[2], 0, t[3]};
            const std::vector<int> ids = sampling_candidates(logits.data(), (int)logits.size(), s).ids;
            EXPECT_EQ(std::set<int>(ids.begin(), ids.end()), k["ids"].get<std::set<int>>()) << name << " " << k["setting"];
        }
    }
}

// RepetitionPenaltyLogitsProcessor: each distinct id of the history once, logit / penalty when
// positive, logit * penalty otherwise; ids outside the vocabulary are ignored.
TEST(RepetitionPenalty, DividesPositiveAndMultipliesNegativeLogitsOnce) {
    std::vector<float> l = {2.0f, -2.0f, 0.0f, 1.0f, 3.0f};
    apply_repetition_penalty(l.data(), 5, {0, 1, 1, 2, 0, 7, -1}, 2.0f);
    EXPECT_EQ(l, (std::vector<float>{1.0f, -4.0f, 0.0f, 1.0f, 3.0f}));
    std::vector<float> same = {2.0f, -2.0f};
    apply_repetition_penalty(same.data(), 2, {0, 1}, 1.0f);
    EXPECT_EQ(same, (std::vector<float>{2.0f, -2.0f}));
    std::vector<float> soft = {2.0f, -2.0f};   // a penalty below 1 favours repeats
    apply_repetition_penalty(soft.data(), 2, {0, 1}, 0.5f);
    EXPECT_EQ(soft, (std::vector<float>{4.0f, -1.0f}));
}

// On every fixture's last prompt logits, penalizing the prompt's ids gives transformers'
// processor output bit for bit (tests/fixtures/sampler_refs.json).
TEST(RepetitionPenalty, EqualsTransformersProcessorBitwise) {
    const nlohmann::json refs = sampler_refs();
    if (refs.is_null()) GTEST_SKIP() << kNoSamplerRefs;
    for (std::string name : list_fixtures()) {
        Fixture f(name);
        const nlohmann::json& r = refs["fixtures"][name];
        std::vector<float> l = last_prompt_logits(f.golden);
        apply_repetition_penalty(l.data(), (int)l.size(), to_i32(*f.golden.find("prompt_ids")), r["repetition_penalty"]);
        EXPECT_EQ(l, r["penalized_last_logits"].get<std::vector<float>>()) << name;
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
