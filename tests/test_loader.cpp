// test_loader.cpp: config.json parsing (both generations of keys) and safetensors loading,
// including every way a file can be broken: each must give one clear error naming the file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common.h"
#include "config.h"
#include "safetensors.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

json olmo2_config() {
    return {{"model_type", "olmo2"}, {"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"vocab_size", 100}, {"max_position_embeddings", 256},
            {"rms_norm_eps", 1e-6}, {"rope_theta", 500000.0}, {"eos_token_id", 7}};
}

TEST(Config, Olmo2Basics) {
    ModelConfig c = parse_config(olmo2_config().dump(), "config.json");
    EXPECT_EQ(c.family, Family::Olmo2);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.kv_dim(), 32);
    EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
    EXPECT_FLOAT_EQ(c.rope(0).theta, 500000.0f);
    EXPECT_EQ(c.eos_ids, std::vector<int>{7});
    EXPECT_FALSE(c.rope(1).yarn);
}

TEST(Config, Olmo1FixedEpsAndClip) {
    json j = olmo2_config();
    j["model_type"] = "olmo";
    j["rms_norm_eps"] = 1e-3;
    j["clip_qkv"] = 8.0;
    j["eos_token_id"] = {50279, 1};
    ModelConfig c = parse_config(j.dump(), "config.json");
    EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);   // OLMo-1's LayerNorm ignores the config's eps
    EXPECT_FLOAT_EQ(c.clip_qkv, 8.0f);
    EXPECT_EQ(c.eos_ids, (std::vector<int>{50279, 1}));
}

// The same OLMo-3 model written by transformers 4.x and by 5.x gives the same config.
TEST(Config, Olmo3YarnBothKeyGenerations) {
    json v4 = olmo2_config();
    v4["model_type"] = "olmo3";
    v4["num_hidden_layers"] = 4;
    v4["sliding_window"] = 8;
    v4["torch_dtype"] = "bfloat16";
    v4["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 32},
                          {"beta_fast", 32.0}, {"beta_slow", 1.0}, {"attention_factor", 1.2079441541679836}};
    json v5 = v4;
    v5.erase("rope_scaling");
    v5.erase("rope_theta");
    v5.erase("torch_dtype");
    v5["dtype"] = "bfloat16";
    v5["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"};
    json full = v4["rope_scaling"];
    full["rope_theta"] = 500000.0;
    v5["rope_parameters"] = {{"full_attention", full},
                             {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 500000.0}}}};
    ModelConfig a = parse_config(v4.dump(), "v4"), b = parse_config(v5.dump(), "v5");
    for (const ModelConfig* c : {&a, &b}) {
        EXPECT_EQ(c->layer_sliding, (std::vector<bool>{true, true, true, false}));  // default: every 4th full
        EXPECT_EQ(c->window(0), 8);
        EXPECT_EQ(c->window(3), 0);
        EXPECT_FALSE(c->rope(0).yarn);              // YaRN on full layers only
        EXPECT_TRUE(c->rope(3).yarn);
        EXPECT_FLOAT_EQ(c->rope(3).attention_factor, 1.2079441541679836f);
        EXPECT_EQ(c->dtype, "bfloat16");
    }
    EXPECT_EQ(a.rope(3).inv_freq(16), b.rope(3).inv_freq(16));
    // YaRN leaves the highest frequencies alone and divides the lowest by the factor.
    std::vector<float> plain = a.rope(0).inv_freq(16), yarn = a.rope(3).inv_freq(16);
    EXPECT_FLOAT_EQ(yarn[0], plain[0]);
    EXPECT_FLOAT_EQ(yarn[7], plain[7] / 8.0f);
}

TEST(Config, YarnDefaultAttentionFactor) {
    json j = olmo2_config();
    j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
    ModelConfig c = parse_config(j.dump(), "c");
    EXPECT_NEAR(c.rope(0).attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-6);
}

TEST(Config, Errors) {
    expect_error([] { load_config("/nonexistent/model"); }, {"/nonexistent/model/config.json", "cannot open"});
    expect_error([] { parse_config("{\"model_type\": ", "bad.json"); }, {"bad.json", "malformed JSON"});
    json j = olmo2_config();
    j["model_type"] = "llama";
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"c.json", "unsupported model_type \"llama\""});
    j = olmo2_config();
    j.erase("hidden_size");
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"missing \"hidden_size\""});
    j = olmo2_config();
    j["num_key_value_heads"] = 3;
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"not a multiple of num_key_value_heads"});
    j = olmo2_config();
    j["hidden_size"] = "64";
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"\"hidden_size\" must be an integer"});
    j = olmo2_config();
    j["rope_scaling"] = {{"rope_type", "longrope"}};
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"unsupported rope type \"longrope\""});
}

TEST(Config, GenerationConfigOverridesEos) {
    std::string d = temp_dir();
    write(d + "/config.json", olmo2_config().dump());
    write(d + "/generation_config.json", R"({"eos_token_id": [3, 4]})");
    EXPECT_EQ(load_config(d).eos_ids, (std::vector<int>{3, 4}));
}

TEST(Config, ParamSpecsFollowFamily) {
    ModelConfig c = parse_config(olmo2_config().dump(), "c");
    auto specs = param_specs(c);
    EXPECT_EQ(specs.front().name, "model.embed_tokens.weight");
    EXPECT_EQ(specs.back().name, "model.norm.weight");
    EXPECT_EQ(specs.size(), 1u + 2 * 11 + 1);
}

