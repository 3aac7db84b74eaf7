// test_tensor_parallel_gpu.cu: --tp on the GPUs (tensor_parallel.h, cuda_engine.cu's TpEngine).
// With two GPUs or more:
// - every golden fixture under --tp 2 against transformers, as on one GPU: fp32 within the same
//   bars (1e-4) and the same greedy ids; bf16 and FP8 within their bars (test_golden.cpp says
//   where those come from). Under --tp the engine has no tensor hooks, so the comparisons are
//   the logits of the prompt's last position, the decode steps and the greedy ids.
// - batched decode, a forked sequence (copy on write of a shared block), a prompt run in chunks
//   and scoring give the logits (log-probabilities) of one GPU (fp32, 1e-5); the output layer
//   is split over the ranks, not copied.
// - a checkpoint stored in FP8 splits, in fp8 (its codes as stored), bf16 and fp32.
// - with an FP8 KV cache, --tp 2 gives one GPU's logits (bf16 weights 1e-4, fp8 weights 1e-1).
// With one GPU: --tp 2 is refused with a one-line error; so is an FP8 cache with --cp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine.h"
#include "fp8_checkpoint_util.h"
#include "golden.h"
#include "tensor_parallel.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

constexpr int kTp = 2;
const char* const kFewGpus = "fewer than 2 GPUs: tensor-parallel runs skipped";

// The --tp 2 engine of fixture f in dtype dt, or null (with the reason in *why) where the
// fixture cannot be split (a head count --tp does not divide).
std::unique_ptr<Engine> tp_engine(const Fixture& f, DeviceDType dt, std::string* why) {
    *why = tp_unsupported_reason(f.cfg, kTp);
    if (!why->empty()) return nullptr;
    return make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), dt, 0, 64, nullptr, 0, kTp);
}

// The fixture's prompt under eng: its last position's logits against the golden ones, then the
// decode steps (check_decode), each within its bar.
void expect_logits_close(Engine& eng, const Fixture& f, double prompt_tol, double tensor_tol, double step_tol,
                         const std::string& what) {
    eng.reset();
    const std::vector<float> got = eng.forward(to_i32(*f.golden.find("prompt_ids")));
    const std::vector<float> want = last_prompt_logits(f.golden);
    const Diff d = compare(got.data(), want.data(), want.size());
    std::printf("%s: prompt logits rel-L2 %.2e\n", what.c_str(), d.rel_l2);
    EXPECT_LE(d.rel_l2, prompt_tol) << what << ": the prompt's last logits";
    const DecodeErr e = check_decode(eng, f.golden, tensor_tol, step_tol);
    std::printf("%s: decode_logits rel-L2 %.2e, worst step %.2e\n", what.c_str(), e.tensor, e.worst_step);
}

class TpGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TpGolden, Fp32MatchesTransformers) {
    if (cuda_device_count() < kTp) GTEST_SKIP() << kFewGpus;
    Fixture f(GetParam());
    std::string why;
    auto eng = tp_engine(f, DeviceDType::F32, &why);
    if (!eng) GTEST_SKIP() << why;
    expect_logits_close(*eng, f, 1e-4, 1e-4, 1e-4, GetParam() + " tp2 fp32");
    const std::vector<int> want = to_i32(*f.golden.find("greedy_ids"));
    EXPECT_EQ(greedy(*eng, to_i32(*f.golden.find("prompt_ids")), (int)want.size()), want);
}

TEST_P(TpGolden, Bf16CloseToReference) {
    if (cuda_device_count() < kTp) GTEST_SKIP() << kFewGpus;
    Fixture f(GetParam());
    std::string why;
    auto eng = tp_engine(f, DeviceDType::BF16, &why);
    if (!eng) GTEST_SKIP() << why;
    expect_logits_close(*eng, f, 2e-2, 2e-2, 2.5e-2, GetParam() + " tp2 bf16");
}

