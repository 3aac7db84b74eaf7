// fp8_checkpoint.cpp: see fp8_checkpoint.h.
#include "fp8_checkpoint.h"

#include <cmath>

#include "common.h"
#include "fp8.h"

namespace olmo {

using json = nlohmann::json;

namespace {

bool per_channel(const std::vector<int64_t>& shape, int64_t N) {
    return shape == std::vector<int64_t>{N, 1} || shape == std::vector<int64_t>{N};
}
bool per_tensor(const std::vector<int64_t>& shape) { return shape.empty() || shape == std::vector<int64_t>{1}; }

}  // namespace

bool has_fp8_weights(const Checkpoint& ck, const std::vector<WeightSlot>& table) {
    for (const TensorView* v : checkpoint_views(ck, table))
        if (v->dtype == DType::F8_E4M3) return true;
    return false;
}

const TensorView& fp8_scale_tensor(const Checkpoint& ck, const WeightSlot& s, const TensorView& t) {
    const std::string where = t.file + ": tensor \"" + s.name + "\"";
    if (!is_linear(s.param))
        fail(where + " is F8_E4M3, but only the linear layers' weights may be FP8 (the embedding and the norms "
                     "must be F32, F16 or BF16)");
    if (ck.has(s.name + "_scale_inv"))
        fail(where + ": block-scaled FP8 (\"" + s.name + "_scale_inv\", one scale per 128x128 block, as in " +
             "DeepSeek-V3 and Qwen3 FP8) is not supported; " + kFp8CheckpointLayouts);
    const std::string name = s.name + "_scale";
    const TensorView* scale = ck.find(name);
    if (!scale) fail(where + " is F8_E4M3 but the checkpoint has no \"" + name + "\"; " + kFp8CheckpointLayouts);
    const int64_t N = s.shape[0];
    if (!per_channel(scale->shape, N) && !per_tensor(scale->shape))
        fail(scale->file + ": tensor \"" + name + "\" has shape " + scale->shape_str() + " for a weight of shape " +
             t.shape_str() + ": per-group or per-block scales are not supported; " + kFp8CheckpointLayouts);
    if (scale->dtype != DType::F32 && scale->dtype != DType::BF16 && scale->dtype != DType::F16)
        fail(scale->file + ": tensor \"" + name + "\" has dtype " + dtype_name(scale->dtype) +
             ", expected F32, BF16 or F16");
    return *scale;
}

std::vector<float> fp8_row_scales(const Checkpoint& ck, const WeightSlot& s) {
    const TensorView* t = ck.find(s.name);
    if (!t) fail(ck.dir() + ": missing tensor \"" + s.name + "\" in the checkpoint");
    const TensorView& scale = fp8_scale_tensor(ck, s, *t);
    std::vector<float> v = to_f32(scale);
    for (size_t i = 0; i < v.size(); i++)
        if (!std::isfinite(v[i])) {
            WeightSlot named = s;
            named.name = scale.name;
            fail(non_finite_weight_message(named, scale.file, (int64_t)i, v[i]));
        }
    if (v.size() == 1) v.assign(s.shape[0], v[0]);   // per tensor: every row
    return v;
}

void apply_row_scales(float* out, int64_t begin, int64_t n, int64_t cols, const float* row_scale) {
    int64_t row = begin / cols, row_end = (row + 1) * cols;
    for (int64_t i = begin; i < begin + n; i++) {
        if (i == row_end) row++, row_end += cols;
        out[i - begin] *= row_scale[row];
    }
}

}  // namespace olmo
