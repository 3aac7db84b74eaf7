// test_kv_fp8.cpp: the FP8 KV cache (--kv-dtype fp8) on the CPU side.
//
//   RoundTrip   fp8_round_trip (src/fp8.h): zero and negligible rows, the row's largest value
//               kept, every value within E4M3's rounding (2^-4 relative in the normal range,
//               half the smallest subnormal step below), and each value scale · (an E4M3 value).
//   ScaleIndex  kv_scale_index: a block's scales per head consecutive, a block's scales one run,
//               every (row, head) of a pool its own slot.
//   CpuEngine   KvDType::FP8 on golden fixtures: logits near, not equal to, the fp32 cache's;
//               prompt then decode steps equal one prefill of the whole sequence; two simulated
//               tensor-parallel ranks equal one; context parallel refused; the pool's bytes.
//   Memory      kv_block_bytes for both storages; --kv-dtype's parser and its checks.
//   Cli         ./generate and ./perplexity with --kv-dtype: runs, one-line errors, --help.
//   Quality     ./perplexity on the default model: the FP8 cache's mean NLL within 1% of fp32's.
#include <cmath>
#include <set>
#include <sstream>

#include "fp8.h"
#include "golden.h"
#include "memory_check.h"
#include "program_setup.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

// ---- fp8_round_trip ----

std::vector<float> round_trip(std::vector<float> x) {
    fp8_round_trip(x.data(), (int)x.size());
    return x;
}

float amax_of(const std::vector<float>& x) {
    float m = 0.0f;
    for (float v : x) m = std::max(m, std::fabs(v));
    return m;
}

// Every promise of the format for the row x: the largest value kept (within 1e-6), each value
// within E4M3's rounding, and each given back as scale · (an E4M3 value), exactly.
void expect_row_round_trips(const std::vector<float>& x, const std::string& what) {
    const std::vector<float> y = round_trip(x);
    const float amax = amax_of(x), scale = fp8_row_scale(amax);
    const float normal = scale * 0x1p-6f;   // below: E4M3's subnormals, a step of scale · 2^-9
    for (size_t i = 0; i < x.size(); i++) {
        const std::string at = what + " element " + std::to_string(i) + " (" + num_str(x[i]) + ")";
        ASSERT_TRUE(std::isfinite(y[i])) << at;
        if (y[i] != 0) {
            ASSERT_EQ(std::signbit(y[i]), std::signbit(x[i])) << at;
        }
        if (std::fabs(x[i]) == amax) {
            EXPECT_NEAR(y[i], x[i], 1e-6 * amax) << at;
        }
        const double bound = std::fabs(x[i]) >= normal ? 0x1p-4 * std::fabs(x[i]) : scale * 0x1p-10;
        EXPECT_LE(std::fabs(y[i] - x[i]), bound * (1 + 1e-6)) << at;
        if (scale > 0) {
            EXPECT_EQ(scale * e4m3_to_float(e4m3_from_float(y[i] / scale)), y[i]) << at << ": not on the grid";
        }
    }
}

TEST(RoundTrip, ZeroAndNegligibleRowsBecomeZero) {
    EXPECT_EQ(round_trip(std::vector<float>(64, 0.0f)), std::vector<float>(64, 0.0f));
    EXPECT_EQ(round_trip({1e-31f, -5e-32f, 0.0f}), (std::vector<float>{0.0f, 0.0f, 0.0f}));   // amax < kFp8TinyRow
}

TEST(RoundTrip, OneElementRows) {
    for (float v : {1.0f, -3.5f, 0.1f, 1e-20f, -7e30f, 3e38f}) {
        EXPECT_NEAR(round_trip({v})[0], v, 1e-6 * std::fabs(v)) << v;
        expect_row_round_trips({v}, "row {" + num_str(v) + "}");
    }
}

TEST(RoundTrip, NegativeValuesMirrorPositiveOnes) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> x(128);
    for (float& v : x) v = normal(rng);
    std::vector<float> neg(x.size());
    for (size_t i = 0; i < x.size(); i++) neg[i] = -x[i];
    const std::vector<float> y = round_trip(x), yn = round_trip(neg);
    for (size_t i = 0; i < x.size(); i++) EXPECT_EQ(yn[i], -y[i]) << i;
    expect_row_round_trips(neg, "negated row");
}

