// test_hardening.cpp: hostile and unlucky inputs, one test per class of problem (docs/hardening.md
// lists what is checked where): non-finite weights and logits on both engines, config values
// that would produce them, every float flag's range, memory budgets decided before anything
// is allocated or built, bounded reads of prompts, the added-token trie's memory, misaligned
// tensor data, NUL bytes in a prompt.
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "decoding.h"
#include "engine.h"
#include "safetensors.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

// A tiny checkpoint whose tensor `name` has `value` at element `at`.
std::string checkpoint_with(const std::string& name, int at, float value) {
    const std::string dir = temp_dir();
    write_random_checkpoint(dir, tiny_olmo2_config(), 1, [&](const WeightSlot& s, std::vector<float>& v) {
        if (s.name == name) v[at] = value;
    });
    return dir;
}

// A checkpoint with finite weights whose logits overflow: the final norm's weight and the
// (tied) embedding are huge, so final_norm(x) · W_embᵀ is Inf.
std::string overflowing_checkpoint() {
    const std::string dir = temp_dir();
    json cfg = tiny_olmo2_config();
    cfg["tie_word_embeddings"] = true;
    write_random_checkpoint(dir, cfg, 1, [](const WeightSlot& s, std::vector<float>& v) {
        if (s.name == "model.norm.weight" || s.name == "model.embed_tokens.weight")
            for (float& x : v) x = 1e30f;
    });
    return dir;
}

// ---- non-finite values ----

TEST(NonFinite, WeightsAreAnErrorAtLoad) {
    const char* tensor = "model.layers.1.mlp.up_proj.weight";
    for (float bad : {NAN, INFINITY, -INFINITY}) {
        const std::string dir = checkpoint_with(tensor, 17, bad);
        Checkpoint ck(dir);
        expect_error([&] { make_cpu_engine(load_config(dir), ck, 16); },
                     {dir + "/model.safetensors", tensor, std::isnan(bad) ? "NaN" : "Inf", "element 17"});
        if (cuda_available())
            expect_error([&] { make_cuda_engine(load_config(dir), &ck, 16, DeviceDType::F32); }, {tensor, "element 17"});
    }
}

// Finite weights whose logits overflow: every way of asking for the next token stops with one
// line naming the step (sampled) or the position (logits), on each engine there is.
TEST(NonFinite, LogitsStopGeneration) {
    const std::string dir = overflowing_checkpoint();
    const ModelConfig c = load_config(dir);
    Checkpoint ck(dir);
    std::vector<std::unique_ptr<Engine>> engines;
    engines.push_back(make_cpu_engine(c, ck, 32, 16));
    if (cuda_available()) engines.push_back(make_cuda_engine(c, &ck, 32, DeviceDType::F32, 16));
    const std::string msg = "the logits are not finite (NaN or Inf)";
    for (auto& eng : engines) {
        for (float t : {0.0f, 0.8f}) {   // argmax and sampling
            eng->reset();
            expect_error([&] { eng->prefill_sample(eng->new_sequence(), {1, 2, 3}, {t, 0, 1.0f, 5}, 0); },
                         {"step 0: " + msg});
            expect_error([&] { generate(*eng, {Request{{1, 2}, {t, 0, 1.0f, 5}, 4}}, {}); }, {"step 0: " + msg});
        }
        eng->reset();
        expect_error([&] { eng->prefill(eng->new_sequence(), {1, 2, 3}); }, {"position 3: " + msg});
        expect_error([&] { eng->score(eng->new_sequence(), {1, 2, 3}); }, {"position 1: " + msg});   // perplexity
        expect_error([&] { beam_search(*eng, {1, 2}, 2, 4, 1.0f, {}); }, {msg});
    }
    expect_cli_error("--device cpu --model " + dir + " --prompt-ids 1,2 --output-ids -n 4", "step 0: " + msg);
}

