// weights.cpp: see weights.h.
#include "weights.h"

#include <algorithm>
#include <cmath>

#include "common.h"
#include "fp8_checkpoint.h"

namespace olmo {

ParamShape param_shape(const ModelConfig& c, Param p) {
    const int64_t H = c.hidden, I = c.intermediate, Q = c.q_dim(), KV = c.kv_dim(), V = c.vocab;
    switch (p) {
        case Param::Embed: case Param::LmHead: return {V, H};
        case Param::Wqkv: return {Q + 2 * KV, H};
        case Param::Wo: return {H, Q};
        case Param::QNorm: return {Q, 1};
        case Param::KNorm: return {KV, 1};
        case Param::AttnNorm: case Param::FfNorm: case Param::FinalNorm: return {H, 1};
        case Param::Wgu: return {2 * I, H};
        case Param::Wdown: return {H, I};
    }
    return {0, 0};
}

bool is_linear(Param p) {
    return p == Param::Wqkv || p == Param::Wo || p == Param::Wgu || p == Param::Wdown || p == Param::LmHead;
}

int64_t WeightSlot::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

int64_t WeightSlot::offset() const { return row_offset * (shape.size() == 2 ? shape[1] : 1); }

std::vector<WeightSlot> weight_table(const ModelConfig& c, bool own_lm_head) {
    const int64_t H = c.hidden, I = c.intermediate, Q = c.q_dim(), KV = c.kv_dim();
    std::vector<WeightSlot> t = {{"model.embed_tokens.weight", {c.vocab, H}, Param::Embed, -1, 0}};
    const bool olmo2 = c.family != Family::Olmo1;   // OLMo-2/3: QK-norm and post-norms
    for (int i = 0; i < c.n_layers; i++) {
        const std::string l = "model.layers." + std::to_string(i) + ".";
        auto add = [&](const char* name, std::vector<int64_t> shape, Param p, int64_t row) {
            t.push_back({l + name, std::move(shape), p, i, row});
        };
        add("self_attn.q_proj.weight", {Q, H}, Param::Wqkv, 0);
        add("self_attn.k_proj.weight", {KV, H}, Param::Wqkv, Q);
        add("self_attn.v_proj.weight", {KV, H}, Param::Wqkv, Q + KV);
        add("self_attn.o_proj.weight", {H, Q}, Param::Wo, 0);
        if (olmo2) {
            add("self_attn.q_norm.weight", {Q}, Param::QNorm, 0);
            add("self_attn.k_norm.weight", {KV}, Param::KNorm, 0);
            add("post_attention_layernorm.weight", {H}, Param::AttnNorm, 0);
            add("post_feedforward_layernorm.weight", {H}, Param::FfNorm, 0);
        }
        add("mlp.gate_proj.weight", {I, H}, Param::Wgu, 0);
        add("mlp.up_proj.weight", {I, H}, Param::Wgu, I);
        add("mlp.down_proj.weight", {H, I}, Param::Wdown, 0);
    }
    if (olmo2) t.push_back({"model.norm.weight", {H}, Param::FinalNorm, -1, 0});
    if (own_lm_head) t.push_back({"lm_head.weight", {c.vocab, H}, Param::LmHead, -1, 0});
    return t;
}

std::vector<WeightSlot> weight_table(const ModelConfig& c, const Checkpoint* ck) {
    const char *embed = "model.embed_tokens.weight", *head = "lm_head.weight";
    if (!ck || !c.tie_embeddings) return weight_table(c, !c.tie_embeddings);
    if (ck->has(embed)) return weight_table(c, ck->has(head));
    std::vector<WeightSlot> t = weight_table(c, false);
    if (ck->has(head)) t[0].name = head;   // tied, only lm_head stored: it is the embedding too
    return t;
}

bool has_lm_head(const std::vector<WeightSlot>& table) {
    return std::any_of(table.begin(), table.end(), [](const WeightSlot& s) { return s.param == Param::LmHead; });
}

std::vector<const TensorView*> checkpoint_views(const Checkpoint& ck, const std::vector<WeightSlot>& table) {
    std::vector<const TensorView*> views;
    for (const WeightSlot& s : table) {
        if (s.param == Param::LmHead && !ck.has(s.name))
            fail(ck.dir() + ": missing tensor \"lm_head.weight\" (and tie_word_embeddings is false)");
        const TensorView& t = ck.get(s.name, s.shape);
        if (t.dtype == DType::F8_E4M3) fp8_scale_tensor(ck, s, t);   // its layout, checked
        views.push_back(&t);
    }
    return views;
}

// ---- progress ----

LoadProgress::LoadProgress(Report report, double interval_s) : report_(std::move(report)), interval_s_(interval_s) {}

void LoadProgress::start(size_t total_bytes) {
    total_ = total_bytes;
    done_ = 0;
    t0_ = Clock::now();
    last_report_ = 0;
    final_s_ = -1;
}

double LoadProgress::seconds() const {
    return final_s_ >= 0 ? final_s_ : std::chrono::duration<double>(Clock::now() - t0_).count();
}

void LoadProgress::add(size_t bytes) {
    const size_t done = done_ += bytes;
    if (!report_) return;
    const double s = seconds();
    if (s - last_report_ < interval_s_ || !mu_.try_lock()) return;   // another thread is reporting
    if (s - last_report_ >= interval_s_) {
        last_report_ = s;
        report_(done, total_, s, false);
    }
    mu_.unlock();
}

void LoadProgress::finish() {
    std::lock_guard<std::mutex> lock(mu_);
    final_s_ = std::chrono::duration<double>(Clock::now() - t0_).count();
    if (report_) report_(done_, total_, final_s_, true);
}

// ---- the CPU loader ----

namespace {

// Index of the first NaN or Inf among p[0, n), or -1.
int64_t first_non_finite(const float* p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!std::isfinite(p[i])) return i;
    return -1;
}

}  // namespace

