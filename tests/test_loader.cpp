// test_loader.cpp: config.json parsing (both generations of keys), safetensors loading
// including every way a file can be broken (each must give one clear error naming the file),
// the weight table and its tie rule, and the CPU engine's parallel loader: bitwise what
// to_f32 gives, for F32, BF16 and F16 checkpoints, in one file or sharded.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <nlohmann/json.hpp>

#include "common.h"
#include "config.h"
#include "engine.h"
#include "safetensors.h"
#include "test_util.h"
#include "weights.h"

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

// A JSON value nested 100000 levels deep: parsing it is fine (nlohmann's parser is iterative),
// but quoting it in an error message with json::dump() would recurse that deep.
std::string deeply_nested() { return std::string(100000, '[') + std::string(100000, ']'); }

// Puts `raw` (JSON text) as the value of `key` in the JSON object text `obj`.
std::string with_raw(const json& obj, const std::string& key, const std::string& raw) {
    std::string s = obj.dump();
    return s.substr(0, s.size() - 1) + ",\"" + key + "\":" + raw + "}";
}

TEST(Config, DeeplyNestedValuesAreCleanErrors) {
    json j = olmo2_config();
    j.erase("hidden_size");
    expect_error([&] { parse_config(with_raw(j, "hidden_size", deeply_nested()), "c.json"); },
                 {"c.json", "\"hidden_size\" must be an integer", "got [[[[...]]]]"});
    j = olmo2_config();
    j.erase("eos_token_id");
    expect_error([&] { parse_config(with_raw(j, "eos_token_id", deeply_nested()), "c.json"); }, {"c.json", "eos_token_id"});
    j = olmo2_config();
    expect_error([&] { parse_config(with_raw(j, "rope_scaling", "[" + deeply_nested() + "]"), "c.json"); },
                 {"c.json", "rope parameters must be an object"});
}

// Integers are read as int64 and range-checked: get<int>() would run 2^32 + 256 as 256.
TEST(Config, IntegersAreRangeChecked) {
    json j = olmo2_config();
    j["hidden_size"] = 4294967552LL;   // 2^32 + 256
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"c.json", "\"hidden_size\"", "[1, 1048576]", "4294967552"});
    j["hidden_size"] = 1.5;
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"c.json", "\"hidden_size\" must be an integer", "1.5"});
    j["hidden_size"] = 0;
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"\"hidden_size\"", "got 0"});
    j = olmo2_config();
    j["vocab_size"] = 18446744073709551615ULL;
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"\"vocab_size\"", "18446744073709551615"});
    j = olmo2_config();
    j["eos_token_id"] = {1, -1};
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"c.json", "eos_token_id entry", "got -1"});
    j["eos_token_id"] = 2147483648LL;
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"eos_token_id", "2147483648"});
    // Each factor in range, the product not: 65536 heads x 65536 would wrap int q_dim() to 0.
    j = olmo2_config();
    j["num_attention_heads"] = j["num_key_value_heads"] = 65536;
    j["head_dim"] = 1024;
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"c.json", "num_attention_heads x head_dim", "above the limit"});
    j["head_dim"] = 65536;
    expect_error([&] { parse_config(j.dump(), "c.json"); }, {"c.json", "\"head_dim\"", "[1, 1024]"});
}

