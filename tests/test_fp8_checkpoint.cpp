// test_fp8_checkpoint.cpp: FP8 checkpoints in the compressed-tensors layout
// (src/fp8_checkpoint.h) on the CPU side: they load, dequantized exactly (scale · code in fp32);
// the CPU engine on them equals the CPU engine on the same weights written dequantized in F32;
// ./generate runs them; every layout that cannot load is a clear error naming the tensor; and
// config.json's quantization_config refuses the methods that cannot load, by name. The GPU side
// is test_fp8_checkpoint_gpu.cu. Last, the checkpoint tests/make_fp8_checkpoint.py makes with
// transformers (skipped while it has not been made) against transformers' logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine.h"
#include "fp8_checkpoint.h"
#include "fp8_checkpoint_util.h"
#include "golden.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

// Every tensor of the table, loaded by the CPU loader.
std::vector<std::vector<float>> load_all(const std::string& dir) {
    const ModelConfig c = load_config(dir);
    const Checkpoint ck(dir);
    const std::vector<WeightSlot> table = weight_table(c, &ck);
    std::vector<std::vector<float>> out;
    std::vector<float*> dst;
    for (const WeightSlot& s : table) out.emplace_back(s.numel());
    for (auto& v : out) dst.push_back(v.data());
    load_f32(ck, table, dst, nullptr);
    return out;
}

struct Pair {
    std::string fp8 = temp_dir(), deq = temp_dir();
};
Pair write_pair(const Fp8Choice& choose, const std::function<void(std::vector<RawTensor>&)>& edit = nullptr) {
    Pair p;
    write_fp8_pair(p.fp8, p.deq, fp8_test_config(), choose, 3, edit);
    return p;
}

TEST(Fp8Checkpoint, LoadsDequantizedExactly) {
    const Pair p = write_pair(every_layout);
    const Checkpoint ck(p.fp8);
    const ModelConfig c = load_config(p.fp8);
    EXPECT_TRUE(has_fp8_weights(ck, weight_table(c, &ck)));
    EXPECT_FALSE(has_fp8_weights(Checkpoint(p.deq), weight_table(c, &ck)));
    const auto got = load_all(p.fp8), want = load_all(p.deq);
    const std::vector<WeightSlot> table = weight_table(c, &ck);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); i++) EXPECT_EQ(got[i], want[i]) << table[i].name;
    // Each scale layout was really used.
    EXPECT_EQ(ck.find("model.layers.0.self_attn.q_proj.weight_scale")->shape, (std::vector<int64_t>{128, 1}));
    EXPECT_EQ(ck.find("model.layers.0.mlp.gate_proj.weight_scale")->dtype, DType::BF16);
    EXPECT_TRUE(ck.find("model.layers.0.mlp.down_proj.weight_scale")->shape.empty());
    EXPECT_EQ(ck.find("model.layers.1.self_attn.o_proj.weight_scale")->shape, std::vector<int64_t>{1});
    EXPECT_EQ(ck.find("model.layers.1.self_attn.k_proj.weight")->dtype, DType::F32);
}

TEST(Fp8Checkpoint, CpuEngineEqualsDequantizedF32) {
    const Pair p = write_pair(every_layout);
    const ModelConfig c = load_config(p.fp8);
    const Checkpoint a(p.fp8), b(p.deq);
    auto fp8 = make_cpu_engine(c, a, 64), ref = make_cpu_engine(c, b, 64);
    const std::vector<int> prompt = fp8_test_prompt(20, c.vocab);
    EXPECT_EQ(fp8->forward(prompt), ref->forward(prompt));
    for (int step = 0; step < 3; step++) EXPECT_EQ(fp8->forward({step * 5 + 1}), ref->forward({step * 5 + 1})) << step;
}