TEST_P(TpGolden, Fp8CloseToReference) {
    if (cuda_device_count() < kTp) GTEST_SKIP() << kFewGpus;
    Fixture f(GetParam());
    std::string why;
    auto eng = tp_engine(f, DeviceDType::FP8, &why);
    if (!eng) GTEST_SKIP() << why;
    expect_logits_close(*eng, f, 2.5e-1, 2.5e-1, 3e-1, GetParam() + " tp2 fp8");
}

// --cp 2 (cp_engine.cuh): every fixture's prompt shared by two GPUs, each with the whole model,
// then decoded on GPU 0 from the cache they filled together: fp32 within the golden bars (1e-4)
// and the same greedy ids. (No head split, so OLMo-3's single KV head runs too.)
TEST_P(TpGolden, ContextParallelFp32MatchesTransformers) {
    if (cuda_device_count() < kTp) GTEST_SKIP() << kFewGpus;
    Fixture f(GetParam());
    auto eng = make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), DeviceDType::F32, 0, 64, nullptr, 0, 1, kTp);
    expect_logits_close(*eng, f, 1e-4, 1e-4, 1e-4, GetParam() + " cp2 fp32");
    const std::vector<int> want = to_i32(*f.golden.find("greedy_ids"));
    EXPECT_EQ(greedy(*eng, to_i32(*f.golden.find("prompt_ids")), (int)want.size()), want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TpGolden, ::testing::ValuesIn(list_fixtures()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TpGolden);

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
    return compare(got.data(), want.data(), want.size()).rel_l2;
}

// --tp 2 (engines[1]) against one GPU (engines[0]) on the same work: a prompt of 40 tokens
// (seed prompt_seed) prefilled in chunks of 16 rows, forked, then both sequences decoded together
// for three steps; then, the pools emptied, a text of 100 tokens (seed text_seed) scored. The
// logits' rel-L2 after the prefill and after each step, and the scores'.
struct AgainstOneGpu {
    std::vector<double> logits;   // prefill, steps 0 .. 2
    double scores = 0;
};
AgainstOneGpu tp_against_one_gpu(Engine* engines[2], int vocab, unsigned prompt_seed, unsigned text_seed) {
    AgainstOneGpu d;
    const std::vector<int> prompt = random_ids(40, vocab, prompt_seed);
    int seqs[2][2];
    std::vector<float> logits[2];
    for (int e = 0; e < 2; e++) {
        seqs[e][0] = engines[e]->new_sequence();
        logits[e] = engines[e]->prefill(seqs[e][0], prompt);
        seqs[e][1] = engines[e]->fork_sequence(seqs[e][0]);
    }
    d.logits.push_back(rel_l2(logits[1], logits[0]));
    for (int step = 0; step < 3; step++) {
        const std::vector<int> ids = {(step * 17 + 3) % vocab, (step * 29 + 5) % vocab};
        for (int e = 0; e < 2; e++) logits[e] = engines[e]->decode({seqs[e][0], seqs[e][1]}, ids);
        d.logits.push_back(rel_l2(logits[1], logits[0]));
    }
    const std::vector<int> text = random_ids(100, vocab, text_seed);
    std::vector<float> scores[2];
    for (int e = 0; e < 2; e++) {
        engines[e]->reset();   // (the pool holds the sequences above)
        scores[e] = engines[e]->score(engines[e]->new_sequence(), text);
    }
    EXPECT_EQ(scores[1].size(), text.size() - 1);
    EXPECT_EQ(scores[0].size(), scores[1].size());
    d.scores = scores[0].size() == scores[1].size() ? rel_l2(scores[1], scores[0]) : INFINITY;
    return d;
}