// --- safetensors ---

TEST(SafeTensors, ReadsAndConvertsDtypes) {
    std::string d = temp_dir();
    float f[3] = {1.5f, -2.25f, 1e-3f};
    uint16_t bf[2] = {0x3FC0, 0xC010};            // 1.5, -2.25
    uint16_t hf[3] = {0x3E00, 0xC080, 0x0001};    // 1.5, -2.25, smallest subnormal
    std::string data = std::string((char*)f, 12) + std::string((char*)bf, 4) + std::string((char*)hf, 6);
    json h = {{"a", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 12}}}},
              {"b", {{"dtype", "BF16"}, {"shape", {1, 2}}, {"data_offsets", {12, 16}}}},
              {"c", {{"dtype", "F16"}, {"shape", {3}}, {"data_offsets", {16, 22}}}},
              {"__metadata__", {{"format", "pt"}}}};
    write(d + "/x.safetensors", safetensors_bytes(h, data));
    SafeTensorsFile sf(d + "/x.safetensors");
    EXPECT_EQ(sf.metadata().at("format"), "pt");
    EXPECT_EQ(to_f32(*sf.find("a")), (std::vector<float>{1.5f, -2.25f, 1e-3f}));
    EXPECT_EQ(to_f32(*sf.find("b")), (std::vector<float>{1.5f, -2.25f}));
    std::vector<float> c = to_f32(*sf.find("c"));
    EXPECT_EQ(c[0], 1.5f);
    EXPECT_EQ(c[1], -2.25f);
    EXPECT_EQ(c[2], std::ldexp(1.0f, -24));
    EXPECT_EQ(sf.find("b")->shape_str(), "[1, 2]");
}

TEST(SafeTensors, BrokenFiles) {
    std::string d = temp_dir();
    auto bad = [&](const std::string& bytes, std::vector<std::string> parts) {
        write(d + "/bad.safetensors", bytes);
        parts.insert(parts.begin(), d + "/bad.safetensors");
        expect_error([&] { SafeTensorsFile f(d + "/bad.safetensors"); }, parts);
    };
    auto entry = [](const char* dt, std::vector<int> shape, std::vector<int> offs) {
        return json{{"dtype", dt}, {"shape", shape}, {"data_offsets", offs}};
    };
    std::string data(16, '\1');
    expect_error([&] { SafeTensorsFile f(d + "/missing.safetensors"); }, {"missing.safetensors", "cannot open"});
    bad("abc", {"truncated"});
    bad(std::string("\xff\xff\0\0\0\0\0\0", 8) + "{}", {"header length", "past the end"});
    bad(safetensors_bytes(json(), "").replace(8, 4, "{\"a\""), {"malformed JSON"});
    bad(safetensors_bytes({{"a", entry("F8_E4M3", {4}, {0, 4})}}, data), {"tensor \"a\"", "unsupported dtype \"F8_E4M3\""});
    bad(safetensors_bytes({{"a", entry("F32", {8}, {0, 32})}}, data), {"out of range"});
    bad(safetensors_bytes({{"a", entry("F32", {3}, {0, 16})}}, data), {"span 16 bytes", "needs 12"});
    bad(safetensors_bytes({{"a", entry("F32", {2}, {0, 8})}, {"b", entry("F32", {2}, {4, 12})}}, data), {"overlap"});
    bad(safetensors_bytes({{"a", entry("F32", {2}, {8, 4})}}, data), {"out of range"});
    bad(safetensors_bytes({{"a", {{"dtype", "F32"}, {"shape", {2}}}}}, data), {"data_offsets"});
    // A good file cut short: the last tensor's data now lies past the end.
    std::string good = safetensors_bytes({{"a", entry("F32", {4}, {0, 16})}}, data);
    bad(good.substr(0, good.size() - 5), {"out of range", "truncated"});
}

TEST(Checkpoint, MissingTensorWrongShapeAndShards) {
    std::string d = temp_dir();
    expect_error([&] { Checkpoint c(d); }, {d, "no model.safetensors"});
    float f[4] = {1, 2, 3, 4};
    std::string data((char*)f, 16);
    json e = {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}};
    write(d + "/s1.safetensors", safetensors_bytes({{"w1", e}}, data));
    write(d + "/s2.safetensors", safetensors_bytes({{"w2", e}}, data));
    write(d + "/model.safetensors.index.json", json{{"weight_map", {{"w1", "s1.safetensors"}, {"w2", "s2.safetensors"}}}}.dump());
    Checkpoint c(d);
    EXPECT_EQ(to_f32(c.get("w2", {2, 2}))[3], 4.0f);
    expect_error([&] { c.get("w3", {2, 2}); }, {"missing tensor \"w3\""});
    expect_error([&] { c.get("w1", {4}); }, {"s1.safetensors", "\"w1\" has shape [2, 2] but the config needs [4]"});
    write(d + "/model.safetensors.index.json", json{{"weight_map", {{"w1", "s1.safetensors"}, {"w9", "s2.safetensors"}}}}.dump());
    expect_error([&] { Checkpoint c2(d); }, {"\"w9\"", "not in the file"});
    write(d + "/model.safetensors.index.json", json{{"weight_map", {{"w1", "s3.safetensors"}}}}.dump());
    expect_error([&] { Checkpoint c2(d); }, {"s3.safetensors", "cannot open"});
}

}  // namespace