TEST(Config, GenerationConfigOverridesEos) {
    std::string d = temp_dir();
    write(d + "/config.json", olmo2_config().dump());
    write(d + "/generation_config.json", R"({"eos_token_id": [3, 4]})");
    EXPECT_EQ(load_config(d).eos_ids, (std::vector<int>{3, 4}));
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
    bad(safetensors_bytes({{"a", entry("F8_E5M2", {4}, {0, 4})}}, data), {"tensor \"a\"", "dtype \"F8_E5M2\" is not supported"});
    bad(safetensors_bytes({{"a", entry("U8", {4}, {0, 4})}}, data), {"tensor \"a\"", "unsupported dtype \"U8\""});
    bad(safetensors_bytes({{"a", entry("F32", {8}, {0, 32})}}, data), {"out of range"});
    bad(safetensors_bytes({{"a", entry("F32", {3}, {0, 16})}}, data), {"span 16 bytes", "needs 12"});
    bad(safetensors_bytes({{"a", entry("F32", {2}, {0, 8})}, {"b", entry("F32", {2}, {4, 12})}}, data), {"overlap"});
    bad(safetensors_bytes({{"a", entry("F32", {2}, {8, 4})}}, data), {"out of range"});
    bad(safetensors_bytes({{"a", {{"dtype", "F32"}, {"shape", {2}}}}}, data), {"data_offsets"});
    std::string e = entry("F32", {1}, {0, 4}).dump();
    bad(safetensors_bytes_raw("{\"a\":" + e + ",\"a\":" + e + "}", data), {"tensor \"a\" appears twice"});
    // Shapes whose byte count wraps to 0 in 64 bits must not pass as empty tensors.
    auto huge = [](json shape) { return json{{"a", {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {0, 0}}}}}; };
    bad(safetensors_bytes(huge({1LL << 32, 1LL << 32}), ""), {"tensor \"a\"", "shape [4294967296, 4294967296] is too large"});
    bad(safetensors_bytes(huge({1LL << 62}), ""), {"tensor \"a\"", "is too large"});
    // A good file cut short: the last tensor's data now lies past the end.
    std::string good = safetensors_bytes({{"a", entry("F32", {4}, {0, 16})}}, data);
    bad(good.substr(0, good.size() - 5), {"out of range", "truncated"});
}

TEST(SafeTensors, DeeplyNestedHeaderValuesAreCleanErrors) {
    std::string d = temp_dir();
    const std::string bad = d + "/bad.safetensors";
    json a = {{"dtype", "F32"}, {"data_offsets", {0, 0}}};
    std::string header = "{\"a\":" + with_raw(a, "shape", deeply_nested()) + "}";
    write(bad, safetensors_bytes_raw(header, ""));
    expect_error([&] { SafeTensorsFile f(bad); }, {bad, "tensor \"a\"", "bad shape [[[[...]]]]"});
    // Non-string metadata (outside the format) is kept as a short excerpt.
    header = "{\"__metadata__\":{\"deep\":" + deeply_nested() + "}}";
    write(bad, safetensors_bytes_raw(header, ""));
    SafeTensorsFile f(bad);
    EXPECT_EQ(f.metadata().at("deep"), "[[[[...]]]]");
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
    // Both shards hold "w1": the one the index names wins.
    float g[4] = {5, 6, 7, 8};
    write(d + "/s2.safetensors", safetensors_bytes({{"w1", e}, {"w2", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {16, 32}}}}},
                                                   std::string((char*)g, 16) + data));
    write(d + "/model.safetensors.index.json", json{{"weight_map", {{"w1", "s2.safetensors"}, {"w2", "s2.safetensors"}}}}.dump());
    EXPECT_EQ(to_f32(Checkpoint(d).get("w1", {2, 2}))[0], 5.0f);
    write(d + "/model.safetensors.index.json", json{{"weight_map", {{"w1", "s1.safetensors"}, {"w2", "s2.safetensors"}}}}.dump());
    EXPECT_EQ(to_f32(Checkpoint(d).get("w1", {2, 2}))[0], 1.0f);
    write(d + "/model.safetensors.index.json", json{{"weight_map", {{"w1", "s1.safetensors"}, {"w9", "s2.safetensors"}}}}.dump());
    expect_error([&] { Checkpoint c2(d); }, {"\"w9\"", "not in the file"});
    // Shard names must stay inside the model folder.
    write(d + "/../outside.safetensors", safetensors_bytes({{"w1", e}}, data));
    for (std::string outside : {"../outside.safetensors", "/etc/passwd", "../../etc/passwd", "sub/../../outside.safetensors", ".."}) {
        write(d + "/model.safetensors.index.json", json{{"weight_map", {{"w1", outside}}}}.dump());
        expect_error([&] { Checkpoint c2(d); }, {"model.safetensors.index.json", "weight_map[\"w1\"] = \"" + outside + "\"",
                                                 "not a file name inside the model folder"});
    }
    std::remove((d + "/../outside.safetensors").c_str());
    write(d + "/model.safetensors.index.json", json{{"weight_map", {{"w1", "s3.safetensors"}}}}.dump());
    expect_error([&] { Checkpoint c2(d); }, {"s3.safetensors", "cannot open"});
}


