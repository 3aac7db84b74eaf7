// cpu_engine.cpp: the fp32 CPU reference forward pass of OLMo-1/2/3, in one file.
//
// Reads top to bottom like the math of docs/architecture.md, one call per op (ops in
// cpu_ops.cpp). The GPU engine (cuda_engine.cu) runs the same list of ops with the same
// buffer names, so the two can be compared tensor by tensor:
//   x = embed(ids)
//   per layer:  OLMo-1  xn = LN(x)          OLMo-2/3  xn = x
//               qkv = xn · Wqkvᵀ    (q | k | v side by side)
//               OLMo-1: clip(qkv)         OLMo-2/3: q = RMSNorm_q(q), k = RMSNorm_k(k) (full width)
//               q, k = RoPE(q, k); k, v -> the sequence's KV cache rows (paged: kv_cache.h)
//               att = attention(q, cache)   (causal, sliding window on sliding layers, GQA)
//               o = att · Woᵀ
//               OLMo-1: x = x + o           OLMo-2/3: x = x + RMSNorm_pa(o)
//               OLMo-1: xn = LN(x)          OLMo-2/3: xn = x
//               m = (silu(xn·Wgᵀ) * xn·Wuᵀ) · Wdᵀ
//               OLMo-1: x = x + m           OLMo-2/3: x = x + RMSNorm_pf(m)
//   logits = final_norm(x) · W_lmᵀ          (only the positions asked for; scoring: kScoreRows
//                                            rows at a time, each reduced to log p(next token))
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "common.h"
#include "cpu_ops.h"
#include "engine.h"
#include "memory_check.h"

namespace olmo {

namespace {

// An allocator whose resize() leaves floats uninitialized: the loader writes every weight,
// in parallel, so zero-filling them first would be a wasted pass on one core.
template <typename U> struct NoInit {
    using value_type = U;
    NoInit() = default;
    template <typename V> NoInit(const NoInit<V>&) {}
    U* allocate(size_t n) { return std::allocator<U>().allocate(n); }
    void deallocate(U* p, size_t n) { std::allocator<U>().deallocate(p, n); }
    template <typename V> void construct(V* p) { ::new ((void*)p) V; }   // default-init: no zeroing
    bool operator==(const NoInit&) const { return true; }
    bool operator!=(const NoInit&) const { return false; }
};
using Weights = std::vector<float, NoInit<float>>;

struct CpuLayer {
    Weights wqkv;                        // [(nH+2nKV)*hd, H]  q | k | v rows stacked
    Weights wo;                          // [H, nH*hd]
    Weights q_norm, k_norm;              // [nH*hd], [nKV*hd]          (OLMo-2/3)
    Weights post_attn_norm, post_ff_norm;  // [H]                      (OLMo-2/3)
    Weights wgu;                         // [2I, H]  gate | up rows stacked
    Weights wdown;                       // [H, I]
    std::vector<float> k_pool, v_pool;   // [blocks * block_size, nKV*hd]  paged KV cache
    int kind = 0;                        // KvCache::kFull or kSliding
    std::vector<float> inv_freq;         // [hd/2]
    float rope_scale = 1.0f;             // YaRN attention factor
    int window = 0;
};

class CpuEngine : public Engine {
public:
    CpuEngine(const ModelConfig& c, const Checkpoint& ck, int max_seq, int kv_blocks, LoadProgress* progress)
        : c_(c) {
        check_fits_cpu(c, max_seq, kv_blocks);   // before any tensor is read
        init_kv(c, max_seq, kv_blocks);
        layers_.resize(c.n_layers);
        // The weights: each engine tensor the table names is sized once, then filled in place.
        const std::vector<WeightSlot> table = weight_table(c, &ck);
        std::vector<float*> dst;
        for (const WeightSlot& s : table) {
            Weights& w = tensor(s.param, s.layer);
            if (w.empty()) w.resize(param_shape(c, s.param).numel());
            dst.push_back(w.data() + s.offset());
        }
        load_f32(ck, table, dst, progress);
        for (int i = 0; i < c.n_layers; i++) {
            CpuLayer& L = layers_[i];
            L.kind = c.layer_sliding[i] ? KvCache::kSliding : KvCache::kFull;
            const size_t rows = (size_t)kv_->total_blocks(L.kind) * kv_->block_size();
            L.k_pool.assign(rows * c.kv_dim(), 0.0f);
            L.v_pool.assign(rows * c.kv_dim(), 0.0f);
            L.inv_freq = c.rope(i).inv_freq(c.head_dim);
            L.rope_scale = c.rope(i).attention_factor;
            L.window = c.window(i);
        }
    }

    const ModelConfig& config() const override { return c_; }

