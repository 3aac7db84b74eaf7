// test_util.h: small helpers shared by the CPU tests: temp folders, writing safetensors files,
// expecting an olmo::Error with given words, a random tiny checkpoint, running ./generate.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common.h"
#include "config.h"

namespace olmo::test {

using json = nlohmann::json;

inline std::string temp_dir() {
    char tmpl[] = "/tmp/olmo_test_XXXXXX";
    return mkdtemp(tmpl);
}

inline void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A safetensors file from a header object and a data blob.
inline std::string safetensors_bytes(const json& header, const std::string& data) {
    std::string h = header.dump();
    uint64_t n = h.size();
    std::string out(8, '\0');
    for (int i = 0; i < 8; i++) out[i] = (char)((n >> (8 * i)) & 0xff);
    return out + h + data;
}

// Expects `f` to throw olmo::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F f, std::vector<std::string> parts) {
    try {
        f();
        ADD_FAILURE() << "no error thrown";
    } catch (const Error& e) {
        for (auto& p : parts)
            EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message: " << e.what() << "\nmissing: " << p;
    }
}

// Writes config.json + model.safetensors (random F32 weights, every tensor param_specs lists,
// plus lm_head) for `cfg_json` into `dir`.
inline void write_random_checkpoint(const std::string& dir, const json& cfg_json, unsigned seed = 1) {
    write(dir + "/config.json", cfg_json.dump());
    ModelConfig c = parse_config(cfg_json.dump(), "config.json");
    std::vector<ParamSpec> specs = param_specs(c);
    if (!c.tie_embeddings) specs.push_back({"lm_head.weight", {c.vocab, c.hidden}});
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    json header;
    std::string data;
    for (const auto& p : specs) {
        int64_t n = 1;
        for (auto d : p.shape) n *= d;
        std::vector<float> v(n);
        for (auto& x : v) x = p.shape.size() == 1 ? 1.0f + normal(rng) : normal(rng);
        header[p.name] = {{"dtype", "F32"}, {"shape", p.shape}, {"data_offsets", {data.size(), data.size() + 4 * n}}};
        data.append((const char*)v.data(), 4 * n);
    }
    write(dir + "/model.safetensors", safetensors_bytes(header, data));
}

inline json tiny_olmo2_config() {
    return {{"model_type", "olmo2"}, {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 2},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"vocab_size", 64}, {"max_position_embeddings", 64},
            {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"eos_token_id", 1000}};
}

struct RunResult {
    int code;
    std::string out, err;
};

// Runs a shell command, capturing stdout and stderr separately.
inline RunResult run_cmd(const std::string& cmd) {
    std::string d = temp_dir();
    int status = std::system((cmd + " >" + d + "/out 2>" + d + "/err </dev/null").c_str());
    auto slurp = [](const std::string& p) {
        std::ifstream f(p);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(d + "/out"), slurp(d + "/err")};
}

}  // namespace olmo::test