// What --dtype fp8 makes of the dequantized twin, computed here with fp8.h's quantizer (the
// GPU's equals it bit for bit, test_fp8): the engine quantizes from bf16, so each row of the
// twin rounded to bf16 must give back the stored codes, and the stored scale exactly when it is
// a power of two, else within bf16's rounding, 2^-8 (test_fp8_checkpoint_gpu.cu relies on both).
TEST(Fp8Checkpoint, RequantizingTheTwinGivesBackTheCodes) {
    for (bool pow2 : {false, true}) {
        Pair p;
        write_fp8_pair(p.fp8, p.deq, fp8_test_config(), requantizable_layouts, 3, nullptr, pow2);
        const ModelConfig c = load_config(p.fp8);
        const Checkpoint ck(p.fp8);
        const std::vector<WeightSlot> table = weight_table(c, &ck);
        const auto twin = load_all(p.deq);
        int64_t rows = 0, codes_differ = 0, scales_differ = 0;
        double worst = 0;
        for (size_t i = 0; i < table.size(); i++) {
            const TensorView* t = ck.find(table[i].name);
            if (t->dtype != DType::F8_E4M3) continue;
            const int64_t N = t->shape[0], K = t->shape[1];
            const std::vector<float> stored = fp8_row_scales(ck, table[i]);
            std::vector<float> row(K);
            std::vector<uint8_t> q(K);
            for (int64_t n = 0; n < N; n++, rows++) {
                for (int64_t k = 0; k < K; k++) row[k] = bf16_round(twin[i][n * K + k]);
                float scale;
                quantize_row_fp8(q.data(), &scale, row.data(), (int)K, (int)K);
                codes_differ += std::memcmp(q.data(), (const uint8_t*)t->data + n * K, K) != 0;
                scales_differ += scale != stored[n];
                worst = std::max(worst, std::fabs((double)scale / stored[n] - 1));
            }
        }
        std::printf("  %s scales: %lld rows, %lld with other codes, %lld with another scale (worst %.2e relative)\n",
                    pow2 ? "power-of-two" : "any", (long long)rows, (long long)codes_differ, (long long)scales_differ,
                    worst);
        EXPECT_EQ(codes_differ, 0);
        EXPECT_LE(worst, 0x1p-8);
        if (pow2) {
            EXPECT_EQ(scales_differ, 0);
        }
    }
}