// tp_against_one_gpu in fp32: --tp 2 gives one GPU's logits at every step and its
// log-probabilities. The vocabulary (301) splits unevenly over the ranks' output layers.
TEST(TensorParallelGpu, ChunksBatchAndForkMatchOneGpu) {
    if (cuda_device_count() < kTp) GTEST_SKIP() << kFewGpus;
    TinyCheckpoint t({{"hidden_size", 64}, {"intermediate_size", 96}, {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"vocab_size", 301}, {"max_position_embeddings", 128}});
    auto one = make_cuda_engine(t.cfg, &t.ckpt, 128, DeviceDType::F32, 0, 4, nullptr, 16);
    auto two = make_cuda_engine(t.cfg, &t.ckpt, 128, DeviceDType::F32, 0, 4, nullptr, 16, kTp);
    Engine* engines[2] = {one.get(), two.get()};
    const AgainstOneGpu d = tp_against_one_gpu(engines, t.cfg.vocab, 7, 8);
    EXPECT_LE(d.logits[0], 1e-5) << "prefill in chunks";
    for (int step = 0; step < 3; step++) {
        std::printf("  batch of 2 (one forked), step %d: logits rel-L2 %.2e against one GPU\n", step, d.logits[step + 1]);
        EXPECT_LE(d.logits[step + 1], 1e-5) << "decode step " << step;
    }
    std::printf("  scoring 100 tokens: log-probabilities rel-L2 %.2e against one GPU\n", d.scores);
    EXPECT_LE(d.scores, 1e-5) << "scoring";
}

// tp_against_one_gpu with an FP8 KV cache (--kv-dtype fp8) on both: each rank quantizes the rows
// of its own KV heads as one GPU does all of them. bf16 weights within 1e-4 (measured on two
// H200s: 2.1e-8 for the logits, 2.5e-7 for the scores). fp8 weights within 1e-1 (measured: 5.2e-2
// and 1.0e-2): there each rank quantizes its slices apart (of the o and down weights, a scale per
// row of the slice; of a prefill's activations, a scale per token of the slice), so --tp 2 is
// not one GPU's arithmetic even with a 16-bit cache (Fp8CheckpointSplits: up to 6.4e-2), and a
// K/V row that differs a little can round to other codes.
TEST(TensorParallelGpu, Fp8CacheMatchesOneGpu) {
    if (cuda_device_count() < kTp) GTEST_SKIP() << kFewGpus;
    TinyCheckpoint t({{"hidden_size", 64}, {"intermediate_size", 96}, {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"vocab_size", 301}, {"max_position_embeddings", 128}});
    for (DeviceDType dt : {DeviceDType::BF16, DeviceDType::FP8}) {
        const char* name = dt == DeviceDType::BF16 ? "bf16" : "fp8";
        auto one = make_cuda_engine(t.cfg, &t.ckpt, 128, dt, 0, 4, nullptr, 16, 1, 1, KvDType::FP8);
        auto two = make_cuda_engine(t.cfg, &t.ckpt, 128, dt, 0, 4, nullptr, 16, kTp, 1, KvDType::FP8);
        EXPECT_NE(two->memory().kv_format.find("FP8"), std::string::npos) << two->memory().kv_format;
        Engine* engines[2] = {one.get(), two.get()};
        const AgainstOneGpu d = tp_against_one_gpu(engines, t.cfg.vocab, 9, 10);
        const double worst = *std::max_element(d.logits.begin(), d.logits.end());
        std::printf("  tp2 %s, FP8 cache: worst logits rel-L2 %.2e (prefill, fork, 3 steps), scoring %.2e, against one "
                    "GPU\n", name, worst, d.scores);
        const double bar = dt == DeviceDType::BF16 ? 1e-4 : 1e-1;
        EXPECT_LE(worst, bar) << name;
        EXPECT_LE(d.scores, bar) << name;
    }
}

