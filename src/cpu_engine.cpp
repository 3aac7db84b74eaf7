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
//
// Tensor parallelism, simulated (tp_ranks > 1, tensor_parallel.h): a layer's q|k|v, o, QK-norm
// weights, gate|up and down are held as one shard per rank, each rank with its own KV pools of
// kv_dim/n columns; the embedding, residual norms, final norm and output layer stay whole. Each
// rank runs the attention of its heads and the MLP of its channels as a GPU of the split would,
// and the engine adds what the GPUs all-reduce, in rank order: the QK-norm's sums of squares
// and the o_proj and down_proj partial products [T, H]. A layer's parts (Part) are its ranks'
// shards, or one part of full tensors when not split: the same calls then run on it as before
// (bit for bit), the QK-norm being cpu::rmsnorm's.
// Ring attention, simulated (cp_ranks > 1, context_parallel.h): a prompt's attention from
// position 0 is computed as that many GPUs holding two mirrored chunks each would, their K/V
// going round a ring, the partial outputs merged by log-sum-exp; the K/V cache is filled as
// always, so decoding goes on as without it.
// FP8 KV cache (KvDType::FP8): the pools stay fp32, but each (token, KV head) row is replaced by
// what an FP8 cache gives back for it (fp8_round_trip) as it is written, so that attention, in
// the prefill as in decode, reads exactly the values the GPU's FP8 pools hold.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "common.h"
#include "cpu_ops.h"
#include "engine.h"
#include "fp8.h"
#include "memory_check.h"
#include "context_parallel.h"
#include "tensor_parallel.h"

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

// What one rank of a split layer holds (tensor_parallel.h): its shards of the split tensors and
// its own KV pools; the unsplit engine has one part holding the full tensors. The shapes below
// are in the part's heads and channels: nH/n, nKV/n and I/n for rank r of n (tp_shard_config).
struct Part {
    Weights wqkv;                        // [(nH+2nKV)*hd, H]  q | k | v rows stacked
    Weights wo;                          // [H, nH*hd]
    Weights q_norm, k_norm;              // [nH*hd], [nKV*hd]          (OLMo-2/3)
    Weights wgu;                         // [2I, H]  gate | up rows stacked
    Weights wdown;                       // [H, I]
    std::vector<float> k_pool, v_pool;   // [blocks * block_size, nKV*hd]  paged KV cache
};

// The member of Part holding engine tensor p, or null for the tensors that are not split.
Weights Part::*split_member(Param p) {
    switch (p) {
        case Param::Wqkv: return &Part::wqkv;
        case Param::Wo: return &Part::wo;
        case Param::QNorm: return &Part::q_norm;
        case Param::KNorm: return &Part::k_norm;
        case Param::Wgu: return &Part::wgu;
        case Param::Wdown: return &Part::wdown;
        default: return nullptr;
    }
}

struct CpuLayer {
    std::vector<Part> parts;             // one per rank (one when not split)
    Weights post_attn_norm, post_ff_norm;  // [H]                      (OLMo-2/3)
    int kind = 0;                        // KvCache::kFull or kSliding
    std::vector<float> inv_freq;         // [hd/2]
    float rope_scale = 1.0f;             // YaRN attention factor
    int window = 0;
};

// One part's activations in a pass over T tokens (shapes of the part's heads and channels).
struct PartActs {
    std::vector<float> qkv, q, k, v;     // fused projection [T, Q+2KV]; q [T, Q], k, v [T, KV]
    std::vector<float> att;              // attention output [T, Q]
    std::vector<float> gu, a;            // gate | up [T, 2I], swiglu [T, I]
    PartActs(const ModelConfig& s, int T)
        : qkv((size_t)T * (s.q_dim() + 2 * s.kv_dim())), q((size_t)T * s.q_dim()), k((size_t)T * s.kv_dim()),
          v((size_t)T * s.kv_dim()), att((size_t)T * s.q_dim()), gu((size_t)T * 2 * s.intermediate),
          a((size_t)T * s.intermediate) {}
};
using Acts = std::vector<PartActs>;
using ActsMember = std::vector<float> PartActs::*;

