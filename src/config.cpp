// config.cpp: config.json -> ModelConfig, with every check that makes a bad config an error
// rather than a silent wrong answer.
#include "config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common.h"
#include "fp8.h"

namespace olmo {

using json = nlohmann::json;

std::vector<float> RopeConfig::inv_freq(int head_dim) const {
    // inv_freq[d] = theta^(-2d/hd) in fp32, as transformers' default RoPE init.
    const int half = head_dim / 2;
    std::vector<float> f(half);
    for (int d = 0; d < half; d++) f[d] = 1.0f / std::pow(theta, (float)(2 * d) / (float)head_dim);
    if (!yarn) return f;
    // YaRN: blend interpolated (f/factor) and original frequencies with a linear ramp between
    // the correction dims of beta_fast and beta_slow (transformers' _compute_yarn_parameters).
    auto corr_dim = [&](float rot) {
        return head_dim * std::log(original_max_pos / (rot * 2.0f * (float)M_PI)) / (2.0f * std::log(theta));
    };
    float low = std::max(std::floor(corr_dim(beta_fast)), 0.0f);
    float high = std::min(std::ceil(corr_dim(beta_slow)), (float)(head_dim - 1));
    if (low == high) high += 0.001f;
    for (int d = 0; d < half; d++) {
        float ramp = std::min(std::max((d - low) / (high - low), 0.0f), 1.0f);  // 1 = interpolate
        f[d] = f[d] / factor * ramp + f[d] * (1.0f - ramp);
    }
    return f;
}

namespace {

// j[key] as text for a message: a string as it is, anything else as a JSON excerpt.
std::string text(const json& j, const char* key) {
    if (!j.is_object() || !j.contains(key)) return "";
    return j[key].is_string() ? j[key].get<std::string>() : json_excerpt(j[key]);
}

// One compressed-tensors scheme's "weights": 8-bit float, one scale per channel or per tensor.
void check_weight_scheme(const json& w, const std::string& at) {
    if (w.is_null()) return;   // a group that quantizes only activations
    const std::string bits = text(w, "num_bits"), type = text(w, "type"), strategy = text(w, "strategy");
    if (bits == "8" && type == "float" && (strategy == "channel" || strategy == "tensor")) return;
    fail(at + ": " + bits + "-bit " + type + " weights with strategy \"" + strategy + "\" are not supported (" +
         kFp8CheckpointLayouts + ")");
}

// FP8 checkpoints (fp8_checkpoint.h): config.json names only what cannot load; the tensors decide.
void check_quantization_config(const json& q, const std::string& where) {
    const std::string at = where + ": quantization_config";
    if (!q.is_object()) fail(at + " is not an object");
    const std::string method = text(q, "quant_method");
    if (method == "compressed-tensors") {
        if (q.contains("config_groups") && q["config_groups"].is_object())
            for (auto& [name, group] : q["config_groups"].items())
                if (group.is_object() && group.contains("weights"))
                    check_weight_scheme(group["weights"], at + ".config_groups." + name + ".weights");
        return;   // input_activations and kv_cache_scheme: ignored (fp8_checkpoint.h says why)
    }
    if (method == "fbgemm_fp8") return;   // per-channel E4M3 weights with weight_scale [N, 1]
    if (method == "fp8")
        fail(at + ": quant_method \"fp8\" (transformers' fine-grained FP8: weight_scale_inv, weight_block_size " +
             text(q, "weight_block_size") + ", as in DeepSeek-V3 and Qwen3 FP8) is not supported; " +
             kFp8CheckpointLayouts);
    fail(at + ": quant_method \"" + method + "\" is not supported; " + kFp8CheckpointLayouts);
}

// Limits on the sizes a config may state (and kMaxVocabSize, in common.h). They are far above
// any OLMo (hidden 8192, vocab 100k, 128 heads of 128) and low enough that products such as n_heads * head_dim and the
// row sizes the engine computes in int cannot overflow.
constexpr int64_t kMaxDim = 1 << 20;        // hidden, intermediate, q_dim, kv_dim, heads
constexpr int64_t kMaxLayers = 4096;        // (the largest OLMo has 64; each layer costs a few table entries)
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxPositions = 1 << 24;  // max_position_embeddings, sliding_window
constexpr int64_t kMaxTokenId = INT32_MAX;  // eos ids are stored as int

// Typed field access with errors that name the file and the key. Every number has a stated
// range: integers are read through json_int, floats are checked as doubles before they are
// narrowed (1e40 would become inf) and must be finite and inside [lo, hi].
struct Reader {
    const json& j;
    std::string where;
    bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
    int get_int(const char* k, int64_t lo, int64_t hi) const {
        if (!has(k)) fail(where + ": missing \"" + k + "\"");
        return json_int(j[k], lo, hi, where + ": \"" + k + "\"");
    }
    int get_int(const char* k, int dflt, int64_t lo, int64_t hi) const { return has(k) ? get_int(k, lo, hi) : dflt; }
    float get_float(const char* k, float dflt, double lo, double hi) const {
        if (!has(k)) return dflt;
        const double v = j[k].is_number() ? j[k].get<double>() : NAN;
        if (!(v >= lo && v <= hi))   // also false for NaN
            fail(where + ": \"" + k + "\" must be a number in [" + num_str(lo) + ", " + num_str(hi) + "], got " + json_excerpt(j[k]));
        return (float)v;
    }
    bool get_bool(const char* k, bool dflt) const {
        if (!has(k)) return dflt;
        if (!j[k].is_boolean()) fail(where + ": \"" + k + "\" must be true or false, got " + json_excerpt(j[k]));
        return j[k].get<bool>();
    }
};

// The ranges of the float keys. Each bound keeps the math finite: eps > 0 keeps 1/sqrt(mean + eps)
// finite, theta > 1 keeps log(theta) (YaRN divides by it) positive, beta > 0 keeps the log of
// the correction dims defined, and the factors stay far from float overflow and underflow.
constexpr double kMinEps = 1e-30, kMaxEps = 1.0;
constexpr double kMinTheta = 1.0 + 1e-6, kMaxTheta = 1e12;
constexpr double kMinFactor = 1e-3, kMaxFactor = 1e6;   // YaRN factor, beta_fast, beta_slow
constexpr double kMinAttnFactor = 1e-3, kMaxAttnFactor = 1e3;
constexpr double kMaxClip = 1e6;

// The rope type of p ("rope_type", or 4.x's older "type"); it must be a string when present.
std::string rope_type(const json& p, const std::string& where) {
    for (const char* k : {"rope_type", "type"}) {
        if (!p.contains(k) || p[k].is_null()) continue;
        if (!p[k].is_string()) fail(where + ": \"" + k + "\" must be a string, got " + json_excerpt(p[k]));
        return p[k].get<std::string>();
    }
    return "default";
}

// Reads one rope parameter object (4.x rope_scaling or a 5.x rope_parameters entry).
RopeConfig parse_rope(const json& p, float theta, int max_pos, const std::string& where) {
    RopeConfig r;
    r.theta = theta;
    if (p.is_null()) return r;
    if (!p.is_object()) fail(where + ": rope parameters must be an object, got " + json_excerpt(p));
    Reader rd{p, where};
    r.theta = rd.get_float("rope_theta", theta, kMinTheta, kMaxTheta);
    const std::string type = rope_type(p, where);
    if (type == "default") return r;
    if (type != "yarn") fail(where + ": unsupported rope type \"" + type + "\" (supported: default, yarn)");
    r.yarn = true;
    r.factor = rd.get_float("factor", 1.0f, kMinFactor, kMaxFactor);
    r.original_max_pos = rd.get_int("original_max_position_embeddings", max_pos, 1, kMaxPositions);
    r.beta_fast = rd.get_float("beta_fast", 32.0f, kMinFactor, kMaxFactor);
    r.beta_slow = rd.get_float("beta_slow", 1.0f, kMinFactor, kMaxFactor);
    if (rd.has("attention_factor")) {
        r.attention_factor = rd.get_float("attention_factor", 1.0f, kMinAttnFactor, kMaxAttnFactor);
    } else {
        // transformers' default: 0.1 ln(s) + 1, with s = max_pos / original_max_pos when the
        // original length is given (DeepSeek convention), else the factor.
        float s = p.contains("original_max_position_embeddings") ? (float)max_pos / r.original_max_pos : r.factor;
        r.attention_factor = s <= 1.0f ? 1.0f : 0.1f * std::log(s) + 1.0f;
    }
    return r;
}

// obj[k], or null when absent, without copying: a copy of a value nested 100000 deep would
// recurse that deep (json::value(k, default) copies).
const json& member_or_null(const json& obj, const char* k) {
    static const json null;
    return obj.is_object() && obj.contains(k) ? obj[k] : null;
}

std::vector<int> parse_ids(const json& v, const std::string& where) {
    std::vector<int> ids;
    if (v.is_null()) return ids;
    const std::string what = where + ": eos_token_id";
    if (v.is_number_integer()) return {json_int(v, 0, kMaxTokenId, what)};
    if (!v.is_array()) fail(where + ": eos_token_id must be an integer or a list, got " + json_excerpt(v));
    for (auto& x : v) {
        ids.push_back(json_int(x, 0, kMaxTokenId, what + " entry"));
    }
    return ids;
}

// The sampling keys of generation_config.json, each checked for its type and range.
GenerationDefaults parse_generation_defaults(const json& g, const std::string& where) {
    Reader rd{g, where};
    GenerationDefaults d;
    if (rd.has("do_sample")) {
        if (!g["do_sample"].is_boolean()) fail(where + ": \"do_sample\" must be true or false, got " + json_excerpt(g["do_sample"]));
        d.do_sample = g["do_sample"].get<bool>();
    }
    d.temperature = rd.get_float("temperature", d.temperature, 0.0, 100.0);
    d.top_p = rd.get_float("top_p", d.top_p, 1e-6, 1.0);
    d.top_k = rd.get_int("top_k", d.top_k, 0, kMaxVocabSize);
    d.max_new_tokens = rd.get_int("max_new_tokens", 0, 1, 1 << 30);
    return d;
}

// The last line of defence behind the ranges above: the frequencies and scales RoPE will use
// must be finite and positive (a combination of in-range values could still overflow).
void check_rope_finite(const ModelConfig& c, const std::string& where) {
    for (const RopeConfig* r : {&c.rope_full, &c.rope_sliding}) {
        bool ok = std::isfinite(r->attention_factor) && r->attention_factor > 0;
        for (float f : r->inv_freq(c.head_dim)) ok = ok && std::isfinite(f) && f > 0;
        if (!ok) fail(where + ": the rope parameters give non-finite or zero frequencies (theta " + num_str(r->theta) +
                      (r->yarn ? ", YaRN factor " + num_str(r->factor) : std::string()) + ")");
    }
}

// text as a JSON object, or an error naming `where`.
json parse_object(const std::string& text, const std::string& where) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        fail(where + ": malformed JSON: " + e.what());
    }
    if (!j.is_object()) fail(where + ": not a JSON object");
    return j;
}

