// golden.h: shared by the golden tests. A fixture is a folder tests/fixtures/<name>/ holding a
// small checkpoint and golden.safetensors, the activations transformers computed for it
// (written by tests/make_goldens.py). check_prefill() runs an engine over the fixture's prompt
// and compares every named intermediate, in order, against the golden tensor of that name.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <dirent.h>
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common.h"
#include "config.h"
#include "engine.h"
#include "safetensors.h"

namespace olmo::test {

inline std::vector<std::string> list_fixtures() {
    std::vector<std::string> names;
    if (DIR* d = opendir("tests/fixtures")) {
        while (dirent* e = readdir(d)) {
            std::string n = e->d_name;
            if (n[0] != '.' && file_exists("tests/fixtures/" + n + "/golden.safetensors")) names.push_back(n);
        }
        closedir(d);
    }
    std::sort(names.begin(), names.end());
    return names;
}

struct Diff {
    double rel_l2 = 0, max_abs = 0;
    size_t worst = 0;   // index of the largest absolute difference
};

inline Diff compare(const float* got, const float* want, size_t n) {
    Diff d;
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)got[i] - want[i];
        if (std::isnan(got[i])) e = INFINITY;
        num += e * e;
        den += (double)want[i] * want[i];
        if (std::fabs(e) > d.max_abs) { d.max_abs = std::fabs(e); d.worst = i; }
    }
    d.rel_l2 = std::sqrt(num / std::max(den, 1e-30));
    return d;
}

// A fixture folder: config, checkpoint and goldens.
struct Fixture {
    std::string dir;
    ModelConfig cfg;
    Checkpoint ckpt;
    SafeTensorsFile golden;
    explicit Fixture(const std::string& name)
        : dir("tests/fixtures/" + name), cfg(load_config(dir)), ckpt(dir), golden(dir + "/golden.safetensors") {}
    int seq_len() const { return (int)golden.find("prompt_ids")->numel() + 64; }
};

// Worst rel-L2 per op family ("q_rope", "mlp", "logits", ...) for the closing report.
using FamilyWorst = std::map<std::string, double>;

inline std::string op_family(const std::string& name) {
    size_t dot = name.find_last_of('.');
    return dot == std::string::npos ? name : name.substr(dot + 1);
}

// Runs the prompt through `eng` (fresh cache) and compares every hooked tensor with the
// golden of the same name. Fails at the first tensor over `tol`, naming it with rel-L2,
// max-abs and where the largest difference is. Returns the worst figure per op family.
inline FamilyWorst check_prefill(Engine& eng, const SafeTensorsFile& golden, double tol) {
    FamilyWorst worst;
    std::vector<std::string> seen;
    std::string first_bad;
    eng.reset();
    eng.hook = [&](const std::string& name, const float* data, int rows, int cols) {
        const TensorView* g = golden.find(name);
        if (!g || !first_bad.empty()) return;
        std::vector<float> want = to_f32(*g);
        ASSERT_EQ(want.size(), (size_t)rows * cols) << name << ": engine shape [" << rows << ", " << cols
                                                     << "] vs golden " << g->shape_str();
        Diff d = compare(data, want.data(), want.size());
        seen.push_back(name);
        worst[op_family(name)] = std::max(worst[op_family(name)], d.rel_l2);
        if (!(d.rel_l2 <= tol)) {
            first_bad = name;
            ADD_FAILURE() << "first mismatch at " << name << ": rel-L2 " << d.rel_l2 << " (tol " << tol << "), max-abs "
                          << d.max_abs << " at row " << d.worst / cols << " col " << d.worst % cols << " (got "
                          << data[d.worst] << ", want " << want[d.worst] << ")";
        }
    };
    std::vector<int> prompt = to_i32(*golden.find("prompt_ids"));
    eng.forward(prompt);
    eng.hook = nullptr;
    if (!first_bad.empty()) return worst;
    // Every activation in the golden file must have been produced by the engine.
    for (auto& [name, t] : golden.tensors()) {
        bool is_activation = name == "embed" || name == "final_norm" || name == "logits" || name.rfind("layers.", 0) == 0;
        if (is_activation) {
            EXPECT_NE(std::find(seen.begin(), seen.end(), name), seen.end()) << "engine never produced " << name;
        }
    }
    return worst;
}

// Decode steps through the KV cache after the prompt: feeds decode_ids one at a time and
// compares the logits with the golden decode_logits [steps, V]: the whole tensor within
// `tensor_tol` (the per-tensor bar, as check_prefill applies to [T, V] logits) and every step
// within `step_tol`. Returns the tensor's rel-L2 and the worst step's.
struct DecodeErr {
    double tensor = 0, worst_step = 0;
};
inline DecodeErr check_decode(Engine& eng, const SafeTensorsFile& golden, double tensor_tol, double step_tol) {
    std::vector<int> prompt = to_i32(*golden.find("prompt_ids"));
    std::vector<int> ids = to_i32(*golden.find("decode_ids"));
    std::vector<float> want = to_f32(*golden.find("decode_logits"));
    const int V = eng.config().vocab;
    std::vector<float> got_all;
    DecodeErr e;
    eng.reset();
    eng.forward(prompt);
    for (size_t s = 0; s < ids.size(); s++) {
        std::vector<float> got = eng.forward({ids[s]});
        Diff d = compare(got.data(), want.data() + s * V, V);
        e.worst_step = std::max(e.worst_step, d.rel_l2);
        EXPECT_LE(d.rel_l2, step_tol) << "decode step " << s << ": rel-L2 " << d.rel_l2 << ", max-abs " << d.max_abs;
        got_all.insert(got_all.end(), got.begin(), got.end());
    }
    e.tensor = compare(got_all.data(), want.data(), got_all.size()).rel_l2;
    EXPECT_LE(e.tensor, tensor_tol) << "decode_logits over " << ids.size() << " steps";
    return e;
}

// The logits of the prompt's last position [V] from a golden file.
inline std::vector<float> last_prompt_logits(const SafeTensorsFile& golden) {
    const TensorView& t = *golden.find("logits");
    std::vector<float> all = to_f32(t);
    const size_t V = t.shape.back();
    return std::vector<float>(all.end() - V, all.end());
}

// tests/fixtures/sampler_refs.json, transformers' results for the samplers and the repetition
// penalty (written by tests/make_sampler_refs.py on a machine with transformers), or null when
// it has not been made. refs["fixtures"][name] holds one fixture's (default model: "default_model").
inline nlohmann::json sampler_refs() {
    const std::string path = "tests/fixtures/sampler_refs.json";
    return file_exists(path) ? nlohmann::json::parse(read_file(path)) : nlohmann::json();
}
constexpr const char* kNoSamplerRefs =
    "tests/fixtures/sampler_refs.json is missing (python3 tests/make_sampler_refs.py, with transformers)";

// Greedy generation like transformers' generate(do_sample=False): argmax, stop after eos.
inline std::vector<int> greedy(Engine& eng, const std::vector<int>& prompt, int n) {
    eng.reset();
    std::vector<int> out, feed = prompt;
    const auto& eos = eng.config().eos_ids;
    for (int i = 0; i < n; i++) {
        int next = eng.forward_sample(feed, SamplingParams{}, i);
        out.push_back(next);
        if (std::find(eos.begin(), eos.end(), next) != eos.end()) break;
        feed = {next};
    }
    return out;
}

}  // namespace olmo::test
