// test_generation_options.cpp: the decoding loop's options (decoding.h): greedy decoding with a
// repetition penalty equal to transformers' generate(do_sample=False, repetition_penalty=R)
// (its processor's rule written out here, the engine's raw logits underneath; and transformers'
// own ids from tests/fixtures/sampler_refs.json when present), beam search with the penalty,
// the logits handed to the callback for log-probabilities (equal to the golden logits), a
// callback that ends a request (stop strings), step counters above 2^32 drawing as sample_cpu.
// CPU engine; the CUDA engine when a GPU is present.
#include <set>

#include "decoding.h"
#include "golden.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

constexpr float kPenalty = 1.3f;

bool is_eos(const std::vector<int>& eos, int id) { return std::find(eos.begin(), eos.end(), id) != eos.end(); }

// transformers' greedy search with RepetitionPenaltyLogitsProcessor, step by step on the engine's
// raw logits: every distinct id of prompt + generated gets logit / R if positive, else logit * R;
// then the first largest logit.
std::vector<int> reference_greedy(Engine& eng, const std::vector<int>& prompt, int n, float R, const std::vector<int>& eos) {
    eng.reset();
    std::vector<float> logits = eng.forward(prompt);
    std::vector<int> history = prompt, out;
    for (int i = 0; i < n; i++) {
        for (int id : std::set<int>(history.begin(), history.end()))
            logits[id] = logits[id] > 0 ? logits[id] / R : logits[id] * R;
        const int next = (int)(std::max_element(logits.begin(), logits.end()) - logits.begin());
        out.push_back(next);
        if (is_eos(eos, next)) break;
        history.push_back(next);
        logits = eng.forward({next});
    }
    eng.reset();
    return out;
}

std::vector<int> greedy_with_penalty(Engine& eng, const std::vector<int>& prompt, int n, const std::vector<int>& eos) {
    SamplingParams s;
    s.repetition_penalty = kPenalty;
    return generate(eng, {Request{prompt, s, n}}, eos)[0];
}

class Penalty : public ::testing::TestWithParam<std::string> {};

// The loop picks on the host when a penalty is set: the same ids as the reference above, and the
// first one is also the argmax of transformers' own (golden) logits, penalized. With the penalty
// the text differs from plain greedy somewhere (checked over all fixtures below).
TEST_P(Penalty, CpuGreedyEqualsTransformersRule) {
    Fixture f(GetParam());
    auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 8);
    const std::vector<int> prompt = to_i32(*f.golden.find("prompt_ids"));
    const std::vector<int> got = greedy_with_penalty(*eng, prompt, 24, f.cfg.eos_ids);
    EXPECT_EQ(got, reference_greedy(*eng, prompt, 24, kPenalty, f.cfg.eos_ids));
    std::vector<float> golden = last_prompt_logits(f.golden);
    apply_repetition_penalty(golden.data(), (int)golden.size(), prompt, kPenalty);
    EXPECT_EQ(got[0], std::max_element(golden.begin(), golden.end()) - golden.begin());
}

// transformers' own generate(do_sample=False, repetition_penalty=1.3): greedy and 2 / 4 beams.
TEST_P(Penalty, CpuEqualsTransformersIds) {
    const nlohmann::json refs = sampler_refs();
    if (refs.is_null()) GTEST_SKIP() << kNoSamplerRefs;
    Fixture f(GetParam());
    const nlohmann::json& r = refs["fixtures"][GetParam()];
    ASSERT_EQ(r["repetition_penalty"].get<float>(), kPenalty);
    auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 64);
    const std::vector<int> prompt = to_i32(*f.golden.find("prompt_ids"));
    const std::vector<int> want = r["greedy_ids"];
    EXPECT_EQ(greedy_with_penalty(*eng, prompt, (int)want.size(), f.cfg.eos_ids), want);
    for (int n : {2, 4}) {
        std::vector<int> beam = r["beam" + std::to_string(n) + "_ids"];
        for (size_t i = 0; i < beam.size(); i++)   // transformers pads after eos
            if (is_eos(f.cfg.eos_ids, beam[i])) beam.resize(i + 1);
        EXPECT_EQ(beam_search(*eng, prompt, n, 16, 1.0f, f.cfg.eos_ids, kPenalty).tokens, beam) << n << " beams";
    }
}

// The CUDA engine (fp32) picks the same ids with the penalty as the CPU engine.
TEST_P(Penalty, GpuFp32EqualsCpu) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU test skipped";
    Fixture f(GetParam());
    const std::vector<int> prompt = to_i32(*f.golden.find("prompt_ids"));
    auto cpu = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 8);
    auto gpu = make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), DeviceDType::F32, 8, 4);
    EXPECT_EQ(greedy_with_penalty(*gpu, prompt, 24, f.cfg.eos_ids), greedy_with_penalty(*cpu, prompt, 24, f.cfg.eos_ids));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Penalty, ::testing::ValuesIn(list_fixtures()), [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Penalty);

TEST(PenaltyAll, ChangesGreedyTextSomewhere) {
    int changed = 0;
    for (const std::string& name : list_fixtures()) {
        Fixture f(name);
        auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 8);
        const std::vector<int> want = to_i32(*f.golden.find("greedy_ids"));
        changed += greedy_with_penalty(*eng, to_i32(*f.golden.find("prompt_ids")), (int)want.size(), f.cfg.eos_ids) != want;
        if (changed) break;
    }
    EXPECT_GT(changed, 0) << "a penalty of 1.3 changed no fixture's greedy ids";
}