class CpuEngine : public Engine {
public:
    CpuEngine(const ModelConfig& c, const Checkpoint& ck, int max_seq, int kv_blocks, LoadProgress* progress,
              int tp_ranks, int cp_ranks, KvDType kv)
        : c_(c), s_(tp_shard_config(c, tp_ranks)),   // fails first if tp_ranks cannot split c
          cp_ranks_(cp_ranks), kv_dtype_(kv) {
        if (cp_ranks < 1) fail("cp_ranks must be at least 1");
        if (cp_ranks > 1 && kv == KvDType::FP8)
            fail("the FP8 KV cache does not combine with context parallel (cp_ranks " + std::to_string(cp_ranks) +
                 "): the ring reads the new K/V rows before they are rounded to FP8");
        check_fits_cpu(c, max_seq, kv_blocks);   // before any tensor is read
        init_kv(c, max_seq, kv_blocks);
        layers_.resize(c.n_layers);
        for (CpuLayer& L : layers_) L.parts.resize(1);   // the full tensors, until shard_layers
        // The weights: each engine tensor the table names is sized once, then filled in place.
        const std::vector<WeightSlot> table = weight_table(c, &ck);
        std::vector<float*> dst;
        for (const WeightSlot& s : table) {
            Weights& w = tensor(s.param, s.layer);
            if (w.empty()) w.resize(param_shape(c, s.param).numel());
            dst.push_back(w.data() + s.offset());
        }
        load_f32(ck, table, dst, progress);
        if (tp_ranks > 1) shard_layers(tp_ranks);
        for (int i = 0; i < c.n_layers; i++) {
            CpuLayer& L = layers_[i];
            L.kind = c.layer_sliding[i] ? KvCache::kSliding : KvCache::kFull;
            const size_t rows = (size_t)kv_->total_blocks(L.kind) * kv_->block_size();
            for (Part& P : L.parts) {
                P.k_pool.assign(rows * s_.kv_dim(), 0.0f);
                P.v_pool.assign(rows * s_.kv_dim(), 0.0f);
            }
            L.inv_freq = c.rope(i).inv_freq(c.head_dim);
            L.rope_scale = c.rope(i).attention_factor;
            L.window = c.window(i);
        }
    }

    const ModelConfig& config() const override { return c_; }

    MemoryUse memory() const override {
        MemoryUse m;
        size_t w = embed_.size() + lm_head_.size() + final_norm_.size(), kv = 0;
        for (const CpuLayer& L : layers_) {
            w += L.post_attn_norm.size() + L.post_ff_norm.size();
            for (const Part& P : L.parts) {
                for (Param p : kTpSplit) w += (P.*split_member(p)).size();
                kv += P.k_pool.size() + P.v_pool.size();
            }
        }
        m.weights = w * sizeof(float);
        m.weight_format = "fp32";
        m.kv_pool = kv * sizeof(float);
        m.kv_format = kv_dtype_ == KvDType::FP8 ? "fp32 holding FP8 E4M3 values (a scale per token and KV head)"
                                                : "fp32";
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
        const size_t n = (size_t)kv_->block_size() * s_.kv_dim();
        for (CpuLayer& L : layers_)
            if (L.kind == kind)
                for (Part& P : L.parts) {   // every rank's pools
                    std::copy_n(P.k_pool.begin() + src * n, n, P.k_pool.begin() + dst * n);
                    std::copy_n(P.v_pool.begin() + src * n, n, P.v_pool.begin() + dst * n);
                }
    }

private:
    // The engine tensor p (of `layer`, for per-layer tensors); split tensors: the full one, in
    // the layer's first part, before shard_layers.
    Weights& tensor(Param p, int layer) {
        if (Weights Part::*m = split_member(p)) return layers_[layer].parts[0].*m;
        switch (p) {
            case Param::Embed: return embed_;
            case Param::LmHead: return lm_head_;
            case Param::FinalNorm: return final_norm_;
            case Param::AttnNorm: return layers_[layer].post_attn_norm;
            case Param::FfNorm: return layers_[layer].post_ff_norm;
            default: break;
        }
        fail("unknown engine tensor");
    }

