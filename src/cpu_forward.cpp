// cpu_forward.cpp: the fp32 CPU reference forward pass of OLMo-1/2/3, in one file.
//
// Reads top to bottom like the math of olmo-architecture.md, one call per op (ops in
// cpu_ops.cpp). The GPU engine (gpu_forward.cu) runs the same list of ops with the same
// buffer names, so the two can be compared tensor by tensor:
//   x = embed(ids)
//   per layer:  OLMo-1  xn = LN(x)          OLMo-2/3  xn = x
//               qkv = xn · Wqkvᵀ    (q | k | v side by side)
//               OLMo-1: clip(qkv)         OLMo-2/3: q = RMSNorm_q(q), k = RMSNorm_k(k) (full width)
//               q, k = RoPE(q, k); k, v -> KV cache at positions pos0..pos0+T-1
//               att = attention(q, cache)   (causal, sliding window on sliding layers, GQA)
//               o = att · Woᵀ
//               OLMo-1: x = x + o           OLMo-2/3: x = x + RMSNorm_pa(o)
//               OLMo-1: xn = LN(x)          OLMo-2/3: xn = x
//               m = (silu(xn·Wgᵀ) * xn·Wuᵀ) · Wdᵀ
//               OLMo-1: x = x + m           OLMo-2/3: x = x + RMSNorm_pf(m)
//   logits = final_norm(x) · W_lmᵀ          (only the positions asked for)
#include <cmath>
#include <cstring>

#include "common.h"
#include "cpu_ops.h"
#include "engine.h"

namespace olmo {

namespace {

struct CpuLayer {
    std::vector<float> wqkv;             // [(nH+2nKV)*hd, H]  q | k | v rows stacked
    std::vector<float> wo;               // [H, nH*hd]
    std::vector<float> q_norm, k_norm;   // [nH*hd], [nKV*hd]          (OLMo-2/3)
    std::vector<float> post_attn_norm, post_ff_norm;  // [H]          (OLMo-2/3)
    std::vector<float> wgu;              // [2I, H]  gate | up rows stacked
    std::vector<float> wdown;            // [H, I]
    std::vector<float> k_cache, v_cache; // [max_seq, nKV*hd]
    std::vector<float> inv_freq;         // [hd/2]
    float rope_scale = 1.0f;             // YaRN attention factor
    int window = 0;
};

// Concatenates checkpoint tensors along rows (the fused q|k|v and gate|up weights).
std::vector<float> stack(const Checkpoint& ck, const std::vector<ParamSpec>& parts) {
    std::vector<float> out;
    for (const auto& p : parts) {
        std::vector<float> t = to_f32(ck.get(p.name, p.shape));
        out.insert(out.end(), t.begin(), t.end());
    }
    return out;
}

class CpuEngine : public Engine {
public:
    CpuEngine(const ModelConfig& c, const Checkpoint& ck, int max_seq) : c_(c) {
        max_seq_ = max_seq;
        const int64_t H = c.hidden, I = c.intermediate, Q = c.q_dim(), KV = c.kv_dim();
        embed_ = to_f32(ck.get("model.embed_tokens.weight", {c.vocab, H}));
        if (ck.has("lm_head.weight")) lm_head_ = to_f32(ck.get("lm_head.weight", {c.vocab, H}));
        else if (!c.tie_embeddings) fail(ck.dir() + ": missing tensor \"lm_head.weight\" (and tie_word_embeddings is false)");
        const bool olmo2 = c.family != Family::Olmo1;
        if (olmo2) final_norm_ = to_f32(ck.get("model.norm.weight", {H}));
        layers_.resize(c.n_layers);
        for (int i = 0; i < c.n_layers; i++) {
            const std::string p = "model.layers." + std::to_string(i) + ".";
            CpuLayer& L = layers_[i];
            L.wqkv = stack(ck, {{p + "self_attn.q_proj.weight", {Q, H}},
                                {p + "self_attn.k_proj.weight", {KV, H}},
                                {p + "self_attn.v_proj.weight", {KV, H}}});
            L.wo = to_f32(ck.get(p + "self_attn.o_proj.weight", {H, Q}));
            if (olmo2) {
                L.q_norm = to_f32(ck.get(p + "self_attn.q_norm.weight", {Q}));
                L.k_norm = to_f32(ck.get(p + "self_attn.k_norm.weight", {KV}));
                L.post_attn_norm = to_f32(ck.get(p + "post_attention_layernorm.weight", {H}));
                L.post_ff_norm = to_f32(ck.get(p + "post_feedforward_layernorm.weight", {H}));
            }
            L.wgu = stack(ck, {{p + "mlp.gate_proj.weight", {I, H}}, {p + "mlp.up_proj.weight", {I, H}}});
            L.wdown = to_f32(ck.get(p + "mlp.down_proj.weight", {H, I}));
            L.k_cache.assign((size_t)max_seq * KV, 0.0f);
            L.v_cache.assign((size_t)max_seq * KV, 0.0f);
            L.inv_freq = c.rope(i).inv_freq(c.head_dim);
            L.rope_scale = c.rope(i).attention_factor;
            L.window = c.window(i);
        }
    }