// model_type and the family it names.
void parse_family(const json& j, ModelConfig& c, const std::string& where) {
    if (!j.contains("model_type") || !j["model_type"].is_string()) fail(where + ": missing \"model_type\"");
    c.model_type = j["model_type"];
    if (c.model_type == "olmo") c.family = Family::Olmo1;
    else if (c.model_type == "olmo2") c.family = Family::Olmo2;
    else if (c.model_type == "olmo3") c.family = Family::Olmo3;
    else fail(where + ": unsupported model_type \"" + c.model_type + "\" (supported: olmo, olmo2, olmo3)");
}

// The sizes (each in range, and the products the engine computes in int), the norm and bias
// keys, tied embeddings and eos ids.
void parse_shape(const json& j, const Reader& rd, ModelConfig& c, const std::string& where) {
    c.hidden = rd.get_int("hidden_size", 1, kMaxDim);
    c.intermediate = rd.get_int("intermediate_size", 1, kMaxDim);
    c.n_layers = rd.get_int("num_hidden_layers", 1, kMaxLayers);
    c.n_heads = rd.get_int("num_attention_heads", 1, kMaxDim);
    c.n_kv_heads = rd.get_int("num_key_value_heads", c.n_heads, 1, kMaxDim);
    c.vocab = rd.get_int("vocab_size", 1, kMaxVocabSize);
    c.max_pos = rd.get_int("max_position_embeddings", 2048, 1, kMaxPositions);
    c.head_dim = rd.get_int("head_dim", c.hidden / c.n_heads, 1, kMaxHeadDim);
    if (c.head_dim <= 0 || c.head_dim % 2) fail(where + ": head_dim must be positive and even, got " + std::to_string(c.head_dim));
    // Each factor is in range; their products must be too (65536 heads x 65536 wraps int to 0).
    if ((int64_t)c.n_heads * c.head_dim > kMaxDim || (int64_t)c.n_kv_heads * c.head_dim > kMaxDim)
        fail(where + ": num_attention_heads x head_dim = " + std::to_string((int64_t)c.n_heads * c.head_dim) +
             " is above the limit " + std::to_string(kMaxDim));
    if (!rd.has("head_dim") && c.hidden % c.n_heads) fail(where + ": hidden_size is not a multiple of num_attention_heads");
    if (c.n_heads % c.n_kv_heads)
        fail(where + ": num_attention_heads (" + std::to_string(c.n_heads) + ") is not a multiple of num_key_value_heads (" +
             std::to_string(c.n_kv_heads) + ")");
    if (rd.get_bool("attention_bias", false))
        fail(where + ": attention_bias = true is not supported (no OLMo checkpoint uses it)");
    c.norm_eps = c.family == Family::Olmo1 ? 1e-5f : rd.get_float("rms_norm_eps", 1e-5f, kMinEps, kMaxEps);
    if (c.family == Family::Olmo1) c.clip_qkv = rd.get_float("clip_qkv", 0.0f, 0.0, kMaxClip);
    c.tie_embeddings = rd.get_bool("tie_word_embeddings", false);
    if (rd.has("quantization_config")) check_quantization_config(j["quantization_config"], where);   // FP8 only
    c.eos_ids = parse_ids(member_or_null(j, "eos_token_id"), where);
}