// A huge value beside tiny ones: the tiny ones fall below the scale's subnormals and flush to
// zero (or near it), the huge one is kept.
TEST(RoundTrip, HugeValueNextToTinyOnes) {
    const std::vector<float> x = {1e30f, 1e-30f, -1.0f, 1e-5f, 3e26f, -2e27f};
    const std::vector<float> y = round_trip(x);
    EXPECT_NEAR(y[0], 1e30f, 1e-6 * 1e30);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_EQ(y[2], 0.0f);
    EXPECT_EQ(y[3], 0.0f);
    expect_row_round_trips(x, "huge and tiny");
}

// Rows of head sizes 8 to 256 at magnitudes 1e-20 to 1e20, of normal values (a few outliers
// that squeeze the rest into the subnormals) and of values spread over many octaves.
TEST(RoundTrip, RandomRowsKeepTheirPromises) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> octaves(-12.0f, 0.0f);
    int rows = 0;
    for (int hd : {8, 32, 64, 128, 256})
        for (float mag : {1e-20f, 1e-3f, 1.0f, 50.0f, 1e20f})
            for (int kind = 0; kind < 3; kind++, rows++) {
                std::vector<float> x(hd);
                for (float& v : x) v = mag * normal(rng);
                if (kind == 1) x[rng() % hd] *= 1000.0f;   // an outlier
                if (kind == 2)
                    for (float& v : x) v = mag * std::copysign(std::exp2(octaves(rng)), normal(rng));
                expect_row_round_trips(x, "hd " + std::to_string(hd) + " magnitude " + num_str(mag) + " kind " +
                                              std::to_string(kind));
            }
    EXPECT_EQ(rows, 75);
}

// ---- kv_scale_index ----

TEST(ScaleIndex, HeadRowsOfABlockAreConsecutive) {
    for (int bs : {1, 4, 16})
        for (int nKV : {1, 2, 8})
            for (int64_t block : {0, 1, 7})
                for (int h = 0; h < nKV; h++)
                    for (int slot = 0; slot + 1 < bs; slot++) {
                        const int64_t r = block * bs + slot;
                        EXPECT_EQ(kv_scale_index(r + 1, h, nKV, bs), kv_scale_index(r, h, nKV, bs) + 1)
                            << "bs " << bs << " nKV " << nKV << " row " << r << " head " << h;
                    }
}

TEST(ScaleIndex, ABlocksScalesAreOneRun) {
    for (int bs : {1, 4, 16})
        for (int nKV : {1, 2, 8})
            for (int64_t block : {0, 1, 5}) {
                std::set<int64_t> got;
                for (int slot = 0; slot < bs; slot++)
                    for (int h = 0; h < nKV; h++) got.insert(kv_scale_index(block * bs + slot, h, nKV, bs));
                const int64_t first = block * nKV * bs;
                ASSERT_EQ((int)got.size(), nKV * bs);
                EXPECT_EQ(*got.begin(), first) << "bs " << bs << " nKV " << nKV << " block " << block;
                EXPECT_EQ(*got.rbegin(), first + nKV * bs - 1) << "bs " << bs << " nKV " << nKV << " block " << block;
            }
}

TEST(ScaleIndex, EveryRowAndHeadOfAPoolHasItsOwnSlot) {
    for (int bs : {1, 4, 16})
        for (int nKV : {1, 3, 8}) {
            const int64_t rows = 6 * bs, n = rows * nKV;
            std::vector<int> hits(n, 0);
            for (int64_t r = 0; r < rows; r++)
                for (int h = 0; h < nKV; h++) {
                    const int64_t i = kv_scale_index(r, h, nKV, bs);
                    ASSERT_TRUE(i >= 0 && i < n) << "row " << r << " head " << h;
                    hits[i]++;
                }
            EXPECT_EQ(hits, std::vector<int>(n, 1)) << "bs " << bs << " nKV " << nKV;
        }
}

// ---- the CPU engine ----