    const ModelConfig& config() const override { return c_; }

    size_t memory_bytes() const override {
        size_t n = embed_.size() + lm_head_.size() + final_norm_.size();
        for (const auto& L : layers_)
            n += L.wqkv.size() + L.wo.size() + L.q_norm.size() + L.k_norm.size() + L.post_attn_norm.size() +
                 L.post_ff_norm.size() + L.wgu.size() + L.wdown.size() + L.k_cache.size() + L.v_cache.size();
        return n * sizeof(float);
    }

    std::vector<float> forward(const std::vector<int>& ids) override {
        check_room(ids.size());
        for (int id : ids)
            if (id < 0 || id >= c_.vocab)
                fail("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(c_.vocab) + ")");
        const int T = ids.size(), H = c_.hidden, I = c_.intermediate, hd = c_.head_dim;
        const int nH = c_.n_heads, nKV = c_.n_kv_heads, Q = c_.q_dim(), KV = c_.kv_dim(), QKV = Q + 2 * KV;
        const int pos0 = n_past_;
        const bool olmo1 = c_.family == Family::Olmo1;
        const float eps = c_.norm_eps;

        std::vector<float> x((size_t)T * H);          // residual stream     [T, H]
        std::vector<float> xn((size_t)T * H);         // normed input        [T, H]   (OLMo-1)
        std::vector<float> qkv((size_t)T * QKV);      // fused projection    [T, Q+2KV]
        std::vector<float> q((size_t)T * Q);          // queries             [T, nH*hd]
        std::vector<float> att((size_t)T * Q);        // attention output    [T, nH*hd]
        std::vector<float> o((size_t)T * H);          // o_proj / MLP output [T, H]
        std::vector<float> gu((size_t)T * 2 * I);     // gate | up           [T, 2I]
        std::vector<float> a((size_t)T * I);          // swiglu              [T, I]

        cpu::embedding(x.data(), embed_.data(), ids.data(), T, H);
        emit("embed", x.data(), T, H);
        for (int l = 0; l < c_.n_layers; l++) {
            CpuLayer& L = layers_[l];
            const std::string n = "layers." + std::to_string(l) + ".";
            float* kc = L.k_cache.data() + (size_t)pos0 * KV;   // this chunk's cache rows
            float* vc = L.v_cache.data() + (size_t)pos0 * KV;

            // --- attention half ---
            if (olmo1) cpu::layernorm(xn.data(), x.data(), T, H, eps);
            cpu::matmul(qkv.data(), olmo1 ? xn.data() : x.data(), L.wqkv.data(), T, H, QKV);
            split_qkv(qkv.data(), q.data(), kc, vc, T, Q, KV);
            if (olmo1 && c_.clip_qkv > 0) {
                cpu::clip(q.data(), (int64_t)T * Q, c_.clip_qkv);
                cpu::clip(kc, (int64_t)T * KV, c_.clip_qkv);
                cpu::clip(vc, (int64_t)T * KV, c_.clip_qkv);
            }
            if (!olmo1) {
                cpu::rmsnorm(q.data(), q.data(), L.q_norm.data(), T, Q, eps);
                cpu::rmsnorm(kc, kc, L.k_norm.data(), T, KV, eps);
            }
            emit(n + "q", q.data(), T, Q);
            emit(n + "k", kc, T, KV);
            emit(n + "v", vc, T, KV);
            cpu::rope(q.data(), T, nH, hd, pos0, L.inv_freq.data(), L.rope_scale);
            cpu::rope(kc, T, nKV, hd, pos0, L.inv_freq.data(), L.rope_scale);
            emit(n + "q_rope", q.data(), T, Q);
            emit(n + "k_rope", kc, T, KV);
            cpu::attention(att.data(), q.data(), L.k_cache.data(), L.v_cache.data(), T, pos0, nH, nKV, hd,
                           L.window, 1.0f / std::sqrt((float)hd));
            emit(n + "attn", att.data(), T, Q);
            cpu::matmul(o.data(), att.data(), L.wo.data(), T, Q, H);
            emit(n + "o_proj", o.data(), T, H);
            if (!olmo1) cpu::rmsnorm(o.data(), o.data(), L.post_attn_norm.data(), T, H, eps);
            add(x.data(), o.data(), (size_t)T * H);
            emit(n + "resid_attn", x.data(), T, H);

            // --- MLP half ---
            if (olmo1) cpu::layernorm(xn.data(), x.data(), T, H, eps);
            cpu::matmul(gu.data(), olmo1 ? xn.data() : x.data(), L.wgu.data(), T, H, 2 * I);
            cpu::swiglu(a.data(), gu.data(), T, I);
            cpu::matmul(o.data(), a.data(), L.wdown.data(), T, I, H);
            emit(n + "mlp", o.data(), T, H);
            if (!olmo1) cpu::rmsnorm(o.data(), o.data(), L.post_ff_norm.data(), T, H, eps);
            add(x.data(), o.data(), (size_t)T * H);
            emit(n + "out", x.data(), T, H);
        }
        n_past_ += T;

        // Final norm and logits. With a hook (golden tests) every position, else the last only.
        const int rows = hook ? T : 1;
        const float* xl = x.data() + (size_t)(T - rows) * H;
        if (olmo1) cpu::layernorm(xn.data(), xl, rows, H, eps);
        else cpu::rmsnorm(xn.data(), xl, final_norm_.data(), rows, H, eps);
        emit("final_norm", xn.data(), rows, H);
        std::vector<float> logits((size_t)rows * c_.vocab);
        cpu::matmul(logits.data(), xn.data(), lm_head_.empty() ? embed_.data() : lm_head_.data(), rows, H, c_.vocab);
        emit("logits", logits.data(), rows, c_.vocab);
        return std::vector<float>(logits.end() - c_.vocab, logits.end());
    }