std::string non_finite_weight_message(const WeightSlot& slot, const std::string& file, int64_t element, float value) {
    return file + ": tensor \"" + slot.name + "\" holds a non-finite value (" + (std::isnan(value) ? "NaN" : "Inf") +
           " at element " + std::to_string(element) + "); the checkpoint is corrupt";
}

void load_f32(const Checkpoint& ck, const std::vector<WeightSlot>& table, const std::vector<float*>& dst,
              LoadProgress* progress) {
    const std::vector<const TensorView*> views = checkpoint_views(ck, table);
    std::vector<std::vector<float>> scales(views.size());   // FP8 weights: the scale of each row
    for (size_t i = 0; i < views.size(); i++)
        if (views[i]->dtype == DType::F8_E4M3) scales[i] = fp8_row_scales(ck, table[i]);
    // Chunks of at most 1M elements, so big and small tensors spread evenly over the cores.
    struct Chunk {
        size_t slot;
        int64_t begin, n;
    };
    constexpr int64_t kChunk = 1 << 20;
    std::vector<Chunk> chunks;
    size_t total = 0;
    for (size_t i = 0; i < views.size(); i++) {
        for (int64_t b = 0; b < views[i]->numel(); b += kChunk) chunks.push_back({i, b, std::min(kChunk, views[i]->numel() - b)});
        total += views[i]->nbytes();
    }
    if (progress) progress->start(total);
    // Nothing in the loop throws: checkpoint_views() has checked every dtype, and the FP8 scales
    // are read. Each chunk is scanned for NaN/Inf right after its conversion, while it is still in
    // cache (a few percent of the load); bad[k] is the first such element of chunk k, or -1.
    std::vector<int64_t> bad(chunks.size(), -1);
#pragma omp parallel for schedule(dynamic)
    for (size_t k = 0; k < chunks.size(); k++) {
        const Chunk& c = chunks[k];
        const TensorView& v = *views[c.slot];
        to_f32(v, c.begin, c.n, dst[c.slot] + c.begin);
        if (!scales[c.slot].empty()) apply_row_scales(dst[c.slot] + c.begin, c.begin, c.n, v.shape[1], scales[c.slot].data());
        bad[k] = first_non_finite(dst[c.slot] + c.begin, c.n);
        if (progress) progress->add(c.n * dtype_size(v.dtype));
    }
    for (size_t k = 0; k < chunks.size(); k++)
        if (bad[k] >= 0) {
            const Chunk& c = chunks[k];
            const int64_t at = c.begin + bad[k];
            fail(non_finite_weight_message(table[c.slot], views[c.slot]->file, at, dst[c.slot][at]));
        }
    if (progress) progress->finish();
}

}  // namespace olmo