// A FIFO in place of a file is refused at once (opening it for reading used to wait forever).
TEST(Checkpoint, FifoIsACleanErrorNotAHang) {
    std::string d = temp_dir();
    ASSERT_EQ(mkfifo((d + "/model.safetensors").c_str(), 0600), 0);
    expect_error([&] { SafeTensorsFile f(d + "/model.safetensors"); }, {d + "/model.safetensors", "not a regular file"});
    write(d + "/model.safetensors.index.json", json{{"weight_map", {{"w1", "model.safetensors"}}}}.dump());
    expect_error([&] { Checkpoint c(d); }, {d + "/model.safetensors", "not a regular file"});
    ASSERT_EQ(mkfifo((d + "/config.json").c_str(), 0600), 0);
    expect_error([&] { load_config(d); }, {d + "/config.json", "not a regular file"});
}

// --- the weight table ---

TEST(WeightTable, Olmo2NamesShapesAndFusedRows) {
    ModelConfig c = parse_config(olmo2_config().dump(), "c");   // H 64, I 128, Q 64, KV 32, V 100
    std::vector<WeightSlot> t = weight_table(c, false);
    ASSERT_EQ(t.size(), 1u + 2 * 11 + 1);
    EXPECT_EQ(t[0].name, "model.embed_tokens.weight");
    EXPECT_EQ(t[0].shape, (std::vector<int64_t>{100, 64}));
    EXPECT_EQ(t[0].param, Param::Embed);
    EXPECT_EQ(t[0].layer, -1);
    const WeightSlot &k = t[12 + 1], &v = t[12 + 2], &qn = t[12 + 4], &up = t[12 + 9], &down = t[12 + 10];
    EXPECT_EQ(k.name, "model.layers.1.self_attn.k_proj.weight");
    EXPECT_EQ(k.shape, (std::vector<int64_t>{32, 64}));
    EXPECT_EQ(k.param, Param::Wqkv);
    EXPECT_EQ(k.layer, 1);
    EXPECT_EQ(k.row_offset, 64);
    EXPECT_EQ(k.offset(), 64 * 64);
    EXPECT_EQ(v.row_offset, 96);
    EXPECT_EQ(qn.name, "model.layers.1.self_attn.q_norm.weight");
    EXPECT_EQ(qn.shape, std::vector<int64_t>{64});
    EXPECT_EQ(qn.param, Param::QNorm);
    EXPECT_EQ(up.name, "model.layers.1.mlp.up_proj.weight");
    EXPECT_EQ(up.param, Param::Wgu);
    EXPECT_EQ(up.offset(), 128 * 64);
    EXPECT_EQ(down.shape, (std::vector<int64_t>{64, 128}));
    EXPECT_EQ(t.back().name, "model.norm.weight");
    EXPECT_FALSE(has_lm_head(t));
    std::vector<WeightSlot> u = weight_table(c, true);
    ASSERT_EQ(u.size(), t.size() + 1);
    EXPECT_EQ(u.back().name, "lm_head.weight");
    EXPECT_EQ(u.back().shape, (std::vector<int64_t>{100, 64}));
    EXPECT_TRUE(has_lm_head(u));
    // The parts of every engine tensor tile it exactly, in row order.
    std::map<std::pair<Param, int>, int64_t> filled;
    for (const WeightSlot& s : u) {
        int64_t& at = filled[std::make_pair(s.param, s.layer)];
        EXPECT_EQ(s.offset(), at) << s.name;
        at += s.numel();
    }
    for (auto& [key, n] : filled) EXPECT_EQ(n, param_shape(c, key.first).numel());
    EXPECT_EQ(param_shape(c, Param::Wqkv).rows, 128);
    EXPECT_EQ(param_shape(c, Param::Wgu).rows, 256);
}