// Layer types: OLMo-3 alternates 3 sliding + 1 full unless layer_types says otherwise.
void parse_layer_types(const json& j, const Reader& rd, ModelConfig& c, const std::string& where) {
    c.layer_sliding.assign(c.n_layers, false);
    if (c.family != Family::Olmo3) return;
    c.sliding_window = rd.get_int("sliding_window", 0, 0, kMaxPositions);
    if (rd.has("layer_types")) {
        const json& lt = j["layer_types"];
        if (!lt.is_array() || (int)lt.size() != c.n_layers)
            fail(where + ": layer_types must list one type per layer (" + std::to_string(c.n_layers) + ")");
        for (int i = 0; i < c.n_layers; i++) {
            std::string t = lt[i].is_string() ? lt[i].get<std::string>() : "";
            if (t != "sliding_attention" && t != "full_attention")
                fail(where + ": unknown layer type " + json_excerpt(lt[i]));
            c.layer_sliding[i] = t == "sliding_attention";
        }
    } else {
        for (int i = 0; i < c.n_layers; i++) c.layer_sliding[i] = (i + 1) % 4 != 0;
    }
    bool any_sliding = false;
    for (bool s : c.layer_sliding) any_sliding |= s;
    if (any_sliding && c.sliding_window <= 0) fail(where + ": sliding layers need sliding_window > 0");
}

