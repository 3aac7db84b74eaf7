// config.h: everything the forward pass needs from a checkpoint's config.json (and
// generation_config.json), read from either generation of transformers' keys:
//   4.x: rope_theta, rope_scaling {rope_type|type: "yarn", ...}
//   5.x: rope_parameters {rope_theta, rope_type, ...}, keyed by layer type for OLMo-3
#pragma once
#include <string>
#include <vector>

namespace olmo {

enum class Family { Olmo1, Olmo2, Olmo3 };

struct RopeConfig {
    float theta = 10000.0f;
    bool yarn = false;                  // YaRN scaling (OLMo-3 full-attention layers)
    float factor = 1.0f;
    int original_max_pos = 0;
    float beta_fast = 32.0f, beta_slow = 1.0f;
    float attention_factor = 1.0f;      // multiplies cos and sin
    // inv_freq[d] for d < head_dim/2, in fp32 as transformers computes it (YaRN blended).
    std::vector<float> inv_freq(int head_dim) const;
};

// generation_config.json's sampling defaults; where it is silent, transformers' GenerationConfig
// defaults (greedy; temperature 1, top-k 50, top-p 1 when sampling). Flags override them.
struct GenerationDefaults {
    bool do_sample = false;
    float temperature = 1.0f, top_p = 1.0f;
    int top_k = 50;
    int max_new_tokens = 0;             // 0: not given (./generate then uses 128)
};

struct ModelConfig {
    std::string model_type;             // "olmo", "olmo2", "olmo3"
    Family family = Family::Olmo2;
    int hidden = 0, intermediate = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
    int vocab = 0, max_pos = 0;
    float norm_eps = 1e-6f;             // OLMo-1: fixed 1e-5 (LayerNorm); OLMo-2/3: rms_norm_eps
    float clip_qkv = 0.0f;              // 0 = off (OLMo-1 only)
    bool tie_embeddings = false;
    int sliding_window = 0;             // 0 = none
    std::vector<bool> layer_sliding;    // per layer: true = sliding-window attention
    RopeConfig rope_full, rope_sliding; // rope of full-attention and sliding layers
    std::vector<int> eos_ids;           // stop on any of these
    GenerationDefaults generation;      // generation_config.json

    int q_dim() const { return n_heads * head_dim; }
    int kv_dim() const { return n_kv_heads * head_dim; }
    int window(int layer) const { return layer_sliding[layer] ? sliding_window : 0; }
    const RopeConfig& rope(int layer) const { return layer_sliding[layer] ? rope_sliding : rope_full; }
};

// Reads DIR/config.json (+ DIR/generation_config.json when present). Throws olmo::Error.
ModelConfig load_config(const std::string& dir);
// Parses config.json text; `where` names the file in errors.
ModelConfig parse_config(const std::string& json_text, const std::string& where);

}  // namespace olmo