    MemoryUse memory() const override {
        MemoryUse m;
        size_t w = embed_.size() + lm_head_.size() + final_norm_.size(), kv = 0;
        for (const auto& L : layers_) {
            w += L.wqkv.size() + L.wo.size() + L.q_norm.size() + L.k_norm.size() + L.post_attn_norm.size() +
                 L.post_ff_norm.size() + L.wgu.size() + L.wdown.size();
            kv += L.k_pool.size() + L.v_pool.size();
        }
        m.weights = w * sizeof(float);
        m.weight_format = "fp32";
        m.kv_pool = kv * sizeof(float);
        return with_pool_use(m);
    }

protected:
    void prefill_impl(int seq, const std::vector<int>& ids, float* logits, int* id, const SamplingParams& s,
                      uint64_t step) override {
        std::vector<float> out = run(seq, ids);
        if (logits) std::copy(out.begin(), out.end(), logits);
        if (id) *id = sample_cpu(out.data(), c_.vocab, s, step);
    }

    // kScoreRows rows at a time: final norm, logits [rows, V], each row's target log-probability.
    void score_impl(int seq, const std::vector<int>& ids, float* logprobs) override {
        const int T = ids.size(), H = c_.hidden;
        const std::vector<float> x = layers(seq, ids);
        std::vector<float> xn((size_t)kScoreRows * H), logits((size_t)kScoreRows * c_.vocab), lp(kScoreRows);
        for (int r0 = 0; r0 < T - 1; r0 += kScoreRows) {
            const int rows = std::min(kScoreRows, T - 1 - r0);   // the last position has no target
            final_norm(xn.data(), x.data() + (size_t)r0 * H, rows);
            lm_head(logits.data(), xn.data(), rows);
            cpu::token_logprobs(logprobs + r0, logits.data(), ids.data() + r0 + 1, rows, c_.vocab);
        }
    }

    // The CPU runs a decode step one sequence after the other: the same math as a batch.
    void decode_impl(const std::vector<int>& seqs, const std::vector<int>& ids, float* logits, int* ids_out,
                     const std::vector<SamplingParams>& s, const std::vector<uint64_t>& steps) override {
        for (size_t b = 0; b < seqs.size(); b++) {
            std::vector<float> out = run(seqs[b], {ids[b]});
            if (logits) std::copy(out.begin(), out.end(), logits + b * c_.vocab);
            if (ids_out) ids_out[b] = sample_cpu(out.data(), c_.vocab, s[b], steps[b]);
        }
    }

    void copy_block(int kind, int src, int dst) override {
        const size_t n = (size_t)kv_->block_size() * c_.kv_dim();
        for (CpuLayer& L : layers_)
            if (L.kind == kind) {
                std::copy_n(L.k_pool.begin() + src * n, n, L.k_pool.begin() + dst * n);
                std::copy_n(L.v_pool.begin() + src * n, n, L.v_pool.begin() + dst * n);
            }
    }

private:
    // The engine tensor p (of `layer`, for per-layer tensors).
    Weights& tensor(Param p, int layer) {
        CpuLayer* L = layer >= 0 ? &layers_[layer] : nullptr;
        switch (p) {
            case Param::Embed: return embed_;
            case Param::LmHead: return lm_head_;
            case Param::FinalNorm: return final_norm_;
            case Param::Wqkv: return L->wqkv;
            case Param::Wo: return L->wo;
            case Param::QNorm: return L->q_norm;
            case Param::KNorm: return L->k_norm;
            case Param::AttnNorm: return L->post_attn_norm;
            case Param::FfNorm: return L->post_ff_norm;
            case Param::Wgu: return L->wgu;
            case Param::Wdown: return L->wdown;
        }
        fail("unknown engine tensor");
    }

    // The forward pass of `ids` appended to `seq` (its cache rows are reserved); returns the
    // last position's logits [V] (and, with a hook, hands it every position's).
    std::vector<float> run(int seq, const std::vector<int>& ids) {
        const int T = ids.size(), H = c_.hidden;
        const std::vector<float> x = layers(seq, ids);
        const int rows = hook ? T : 1;
        std::vector<float> xn((size_t)rows * H), logits((size_t)rows * c_.vocab);
        final_norm(xn.data(), x.data() + (size_t)(T - rows) * H, rows);
        emit("final_norm", xn.data(), rows, H);
        lm_head(logits.data(), xn.data(), rows);
        emit("logits", logits.data(), rows, c_.vocab);
        return std::vector<float>(logits.end() - c_.vocab, logits.end());
    }

