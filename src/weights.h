// weights.h: the one table of a model's parameters, the tie rule, and loading on the host.
//
// weight_table() lists every tensor the forward pass reads, in checkpoint order: its name and
// shape in the checkpoint, and where it lands in an engine: which engine tensor (Param), of
// which layer, at which row. The engines fuse q|k|v into one wqkv [Q+2KV, H] (rows 0, Q, Q+KV)
// and gate|up into one wgu [2I, H] (rows 0, I), so each is one GEMM. Both engines allocate
// their tensors from param_shape() and fill them through this table; the tests write their
// random checkpoints from it.
//
// The output layer (the tie rule, as transformers 5 loads a checkpoint):
//   tie_word_embeddings false                -> lm_head.weight (missing: an error)
//   true, the checkpoint has no lm_head      -> the embedding matrix is the output layer
//   true, the checkpoint has both            -> lm_head.weight: transformers 5 does not tie
//                                               tensors that are both present (it warns
//                                               "both are present in the checkpoints")
//   true, only lm_head.weight                -> it is the embedding too (transformers swaps
//                                               source and target of the tie)
// Without a checkpoint (random weights) the config decides alone.
//
// load_f32() fills the CPU engine: every core converts chunks straight from the file mapping
// into the engine's fused fp32 tensors. The GPU loader is gpu_loader.h.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "config.h"
#include "safetensors.h"

namespace olmo {

// The engine tensors. Per layer: Wqkv .. Wdown; once: Embed, FinalNorm, LmHead.
enum class Param { Embed, Wqkv, Wo, QNorm, KNorm, AttnNorm, FfNorm, Wgu, Wdown, FinalNorm, LmHead };

// Rows and columns of an engine tensor (vectors: cols = 1); fused tensors hold all their parts.
struct ParamShape {
    int64_t rows, cols;
    int64_t numel() const { return rows * cols; }
};
ParamShape param_shape(const ModelConfig& c, Param p);
// Whether p is a linear layer's weight (Wqkv, Wo, Wgu, Wdown, LmHead): the tensors FP8 applies to.
bool is_linear(Param p);

// One checkpoint tensor and its place in an engine tensor.
struct WeightSlot {
    std::string name;              // checkpoint name, e.g. "model.layers.3.self_attn.k_proj.weight"
    std::vector<int64_t> shape;    // as the checkpoint must hold it
    Param param;                   // the engine tensor it lands in
    int layer;                     // -1 for Embed, FinalNorm, LmHead
    int64_t row_offset;            // first row inside a fused tensor (0 when not fused)
    int64_t numel() const;
    int64_t offset() const;        // first element inside the engine tensor: row_offset * cols
};

// Every tensor of the model; own_lm_head: whether the output layer is its own lm_head.weight
// (else the embedding is reused and lm_head is not listed).
std::vector<WeightSlot> weight_table(const ModelConfig& c, bool own_lm_head);
// The table for a checkpoint, the tie rule applied to what it holds (ck null: random weights).
std::vector<WeightSlot> weight_table(const ModelConfig& c, const Checkpoint* ck);
bool has_lm_head(const std::vector<WeightSlot>& table);

// The checkpoint's view of every slot, checked (present, shape, float dtype; an F8_E4M3 weight's
// scale layout, fp8_checkpoint.h) before any copy.
std::vector<const TensorView*> checkpoint_views(const Checkpoint& ck, const std::vector<WeightSlot>& table);

// Counts the bytes of a load from any thread, and calls `report` while it runs (at most every
// interval_s seconds) and once more at the end (last = true), never from two threads at once.
// The counts stay readable afterwards: --stats takes the load's bytes from here.
class LoadProgress {
public:
    using Report = std::function<void(size_t done, size_t total, double seconds, bool last)>;
    explicit LoadProgress(Report report = {}, double interval_s = 0.2);
    void start(size_t total_bytes);   // the loader, before the first byte
    void add(size_t bytes);           // any thread, as bytes are read
    void finish();                    // the loader, once every byte is in place
    size_t done() const { return done_; }
    size_t total() const { return total_; }
    double seconds() const;           // since start(); frozen by finish()

private:
    using Clock = std::chrono::steady_clock;
    Report report_;
    double interval_s_;
    std::atomic<size_t> done_{0};
    size_t total_ = 0;
    Clock::time_point t0_;
    std::atomic<double> last_report_{0};   // seconds() of the last report
    double final_s_ = -1;
    std::mutex mu_;
};

// Fills dst[i] (table[i].numel() floats each) with table[i]'s tensor as fp32, in parallel
// chunks (an FP8 weight dequantized: scale · code, fp8_checkpoint.h); progress may be null. A NaN or Inf in any tensor is an error naming it (the GPU
// loader makes the same check on the device).
void load_f32(const Checkpoint& ck, const std::vector<WeightSlot>& table, const std::vector<float*>& dst,
              LoadProgress* progress);
// The error both loaders give for a NaN or Inf: file, tensor, what and where.
std::string non_finite_weight_message(const WeightSlot& slot, const std::string& file, int64_t element, float value);

}  // namespace olmo
