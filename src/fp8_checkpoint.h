// fp8_checkpoint.h: FP8 checkpoints as published on the Hugging Face hub.
//
// The layout that loads is the one of compressed-tensors "float-quantized" checkpoints
// (llm-compressor's FP8 and FP8-Dynamic schemes) and of fbgemm_fp8: a linear layer's weight
// X.weight [N, K] stored as F8_E4M3 codes, with beside it
//     X.weight_scale   F32, BF16 or F16 of shape [N, 1] or [N]   one scale per output channel
//                                          or of shape [] or [1]   one scale for the tensor
//     W[n, k] = weight_scale[n] · E4M3(X.weight[n, k])
// which is the engine's own FP8 form (fp8.h): the GPU engine in fp8 runs these codes and scales
// as stored (a per-tensor scale repeated on every row), without requantizing; every other
// engine and dtype dequantizes them at load (scale · code, rounded once to fp32, then to the
// storage type). Linear weights may be FP8 or not one by one (the usual recipe leaves lm_head in
// bf16; the engine quantizes those itself with --dtype fp8).
//
// Anything else is a one-line error naming the tensor and its layout: the block-scaled FP8 of
// DeepSeek-V3 and Qwen3 (X.weight_scale_inv, one scale per 128x128 block), a weight_scale of any
// other shape (per group, per block), an F8_E4M3 weight without a scale, an F8_E4M3 tensor that
// is not a linear layer's weight (embedding, norms), and F8_E5M2 or narrower dtypes (refused
// where the file is read, safetensors.cpp).
//
// Ignored: input_scale tensors (static activation scales of the FP8 "static" scheme) and
// k_scale / v_scale (an FP8 KV cache). How activations are rounded is the engine's choice, not
// the checkpoint's: bf16 in decode, per-token scales computed on the fly in the prefill GEMM,
// both at least as accurate as one calibrated per-tensor scale; the KV cache stays bf16.
//
// config.json's quantization_config is read only to refuse, by name, the methods and schemes
// that cannot load (check_quantization_config in config.cpp, called by parse_config); the tensors decide.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "safetensors.h"
#include "weights.h"

namespace olmo {

// Whether any weight of the table is stored as F8_E4M3 (every slot is checked on the way, as
// checkpoint_views does). ./generate then defaults to --dtype fp8 on the GPU.
bool has_fp8_weights(const Checkpoint& ck, const std::vector<WeightSlot>& table);

// Checks the FP8 layout of slot s, whose checkpoint tensor t is F8_E4M3, and returns its
// weight_scale tensor; any other layout is an error naming the tensor.
const TensorView& fp8_scale_tensor(const Checkpoint& ck, const WeightSlot& s, const TensorView& t);

// The scale of each row of slot s [s.shape[0]] (a per-tensor scale repeated), as fp32; a NaN or
// Inf scale is an error naming the scale tensor.
std::vector<float> fp8_row_scales(const Checkpoint& ck, const WeightSlot& s);

// out[i] *= row_scale[(begin + i) / cols] for i < n: elements [begin, begin + n) of a
// [rows, cols] tensor, converted to fp32 codes, become the weights they stand for.
void apply_row_scales(float* out, int64_t begin, int64_t n, int64_t cols, const float* row_scale);


}  // namespace olmo