// Config values that would make the math produce NaN or Inf are refused, each with its range.
TEST(NonFinite, ConfigRangesRefuseWhatWouldOverflow) {
    auto expect_refused = [](const std::function<void(json&)>& edit, const std::string& what) {
        json j = tiny_olmo2_config();
        edit(j);
        expect_error([&] { parse_config(j.dump(), "c.json"); }, {"c.json", what});
    };
    for (double eps : {0.0, -1e-6, 1e40, 2.0}) expect_refused([&](json& j) { j["rms_norm_eps"] = eps; }, "\"rms_norm_eps\" must be a number in");
    for (double theta : {0.0, -5.0, 1.0, 1e40}) expect_refused([&](json& j) { j["rope_theta"] = theta; }, "\"rope_theta\"");
    auto yarn = [](const char* key, double v) {
        return [=](json& j) {
            j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}};
            j["rope_scaling"][key] = v;
        };
    };
    expect_refused(yarn("factor", 1e-45), "\"factor\"");
    expect_refused(yarn("factor", 0.0), "\"factor\"");
    expect_refused(yarn("beta_fast", 0.0), "\"beta_fast\"");
    expect_refused(yarn("beta_slow", -1.0), "\"beta_slow\"");
    expect_refused(yarn("attention_factor", 1e40), "\"attention_factor\"");
    expect_refused([](json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"rope_theta", 1.0}}; }, "\"rope_theta\"");
    expect_refused([](json& j) { j["rms_norm_eps"] = "1e-6"; }, "\"rms_norm_eps\" must be a number");
    expect_refused([](json& j) { j["rope_scaling"] = {{"rope_type", 7}}; }, "\"rope_type\" must be a string");
    expect_refused([](json& j) { j["rope_scaling"] = {{"type", json::array()}}; }, "\"type\" must be a string");
    expect_refused([](json& j) { j["tie_word_embeddings"] = "yes"; }, "\"tie_word_embeddings\" must be true or false");
    expect_refused([](json& j) { j["model_type"] = "olmo"; j["clip_qkv"] = -1.0; }, "\"clip_qkv\"");
    // In range: accepted, and the frequencies are finite.
    json ok = tiny_olmo2_config();
    yarn("beta_fast", 64.0)(ok);
    const ModelConfig c = parse_config(ok.dump(), "c.json");
    for (float f : c.rope(0).inv_freq(c.head_dim)) EXPECT_TRUE(std::isfinite(f) && f > 0);
}

// ---- flags ----

class Flags : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = temp_dir();
        write_random_checkpoint(dir_, tiny_olmo2_config());
        base_ = "--device cpu --model " + dir_ + " --prompt-ids 1,2 --output-ids -n 4 ";
    }
    std::string dir_, base_;
};

TEST_F(Flags, EveryFloatFiniteAndInRange) {
    for (const char* t : {"nan", "inf", "-inf", "-1", "101"}) expect_cli_error(base_ + "--temperature " + t, "--temperature");
    for (const char* p : {"nan", "0", "1.5", "-inf"}) expect_cli_error(base_ + "--top-p " + std::string(p), "--top-p");
    for (const char* l : {"nan", "-inf", "inf", "1e9"})
        expect_cli_error(base_ + "--beams 2 --length-penalty " + std::string(l), "--length-penalty");
    for (const char* g : {"nan", "inf", "-1", "1e9"}) expect_cli_error(base_ + "--kv-pool-gb " + std::string(g), "--kv-pool-gb");
    expect_cli_error(base_ + "--top-k -1", "--top-k");
    // A temperature below 1e-5 is greedy, as 0 is (dividing by it would overflow).
    RunResult greedy = run_cmd("./generate " + base_ + "--temperature 0"), tiny = run_cmd("./generate " + base_ + "--temperature 1e-38");
    ASSERT_EQ(tiny.code, 0) << tiny.err;
    EXPECT_EQ(tiny.out, greedy.out);
}