// --cp 2 against one GPU (fp32, 1e-5): prompts of 1 to 300 tokens in chunks of 16 rows, so that
// the longer ones take several rounds (at most 2 x 16 tokens each) and the shortest run on GPU 0
// alone; then three decode steps on the cache the two GPUs filled. bf16 and fp8 within 2e-2 (a
// chunk's rows differ from one GPU's, and so may their rounding), each also with an FP8 KV cache
// on both sides (its codes and scales exchanged: exchange_kv), within the same bar.
TEST(TensorParallelGpu, ContextParallelMatchesOneGpu) {
    if (cuda_device_count() < kTp) GTEST_SKIP() << kFewGpus;
    TinyCheckpoint t({{"hidden_size", 64}, {"intermediate_size", 96}, {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"vocab_size", 301}, {"max_position_embeddings", 320}});
    struct Case {
        DeviceDType dt;
        KvDType kv;
        double bar;
    };
    for (auto [dt, kv, bar] : {Case{DeviceDType::F32, KvDType::Same, 1e-5}, Case{DeviceDType::BF16, KvDType::Same, 2e-2},
                               Case{DeviceDType::FP8, KvDType::Same, 2e-2}, Case{DeviceDType::BF16, KvDType::FP8, 2e-2},
                               Case{DeviceDType::FP8, KvDType::FP8, 2e-2}}) {
        auto one = make_cuda_engine(t.cfg, &t.ckpt, 320, dt, 0, 4, nullptr, 16, 1, 1, kv);
        auto two = make_cuda_engine(t.cfg, &t.ckpt, 320, dt, 0, 4, nullptr, 16, 1, kTp, kv);
        if (kv == KvDType::FP8) EXPECT_NE(two->memory().kv_format.find("FP8"), std::string::npos) << two->memory().kv_format;
        for (int len : {1, 3, 4, 5, 33, 100, 300}) {
            const std::vector<int> prompt = random_ids(len, t.cfg.vocab, len);
            Engine* engines[2] = {one.get(), two.get()};
            std::vector<float> logits[2];
            int seq[2];
            for (int e = 0; e < 2; e++) {
                engines[e]->reset();
                seq[e] = engines[e]->new_sequence();
                logits[e] = engines[e]->prefill(seq[e], prompt);
            }
            double worst = rel_l2(logits[1], logits[0]);
            for (int step = 0; step < 3; step++) {
                for (int e = 0; e < 2; e++) logits[e] = engines[e]->decode({seq[e]}, {(step * 7 + len) % t.cfg.vocab});
                worst = std::max(worst, rel_l2(logits[1], logits[0]));
            }
            std::printf("  cp2 %s%s, %d-token prompt: worst logits rel-L2 %.2e against one GPU\n",
                        dt == DeviceDType::F32 ? "fp32" : dt == DeviceDType::BF16 ? "bf16" : "fp8",
                        kv == KvDType::FP8 ? ", FP8 cache" : "", len, worst);
            EXPECT_LE(worst, bar) << len << " tokens";
        }
    }
}

// What --tp 2 holds beyond one GPU's weights is what every rank keeps whole: the embedding and
// the norms. The output layer is split by vocabulary, not copied (untied, fp32; each tensor's
// start is aligned to 256 bytes, the slack allowed).
TEST(TensorParallelGpu, OutputLayerIsSplitNotCopied) {
    if (cuda_device_count() < kTp) GTEST_SKIP() << kFewGpus;
    TinyCheckpoint t({{"hidden_size", 64}, {"intermediate_size", 96}, {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"vocab_size", 301}, {"tie_word_embeddings", false}});
    auto one = make_cuda_engine(t.cfg, &t.ckpt, 64, DeviceDType::F32, 0, 1, nullptr, 0);
    auto two = make_cuda_engine(t.cfg, &t.ckpt, 64, DeviceDType::F32, 0, 1, nullptr, 0, kTp);
    const size_t H = t.cfg.hidden, L = t.cfg.n_layers;
    const size_t whole = sizeof(float) * (t.cfg.vocab * H + H + 2 * L * H);   // embedding, final and residual norms
    const size_t slack = 256 * kTp * (3 + 8 * L);
    const size_t extra = two->memory().weights - one->memory().weights;
    EXPECT_GE(extra, whole);
    EXPECT_LE(extra, whole + slack) << "the output layer (" << sizeof(float) * t.cfg.vocab * H << " bytes) held twice?";
}