    // xn [rows, H] = the final norm of x [rows, H]; logits [rows, V] = xn · W_lmᵀ.
    void final_norm(float* xn, const float* x, int rows) {
        if (c_.family == Family::Olmo1) cpu::layernorm(xn, x, rows, c_.hidden, c_.norm_eps);
        else cpu::rmsnorm(xn, x, final_norm_.data(), rows, c_.hidden, c_.norm_eps);
    }
    void lm_head(float* logits, const float* xn, int rows) {
        cpu::matmul(logits, xn, lm_head_.empty() ? embed_.data() : lm_head_.data(), rows, c_.hidden, c_.vocab);
    }

    // The decoder layers over `ids` appended to `seq`: returns the residual stream x [T, H]
    // after the last layer.
    std::vector<float> layers(int seq, const std::vector<int>& ids) {
        const int T = ids.size(), H = c_.hidden, I = c_.intermediate, hd = c_.head_dim;
        const int nH = c_.n_heads, nKV = c_.n_kv_heads, Q = c_.q_dim(), KV = c_.kv_dim(), QKV = Q + 2 * KV;
        const int pos0 = kv_->len(seq);
        const bool olmo1 = c_.family == Family::Olmo1;
        const float eps = c_.norm_eps;

        std::vector<float> x((size_t)T * H);          // residual stream     [T, H]
        std::vector<float> xn((size_t)T * H);         // normed input        [T, H]   (OLMo-1)
        std::vector<float> qkv((size_t)T * QKV);      // fused projection    [T, Q+2KV]
        std::vector<float> q((size_t)T * Q);          // queries             [T, nH*hd]
        std::vector<float> k((size_t)T * KV);         // new keys            [T, nKV*hd]
        std::vector<float> v((size_t)T * KV);         // new values          [T, nKV*hd]
        std::vector<float> att((size_t)T * Q);        // attention output    [T, nH*hd]
        std::vector<float> o((size_t)T * H);          // o_proj / MLP output [T, H]
        std::vector<float> gu((size_t)T * 2 * I);     // gate | up           [T, 2I]
        std::vector<float> a((size_t)T * I);          // swiglu              [T, I]

        cpu::embedding(x.data(), embed_.data(), ids.data(), T, H);
        emit("embed", x.data(), T, H);
        for (int l = 0; l < c_.n_layers; l++) {
            CpuLayer& L = layers_[l];
            const std::string n = "layers." + std::to_string(l) + ".";

            // --- attention half ---
            if (olmo1) cpu::layernorm(xn.data(), x.data(), T, H, eps);
            cpu::matmul(qkv.data(), olmo1 ? xn.data() : x.data(), L.wqkv.data(), T, H, QKV);
            split_qkv(qkv.data(), q.data(), k.data(), v.data(), T, Q, KV);
            if (olmo1 && c_.clip_qkv > 0) {
                cpu::clip(q.data(), (int64_t)T * Q, c_.clip_qkv);
                cpu::clip(k.data(), (int64_t)T * KV, c_.clip_qkv);
                cpu::clip(v.data(), (int64_t)T * KV, c_.clip_qkv);
            }
            if (!olmo1) {
                cpu::rmsnorm(q.data(), q.data(), L.q_norm.data(), T, Q, eps);
                cpu::rmsnorm(k.data(), k.data(), L.k_norm.data(), T, KV, eps);
            }
            emit(n + "q", q.data(), T, Q);
            emit(n + "k", k.data(), T, KV);
            emit(n + "v", v.data(), T, KV);
            cpu::rope(q.data(), T, nH, hd, pos0, L.inv_freq.data(), L.rope_scale);
            cpu::rope(k.data(), T, nKV, hd, pos0, L.inv_freq.data(), L.rope_scale);
            emit(n + "q_rope", q.data(), T, Q);
            emit(n + "k_rope", k.data(), T, KV);
            for (int t = 0; t < T; t++) {                 // k, v -> this sequence's cache rows
                const size_t r = kv_->row(seq, L.kind, pos0 + t);
                std::copy_n(k.begin() + (size_t)t * KV, KV, L.k_pool.begin() + r * KV);
                std::copy_n(v.begin() + (size_t)t * KV, KV, L.v_pool.begin() + r * KV);
            }
            cpu::attention(att.data(), q.data(), L.k_pool.data(), L.v_pool.data(), T, pos0, nH, nKV, hd, L.window,
                           1.0f / std::sqrt((float)hd), kv_->table(seq, L.kind).data(), kv_->block_size());
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

        return x;
    }

    // qkv [T, Q+2KV] -> q [T, Q], k [T, KV], v [T, KV].
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
    Weights embed_, lm_head_, final_norm_;   // lm_head_ empty: the embedding is the output layer
    std::vector<CpuLayer> layers_;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const ModelConfig& c, const Checkpoint& ckpt, int max_seq, int kv_blocks,
                                        LoadProgress* progress) {
    return std::make_unique<CpuEngine>(c, ckpt, max_seq, kv_blocks, progress);
}

}  // namespace olmo