TEST_F(Flags, SeedAndEmptyValues) {
    for (const char* s : {"-1", "18446744073709551616", "1.5", "x", "' 7'", "''"}) expect_cli_error(base_ + "--seed " + s, "--seed");
    RunResult top = run_cmd("./generate " + base_ + "--seed 18446744073709551615");
    EXPECT_EQ(top.code, 0) << top.err;
    for (const char* flag : {"--model", "--tokenizer", "--prompt-file", "--prompts-file", "--random-weights"})
        expect_cli_error(std::string("--device cpu --prompt-ids 1 --output-ids ") + flag + " ''", std::string(flag) + ": the value is empty");
    expect_cli_error("--device cpu --model " + dir_ + " --output-ids --prompt-ids ''", "--prompt-ids: the value is empty");
}

// ---- memory budgets ----

// A pool larger than memory fails at once, before anything is allocated.
TEST_F(Flags, PoolLargerThanMemoryFailsAtOnce) {
    const auto t0 = std::chrono::steady_clock::now();
    expect_cli_error(base_ + "--kv-pool-gb 4000", "--kv-pool-gb 4000: only");
    EXPECT_LT(seconds_since(t0), kRefusalSeconds);
}

// Benchmark prompts are checked against the context before they are built: 8 x 2^30 ids would be 32 GB.
TEST_F(Flags, LongBenchmarkPromptFailsBeforeItIsBuilt) {
    const auto t0 = std::chrono::steady_clock::now();
    expect_cli_error("--device cpu --model " + dir_ + " --output-ids -n 2 --prompt-len 1073741824 --batch 8",
                     "--prompt-len 1073741824 is longer than the context of 64 tokens");
    EXPECT_LT(seconds_since(t0), kRefusalSeconds);
}

// 600 prompts: the default pool holds at most 256 of them at a time, the others are admitted as
// blocks free, and every prompt gets its own line. (One thread: the tiny model's steps are too
// short to share, and on a busy machine OpenMP's barriers would dominate.)
TEST_F(Flags, ManyPromptsRunInWaves) {
    std::string lines;
    for (int i = 0; i < 600; i++) lines += "p" + std::to_string(i % 7) + "\n";
    const std::string file = dir_ + "/prompts.txt";
    write(file, lines);
    json cfg = tiny_olmo2_config();
    cfg["vocab_size"] = 8192;   // the default tokenizer's
    write_random_checkpoint(dir_, cfg);
    RunResult r = run_cmd("OMP_NUM_THREADS=1 " + program("generate") + " --device cpu --model " + dir_ +
                          " --tokenizer tokenizer/tokenizer.model --temperature 0 --output-ids -n 2 --stats --prompts-file " + file);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 600);
    EXPECT_NE(r.out.find("[599] "), std::string::npos);
    const size_t at = r.err.find("KV pool");
    ASSERT_NE(at, std::string::npos) << r.err;
    const int blocks = std::atoi(r.err.c_str() + r.err.find_first_of("0123456789", at));
    EXPECT_LE(blocks, 256 * 3) << r.err;   // 3 blocks per prompt (1 for its tokens, 2 spare), 256 prompts
}

// Prompt sources are read up to 64 MiB: /dev/zero as a file or as stdin is an error, at once.
TEST_F(Flags, PromptSourcesAreBounded) {
    json cfg = tiny_olmo2_config();
    cfg["vocab_size"] = 8192;   // the default tokenizer's
    write_random_checkpoint(dir_, cfg);
    const std::string args = "--device cpu --model " + dir_ + " --tokenizer tokenizer/tokenizer.model --output-ids -n 2 ";
    expect_cli_error(args + "--prompt-file /dev/zero", "/dev/zero: larger than the limit of 64 MiB");
    expect_cli_error(args + "--prompts-file /dev/zero", "/dev/zero: larger than the limit of 64 MiB");
    RunResult r = run_cmd("(" + program("generate") + " " + args + " </dev/zero)");
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.err, "error: stdin: larger than the limit of 64 MiB\n");
}