// The fixtures the engine tests run on: grouped-query heads of 64, and OLMo-3's sliding
// window with YaRN (blocks released as the window moves).
const char* const kFixtures[] = {"olmo2_gqa", "olmo3_swa_yarn"};

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
    EXPECT_EQ(got.size(), want.size());
    return compare(got.data(), want.data(), std::min(got.size(), want.size())).rel_l2;
}

// The logits of the fixture's prompt and of 24 decode steps after it (past block boundaries).
std::vector<std::vector<float>> prompt_and_steps(Engine& e, const std::vector<int>& prompt, int vocab) {
    std::vector<std::vector<float>> out;
    const int seq = e.new_sequence();
    out.push_back(e.prefill(seq, prompt));
    for (int id : random_ids(24, vocab, 3)) out.push_back(e.decode({seq}, {id}));
    return out;
}

// The FP8 cache changes every fixture's logits (its rounding reaches them), by little. Measured
// rel-L2 against the fp32 cache, worst over the prompt and 24 decode steps: 5.7e-2 (olmo2_mha)
// to 1.0e-1 (olmo3_swa_yarn), least 2.7e-2. The fixtures' random weights use every mantissa bit,
// which E4M3 has few of (test_golden's FP8 weights measure 0.08-0.20 on them); what a trained
// model loses is Quality's test below. The bar, 0.3, is three times the worst.
TEST(CpuEngine, Fp8LogitsAreNearTheFp32Caches) {
    for (const std::string& name : list_fixtures()) {
        Fixture f(name);
        const std::vector<int> prompt = to_i32(*f.golden.find("prompt_ids"));
        auto same = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 0, nullptr, 1, 1, KvDType::Same);
        auto fp8 = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 0, nullptr, 1, 1, KvDType::FP8);
        const auto want = prompt_and_steps(*same, prompt, f.cfg.vocab);
        const auto got = prompt_and_steps(*fp8, prompt, f.cfg.vocab);
        double worst = 0, least = INFINITY;
        for (size_t i = 0; i < want.size(); i++) {
            const double d = rel_l2(got[i], want[i]);
            worst = std::max(worst, d), least = std::min(least, d);
        }
        std::printf("%s: FP8 KV cache vs fp32 logits rel-L2 over %zu steps: worst %.2e, least %.2e\n", name.c_str(),
                    want.size(), worst, least);
        EXPECT_GT(least, 1e-6) << name << ": the FP8 rounding should reach every step's logits";
        EXPECT_LE(worst, 3e-1) << name;
        EXPECT_EQ(fp8->memory().kv_pool, same->memory().kv_pool);   // fp32 pools either way
        EXPECT_EQ(same->memory().kv_format, "fp32");
        EXPECT_NE(fp8->memory().kv_format.find("FP8 E4M3"), std::string::npos) << fp8->memory().kv_format;
    }
}

// Each row is rounded on its own as it is written, so a prompt followed by decode steps leaves
// the same stored values, and gives the same logits, as one prefill of the whole sequence
// (measured: bit for bit; the bar allows for a compiler that orders a product differently).
TEST(CpuEngine, Fp8DecodeStepsEqualOnePrefill) {
    for (const char* name : kFixtures) {
        Fixture f(name);
        const std::vector<int> ids = random_ids(40, f.cfg.vocab, 9);
        const int prompt = 13;
        auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 0, nullptr, 1, 1, KvDType::FP8);
        std::vector<float> all;   // every position's logits [40, V], through the hook
        eng->hook = [&](const std::string& n, const float* d, int rows, int cols) {
            if (n == "logits") all.assign(d, d + (size_t)rows * cols);
        };
        eng->prefill(eng->new_sequence(), ids);
        eng->hook = nullptr;
        const int V = f.cfg.vocab, seq = eng->new_sequence();
        std::vector<std::vector<float>> steps = {eng->prefill(seq, {ids.begin(), ids.begin() + prompt})};
        for (size_t t = prompt; t < ids.size(); t++) steps.push_back(eng->decode({seq}, {ids[t]}));
        double worst = 0;
        for (size_t k = 0; k < steps.size(); k++) {
            const size_t pos = prompt - 1 + k;
            const std::vector<float> want(all.begin() + pos * V, all.begin() + (pos + 1) * V);
            worst = std::max(worst, rel_l2(steps[k], want));
        }
        std::printf("%s: FP8 cache, prompt + %zu decode steps vs one prefill: worst logits rel-L2 %.2e\n", name,
                    steps.size() - 1, worst);
        EXPECT_LE(worst, 1e-5) << name;
    }
}