// Static activation scales (input_scale) and an FP8 KV-cache scheme (k_scale, v_scale) are
// ignored: the same logits as without them.
TEST(Fp8Checkpoint, InputAndKvScalesIgnored) {
    const Pair plain = write_pair(mixed_layouts);
    const Pair with = write_pair(mixed_layouts, [](std::vector<RawTensor>& ts) {
        const float one = 0.5f;
        ts.push_back({"model.layers.0.self_attn.q_proj.input_scale", {1}, "F32", bytes_of(std::vector<float>{one})});
        ts.push_back({"model.layers.0.self_attn.k_scale", {}, "F32", bytes_of(std::vector<float>{one})});
    });
    json cfg = fp8_test_config();
    cfg["quantization_config"] = compressed_tensors_config();
    cfg["quantization_config"]["config_groups"]["group_0"]["input_activations"]["dynamic"] = false;
    cfg["quantization_config"]["config_groups"]["group_0"]["input_activations"]["strategy"] = "tensor";
    cfg["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}};
    write(with.fp8 + "/config.json", cfg.dump());
    const ModelConfig c = load_config(with.fp8);
    const Checkpoint a(with.fp8), b(plain.fp8);
    const std::vector<int> prompt = fp8_test_prompt(9, c.vocab);
    EXPECT_EQ(make_cpu_engine(c, a, 64)->forward(prompt), make_cpu_engine(c, b, 64)->forward(prompt));
}

TEST(Fp8Checkpoint, GenerateRunsItOnTheCpu) {
    const Pair p = write_pair(every_layout);
    const std::string args = " --device cpu --prompt-ids 3,1,4,1,5 -n 6 --output-ids --stats -q";
    const RunResult a = run_cmd("./generate -m " + p.fp8 + args), b = run_cmd("./generate -m " + p.deq + args);
    ASSERT_EQ(a.code, 0) << a.err;
    ASSERT_EQ(b.code, 0) << b.err;
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(a.err.find("cpu fp32"), std::string::npos) << a.err;
}

// ---- what cannot load ----

// The error a pair edited by `edit` gives when its FP8 folder loads (CPU loader).
void expect_load_error(const std::function<void(std::vector<RawTensor>&)>& edit, std::vector<std::string> parts) {
    const Pair p = write_pair(mixed_layouts, edit);
    expect_error([&] { load_all(p.fp8); }, parts);
}

RawTensor* find(std::vector<RawTensor>& ts, const std::string& name) {
    for (RawTensor& t : ts)
        if (t.name == name) return &t;
    ADD_FAILURE() << "no tensor " << name;
    static RawTensor none;
    return &none;
}

const std::string kQ = "model.layers.0.self_attn.q_proj.weight";   // [128, 128], Channel

TEST(Fp8Checkpoint, BlockScaledIsAClearError) {
    expect_load_error([](std::vector<RawTensor>& ts) {
        RawTensor* s = find(ts, kQ + "_scale");
        s->name = kQ + "_scale_inv";                      // DeepSeek-V3 / Qwen3 FP8: one per 128x128 block
        s->shape = {1, 1};
        s->bytes = s->bytes.substr(0, 4);
    }, {"model.safetensors", "\"" + kQ + "\"", "block-scaled FP8", "weight_scale_inv", "128x128"});
    // compressed-tensors' own block strategy keeps the name weight_scale: refused by its shape
    expect_load_error([](std::vector<RawTensor>& ts) {
        RawTensor* s = find(ts, kQ + "_scale");
        s->shape = {1, 1};
        s->bytes = s->bytes.substr(0, 4);
    }, {"\"" + kQ + "_scale\" has shape [1, 1]", "per-group or per-block scales are not supported"});
}

TEST(Fp8Checkpoint, OtherLayoutsAreClearErrors) {
    expect_load_error([](std::vector<RawTensor>& ts) {   // per group of 64 columns
        RawTensor* s = find(ts, kQ + "_scale");
        s->shape = {128, 2};
        s->bytes += s->bytes;
    }, {"\"" + kQ + "_scale\" has shape [128, 2] for a weight of shape [128, 128]", "per-group"});
    expect_load_error([](std::vector<RawTensor>& ts) { find(ts, kQ + "_scale")->name = "unrelated"; },
                      {"\"" + kQ + "\" is F8_E4M3 but the checkpoint has no \"" + kQ + "_scale\""});
    expect_load_error([](std::vector<RawTensor>& ts) {   // the embedding in FP8
        RawTensor* e = find(ts, "model.embed_tokens.weight");
        e->dtype = "F8_E4M3";
        e->bytes = std::string(1007 * 128, '\x38');
    }, {"\"model.embed_tokens.weight\" is F8_E4M3, but only the linear layers' weights may be FP8"});
    expect_load_error([](std::vector<RawTensor>& ts) {
        RawTensor* s = find(ts, kQ + "_scale");
        s->dtype = "I32";
    }, {"\"" + kQ + "_scale\" has dtype I32, expected F32, BF16 or F16"});
}

TEST(Fp8Checkpoint, E5M2IsAClearError) {
    expect_load_error([](std::vector<RawTensor>& ts) { find(ts, kQ)->dtype = "F8_E5M2"; },
                      {"model.safetensors", "\"" + kQ + "\"", "dtype \"F8_E5M2\" is not supported", "F8_E4M3"});
}

TEST(Fp8Checkpoint, NonFiniteCodesAndScalesAreErrors) {
    expect_load_error([](std::vector<RawTensor>& ts) { find(ts, kQ)->bytes[130] = '\x7F'; },   // E4M3 NaN
                      {"\"" + kQ + "\" holds a non-finite value (NaN at element 130)"});
    expect_load_error([](std::vector<RawTensor>& ts) {
        const float inf = INFINITY;
        find(ts, kQ + "_scale")->bytes.replace(12, 4, (const char*)&inf, 4);
    }, {"\"" + kQ + "_scale\" holds a non-finite value (Inf at element 3)"});
}

TEST(Fp8Checkpoint, QuantizationConfigRefusesWhatCannotLoad) {
    auto parse = [](const json& q) {
        json cfg = fp8_test_config();
        cfg["quantization_config"] = q;
        return parse_config(cfg.dump(), "config.json");
    };
    parse(compressed_tensors_config("channel"));
    parse(compressed_tensors_config("tensor"));
    parse({{"quant_method", "fbgemm_fp8"}, {"activation_scale_ub", 1200.0}});
    expect_error([&] { parse({{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}}); },
                 {"config.json: quantization_config", "quant_method \"fp8\"", "weight_scale_inv", "[128, 128]",
                  "not supported"});
    expect_error([&] { parse(compressed_tensors_config("block")); },
                 {"quantization_config.config_groups.group_0.weights", "strategy \"block\"", "not supported"});
    json int4 = compressed_tensors_config("group");
    int4["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
    int4["config_groups"]["group_0"]["weights"]["type"] = "int";
    expect_error([&] { parse(int4); }, {"4-bit int weights with strategy \"group\" are not supported"});
    expect_error([&] { parse({{"quant_method", "awq"}, {"bits", 4}}); }, {"quant_method \"awq\" is not supported"});
    expect_error([&] { parse(json::array()); }, {"quantization_config is not an object"});
}

// ---- against transformers (tests/make_fp8_checkpoint.py) ----

constexpr const char* kFixture = "tests/fixtures/olmo2_fp8";
constexpr const char* kNoFixture =
    "tests/fixtures/olmo2_fp8 is missing (python3 tests/make_fp8_checkpoint.py, with torch and transformers)";

TEST(Fp8Checkpoint, CpuMatchesTransformersOnMadeCheckpoint) {
    if (!file_exists(std::string(kFixture) + "/fp8_ref.safetensors")) GTEST_SKIP() << kNoFixture;
    const ModelConfig c = load_config(kFixture);
    const Checkpoint ck(kFixture);
    ASSERT_TRUE(has_fp8_weights(ck, weight_table(c, &ck)));
    const SafeTensorsFile ref(std::string(kFixture) + "/fp8_ref.safetensors");
    auto eng = make_cpu_engine(c, ck, 128);
    const double prefill = check_prefill(*eng, ref, 1e-5)["logits"];
    const DecodeErr decode = check_decode(*eng, ref, 1e-5, 1e-5);
    std::printf("  olmo2_fp8 cpu: logits rel-L2 %.2e, decode %.2e (worst step %.2e)\n", prefill, decode.tensor,
                decode.worst_step);
}

}  // namespace
