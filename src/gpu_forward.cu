// gpu_forward.cu: the CUDA engine. The same forward pass as cpu_forward.cpp, op for op, as a
// list of kernel launches (kernels/*.cuh) and cuBLAS GEMMs.
//
//   T = storage type of weights, activations and KV cache (bf16, fp16 or fp32); every kernel
//   computes in fp32 and rounds once; GEMMs accumulate in fp32; logits are produced in fp32;
//   the residual stream x stays in fp32 (norm.cuh says why).
//
// Memory: the weights live in one allocation carved into tensors (q|k|v and gate|up fused so
// each is one GEMM); activations for one prefill chunk and the KV cache in a second. Nothing
// is allocated after construction, so the decode step (T = 1) can be captured once as a CUDA
// graph and replayed: its inputs (token id, position) live in device memory.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>

#include "attention.cuh"
#include "common.h"
#include "cuda_common.cuh"
#include "elementwise.cuh"
#include "engine.h"
#include "norm.cuh"
#include "rope.cuh"
#include "sampling.cuh"

namespace olmo {

namespace {

constexpr int kMaxChunk = 4096;   // longest prefill chunk; longer prompts run in chunks

template <typename T> constexpr cudaDataType_t cuda_type();
template <> constexpr cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <> constexpr cudaDataType_t cuda_type<__half>() { return CUDA_R_16F; }
template <> constexpr cudaDataType_t cuda_type<__nv_bfloat16>() { return CUDA_R_16BF; }

// Fills n elements with a deterministic hash of (seed, i), uniform in [-scale, scale].
template <typename T>
__global__ void fill_random_kernel(T* p, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = seed * 0x9E3779B97F4A7C15ull + i;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        p[i] = from_float<T>(((z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale);
    }
}

// A bump allocator over one cudaMalloc: reserve() while counting, then carve.
struct Arena {
    char* base = nullptr;
    size_t used = 0, size = 0;
    template <typename U> U* take(size_t n) {
        size_t at = (used + 255) & ~size_t(255);
        used = at + n * sizeof(U);
        return base ? reinterpret_cast<U*>(base + at) : nullptr;
    }
    void allocate() {
        size = used;
        used = 0;
        cudaCheck(cudaMalloc(&base, size));
    }
    ~Arena() { if (base) cudaFree(base); }
};

template <typename T>
struct GpuLayer {
    T* wqkv;          // [Q+2KV, H]   q | k | v rows
    T* wo;            // [H, Q]
    T* q_norm;        // [Q]          (OLMo-2/3)
    T* k_norm;        // [KV]
    T* attn_norm;     // [H]          post_attention_layernorm (OLMo-2/3)
    T* ff_norm;       // [H]          post_feedforward_layernorm (OLMo-2/3)
    T* wgu;           // [2I, H]      gate | up rows
    T* wdown;         // [H, I]
    T* k_cache;       // [max_seq, KV]
    T* v_cache;       // [max_seq, KV]
    float* inv_freq;  // [hd/2]
    float rope_scale;
    int window;
};

template <typename T>
class CudaEngine : public Engine {
public:
    CudaEngine(const ModelConfig& c, const Checkpoint* ck, int max_seq) : c_(c) {
        max_seq_ = max_seq;
        cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        cublasCheck(cublasCreate(&cublas_));
        cublasCheck(cublasSetStream(cublas_, stream_));
        cublasCheck(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));   // fp32 stays true fp32 (no TF32)
        layers_.resize(c.n_layers);
        carve();                 // count sizes
        weights_.allocate();
        buffers_.allocate();
        carve();                 // hand out pointers
        cublasCheck(cublasSetWorkspace(cublas_, cublas_ws_, kCublasWorkspace));
        if (ck) upload(*ck);
        else randomize();
        cudaCheck(cudaMallocHost(&host_io_, sizeof(int) * (kMaxChunk + 2)));
        cudaCheck(cudaStreamSynchronize(stream_));
    }

    ~CudaEngine() override {
        if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
        if (host_io_) cudaFreeHost(host_io_);
        cublasDestroy(cublas_);
        cudaStreamDestroy(stream_);
    }

    const ModelConfig& config() const override { return c_; }
    size_t memory_bytes() const override { return weights_.size + buffers_.size; }

    std::vector<float> forward(const std::vector<int>& ids) override {
        run(ids);
        std::vector<float> logits(c_.vocab);
        cudaCheck(cudaMemcpyAsync(logits.data(), logits_, sizeof(float) * c_.vocab, cudaMemcpyDeviceToHost, stream_));
        cudaCheck(cudaStreamSynchronize(stream_));
        return logits;
    }

    int forward_sample(const std::vector<int>& ids, const SamplingParams& s, uint64_t step) override {
        sampling_ = s;
        step_ = step;
        run(ids, /*sample=*/true);
        cudaCheck(cudaMemcpyAsync(host_io_, next_id_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
        cudaCheck(cudaStreamSynchronize(stream_));
        return host_io_[0];
    }

private:
    static constexpr size_t kCublasWorkspace = 32 << 20;

    // Lays out weights and buffers. Called twice: first to measure (arenas empty), then to
    // assign pointers into the allocated arenas.
    void carve() {
        const size_t H = c_.hidden, I = c_.intermediate, Q = c_.q_dim(), KV = c_.kv_dim(), V = c_.vocab;
        const size_t S = max_seq_, C = std::min(max_seq_, kMaxChunk), hd2 = c_.head_dim / 2;
        Arena& w = weights_;
        embed_ = w.take<T>(V * H);
        lm_head_ = c_.tie_embeddings ? embed_ : w.take<T>(V * H);
        final_norm_ = w.take<T>(H);
        for (auto& L : layers_) {
            L.wqkv = w.take<T>((Q + 2 * KV) * H);
            L.wo = w.take<T>(H * Q);
            L.q_norm = w.take<T>(Q);
            L.k_norm = w.take<T>(KV);
            L.attn_norm = w.take<T>(H);
            L.ff_norm = w.take<T>(H);
            L.wgu = w.take<T>(2 * I * H);
            L.wdown = w.take<T>(H * I);
        }
        Arena& b = buffers_;
        for (auto& L : layers_) {
            L.k_cache = b.take<T>(S * KV);
            L.v_cache = b.take<T>(S * KV);
            L.inv_freq = b.take<float>(hd2);
        }
        x_ = b.take<float>(C * H);          // residual stream   [C, H] fp32
        xn_ = b.take<T>(C * H);             // next GEMM's input [C, H]: LN(x) (OLMo-1) or x in T
        qkv_ = b.take<T>(C * (Q + 2 * KV)); // fused projection  [C, Q+2KV]
        q_ = b.take<T>(C * Q);              // roped queries     [C, Q]
        att_ = b.take<T>(C * Q);            // attention output  [C, Q]
        o_ = b.take<T>(C * H);              // o_proj / MLP out  [C, H]
        gu_ = b.take<T>(C * 2 * I);         // gate | up         [C, 2I]
        a_ = b.take<T>(C * I);              // swiglu            [C, I]
        logits_ = b.take<float>(V);         // fp32 logits of the last position [V]
        ids_ = b.take<int>(C);              // input token ids   [C]
        pos_ = b.take<int>(1);              // position of ids[0]
        next_id_ = b.take<int>(1);          // sampled token
        step_dev_ = b.take<int>(1);         // draw counter for the sampler's RNG
        attn_ws_ = b.take<char>(attention_decode_workspace_bytes(c_.n_heads, c_.head_dim, max_seq_));
        cublas_ws_ = b.take<char>(kCublasWorkspace);
    }

    // Host tensor -> T on the device at `dst` (n elements), converting through fp32.
    void put(T* dst, const TensorView& t) {
        std::vector<float> f = to_f32(t);
        std::vector<T> h(f.size());
        for (size_t i = 0; i < f.size(); i++) h[i] = from_float<T>(f[i]);
        cudaCheck(cudaMemcpy(dst, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    }

    void upload(const Checkpoint& ck) {
        const int64_t H = c_.hidden, I = c_.intermediate, Q = c_.q_dim(), KV = c_.kv_dim();
        const bool olmo2 = c_.family != Family::Olmo1;
        put(embed_, ck.get("model.embed_tokens.weight", {c_.vocab, H}));
        if (ck.has("lm_head.weight") && !c_.tie_embeddings) put(lm_head_, ck.get("lm_head.weight", {c_.vocab, H}));
        else if (!c_.tie_embeddings) fail(ck.dir() + ": missing tensor \"lm_head.weight\" (and tie_word_embeddings is false)");
        if (olmo2) put(final_norm_, ck.get("model.norm.weight", {H}));
        for (int i = 0; i < c_.n_layers; i++) {
            const std::string p = "model.layers." + std::to_string(i) + ".";
            GpuLayer<T>& L = layers_[i];
            put(L.wqkv, ck.get(p + "self_attn.q_proj.weight", {Q, H}));
            put(L.wqkv + Q * H, ck.get(p + "self_attn.k_proj.weight", {KV, H}));
            put(L.wqkv + (Q + KV) * H, ck.get(p + "self_attn.v_proj.weight", {KV, H}));
            put(L.wo, ck.get(p + "self_attn.o_proj.weight", {H, Q}));
            if (olmo2) {
                put(L.q_norm, ck.get(p + "self_attn.q_norm.weight", {Q}));
                put(L.k_norm, ck.get(p + "self_attn.k_norm.weight", {KV}));
                put(L.attn_norm, ck.get(p + "post_attention_layernorm.weight", {H}));
                put(L.ff_norm, ck.get(p + "post_feedforward_layernorm.weight", {H}));
            }
            put(L.wgu, ck.get(p + "mlp.gate_proj.weight", {I, H}));
            put(L.wgu + I * H, ck.get(p + "mlp.up_proj.weight", {I, H}));
            put(L.wdown, ck.get(p + "mlp.down_proj.weight", {H, I}));
        }
        upload_rope();
    }

    // Random weights for benchmarks: uniform with std ~0.02 for matrices, norms near 1.
    void randomize() {
        const size_t H = c_.hidden, I = c_.intermediate, Q = c_.q_dim(), KV = c_.kv_dim(), V = c_.vocab;
        uint64_t seed = 1;
        auto fill = [&](T* p, size_t n, float scale) {
            fill_random_kernel<<<1024, 256, 0, stream_>>>(p, n, seed++, scale);
            cudaCheckLaunch();
        };
        fill(embed_, V * H, 0.035f);
        if (lm_head_ != embed_) fill(lm_head_, V * H, 0.035f);
        fill(final_norm_, H, 0.1f);
        for (auto& L : layers_) {
            fill(L.wqkv, (Q + 2 * KV) * H, 0.035f);
            fill(L.wo, H * Q, 0.035f);
            fill(L.wgu, 2 * I * H, 0.035f);
            fill(L.wdown, H * I, 0.035f);
            fill(L.q_norm, Q, 0.1f);
            fill(L.k_norm, KV, 0.1f);
            fill(L.attn_norm, H, 0.1f);
            fill(L.ff_norm, H, 0.1f);
        }
        upload_rope();
    }

    void upload_rope() {
        for (int i = 0; i < c_.n_layers; i++) {
            std::vector<float> f = c_.rope(i).inv_freq(c_.head_dim);
            cudaCheck(cudaMemcpy(layers_[i].inv_freq, f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice));
            layers_[i].rope_scale = c_.rope(i).attention_factor;
            layers_[i].window = c_.window(i);
        }
    }

    // y[rows, N] = x[rows, K] · W[N, K]ᵀ, fp32 accumulation. In cuBLAS's column-major terms:
    // yᵀ (N x rows) = W (op T of the K x N column-major view) · xᵀ (K x rows).
    template <typename Out>
    void gemm(Out* y, const T* x, const T* W, int rows, int K, int N) {
        const float one = 1.0f, zero = 0.0f;
        cublasCheck(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, N, rows, K, &one, W, cuda_type<T>(), K, x,
                                 cuda_type<T>(), K, &zero, y, cuda_type<Out>(), N, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    }

    // Copies a device tensor [rows, cols] with row stride ld to the host as fp32 for the hook.
    template <typename U>
    void emit(const std::string& name, const U* dev, int rows, int cols, int ld) {
        if (!hook) return;
        std::vector<U> h((size_t)rows * ld);
        cudaCheck(cudaMemcpyAsync(h.data(), dev, h.size() * sizeof(U), cudaMemcpyDeviceToHost, stream_));
        cudaCheck(cudaStreamSynchronize(stream_));
        std::vector<float> f((size_t)rows * cols);
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < cols; j++) f[(size_t)r * cols + j] = to_float(h[(size_t)r * ld + j]);
        hook(name, f.data(), rows, cols);
    }

    // Feeds `ids` (after the n_past_ tokens in the cache): prefill chunks, or a graph-replayed
    // decode step. Leaves the last position's fp32 logits in logits_ and, when `sample`, the
    // chosen next id in next_id_.
    void run(const std::vector<int>& ids, bool sample = false) {
        check_room(ids.size());
        for (int id : ids)
            if (id < 0 || id >= c_.vocab)
                fail("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(c_.vocab) + ")");
        for (size_t done = 0; done < ids.size();) {
            const int n = (int)std::min(ids.size() - done, (size_t)std::min(max_seq_, kMaxChunk));
            host_io_[0] = n_past_;
            host_io_[1] = (int)step_;
            std::memcpy(host_io_ + 2, ids.data() + done, n * sizeof(int));
            cudaCheck(cudaMemcpyAsync(pos_, host_io_, sizeof(int), cudaMemcpyHostToDevice, stream_));
            cudaCheck(cudaMemcpyAsync(step_dev_, host_io_ + 1, sizeof(int), cudaMemcpyHostToDevice, stream_));
            cudaCheck(cudaMemcpyAsync(ids_, host_io_ + 2, n * sizeof(int), cudaMemcpyHostToDevice, stream_));
            const bool last = done + n == ids.size();
            if (n == 1 && !hook && last) decode_graph(sample);
            else forward_chunk(n, last && sample);
            n_past_ += n;
            done += n;
        }
    }

    // Decode steps replay one captured graph; sampling settings are baked into it, so a
    // change of settings (or of sample vs. logits) captures again.
    void decode_graph(bool sample) {
        const bool same = graph_exec_ && sample == graph_sample_ &&
                          (!sample || std::memcmp(&sampling_, &graph_sampling_, sizeof sampling_) == 0);
        if (!same) {
            if (graph_exec_) cudaCheck(cudaGraphExecDestroy(graph_exec_));
            cudaGraph_t graph;
            cudaCheck(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
            forward_chunk(1, sample);
            cudaCheck(cudaStreamEndCapture(stream_, &graph));
            cudaCheck(cudaGraphInstantiate(&graph_exec_, graph, 0));
            cudaCheck(cudaGraphDestroy(graph));
            graph_sample_ = sample;
            graph_sampling_ = sampling_;
        }
        cudaCheck(cudaGraphLaunch(graph_exec_, stream_));
    }

    // The forward pass over n tokens at positions *pos_ .. *pos_+n-1: a list of launches.
    void forward_chunk(int n, bool sample) {
        const int H = c_.hidden, I = c_.intermediate, hd = c_.head_dim, Q = c_.q_dim(), KV = c_.kv_dim();
        const int QKV = Q + 2 * KV, nH = c_.n_heads, nKV = c_.n_kv_heads;
        const bool olmo1 = c_.family == Family::Olmo1;
        const float eps = c_.norm_eps;
        const int pos0 = n_past_;   // host copy, for the hook only (kernels read pos_)

        embedding(xn_, embed_, ids_, n, H, stream_);                             // [n, H] in T
        convert(x_, xn_, (int64_t)n * H, stream_);                               // the fp32 residual
        emit("embed", x_, n, H, H);
        if (olmo1) layernorm(xn_, x_, n, H, eps, stream_);
        for (int l = 0; l < c_.n_layers; l++) {
            GpuLayer<T>& L = layers_[l];
            const std::string name = "layers." + std::to_string(l) + ".";
            // --- attention half ---
            gemm(qkv_, xn_, L.wqkv, n, H, QKV);                                  // [n, Q+2KV]
            if (olmo1 && c_.clip_qkv > 0) clip(qkv_, (int64_t)n * QKV, c_.clip_qkv, stream_);
            if (!olmo1) {                                                        // full-width QK-norm, in place
                rmsnorm(qkv_, qkv_, L.q_norm, n, Q, QKV, QKV, eps, stream_);
                rmsnorm(qkv_ + Q, qkv_ + Q, L.k_norm, n, KV, QKV, QKV, eps, stream_);
            }
            emit(name + "q", qkv_, n, Q, QKV);
            emit(name + "k", qkv_ + Q, n, KV, QKV);
            emit(name + "v", qkv_ + Q + KV, n, KV, QKV);
            RopeParams<T> rp{qkv_, q_, L.k_cache, L.v_cache, n, pos_, nH, nKV, hd, L.inv_freq, L.rope_scale};
            rope_qkv(rp, stream_);                                               // q -> q_, k/v -> cache
            emit(name + "q_rope", q_, n, Q, Q);
            emit(name + "k_rope", L.k_cache + (size_t)pos0 * KV, n, KV, KV);
            AttnParams<T> ap{q_, L.k_cache, L.v_cache, att_, n, pos_, nH, nKV, hd, L.window,
                             1.0f / std::sqrt((float)hd), max_seq_};
            if (n == 1) attention_decode(ap, attn_ws_, stream_);
            else attention_prefill(ap, stream_);
            emit(name + "attn", att_, n, Q, Q);
            gemm(o_, att_, L.wo, n, Q, H);                                       // [n, H]
            emit(name + "o_proj", o_, n, H, H);
            if (olmo1) add_layernorm(x_, o_, xn_, n, H, eps, stream_);          // x += o; xn = LN(x)
            else add_rmsnorm(x_, o_, L.attn_norm, xn_, n, H, eps, stream_);      // x += RMSNorm(o); xn = x
            emit(name + "resid_attn", x_, n, H, H);
            // --- MLP half ---
            gemm(gu_, xn_, L.wgu, n, H, 2 * I);                                  // [n, 2I]
            swiglu(a_, gu_, n, I, stream_);                                      // [n, I]
            gemm(o_, a_, L.wdown, n, I, H);                                      // [n, H]
            emit(name + "mlp", o_, n, H, H);
            if (olmo1) add_layernorm(x_, o_, xn_, n, H, eps, stream_);          // also the next layer's LN
            else add_rmsnorm(x_, o_, L.ff_norm, xn_, n, H, eps, stream_);
            emit(name + "out", x_, n, H, H);
        }
        // Final norm and logits: the last position only, unless a hook wants all of them.
        const int rows = hook ? n : 1;
        const size_t first = (size_t)(n - rows) * H;
        if (!olmo1) rmsnorm(xn_ + first, x_ + first, final_norm_, rows, H, H, H, eps, stream_);
        // (OLMo-1: xn_ already holds LN(x) from the last add_layernorm)
        emit("final_norm", xn_ + first, rows, H, H);
        if (hook) {   // every position's logits, in a temporary buffer (tests only, never in a graph)
            float* all = nullptr;
            cudaCheck(cudaMalloc(&all, sizeof(float) * rows * c_.vocab));
            gemm(all, xn_ + first, lm_head_, rows, H, c_.vocab);                 // [rows, V] fp32
            emit("logits", all, rows, c_.vocab, c_.vocab);
            cudaCheck(cudaFree(all));
        }
        gemm(logits_, xn_ + (size_t)(n - 1) * H, lm_head_, 1, H, c_.vocab);      // [1, V] fp32
        if (sample) {
            if (sampling_.temperature <= 0.0f) argmax(next_id_, logits_, c_.vocab, stream_);
            else olmo::sample(next_id_, logits_, c_.vocab, SamplerParams{sampling_.temperature, sampling_.top_k, sampling_.top_p},
                        sampling_.seed, step_dev_, stream_);
        }
    }

    ModelConfig c_;
    cudaStream_t stream_ = nullptr;
    cublasHandle_t cublas_ = nullptr;
    Arena weights_, buffers_;
    std::vector<GpuLayer<T>> layers_;
    T *embed_ = nullptr, *lm_head_ = nullptr, *final_norm_ = nullptr;
    float* x_;
    T *xn_, *qkv_, *q_, *att_, *o_, *gu_, *a_;
    float* logits_;
    int *ids_, *pos_, *next_id_, *step_dev_;
    char *attn_ws_, *cublas_ws_;
    int* host_io_ = nullptr;   // pinned: [pos, step, ids...]
    SamplingParams sampling_, graph_sampling_;
    uint64_t step_ = 0;
    cudaGraphExec_t graph_exec_ = nullptr;
    bool graph_sample_ = false;
};

}  // namespace

bool cuda_available() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::unique_ptr<Engine> make_cuda_engine(const ModelConfig& c, const Checkpoint* ck, int max_seq, DeviceDType dt) {
    if (!cuda_available()) fail("no CUDA device available");
    switch (dt) {
        case DeviceDType::F32: return std::make_unique<CudaEngine<float>>(c, ck, max_seq);
        case DeviceDType::F16: return std::make_unique<CudaEngine<__half>>(c, ck, max_seq);
        case DeviceDType::BF16: break;
    }
    return std::make_unique<CudaEngine<__nv_bfloat16>>(c, ck, max_seq);
}

}  // namespace olmo