// ---- tokenizer, files ----

// A 1 MB added token costs about 16 bytes per byte in the trie (a table per node cost 1 KiB).
TEST(Tokenizer, LongAddedTokenIsCheap) {
    json j = json::parse(read_file("tests/tokenizers/allenai_dolma2.json"));
    const std::string big(1 << 20, 'x');
    j["added_tokens"].push_back({{"id", 100400}, {"content", big}, {"special", true}, {"normalized", false}});
    const std::string path = temp_dir() + "/tokenizer.json";
    write(path, j.dump());
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    auto tok = load_tokenizer(path);
    getrusage(RUSAGE_SELF, &after);
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 400 * 1024) << "KiB of peak memory to load it";
    EXPECT_EQ(tok->encode("a" + big + "b").size(), 3u);
    EXPECT_EQ(tok->encode("a" + big + "b")[1], 100400);
}

// Data after an odd-length header is misaligned for F16/BF16/I64: read through memcpy, the
// values are right (and the sanitized build reports no misaligned load); empty tensors are fine.
TEST(Safetensors, MisalignedAndEmptyTensors) {
    const std::string dir = temp_dir();
    const uint16_t bf16[3] = {0x3f80, 0xc000, 0x4040}, f16[2] = {0x3c00, 0xc000};   // 1, -2, 3 and 1, -2
    const int64_t i64[2] = {-5, 1LL << 40};
    std::string data((const char*)bf16, 6);
    data.append((const char*)f16, 4).append((const char*)i64, 16);
    json h = {{"b", {{"dtype", "BF16"}, {"shape", {3}}, {"data_offsets", {0, 6}}}},
              {"h", {{"dtype", "F16"}, {"shape", {2}}, {"data_offsets", {6, 10}}}},
              {"i", {{"dtype", "I64"}, {"shape", {2}}, {"data_offsets", {10, 26}}}},
              {"e", {{"dtype", "F32"}, {"shape", {0, 4}}, {"data_offsets", {26, 26}}}}};
    std::string header = h.dump();
    if (header.size() % 2 == 0) header += ' ';
    write(dir + "/x.safetensors", safetensors_bytes_raw(header, data));
    SafeTensorsFile f(dir + "/x.safetensors");
    EXPECT_EQ(to_f32(*f.find("b")), (std::vector<float>{1, -2, 3}));
    EXPECT_EQ(to_f32(*f.find("h")), (std::vector<float>{1, -2}));
    EXPECT_TRUE(to_f32(*f.find("e")).empty());
    expect_error([&] { to_i32(*f.find("i")); }, {"\"i\"", "1099511627776", "outside the 32-bit range"});
}

// A file refused after it was mapped is unmapped again (the fuzzer ran out of mappings).
TEST(Safetensors, RefusedFilesAreUnmapped) {
    const std::string path = temp_dir() + "/bad.safetensors";
    write(path, safetensors_bytes_raw("{\"x\": 1}", std::string(4096, '\0')));
    auto mappings = [] {
        const std::string maps = read_file("/proc/self/maps", /*allow_pipe=*/true);
        return std::count(maps.begin(), maps.end(), '\n');
    };
    const auto before = mappings();
    for (int i = 0; i < 200; i++) expect_error([&] { SafeTensorsFile f(path); }, {"entry needs dtype"});
    EXPECT_LT(mappings(), before + 20);
}

// A NUL byte in a prompt is kept: the echo is not cut there.
TEST(Prompts, NulBytesAreKept) {
    const std::string dir = temp_dir();
    write(dir + "/p.txt", std::string("Once\0upon", 9));
    RunResult r = run_cmd("./generate --device cpu -n 1 --temperature 0 --prompt-file " + dir + "/p.txt");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.substr(0, 4), "Once");
    EXPECT_NE(r.out.find("upon"), std::string::npos) << "the output stops at the NUL byte";
}

}  // namespace