    // Replaces each layer's one part of full tensors by `ranks` parts, rank r's holding its shard
    // of each split tensor (tp_shard); the full tensors are freed layer by layer.
    void shard_layers(int ranks) {
        for (CpuLayer& L : layers_) {
            std::vector<Part> shards(ranks);
            for (int r = 0; r < ranks; r++)
                for (Param p : kTpSplit) {
                    const Weights& full = L.parts[0].*split_member(p);
                    if (full.empty()) continue;   // OLMo-1 has no QK-norm weights
                    const std::vector<float> shard = tp_shard(full.data(), c_, p, r, ranks);
                    (shards[r].*split_member(p)).assign(shard.begin(), shard.end());
                }
            L.parts = std::move(shards);
        }
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
        const int T = ids.size(), H = c_.hidden;
        const bool olmo1 = c_.family == Family::Olmo1;
        const float eps = c_.norm_eps;

        std::vector<float> x((size_t)T * H);          // residual stream     [T, H]
        std::vector<float> xn((size_t)T * H);         // normed input        [T, H]   (OLMo-1)
        std::vector<float> o((size_t)T * H);          // o_proj / MLP output [T, H]
        Acts acts(layers_[0].parts.size(), PartActs(s_, T));   // each part's q, k, v, ...

        cpu::embedding(x.data(), embed_.data(), ids.data(), T, H);
        emit("embed", x.data(), T, H);
        for (int l = 0; l < c_.n_layers; l++) {
            CpuLayer& L = layers_[l];
            const std::string n = "layers." + std::to_string(l) + ".";

            // --- attention half ---
            if (olmo1) cpu::layernorm(xn.data(), x.data(), T, H, eps);
            attention(L, n, seq, olmo1 ? xn.data() : x.data(), T, acts, o.data());
            emit(n + "o_proj", o.data(), T, H);
            if (!olmo1) cpu::rmsnorm(o.data(), o.data(), L.post_attn_norm.data(), T, H, eps);
            add(x.data(), o.data(), (size_t)T * H);
            emit(n + "resid_attn", x.data(), T, H);

            // --- MLP half ---
            if (olmo1) cpu::layernorm(xn.data(), x.data(), T, H, eps);
            mlp(L, olmo1 ? xn.data() : x.data(), T, acts, o.data());
            emit(n + "mlp", o.data(), T, H);
            if (!olmo1) cpu::rmsnorm(o.data(), o.data(), L.post_ff_norm.data(), T, H, eps);
            add(x.data(), o.data(), (size_t)T * H);
            emit(n + "out", x.data(), T, H);
        }

        return x;
    }