// The logits handed to the callback are the model's raw logits of each step: greedy on a
// fixture, they equal transformers' logits of the prompt's last position, then decode_logits.
void expect_callback_logits_are_golden(Engine& eng, const Fixture& f, double tol) {
    const std::vector<int> prompt = to_i32(*f.golden.find("prompt_ids"));
    const std::vector<float> decode = to_f32(*f.golden.find("decode_logits")), last = last_prompt_logits(f.golden);
    const int V = f.cfg.vocab, steps = (int)decode.size() / V;
    Request r{prompt, SamplingParams{}, steps + 1, /*want_logits=*/true};
    int step = 0;
    generate(eng, {r}, {}, [&](const NewToken& t) {
        const float* want = step == 0 ? last.data() : decode.data() + (size_t)(step - 1) * V;
        EXPECT_NE(t.logits, nullptr);
        if (t.logits) {
            EXPECT_LE(compare(t.logits, want, V).rel_l2, tol) << "step " << step;
        }
        step++;
        return false;
    });
    EXPECT_EQ(step, steps + 1);
}

TEST(CallbackLogits, CpuEqualGolden) {
    Fixture f("olmo2_gqa");
    auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 8);
    expect_callback_logits_are_golden(*eng, f, 1e-5);
}

TEST(CallbackLogits, GpuEqualGoldenAndDrawsDoNotChange) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU test skipped";
    Fixture f("olmo3_swa_yarn");
    auto eng = make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), DeviceDType::F32, 64, 4);
    expect_callback_logits_are_golden(*eng, f, 1e-4);
    // Sampled, batched: asking for the logits changes no draw (the device still draws).
    std::vector<Request> plain, with;
    for (int k = 0; k < 3; k++) {
        plain.push_back({{5, 9, 2, 7, 1 + k}, {0.9f, 20, 0.9f, 11u + k, 0.05f}, 10});
        with.push_back(plain.back());
        with.back().want_logits = true;
    }
    EXPECT_EQ(generate(*eng, with, {}), generate(*eng, plain, {}));
}

// Step counters are 64-bit end to end: with steps above 2^32, an engine's draws (prefill and a
// batched decode) are sample_cpu's on the logits they came from at the same step, and not those
// at the step's low 32 bits (where a counter narrowed to 32 bits would draw).
void expect_draws_use_whole_step(Engine& eng, const Fixture& f) {
    const SamplingParams s{2.0f, 0, 1.0f, 3};
    const uint64_t big = (uint64_t(1) << 32) + 7;
    const int V = f.cfg.vocab, B = 3;
    std::vector<float> logits;
    std::vector<int> seqs, ids;
    std::vector<uint64_t> steps;
    int mismatches = 0, as_narrowed = 0, draws = 0;
    auto check = [&](int id, const float* l, uint64_t step) {
        mismatches += id != sample_cpu(l, V, s, step);
        as_narrowed += id == sample_cpu(l, V, s, (uint32_t)step);
        draws++;
    };
    for (int k = 0; k < B; k++) {
        seqs.push_back(eng.new_sequence());
        ids.push_back(eng.prefill_sample(seqs.back(), {5, 9, 2, 7 + k}, s, big + k, &logits));
        check(ids.back(), logits.data(), big + k);
    }
    for (int step = 1; step <= 5; step++) {
        steps.clear();
        for (int k = 0; k < B; k++) steps.push_back(big + 1000 * (uint64_t)step + k);
        ids = eng.decode_sample(seqs, ids, std::vector<SamplingParams>(B, s), steps, &logits);
        for (int k = 0; k < B; k++) check(ids[k], logits.data() + (size_t)k * V, steps[k]);
    }
    for (int q : seqs) eng.free_sequence(q);
    EXPECT_LE(mismatches, 1) << "of " << draws << " draws";  // a boundary moved by rounding is rare
    EXPECT_LT(as_narrowed, draws / 2) << "the draws follow the low 32 bits of the step";
}

TEST(StepCounters, CpuDrawsUseTheWholeStep) {
    Fixture f("olmo3_swa_yarn");
    auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 8);
    expect_draws_use_whole_step(*eng, f);
}

TEST(StepCounters, GpuDrawsUseTheWholeStep) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU test skipped";
    Fixture f("olmo3_swa_yarn");
    auto eng = make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), DeviceDType::F32, 64, 4);
    expect_draws_use_whole_step(*eng, f);
}

// A callback returning true ends its request after that token; the others run on.
TEST(Callback, TrueEndsTheRequest) {
    Fixture f("olmo2_gqa");
    auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 16);
    std::vector<Request> reqs(3, Request{to_i32(*f.golden.find("prompt_ids")), SamplingParams{}, 12});
    std::vector<bool> last_seen(3, false);
    auto out = generate(*eng, reqs, {}, [&](const NewToken& t) {
        last_seen[t.req] = t.last;
        return t.req == 1;   // request 1 stops at its first token
    });
    EXPECT_EQ(out[0].size(), 12u);
    EXPECT_EQ(out[1].size(), 1u);
    EXPECT_EQ(out[2].size(), 12u);
    EXPECT_TRUE(last_seen[0]) << "the 12th token is reported as the last";
    EXPECT_FALSE(last_seen[1]);
    EXPECT_EQ(eng->kv_cache().free_blocks(0), eng->kv_cache().total_blocks(0));
}

}  // namespace