    int forward_sample(const std::vector<int>& ids, const SamplingParams& s, uint64_t step) override {
        std::vector<float> logits = forward(ids);
        return sample_cpu(logits.data(), c_.vocab, s, step);
    }

private:
    // qkv [T, Q+2KV] -> q [T, Q], k and v straight into the cache rows of this chunk.
    static void split_qkv(const float* qkv, float* q, float* k, float* v, int T, int Q, int KV) {
        for (int t = 0; t < T; t++) {
            const float* r = qkv + (size_t)t * (Q + 2 * KV);
            std::memcpy(q + (size_t)t * Q, r, Q * sizeof(float));
            std::memcpy(k + (size_t)t * KV, r + Q, KV * sizeof(float));
            std::memcpy(v + (size_t)t * KV, r + Q + KV, KV * sizeof(float));
        }
    }
    static void add(float* x, const float* y, size_t n) {
        for (size_t i = 0; i < n; i++) x[i] += y[i];
    }
    void emit(const std::string& name, const float* data, int rows, int cols) {
        if (hook) hook(name, data, rows, cols);
    }

    ModelConfig c_;
    std::vector<float> embed_, lm_head_, final_norm_;
    std::vector<CpuLayer> layers_;
};

}  // namespace

void Engine::check_room(size_t n) const {
    if (n == 0) fail("nothing to run: the token list is empty");
    if (n_past_ + n > (size_t)max_seq_)
        fail("sequence of " + std::to_string(n_past_ + n) + " tokens does not fit the context of " +
             std::to_string(max_seq_) + " tokens (raise --max-seq-len, up to max_position_embeddings)");
}

std::unique_ptr<Engine> make_cpu_engine(const ModelConfig& c, const Checkpoint& ckpt, int max_seq) {
    return std::make_unique<CpuEngine>(c, ckpt, max_seq);
}

}  // namespace olmo