// A checkpoint stored in FP8 (fp8_checkpoint_util.h's every_layout: every scale layout that
// loads, the output layer in FP8 too, and layer 1's q|k|v half in FP8, half in F32) under --tp 2
// gives one GPU's logits on the same checkpoint: in fp8 (the codes split as stored; the half
// and half tensor dequantized and quantized again after its split), bf16 and fp32 (dequantized
// at load). Each prompt is followed by four decode steps. An 8-token prompt runs every product
// with bf16 activations (fp8_gemv), so in fp8 only the requantized tensor differs (its scales by
// up to 2^-8): a tight bar. A 24-token prompt runs the prefill's FP8 GEMMs, whose activations
// each rank quantizes over its own columns of o's and down's inputs, rounding them otherwise
// than one GPU does over whole rows (measured: 5.8e-2 on the prompt, up to 3.3e-2 after): the
// bar of that rounding; a misplaced slice would give differences of order 1. (bf16: one value
// rounded the other way moved one step by 3.2e-4, the rest within 1.1e-7.)
TEST(TensorParallelGpu, Fp8CheckpointSplits) {
    if (cuda_device_count() < kTp) GTEST_SKIP() << kFewGpus;
    json cfg = fp8_test_config();
    cfg["num_key_value_heads"] = 2;   // (one KV head cannot be split)
    const std::string fp8_dir = temp_dir(), deq_dir = temp_dir();
    write_fp8_pair(fp8_dir, deq_dir, cfg, every_layout, 5);
    const ModelConfig c = load_config(fp8_dir);
    const Checkpoint ck(fp8_dir);
    struct Case {
        DeviceDType dt;
        const char* name;
        double bar_gemv, bar_gemm;   // the 8- and 24-token prompts
    };
    for (const Case& k : {Case{DeviceDType::FP8, "fp8", 1e-2, 1e-1}, Case{DeviceDType::BF16, "bf16", 2e-3, 2e-3},
                          Case{DeviceDType::F32, "fp32", 1e-5, 1e-5}}) {
        auto one = make_cuda_engine(c, &ck, 64, k.dt), two = make_cuda_engine(c, &ck, 64, k.dt, 0, 1, nullptr, 0, kTp);
        Engine* engines[2] = {one.get(), two.get()};
        for (auto [len, bar] : {std::pair{8, k.bar_gemv}, std::pair{24, k.bar_gemm}}) {
            std::vector<float> logits[2];
            int seq[2];
            for (int e = 0; e < 2; e++) {
                engines[e]->reset();
                seq[e] = engines[e]->new_sequence();
                logits[e] = engines[e]->prefill(seq[e], fp8_test_prompt(len, c.vocab));
            }
            std::string line = k.name + std::string(", ") + std::to_string(len) + "-token prompt: logits rel-L2";
            for (int step = 0; step <= 4; step++) {
                if (step > 0)
                    for (int e = 0; e < 2; e++) logits[e] = engines[e]->decode({seq[e]}, {(step * 131 + 7) % c.vocab});
                const double d = rel_l2(logits[1], logits[0]);
                char buf[32];
                std::snprintf(buf, sizeof buf, " %.2e", d);
                line += buf;
                EXPECT_LE(d, bar) << k.name << ", " << len << "-token prompt, step " << step << " (0: the prompt)";
            }
            std::printf("  %s (prompt, then 4 decode steps) against one GPU\n", line.c_str());
        }
    }
}

// --tp asks for more GPUs than there are, or a split the heads do not allow, or goes with --cp:
// one-line errors.
TEST(TensorParallelGpu, BadSplitsAreRefused) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    TinyCheckpoint t({{"num_attention_heads", 4}, {"num_key_value_heads", 2}});
    const int gpus = cuda_device_count();
    expect_error([&] { make_cuda_engine(t.cfg, &t.ckpt, 64, DeviceDType::F32, 0, 4, nullptr, 0, gpus + 1); },
                 {"--tp " + std::to_string(gpus + 1), "GPU"});
    expect_error([&] { make_cuda_engine(t.cfg, &t.ckpt, 64, DeviceDType::BF16, 0, 4, nullptr, 0, 2, 2); },
                 {"--tp and --cp cannot be combined"});
    if (gpus >= 4) expect_error([&] { make_cuda_engine(t.cfg, &t.ckpt, 64, DeviceDType::F32, 0, 4, nullptr, 0, 4); },
                                {"KV heads"});
}

}  // namespace