// Two simulated tensor-parallel ranks hold whole KV heads, so each head row is rounded as in
// the unsplit engine: the same logits, at the bar of test_tensor_parallel (measured 1.4e-6).
TEST(CpuEngine, Fp8TensorParallelEqualsUnsplit) {
    Fixture f("olmo2_gqa");
    const std::vector<int> prompt = to_i32(*f.golden.find("prompt_ids"));
    auto one = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 8, nullptr, 1, 1, KvDType::FP8);
    auto two = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 8, nullptr, 2, 1, KvDType::FP8);
    const auto want = prompt_and_steps(*one, prompt, f.cfg.vocab), got = prompt_and_steps(*two, prompt, f.cfg.vocab);
    double worst = 0;
    for (size_t i = 0; i < want.size(); i++) worst = std::max(worst, rel_l2(got[i], want[i]));
    std::printf("olmo2_gqa: FP8 cache, tp 2 vs tp 1 worst logits rel-L2 %.2e\n", worst);
    EXPECT_LE(worst, 1e-5);
}

TEST(CpuEngine, Fp8RefusesContextParallel) {
    Fixture f("olmo2_gqa");
    expect_error([&] { make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 0, nullptr, 1, 2, KvDType::FP8); },
                 {"FP8 KV cache", "context parallel", "cp_ranks 2"});
}

// ---- memory ----

TEST(Memory, KvBlockBytes) {
    ModelConfig c;
    c.n_kv_heads = 8, c.head_dim = 128;   // 8 KV heads of 128, as in grouped-query models
    const size_t rows = kKvBlockSize, kv = 8 * 128;
    EXPECT_EQ(kv_block_bytes(c, KvDType::Same, 4), 2 * rows * kv * 4);
    EXPECT_EQ(kv_block_bytes(c, KvDType::Same, 2), 2 * rows * kv * 2);
    EXPECT_EQ(kv_block_bytes(c, KvDType::FP8, 2), 2 * (rows * kv + rows * 8 * 4));   // codes + a scale per head row
    EXPECT_EQ(kv_block_bytes(c, KvDType::FP8, 4), kv_block_bytes(c, KvDType::FP8, 2));   // elt_bytes plays no part
    // About half of bf16's: 1 byte + 4/hd bytes per value against 2.
    const double ratio = (double)kv_block_bytes(c, KvDType::FP8, 2) / kv_block_bytes(c, KvDType::Same, 2);
    EXPECT_NEAR(ratio, 0.5 + 2.0 / 128, 1e-12);
}

// The CPU engine's pool, fp32 with either KvDType, is what kv_block_bytes and cpu_memory_need say.
TEST(Memory, CpuPoolMatchesKvBlockBytes) {
    Fixture f("olmo2_gqa");
    const size_t per_layer = kv_block_bytes(f.cfg, KvDType::Same, sizeof(float)) * f.cfg.n_layers;
    for (KvDType kv : {KvDType::Same, KvDType::FP8}) {
        auto eng = make_cpu_engine(f.cfg, f.ckpt, 64, 10, nullptr, 1, 1, kv);
        EXPECT_EQ(eng->memory().kv_pool, 10 * per_layer);
    }
    EXPECT_EQ(cpu_memory_need(f.cfg, 64, 10).kv_cache, 10 * per_layer);
}

TEST(Memory, KvDtypeParserAndChecks) {
    EXPECT_EQ(kv_dtype("fp8"), KvDType::FP8);
    EXPECT_EQ(kv_dtype("auto"), KvDType::Same);
    expect_error([] { check_kv_dtype(KvDType::FP8, true, "fp32"); }, {"--kv-dtype fp8", "--dtype bf16, fp16 or fp8"});
    for (const char* dt : {"bf16", "fp16", "fp8"}) check_kv_dtype(KvDType::FP8, true, dt);
    check_kv_dtype(KvDType::FP8, false, "fp32");   // the CPU: --dtype plays no part
    check_kv_dtype(KvDType::Same, true, "fp32");
}

