// fp8_checkpoint_util.h: tiny FP8 checkpoints in the compressed-tensors layout
// (src/fp8_checkpoint.h), for test_fp8_checkpoint.cpp and test_fp8_checkpoint_gpu.cu.
//
// write_fp8_pair() draws random weights (rounded to bf16), then writes two folders:
//   fp8:   each linear weight stored as the test asks (F8_E4M3 codes from fp8.h's quantizers
//          with a weight_scale of one of the accepted shapes, or left in F32), the rest F32,
//          and a config.json with a compressed-tensors quantization_config;
//   deq:   the same weights dequantized, scale · code in fp32 (exactly what the loaders
//          compute), all F32, and a config.json without quantization_config.
// So any engine must give the same logits on both folders. With pow2 scales, the largest
// element of every row (per channel) or of the tensor is first set to ±448 · 2^k, so that each
// scale is a power of two, 2^k, and scale · code is exact even in bf16.
#pragma once
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "fp8.h"
#include "test_util.h"

namespace olmo::test {

// How one linear weight [N, K] is stored in the FP8 folder.
enum class Fp8Store {
    Float,              // F32 (the engine quantizes it itself with --dtype fp8)
    Channel,            // codes, weight_scale F32 [N, 1] (fp8.h's per-row quantizer)
    ChannelBf16,        // codes, weight_scale BF16 [N] (the per-row scales rounded to bf16)
    Tensor,             // codes, weight_scale F32 [] (one amax for the tensor)
    TensorRowsAtMax,    // as Tensor, [1], with one element of every row at the tensor's amax
};
using Fp8Choice = std::function<Fp8Store(const WeightSlot&)>;

inline uint16_t bf16_bits(float f) {   // round to nearest even (finite inputs)
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
inline float bf16_round(float f) { return bf16_to_f32(bf16_bits(f)); }

template <typename U> std::string bytes_of(const std::vector<U>& v) {
    return std::string((const char*)v.data(), v.size() * sizeof(U));
}

// w [N, K] as FP8 codes [N, K] and its scales as stored (one per row, or one), per `how`.
struct Fp8Stored {
    std::vector<uint8_t> q;
    std::vector<float> scale;   // N or 1 values, as the checkpoint holds them (bf16 values for ChannelBf16)
    float row_scale(int64_t n) const { return scale.size() == 1 ? scale[0] : scale[n]; }
};
// Sets the element of largest magnitude among x[0, n) to ±448 · 2^k, the power of two at or
// above its magnitude / 448 (its quantization scale becomes 2^k); returns that magnitude.
inline float largest_to_pow2_scale(float* x, int64_t n) {
    int64_t at = 0;
    for (int64_t i = 1; i < n; i++)
        if (std::fabs(x[i]) > std::fabs(x[at])) at = i;
    const float m = kFp8Max * std::exp2(std::ceil(std::log2(std::fabs(x[at]) / kFp8Max)));
    x[at] = std::copysign(m, x[at]);
    return m;
}

inline Fp8Stored quantize_for_checkpoint(std::vector<float>& w, int64_t N, int64_t K, Fp8Store how, bool pow2) {
    Fp8Stored st;
    st.q.resize(N * K);
    if (how == Fp8Store::Channel || how == Fp8Store::ChannelBf16) {
        st.scale.resize(N);
        for (int64_t n = 0; n < N; n++) {
            if (pow2) largest_to_pow2_scale(&w[n * K], K);
            quantize_row_fp8(&st.q[n * K], &st.scale[n], &w[n * K], (int)K, (int)K);
        }
        if (how == Fp8Store::ChannelBf16)
            for (float& s : st.scale) s = bf16_round(s);
        return st;
    }
    float amax = 0;
    for (float x : w) amax = std::max(amax, std::fabs(x));
    if (pow2) amax = largest_to_pow2_scale(w.data(), N * K);
    if (how == Fp8Store::TensorRowsAtMax)
        for (int64_t n = 0; n < N; n++) w[n * K + n % K] = n % 2 ? -amax : amax;
    const float inv = fp8_row_inverse_scale(amax);
    for (int64_t i = 0; i < N * K; i++) st.q[i] = e4m3_from_float(w[i] * inv);
    st.scale = {fp8_row_scale(amax)};
    return st;
}

// The quantization_config of a compressed-tensors FP8-Dynamic checkpoint.
inline json compressed_tensors_config(const std::string& strategy = "channel") {
    return {{"quant_method", "compressed-tensors"}, {"format", "float-quantized"}, {"quantization_status", "compressed"},
            {"ignore", {"lm_head"}},
            {"config_groups",
             {{"group_0",
               {{"targets", {"Linear"}},
                {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", strategy}, {"symmetric", true}, {"dynamic", false}}},
                {"input_activations",
                 {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"symmetric", true}, {"dynamic", true}}}}}}}};
}

// Writes the two folders (see the file comment); `edit` may change the FP8 folder's tensors
// last (to break them on purpose).
inline void write_fp8_pair(const std::string& fp8_dir, const std::string& deq_dir, const json& cfg_json,
                           const Fp8Choice& choose, unsigned seed = 1,
                           const std::function<void(std::vector<RawTensor>&)>& edit = nullptr, bool pow2 = false) {
    json fp8_cfg = cfg_json;
    fp8_cfg["quantization_config"] = compressed_tensors_config();
    write(fp8_dir + "/config.json", fp8_cfg.dump());
    write(deq_dir + "/config.json", cfg_json.dump());
    const ModelConfig c = parse_config(cfg_json.dump(), "config.json");
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    std::vector<RawTensor> fp8, deq;
    for (const WeightSlot& s : weight_table(c, !c.tie_embeddings)) {
        std::vector<float> w(s.numel());
        for (float& x : w) x = bf16_round(s.shape.size() == 1 ? 1.0f + normal(rng) : normal(rng));
        const Fp8Store how = is_linear(s.param) ? choose(s) : Fp8Store::Float;
        if (how == Fp8Store::Float) {
            fp8.push_back({s.name, s.shape, "F32", bytes_of(w)});
            deq.push_back(fp8.back());
            continue;
        }
        const int64_t N = s.shape[0], K = s.shape[1];
        const Fp8Stored st = quantize_for_checkpoint(w, N, K, how, pow2);
        for (int64_t i = 0; i < N * K; i++) w[i] = st.row_scale(i / K) * e4m3_to_float(st.q[i]);
        fp8.push_back({s.name, s.shape, "F8_E4M3", bytes_of(st.q)});
        deq.push_back({s.name, s.shape, "F32", bytes_of(w)});
        const std::string scale = s.name + "_scale";
        switch (how) {
            case Fp8Store::Channel: fp8.push_back({scale, {N, 1}, "F32", bytes_of(st.scale)}); break;
            case Fp8Store::ChannelBf16: {
                std::vector<uint16_t> b;
                for (float x : st.scale) b.push_back(bf16_bits(x));
                fp8.push_back({scale, {N}, "BF16", bytes_of(b)});
                break;
            }
            case Fp8Store::Tensor: fp8.push_back({scale, {}, "F32", bytes_of(st.scale)}); break;
            default: fp8.push_back({scale, {1}, "F32", bytes_of(st.scale)}); break;
        }
    }
    if (edit) edit(fp8);
    write_tensors(fp8_dir, fp8);
    write_tensors(deq_dir, deq);
}

// A shape the GPU engine runs (head size 64) whose widths need the FP8 padding: K = 200 for
// down_proj (ld 256), a vocabulary of 1007 rows (N16 = 1008).
inline json fp8_test_config() {
    json cfg = tiny_olmo2_config();
    cfg["hidden_size"] = 128, cfg["num_attention_heads"] = 2, cfg["num_key_value_heads"] = 1;
    cfg["intermediate_size"] = 200, cfg["vocab_size"] = 1007, cfg["max_position_embeddings"] = 128;
    return cfg;
}

// Every accepted scale layout somewhere in the model; lm_head left in F32 (the usual recipe).
inline Fp8Store mixed_layouts(const WeightSlot& s) {
    if (s.param == Param::LmHead) return Fp8Store::Float;
    if (s.param == Param::Wgu) return Fp8Store::ChannelBf16;
    if (s.layer == 1 && s.param == Param::Wo) return Fp8Store::TensorRowsAtMax;
    return Fp8Store::Channel;
}

// Every layout that loads: as mixed_layouts, plus lm_head in FP8 (1007 rows: padded to 1008), a
// generic per-tensor scale (layer 0's down_proj), and a fused matrix half in FP8, half in F32
// (layer 1's q in FP8, k and v in F32).
inline Fp8Store every_layout(const WeightSlot& s) {
    if (s.param == Param::LmHead) return Fp8Store::Channel;
    if (s.layer == 0 && s.param == Param::Wdown) return Fp8Store::Tensor;
    if (s.layer == 1 && s.row_offset > 0 && s.param == Param::Wqkv) return Fp8Store::Float;
    return mixed_layouts(s);
}
// every_layout without the generic per-tensor scale: requantizing its dequantized weights
// gives back the same codes, and with pow2 scales the same scales (test_fp8_checkpoint_gpu.cu
// says why).
inline Fp8Store requantizable_layouts(const WeightSlot& s) {
    const Fp8Store how = every_layout(s);
    return how == Fp8Store::Tensor ? Fp8Store::TensorRowsAtMax : how;
}

// A prompt of n ids of a vocabulary of V.
inline std::vector<int> fp8_test_prompt(int n, int V) {
    std::vector<int> p(n);
    for (int i = 0; i < n; i++) p[i] = (i * 37 + 11) % V;
    return p;
}

}  // namespace olmo::test