    // The attention of layer L (names prefixed `n`) over the T new tokens of `seq`, from `in`
    // [T, H]: each part runs its heads; o [T, H] = the o_proj output, summed over the parts.
    void attention(CpuLayer& L, const std::string& n, int seq, const float* in, int T, Acts& acts, float* o) {
        const int hd = c_.head_dim, Q = s_.q_dim(), KV = s_.kv_dim(), pos0 = kv_->len(seq);
        for (size_t r = 0; r < acts.size(); r++) project_qkv(L.parts[r], in, T, acts[r]);
        if (c_.family != Family::Olmo1) qk_norm(L, T, acts);
        emit_parts(n + "q", acts, &PartActs::q, T, Q);
        emit_parts(n + "k", acts, &PartActs::k, T, KV);
        emit_parts(n + "v", acts, &PartActs::v, T, KV);
        for (PartActs& a : acts) {
            cpu::rope(a.q.data(), T, s_.n_heads, hd, pos0, L.inv_freq.data(), L.rope_scale);
            cpu::rope(a.k.data(), T, s_.n_kv_heads, hd, pos0, L.inv_freq.data(), L.rope_scale);
        }
        emit_parts(n + "q_rope", acts, &PartActs::q, T, Q);
        emit_parts(n + "k_rope", acts, &PartActs::k, T, KV);
        for (size_t r = 0; r < acts.size(); r++) {
            Part& P = L.parts[r];
            PartActs& a = acts[r];
            for (int t = 0; t < T; t++) {                 // k, v -> this sequence's cache rows
                const size_t row = kv_->row(seq, L.kind, pos0 + t);
                std::copy_n(a.k.begin() + (size_t)t * KV, KV, P.k_pool.begin() + row * KV);
                std::copy_n(a.v.begin() + (size_t)t * KV, KV, P.v_pool.begin() + row * KV);
                if (kv_dtype_ == KvDType::FP8) round_row_to_fp8(P, row);
            }
            const float scale = 1.0f / std::sqrt((float)hd);
            if (cp_ranks_ > 1 && pos0 == 0)   // a prompt's first tokens: as cp_ranks_ GPUs would, round a ring
                ring_attention(a.att.data(), a.q.data(), a.k.data(), a.v.data(), T, s_.n_heads, s_.n_kv_heads, hd,
                               L.window, scale, cp_ranks_);
            else
                cpu::attention(a.att.data(), a.q.data(), P.k_pool.data(), P.v_pool.data(), T, pos0, s_.n_heads,
                               s_.n_kv_heads, hd, L.window, scale, kv_->table(seq, L.kind).data(), kv_->block_size());
        }
        emit_parts(n + "attn", acts, &PartActs::att, T, Q);
        row_parallel(o, acts, &PartActs::att, L, &Part::wo, T, Q, c_.hidden);
    }

    // Row `row` of part P's K and V pools <- what an FP8 cache gives back for it, one KV head
    // (hd values, one scale) at a time.
    void round_row_to_fp8(Part& P, size_t row) {
        const int hd = c_.head_dim, KV = s_.kv_dim();
        for (std::vector<float>* pool : {&P.k_pool, &P.v_pool})
            for (int h = 0; h < s_.n_kv_heads; h++) fp8_round_trip(pool->data() + row * KV + (size_t)h * hd, hd);
    }

    // The part's qkv = in · Wqkvᵀ [T, Q+2KV], split into its q, k, v (OLMo-1: clipped).
    void project_qkv(const Part& P, const float* in, int T, PartActs& a) {
        const int Q = s_.q_dim(), KV = s_.kv_dim();
        cpu::matmul(a.qkv.data(), in, P.wqkv.data(), T, c_.hidden, Q + 2 * KV);
        split_qkv(a.qkv.data(), a.q.data(), a.k.data(), a.v.data(), T, Q, KV);
        if (c_.family == Family::Olmo1 && c_.clip_qkv > 0) {
            cpu::clip(a.q.data(), (int64_t)T * Q, c_.clip_qkv);
            cpu::clip(a.k.data(), (int64_t)T * KV, c_.clip_qkv);
            cpu::clip(a.v.data(), (int64_t)T * KV, c_.clip_qkv);
        }
    }

    // OLMo-2/3 QK-norm: RMSNorm of q over its full width Q and of k over KV, in place.
    void qk_norm(const CpuLayer& L, int T, Acts& acts) {
        if (acts.size() == 1) {   // not split
            cpu::rmsnorm(acts[0].q.data(), acts[0].q.data(), L.parts[0].q_norm.data(), T, s_.q_dim(), c_.norm_eps);
            cpu::rmsnorm(acts[0].k.data(), acts[0].k.data(), L.parts[0].k_norm.data(), T, s_.kv_dim(), c_.norm_eps);
            return;
        }
        split_rmsnorm(acts, &PartActs::q, L, &Part::q_norm, T, s_.q_dim());
        split_rmsnorm(acts, &PartActs::k, L, &Part::k_norm, T, s_.kv_dim());
    }