// ---- the command lines ----

TEST(Cli, GenerateRunsWithAnFp8CacheOnTheCpu) {
    const RunResult r = run_cmd("./generate --device cpu --kv-dtype fp8 -p 'Once upon a time' -n 12 --stats -q");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("Once upon a time", 0), 0u) << r.out;
    EXPECT_GT(r.out.size(), std::string("Once upon a time\n").size() + 10) << r.out;
    EXPECT_NE(r.err.find("KV cache         fp32 holding FP8 E4M3 values"), std::string::npos) << r.err;
    const RunResult plain = run_cmd("./generate --device cpu -p 'Once upon a time' -n 12 --stats -q");
    ASSERT_EQ(plain.code, 0) << plain.err;
    EXPECT_NE(plain.err.find("KV cache         fp32\n"), std::string::npos) << plain.err;
}

TEST(Cli, KvDtypeErrorsAreOneLine) {
    expect_cli_error("--device cpu --prompt-ids 1,2 --output-ids --kv-dtype bogus", "--kv-dtype");
    expect_cli_error("--device cpu --prompt-ids 1,2 --output-ids --kv-dtype bf16", "--kv-dtype");
    expect_cli_error("--device cpu --kv-dtype bogus --file tests/fixtures/perplexity/pinocchio.txt", "--kv-dtype",
                     "perplexity");
    if (cuda_available()) {
        expect_cli_error("--device cuda --dtype fp32 --kv-dtype fp8 --prompt-ids 1,2 --output-ids",
                         "--kv-dtype fp8 on the GPU needs --dtype bf16, fp16 or fp8");
    }
}

TEST(Cli, HelpNamesKvDtype) {
    for (const char* prog : {"./generate", "./perplexity"}) {
        const RunResult r = run_cmd(std::string(prog) + " --help");
        EXPECT_EQ(r.code, 0) << prog;
        EXPECT_NE(r.out.find("--kv-dtype"), std::string::npos) << prog;
        EXPECT_NE(r.out.find("scale per token and KV head"), std::string::npos) << prog;
    }
}

// ---- quality ----

// ./perplexity on the default model, CPU, over the first 10 lines of
// tests/fixtures/perplexity/pinocchio.txt (219 tokens of text it was not trained on, in one
// window; the whole file takes twice as long): the FP8 cache's mean NLL within 1% of the fp32
// cache's. Measured: -0.05% (and +0.05% on the whole file).
TEST(Quality, DefaultModelPerplexityWithinOnePercent) {
    std::stringstream text(read_file("tests/fixtures/perplexity/pinocchio.txt")), head;
    std::string line;
    for (int i = 0; i < 10 && std::getline(text, line); i++) head << line << "\n";
    const std::string path = temp_dir() + "/pinocchio10.txt";
    write(path, head.str());
    const std::string args = " --device cpu -q --json --file " + path;
    const RunResult fp32 = run_cmd("./perplexity" + args), fp8 = run_cmd("./perplexity --kv-dtype fp8" + args);
    ASSERT_EQ(fp32.code, 0) << fp32.err;
    ASSERT_EQ(fp8.code, 0) << fp8.err;
    const json a = json::parse(fp32.out), b = json::parse(fp8.out);
    EXPECT_EQ(a.at("kv_dtype"), "auto");
    EXPECT_EQ(b.at("kv_dtype"), "fp8");
    EXPECT_EQ(a.at("scored"), b.at("scored"));
    const double nll32 = a.at("mean_nll"), nll8 = b.at("mean_nll"), rel = std::fabs(nll8 - nll32) / nll32;
    std::printf("default model, %lld tokens scored: mean NLL fp32 cache %.6f, FP8 cache %.6f: %+.3f%%\n",
                (long long)a.at("scored").get<int64_t>(), nll32, nll8, 100 * (nll8 - nll32) / nll32);
    EXPECT_NE(nll8, nll32);   // the rounding happened
    EXPECT_LE(rel, 0.01);
}

}  // namespace