TEST(WeightTable, Olmo1HasNoNorms) {
    json j = olmo2_config();
    j["model_type"] = "olmo";
    j["clip_qkv"] = 8.0;
    ModelConfig c = parse_config(j.dump(), "c");
    std::vector<WeightSlot> t = weight_table(c, true);
    std::vector<std::string> layer0;
    for (const WeightSlot& s : t)
        if (s.layer == 0) layer0.push_back(s.name.substr(std::string("model.layers.0.").size()));
    EXPECT_EQ(layer0, (std::vector<std::string>{"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                                "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                                "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}));
    EXPECT_EQ(t.size(), 1u + 2 * 7 + 1);   // embed, 2 layers, lm_head: no final norm (OLMo-1 LayerNorm has none)
    EXPECT_EQ(t.back().name, "lm_head.weight");
}

// The output layer as transformers 5 loads it (weights.h): only has() of the checkpoint matters.
TEST(WeightTable, TieRuleFollowsTransformers5) {
    auto table_for = [](bool tie, bool embed, bool head) {
        std::string d = temp_dir();
        std::vector<RawTensor> ts;
        if (embed) ts.push_back({"model.embed_tokens.weight", {1}, "F32", std::string(4, '\0')});
        if (head) ts.push_back({"lm_head.weight", {1}, "F32", std::string(4, '\0')});
        write_tensors(d, ts);
        json j = olmo2_config();
        j["tie_word_embeddings"] = tie;
        Checkpoint ck(d);
        return weight_table(parse_config(j.dump(), "c"), &ck);
    };
    EXPECT_TRUE(has_lm_head(table_for(false, true, true)));
    EXPECT_TRUE(has_lm_head(table_for(false, true, false)));   // required: load fails without it
    EXPECT_FALSE(has_lm_head(table_for(true, true, false)));   // tied: the embedding is the output layer
    EXPECT_TRUE(has_lm_head(table_for(true, true, true)));     // both stored: not tied, lm_head is used
    std::vector<WeightSlot> only_head = table_for(true, false, true);
    EXPECT_FALSE(has_lm_head(only_head));                      // only lm_head: it is the embedding too
    EXPECT_EQ(only_head[0].name, "lm_head.weight");
    EXPECT_EQ(only_head[0].param, Param::Embed);
    json j = olmo2_config();
    j["tie_word_embeddings"] = true;
    EXPECT_FALSE(has_lm_head(weight_table(parse_config(j.dump(), "c"), nullptr)));   // random weights: the config
    EXPECT_TRUE(has_lm_head(weight_table(parse_config(olmo2_config().dump(), "c"), nullptr)));
}

TEST(LoadProgress, CountsBytesAndReportsTheEnd) {
    int reports = 0, lasts = 0;
    size_t last_done = 0;
    LoadProgress p([&](size_t done, size_t total, double, bool last) {
        reports++, lasts += last, last_done = done;
        EXPECT_EQ(total, 100u);
    }, /*interval_s=*/1e9);
    p.start(100);
    p.add(40);
    p.add(60);
    p.finish();
    EXPECT_EQ(reports, 1);   // the interval never passed: only the final report
    EXPECT_EQ(lasts, 1);
    EXPECT_EQ(last_done, 100u);
    EXPECT_EQ(p.done(), 100u);
    const double s = p.seconds();
    EXPECT_GE(s, 0.0);
    EXPECT_EQ(p.seconds(), s);   // frozen by finish()
    LoadProgress every([&](size_t, size_t, double, bool) { reports++; }, 0.0);
    reports = 0;
    every.start(10);
    every.add(5);
    every.add(5);
    every.finish();
    EXPECT_EQ(reports, 3);
}

// --- the CPU loader ---

// An OLMo-2 shape with odd sizes whose embedding spans two loader chunks (> 2^20 elements).
json odd_config() {
    json j = olmo2_config();
    j["hidden_size"] = 264;        // head_dim 66
    j["intermediate_size"] = 40;
    j["num_hidden_layers"] = 1;
    j["vocab_size"] = 4099;
    return j;
}

// The fp32 value of element i of a raw tensor, decoded independently of the loader.
float reference_f32(const RawTensor& t, int64_t i) {
    uint16_t h = 0;
    uint32_t u = 0;
    if (t.dtype == "F32") std::memcpy(&u, t.bytes.data() + 4 * i, 4);
    else std::memcpy(&h, t.bytes.data() + 2 * i, 2);
    if (t.dtype == "BF16") u = (uint32_t)h << 16;
    if (t.dtype == "F16") return f16_to_f32(h);   // checked against known values in ReadsAndConvertsDtypes
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

TEST(CpuLoader, BitwiseEqualsTheFileForEveryDtypeAndSharding) {
    ModelConfig c = parse_config(odd_config().dump(), "c");
    for (const char* dtype : {"F32", "BF16", "F16"})
        for (int shards : {1, 3}) {
            SCOPED_TRACE(std::string(dtype) + ", " + std::to_string(shards) + " shard(s)");
            std::string d = temp_dir();
            std::mt19937 rng(shards);
            std::vector<RawTensor> ts;
            for (const WeightSlot& s : weight_table(c, true)) ts.push_back({s.name, s.shape, dtype, random_bytes(dtype, s.numel(), rng)});
            write_tensors(d, ts, shards);
            Checkpoint ck(d);
            const std::vector<WeightSlot> table = weight_table(c, &ck);
            ASSERT_EQ(table.size(), ts.size());
            std::vector<std::vector<float>> got(table.size());
            std::vector<float*> dst;
            for (size_t i = 0; i < table.size(); i++) {
                got[i].assign(table[i].numel(), std::nanf(""));   // anything not written stays NaN
                dst.push_back(got[i].data());
            }
            LoadProgress progress;
            load_f32(ck, table, dst, &progress);
            size_t bytes = 0;
            for (size_t i = 0; i < table.size(); i++) {
                ASSERT_EQ(table[i].name, ts[i].name);
                bytes += ts[i].bytes.size();
                int64_t bad = 0;
                for (int64_t e = 0; e < table[i].numel(); e++) {
                    const float want = reference_f32(ts[i], e);
                    bad += std::memcmp(&got[i][e], &want, 4) != 0;
                }
                EXPECT_EQ(bad, 0) << table[i].name;
                EXPECT_EQ(std::memcmp(got[i].data(), to_f32(ck.get(table[i].name, table[i].shape)).data(), 4 * got[i].size()), 0);
            }
            EXPECT_EQ(progress.total(), bytes);
            EXPECT_EQ(progress.done(), bytes);
        }
}

// --- the CPU engine's weights, through a forward pass ---

// Rounds x to a value every float dtype holds exactly: 8 significant bits, |x| >= 2^-14 or 0.
float representable(float x) {
    if (std::fabs(x) < std::ldexp(1.0f, -14)) return 0.0f;
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u &= 0xffff0000u;
    std::memcpy(&x, &u, 4);
    return x;
}

// x (representable) stored as `dtype`.
std::string encode(const std::vector<float>& v, const std::string& dtype) {
    std::string out;
    for (float x : v) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        const uint32_t sign = u >> 31, exp = (u >> 23) & 0xff, man = u & 0x7fffff;
        uint16_t h = dtype == "BF16" ? (uint16_t)(u >> 16)
                                     : (uint16_t)(sign << 15 | (exp ? (exp - 112) << 10 | man >> 13 : 0));
        if (dtype == "F32") out.append((const char*)&u, 4);
        else out.append((const char*)&h, 2);
    }
    return out;
}

// A tiny OLMo-2 model's tensors in `dtype`: the same values whatever the dtype.
std::vector<RawTensor> model_tensors(const ModelConfig& c, const std::string& dtype, bool lm_head) {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    std::vector<RawTensor> ts;
    for (const WeightSlot& s : weight_table(c, lm_head)) {
        std::vector<float> v(s.numel());
        for (float& x : v) x = representable(s.shape.size() == 1 ? 1.0f + normal(rng) : normal(rng));
        ts.push_back({s.name, s.shape, dtype, encode(v, dtype)});
    }
    return ts;
}

std::vector<float> logits_of(const std::string& dir, const json& cfg, const std::vector<RawTensor>& ts, int shards = 1) {
    write(dir + "/config.json", cfg.dump());
    write_tensors(dir, ts, shards);
    ModelConfig c = load_config(dir);
    Checkpoint ck(dir);
    return make_cpu_engine(c, ck, 16)->forward({1, 2, 3, 4, 5});
}

TEST(CpuEngineLoad, SameLogitsFromEveryDtypeAndSharding) {
    const json cfg = tiny_olmo2_config();
    const ModelConfig c = parse_config(cfg.dump(), "c");
    const std::vector<float> ref = logits_of(temp_dir(), cfg, model_tensors(c, "F32", true));
    for (const char* dtype : {"F32", "BF16", "F16"})
        for (int shards : {1, 4}) {
            SCOPED_TRACE(std::string(dtype) + ", " + std::to_string(shards) + " shard(s)");
            EXPECT_EQ(logits_of(temp_dir(), cfg, model_tensors(c, dtype, true), shards), ref);
        }
}

// The defect this table fixed: tie_word_embeddings true with lm_head.weight stored used lm_head
// on the CPU but the embedding on the GPU. Now both follow transformers 5 (weights.h).
TEST(CpuEngineLoad, TieRule) {
    json untied = tiny_olmo2_config(), tied = untied;
    tied["tie_word_embeddings"] = true;
    const ModelConfig c = parse_config(untied.dump(), "c");
    const std::vector<RawTensor> with_head = model_tensors(c, "F32", true), no_head = model_tensors(c, "F32", false);
    const std::vector<float> own = logits_of(temp_dir(), untied, with_head);
    EXPECT_EQ(logits_of(temp_dir(), tied, with_head), own);           // both stored: lm_head is the output layer
    std::vector<RawTensor> head_is_embed = no_head;
    head_is_embed.push_back(no_head[0]);
    head_is_embed.back().name = "lm_head.weight";
    const std::vector<float> tied_logits = logits_of(temp_dir(), tied, no_head);
    EXPECT_EQ(logits_of(temp_dir(), untied, head_is_embed), tied_logits);   // tied = lm_head equal to the embedding
    EXPECT_NE(tied_logits, own);
    std::vector<RawTensor> only_head = no_head;
    only_head[0].name = "lm_head.weight";                               // tied, the matrix stored as lm_head only
    EXPECT_EQ(logits_of(temp_dir(), tied, only_head), tied_logits);
}

TEST(CpuEngineLoad, BrokenCheckpointsAreCleanErrors) {
    const json cfg = tiny_olmo2_config();
    const ModelConfig c = parse_config(cfg.dump(), "c");
    auto load = [&](const std::vector<RawTensor>& ts) { logits_of(temp_dir(), cfg, ts); };
    expect_error([&] { load(model_tensors(c, "F32", false)); },
                 {"missing tensor \"lm_head.weight\"", "tie_word_embeddings is false"});
    std::vector<RawTensor> ts = model_tensors(c, "F32", true);
    auto up = std::find_if(ts.begin(), ts.end(), [](const RawTensor& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
    ASSERT_NE(up, ts.end());
    RawTensor saved = *up;
    ts.erase(up);
    expect_error([&] { load(ts); }, {"missing tensor \"model.layers.1.mlp.up_proj.weight\""});
    saved.shape = {saved.shape[1], saved.shape[0]};
    ts.push_back(saved);
    expect_error([&] { load(ts); }, {"model.safetensors", "\"model.layers.1.mlp.up_proj.weight\" has shape [32, 64]",
                                     "the config needs [64, 32]"});
    ts.back().shape = {saved.shape[1], saved.shape[0]};
    ts.back().dtype = "I32";
    expect_error([&] { load(ts); }, {"model.safetensors", "has dtype I32, expected F32, F16, BF16 or F8_E4M3"});
}

}  // namespace