    // RMSNorm of rows spread over the ranks, each holding `cols` columns of every row (member x of
    // its activations, its weights member w): each rank's sum of squares per row, the sums added
    // in rank order (the all-reduce), then x_r = w_r * (x_r * rstd) as in cpu::rmsnorm.
    void split_rmsnorm(Acts& acts, ActsMember x, const CpuLayer& L, Weights Part::*w, int T, int cols) {
        const int width = cols * (int)acts.size();
        for (int t = 0; t < T; t++) {
            float ss = 0.0f;
            for (const PartActs& a : acts) {
                const float* xr = (a.*x).data() + (size_t)t * cols;
                float part = 0.0f;
                for (int i = 0; i < cols; i++) part += xr[i] * xr[i];
                ss += part;
            }
            const float rstd = 1.0f / std::sqrt(ss / width + c_.norm_eps);
            for (size_t r = 0; r < acts.size(); r++) {
                float* xr = (acts[r].*x).data() + (size_t)t * cols;
                const float* wr = (L.parts[r].*w).data();
                for (int i = 0; i < cols; i++) xr[i] = wr[i] * (xr[i] * rstd);
            }
        }
    }

    // The MLP of layer L on `in` [T, H]: each part's gate | up channels and swiglu; out [T, H] =
    // the down_proj output, summed over the parts.
    void mlp(const CpuLayer& L, const float* in, int T, Acts& acts, float* out) {
        const int I = s_.intermediate;
        for (size_t r = 0; r < acts.size(); r++) {
            cpu::matmul(acts[r].gu.data(), in, L.parts[r].wgu.data(), T, c_.hidden, 2 * I);
            cpu::swiglu(acts[r].a.data(), acts[r].gu.data(), T, I);
        }
        row_parallel(out, acts, &PartActs::a, L, &Part::wdown, T, I, c_.hidden);
    }

    // y [T, N] = Σ_r x_r · W_rᵀ with x_r [T, K] member x of part r's activations and W_r [N, K]
    // member w of part r, the partial products added in rank order (the all-reduce of the row
    // parallel o_proj and down_proj). One part: y = x · Wᵀ.
    static void row_parallel(float* y, const Acts& acts, ActsMember x, const CpuLayer& L, Weights Part::*w, int T,
                             int K, int N) {
        cpu::matmul(y, (acts[0].*x).data(), (L.parts[0].*w).data(), T, K, N);
        std::vector<float> partial(acts.size() > 1 ? (size_t)T * N : 0);
        for (size_t r = 1; r < acts.size(); r++) {
            cpu::matmul(partial.data(), (acts[r].*x).data(), (L.parts[r].*w).data(), T, K, N);
            add(y, partial.data(), partial.size());
        }
    }

    // Emits member m [T, cols] of each part's activations as one tensor [T, parts·cols], part r
    // in columns r·cols..: the parts hold consecutive heads, so this is the unsplit layout.
    void emit_parts(const std::string& name, const Acts& acts, ActsMember m, int T, int cols) {
        if (!hook) return;
        if (acts.size() == 1) return emit(name, (acts[0].*m).data(), T, cols);
        const size_t width = acts.size() * cols;
        std::vector<float> full(T * width);
        for (int t = 0; t < T; t++)
            for (size_t r = 0; r < acts.size(); r++)
                std::copy_n((acts[r].*m).begin() + (size_t)t * cols, cols, full.begin() + t * width + r * cols);
        emit(name, full.data(), T, width);
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
    ModelConfig s_;                          // the model one part runs (c_ when not split)
    int cp_ranks_;                           // > 1: a prompt's attention as a ring of that many GPUs
    KvDType kv_dtype_;                       // FP8: the pools hold FP8-rounded rows
    Weights embed_, lm_head_, final_norm_;   // lm_head_ empty: the embedding is the output layer
    std::vector<CpuLayer> layers_;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const ModelConfig& c, const Checkpoint& ckpt, int max_seq, int kv_blocks,
                                        LoadProgress* progress, int tp_ranks, int cp_ranks, KvDType kv) {
    return std::make_unique<CpuEngine>(c, ckpt, max_seq, kv_blocks, progress, tp_ranks, cp_ranks, kv);
}

}  // namespace olmo