// RoPE: 5.x rope_parameters (flat, or keyed by layer type), else 4.x rope_theta + rope_scaling.
void parse_rope_keys(const json& j, const Reader& rd, ModelConfig& c, const std::string& where) {
    float theta = rd.get_float("rope_theta", 10000.0f, kMinTheta, kMaxTheta);
    if (rd.has("rope_parameters")) {
        const json& rp = j["rope_parameters"];
        if (!rp.is_object()) fail(where + ": rope_parameters must be an object");
        if (rp.contains("full_attention") || rp.contains("sliding_attention")) {
            c.rope_full = parse_rope(member_or_null(rp, "full_attention"), theta, c.max_pos, where);
            c.rope_sliding = parse_rope(member_or_null(rp, "sliding_attention"), theta, c.max_pos, where);
        } else {
            c.rope_full = c.rope_sliding = parse_rope(rp, theta, c.max_pos, where);
        }
    } else {
        c.rope_full = parse_rope(member_or_null(j, "rope_scaling"), theta, c.max_pos, where);
        // OLMo-3 applies rope_scaling (YaRN) on full-attention layers only.
        c.rope_sliding = c.family == Family::Olmo3 ? parse_rope(json(), theta, c.max_pos, where) : c.rope_full;
    }
    check_rope_finite(c, where);
}

}  // namespace

ModelConfig parse_config(const std::string& text, const std::string& where) {
    const json j = parse_object(text, where);
    const Reader rd{j, where};
    ModelConfig c;
    parse_family(j, c, where);
    parse_shape(j, rd, c, where);
    parse_layer_types(j, rd, c, where);
    parse_rope_keys(j, rd, c, where);
    return c;
}

ModelConfig load_config(const std::string& dir) {
    const std::string path = dir + "/config.json";
    ModelConfig c = parse_config(read_file(path), path);
    const std::string gen = dir + "/generation_config.json";
    if (file_exists(gen)) {
        const json g = parse_object(read_file(gen), gen);
        if (g.contains("eos_token_id") && !g["eos_token_id"].is_null()) c.eos_ids = parse_ids(g["eos_token_id"], gen);
        c.generation = parse_generation_defaults(g, gen);
    }
    return c;
}

}  // namespace olmo
