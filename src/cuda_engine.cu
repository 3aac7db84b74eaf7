// cuda_engine.cu: the CUDA engine. The same forward pass as cpu_engine.cpp, op for op, as a
// list of kernel launches (kernels/*.cuh) and cuBLAS GEMMs.
//
//   T = storage type of weights, GEMM inputs and KV cache (bf16, fp16 or fp32; the KV cache may
//   instead be FP8, --kv-dtype fp8: LayerCache, with_pools); every kernel
//   computes in fp32 and rounds once. GEMMs accumulate in fp32; the kernel that consumes a
//   GEMM output rounds once into T (the next GEMM's input or the KV cache). G is the type the
//   two widest products, q|k|v and gate|up, are written in: bf16 when the weights are bf16,
//   which halves what RoPE and SwiGLU read (their outputs are bf16 anyway); fp32 for fp16 (its
//   range is too small for the products) and for FP8 (its products carry scales still to be
//   applied, fp8_gemm.h). The o and down products, which join the residual stream x, stay
//   fp32 (in bf16 as well they cost a golden bar: docs/architecture.md); x stays in fp32
//   (norm.cuh says why), and so do the logits. A is the type the norms, the attention and
//   SwiGLU hand the linear layers (xn_, att_, a_): T, except in the FP8 engine, where it is
//   fp16 (CudaEngine::A).
//
// Memory: the weights live in one allocation (cuda_weights.cuh: their layout and loading, FP8
// included); activations for one prefill chunk in a second; the paged KV pools (kv_cache.h) in
// a third. Nothing is allocated after construction, so a decode step over B
// sequences is captured once as a CUDA graph and replayed (decode_graphs.h): its inputs (token
// ids, positions, block tables: step_meta.h) live in device memory, fetched from pinned host
// memory by the graph's first kernel; its drawn ids go back the same way, and the next step is
// launched before they are read (pipelined decode: Engine::decode_sample).
//
// Several GPUs (--tp): each runs this engine on its shard of the model (tensor_parallel.h) with
// NCCL all-reduces where the shards' partial sums meet (all_reduce), and rank 0 gathers the
// logits (logits); tp_engine.cuh drives them.
#include <cublas_v2.h>
#include <nccl.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "attention.cuh"
#include "common.h"
#include "cuda_common.cuh"
#include "cuda_weights.cuh"
#include "decode_graphs.h"
#include "elementwise.cuh"
#include "engine.h"
#include "fp8_gemm.h"
#include "logprob.cuh"
#include "memory_check.h"
#include "norm.cuh"
#include "rope.cuh"
#include "sampling.cuh"
#include "step_meta.h"
#include "tensor_parallel.h"

namespace olmo {

namespace {

// Prefill chunk sizes, largest first: a prompt longer than the engine's chunk runs in chunks.
// Larger chunks run a long prompt's GEMMs and attention in fewer, fuller launches (a 32768-token
// prompt on the 7B shape: 1.4% faster in chunks of 16384 than of 4096, docs/attention_notes.md),
// but the activation buffers grow with them (7B: 0.6 GB at 4096 rows, 2.4 GB at 16384).
constexpr int kChunks[] = {16384, 8192, 4096};

template <typename T> constexpr cudaDataType_t cuda_type();
template <> constexpr cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <> constexpr cudaDataType_t cuda_type<__half>() { return CUDA_R_16F; }
template <> constexpr cudaDataType_t cuda_type<__nv_bfloat16>() { return CUDA_R_16BF; }

// A layer's KV pools and position encoding (its weights: cuda_weights.cuh). The pools hold T,
// or for an FP8 cache (--kv-dtype fp8) E4M3 codes and their scales (fp8.h).
template <typename T>
struct LayerCache {
    T* k_pool = nullptr;    // [blocks * block_size, KV]   paged K cache (kv_cache.h)
    T* v_pool = nullptr;    // [blocks * block_size, KV]
    uint8_t* k8 = nullptr;  // FP8: [blocks * block_size, KV] codes in place of k_pool,
    uint8_t* v8 = nullptr;  //      of v_pool,
    float* k_scale = nullptr, *v_scale = nullptr;   // and their scales [blocks * nKV * block_size]
    float* inv_freq;  // [hd/2]
    float rope_scale;
    int window;
    int kind;         // KvCache::kFull or kSliding: which block tables address its pools
};

#define ncclCheck(call)                                                                                            \
    do {                                                                                                           \
        const ncclResult_t r_ = (call);                                                                            \
        if (r_ != ncclSuccess) fail(std::string(__FILE__ ":") + std::to_string(__LINE__) + ": " #call ": " + ncclGetErrorString(r_)); \
    } while (0)

// The NCCL type of a storage type (the K/V rows context parallel exchanges).
template <typename T> ncclDataType_t nccl_type() {
    if constexpr (std::is_same_v<T, float>) return ncclFloat;
    else if constexpr (std::is_same_v<T, uint8_t>) return ncclUint8;   // an FP8 cache's codes
    else if constexpr (std::is_same_v<T, __half>) return ncclHalf;
    else return ncclBfloat16;
}

// A rank's link to the others when several GPUs run one model: tensor parallel (tensor_parallel.h,
// TpEngine) holds a shard of it; context parallel (context_parallel.h, CpEngine) the whole model,
// with a share of a long prompt's tokens (cp_ranks > 1). Its NCCL communicator, and the block
// tables, which the engine driving the ranks keeps for them all.
struct TpRank : TpShard {
    ncclComm_t comm = nullptr;
    const KvCache* kv = nullptr;
    int cp_rank = 0, cp_ranks = 1;
};

template <typename T, typename G> class TpEngine;
template <typename T, typename G> class CpEngine;
template <typename T, typename G> class MultiGpuEngine;

template <typename T, typename G>
class CudaEngine : public Engine {
    friend class TpEngine<T, G>;
    friend class CpEngine<T, G>;
    friend class MultiGpuEngine<T, G>;
    // The linear layers' inputs xn_ (the residual, or LN(x)), att_ (the attention's output) and
    // a_ (SwiGLU's output): T, but fp16 in the FP8 engine (bf16 storage with fp32 products: no
    // other engine has those types). There every decode product widens its E4M3 weights to the
    // input's type, and to fp16 that is one instruction per pair where bf16 takes four: decode
    // is 2-3% faster (docs/fp8.md, "Session 33"), and fp16 holds these values more precisely
    // than bf16 up to 65504, past which they overflow and the logits come out non-finite (a
    // clear error, as with --dtype fp16). The embedding and norm weights, the residual stream,
    // q and the KV cache keep T.
    using A = std::conditional_t<std::is_same_v<T, __nv_bfloat16> && std::is_same_v<G, float>, __half, T>;
public:
    // fp8: the linear layers' weights in FP8 (fp8.h), quantized here from the checkpoint.
    // max_chunk: the most rows a prefill runs at once (0: choose_chunk).
    // tp: with tp.ranks > 1, c is this rank's shard of tp.full, and a TpEngine drives it.
    // kv_fp8: the KV cache in FP8 (16-bit T; alone or as a rank of a TpEngine or CpEngine).
    CudaEngine(const ModelConfig& c, const Checkpoint* ck, int max_seq, int kv_blocks, int max_batch, bool fp8,
               LoadProgress* progress, int max_chunk, const TpRank& tp = {}, bool kv_fp8 = false)
        : c_(c), max_batch_(max_batch), w_(c, ck, fp8, tp), tp_(tp), kv8_(kv_fp8) {
        if (kv8_ && std::is_same_v<T, float>) fail("--kv-dtype fp8 needs --dtype bf16, fp16 or fp8 on the GPU");
        init_kv(c, max_seq, kv_blocks);
        kv_src_ = tp.kv ? tp.kv : kv_.get();
        stride_ = (max_seq_ + kv_src_->block_size() - 1) / kv_src_->block_size() + 1;
        layers_.resize(c.n_layers);
        chunk_ = max_chunk > 0 ? std::min(max_seq_, max_chunk) : choose_chunk();
        meta_.reserve(std::max(chunk_, max_batch_), max_batch_, stride_);
        cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        cublasCheck(cublasCreate(&cublas_));
        cublasCheck(cublasSetStream(cublas_, stream_));
        cublasCheck(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));   // fp32 stays true fp32 (no TF32)
        carve();                 // count sizes
        check_fits(memory_need(), gpu_free_bytes(), "free on the GPU");
        w_.allocate(stream_);
        buffers_.allocate();
        kv_arena_.allocate();
        carve();                 // hand out pointers
        cublasCheck(cublasSetWorkspace(cublas_, cublas_ws_, kCublasWorkspace));
        if (fp8) fp8_gemm_ = std::make_unique<Fp8Gemm>(cublas_ws_, kCublasWorkspace);
        w_.load(ck, progress, stream_);
        upload_rope();
        meta_.reset_counter(stream_);
        cudaCheck(cudaMallocHost(&host_ids_, sizeof(int) * max_batch_));
        cudaCheck(cudaHostAlloc(&id_slots_, sizeof(int) * 2 * max_batch_, cudaHostAllocMapped));
        cudaCheck(cudaHostGetDevicePointer(&id_slots_dev_, id_slots_, 0));
        for (cudaEvent_t& e : slot_ready_) cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        cudaCheck(cudaStreamSynchronize(stream_));
    }

    ~CudaEngine() override {
        cudaStreamSynchronize(stream_);   // a decode step started ahead may still run
        for (cudaEvent_t e : slot_ready_) cudaEventDestroy(e);
        cudaFreeHost(id_slots_);
        cudaFreeHost(host_ids_);
        cublasDestroy(cublas_);
        cudaStreamDestroy(stream_);
    }

    const ModelConfig& config() const override { return c_; }

    // The rehearsal (Engine::rehearse) runs the first request's shapes, a long prompt's only in
    // part. cuBLAS chooses a kernel the first time it meets a row count, and loads a kernel the
    // first time it runs one: 1 to 14 ms of host time for the four products of a 7B layer, which
    // the prompt's first layer would wait for (docs/architecture.md). So the row counts of the
    // prompt's chunks get one layer's products here.
    void warm_up(const WarmUp& w) override {
        rehearse(w);
        warm_products(w);
    }
    void warm_products(const WarmUp& w) {
        const int n = w.prompt_len;
        for (int rows : {std::min(n, chunk_), n > chunk_ ? n % chunk_ : 0})
            if (rows > 0) rehearse_products(rows);
    }
    int max_batch() const override { return max_batch_; }

    MemoryUse memory() const override {
        MemoryUse m;
        m.weights = w_.bytes();
        m.weight_format = w_.format();
        m.kv_pool = kv_arena_.size;
        m.kv_format = kv8_ ? "FP8 E4M3, a scale per token and KV head" : std::is_same_v<T, float> ? "fp32"
                      : std::is_same_v<T, __half> ? "fp16" : "bf16";
        m.other = buffers_.size;
        return with_pool_use(m);
    }

protected:
    // One sequence, any number of tokens: chunks of at most chunk_ tokens, run eagerly.
    void prefill_impl(int seq, const std::vector<int>& ids, float* logits, int* id, const SamplingParams& s,
                      uint64_t step) override {
        const int pos0 = kv_src_->len(seq);
        for (size_t done = 0; done < ids.size();) {
            const int n = (int)std::min(ids.size() - done, (size_t)chunk_);
            const bool last = done + n == ids.size();
            std::vector<int> pos(n);
            for (int r = 0; r < n; r++) pos[r] = pos0 + (int)done + r;
            meta_.upload(*kv_src_, std::vector<int>(ids.begin() + done, ids.begin() + done + n), pos, {seq}, {step},
                         stream_);
            forward_rows(n, /*batch=*/1, /*prefill=*/true, last ? Out::Logits : Out::CacheOnly);
            if (last && id) draw({s});
            done += n;
        }
        sync_out(1, logits, id);
    }

    // Several sequences, one token each: one batched step, replayed from a CUDA graph that is
    // captured once per batch size and output mode.
    void decode_impl(const std::vector<int>& seqs, const std::vector<int>& ids, float* logits, int* ids_out,
                     const std::vector<SamplingParams>& s, const std::vector<uint64_t>& steps) override {
        if (!logits && ids_out) {
            decode_start(seqs, ids.data(), s, steps);
            return decode_finish(ids_out);
        }
        launch_decode(seqs, ids, ids_out ? s : std::vector<SamplingParams>{}, steps, /*fed=*/false);   // no draws: logits only
        sync_out((int)seqs.size(), logits, ids_out);
        finished_ = started_;
    }

    // A step that draws: its graph ends by storing the ids in pinned host memory (row `slot` of
    // id_slots_), and an event recorded behind it says they are there. The host waits for that
    // event, not for the stream, so the step after it can already be queued (Engine::
    // decode_sample's step ahead); the two slots take turns.
    bool pipelined() const override { return true; }
    void decode_start(const std::vector<int>& seqs, const int* ids, const std::vector<SamplingParams>& s,
                      const std::vector<uint64_t>& steps) override {
        const int B = (int)seqs.size();
        const int slot = launch_decode(seqs, ids ? std::vector<int>(ids, ids + B) : std::vector<int>(B, 0), s, steps, !ids);
        slot_n_[slot] = B;
        cudaCheck(cudaEventRecord(slot_ready_[slot], stream_));
    }
    void decode_finish(int* ids_out) override {
        const int slot = finished_++ % 2, B = slot_n_[slot];
        cudaCheck(cudaEventSynchronize(slot_ready_[slot]));
        std::copy(id_slots_ + slot * B, id_slots_ + (slot + 1) * B, ids_out);
    }
    void decode_drop() override {
        cudaCheck(cudaStreamSynchronize(stream_));
        finished_ = started_;
    }

    // Stages the step's metadata and launches its graph, which fetches it first (step_meta.h);
    // returns the step's slot (its count % 2), which names its staging buffer and the row its
    // drawn ids go to. fed: the tokens are the ones the step before drew, read where it left
    // them (next_ids_), and `ids` is not read.
    int launch_decode(const std::vector<int>& seqs, const std::vector<int>& ids, const std::vector<SamplingParams>& draws,
                      const std::vector<uint64_t>& steps, bool fed) {
        const int B = (int)seqs.size();
        if (B > max_batch_)
            fail("decode: " + std::to_string(B) + " sequences in one step, the engine was built for at most " +
                 std::to_string(max_batch_));
        std::vector<int> pos(B);
        for (int b = 0; b < B; b++) pos[b] = kv_src_->len(seqs[b]);
        const int slot = started_++ % 2;
        meta_.stage(slot, *kv_src_, ids, pos, seqs, steps);
        graphs_.launch(B, draws, fed, stream_, [&] {
            meta_.fetch_staged(B, stream_);
            forward_rows(B, B, /*prefill=*/false, Out::Logits, fed ? next_ids_ : meta_.ids);
            draw(draws, /*to_host=*/true);
        });
        return slot;
    }

    // A prefill in chunks of at most chunk_ rows whose every row is scored against the next id:
    // only the log-probabilities [n-1] leave the device.
    void score_impl(int seq, const std::vector<int>& ids, float* logprobs) override {
        const int pos0 = kv_src_->len(seq);
        for (size_t done = 0; done < ids.size();) {
            const int n = (int)std::min(ids.size() - done, (size_t)chunk_);
            std::vector<int> pos(n), target(n);
            for (int r = 0; r < n; r++) {
                pos[r] = pos0 + (int)done + r;
                target[r] = done + r + 1 < ids.size() ? ids[done + r + 1] : -1;   // the last row has none
            }
            meta_.upload(*kv_src_, std::vector<int>(ids.begin() + done, ids.begin() + done + n), pos, {seq}, {0},
                         stream_);
            cudaCheck(cudaMemcpyAsync(targets_, target.data(), sizeof(int) * n, cudaMemcpyHostToDevice, stream_));
            forward_rows(n, /*batch=*/1, /*prefill=*/true, Out::Scores);
            const size_t scored = std::min((size_t)n, ids.size() - 1 - done);
            if (logprobs)   // (tensor parallel: rank 0's)
                cudaCheck(cudaMemcpyAsync(logprobs + done, logprobs_, sizeof(float) * scored, cudaMemcpyDeviceToHost, stream_));
            cudaCheck(cudaStreamSynchronize(stream_));   // `target` is read before it goes
            done += n;
        }
    }

    void copy_block(int kind, int src, int dst) override {
        const size_t n = (size_t)kv_src_->block_size() * c_.kv_dim(), ns = (size_t)kv_src_->block_size() * c_.n_kv_heads;
        auto copy = [&](auto* pool, size_t count) {   // block dst of `pool` <- block src (count elements a block)
            cudaCheck(cudaMemcpyAsync(pool + dst * count, pool + src * count, count * sizeof(*pool), cudaMemcpyDeviceToDevice,
                                      stream_));
        };
        for (LayerCache<T>& L : layers_) {
            if (L.kind != kind) continue;
            if (!kv8_) {
                copy(L.k_pool, n), copy(L.v_pool, n);
            } else {   // a block's scales are one run (kv_scale_index)
                copy(L.k8, n), copy(L.v8, n), copy(L.k_scale, ns), copy(L.v_scale, ns);
            }
        }
    }

private:
    static constexpr size_t kCublasWorkspace = 32 << 20;

    // What the engine needs on the GPU once carve() has measured the arenas. (FP8: the buffers
    // include the staging area the load quantizes from, freed after it.)
    MemoryNeed memory_need() const { return {w_.bytes(), kv_arena_.used, buffers_.used + w_.staging_bytes()}; }

    // The prefill chunk: the largest of kChunks (capped at max_seq) with which everything leaves
    // a tenth of the free GPU memory spare; else the smallest, which check_fits then judges.
    int choose_chunk() {
        const size_t free = gpu_free_bytes();
        for (int rows : kChunks) {
            chunk_ = std::min(max_seq_, rows);
            carve();   // measures (the step metadata, not reserved yet, counts as nothing: a few KB)
            const MemoryNeed need = memory_need();
            buffers_.used = kv_arena_.used = 0;
            if (need.total() <= free - free / 10) break;
        }
        return chunk_;
    }

    // Lays out the KV pools and the buffers. Called twice: first to measure (arenas empty), then
    // to assign pointers into the allocated arenas.
    void carve() {
        const size_t H = c_.hidden, I = c_.intermediate, Q = c_.q_dim(), KV = c_.kv_dim(), V = c_.vocab;
        const size_t C = chunk_, hd2 = c_.head_dim / 2;
        for (int l = 0; l < c_.n_layers; l++) {
            LayerCache<T>& L = layers_[l];
            L.kind = c_.layer_sliding[l] ? KvCache::kSliding : KvCache::kFull;
            const size_t rows = (size_t)kv_src_->total_blocks(L.kind) * kv_src_->block_size();
            if (kv8_) {
                L.k8 = kv_arena_.take<uint8_t>(rows * KV), L.v8 = kv_arena_.take<uint8_t>(rows * KV);
                L.k_scale = kv_arena_.take<float>(rows * c_.n_kv_heads), L.v_scale = kv_arena_.take<float>(rows * c_.n_kv_heads);
            } else {
                L.k_pool = kv_arena_.take<T>(rows * KV), L.v_pool = kv_arena_.take<T>(rows * KV);
            }
        }
        Arena& b = buffers_;
        for (auto& L : layers_) L.inv_freq = b.take<float>(hd2);
        x_ = b.take<float>(C * H);          // residual stream   [C, H] fp32
        xn_ = b.take<A>(C * H);             // next GEMM's input [C, H]: LN(x) (OLMo-1) or x in A
        qkv_ = b.take<G>(C * (Q + 2 * KV));  // fused projection [C, Q+2KV] G
        q_ = b.take<T>(C * Q);              // roped queries     [C, Q]
        att_ = b.take<A>(C * Q);            // attention output  [C, Q] A
        o_ = b.take<float>(C * H);          // o_proj / MLP out  [C, H] fp32
        gu_ = b.take<G>(C * 2 * I);         // gate | up         [C, 2I] G
        a_ = b.take<A>(C * I);              // swiglu            [C, I] A
        if (w_.fp8()) {                     // a GEMM's input in FP8, one scale per row
            const size_t rows = std::max(chunk_, max_batch_), K = fp8_padded_cols((int)std::max({H, Q, I}));
            x8_ = b.take<uint8_t>(rows * K);
            x8_scale_ = b.take<float>(rows);
        }
        logits_ = b.take<float>(std::max(max_batch_, kScoreRows) * V);   // fp32 logits [B, V]; scoring: [kScoreRows, V]
        targets_ = b.take<int>(C);          // scoring: each row's next token (-1: none)  [C]
        logprobs_ = b.take<float>(C);       // scoring: each row's log p(target)          [C]
        next_ids_ = b.take<int>(max_batch_);       // sampled tokens [B]
        meta_.place(b.take<int>(meta_.ints()));   // step metadata (step_meta.h), filled by one copy
        attn_ws_ = b.take<char>(attention_decode_workspace_bytes(c_.n_heads, c_.head_dim, max_seq_, max_batch_));
        if constexpr (!std::is_same_v<T, float>)
            if (kv8_ && attention_prefill_hopper_runs(c_.head_dim))   // (one sequence's keys: 1/layers of its bf16 cache)
                prefill_ws_ = b.take<char>(attention_prefill_fp8_workspace_bytes<T>(c_.n_kv_heads, c_.head_dim, max_seq_,
                                                                                    kv_src_->block_size()));
        if (tp_.cp_ranks > 1) {             // context parallel: the K/V exchange (exchange_kv)
            const size_t N = tp_.cp_ranks;
            for (int k = 0; k < 2; k++) cp_rows_[k] = b.take<int>(N * C);   // each rank's tokens' pool rows [N, C]
            cp_pos0_ = b.take<int>(2);                                      // this rank's two chunks' first positions
            cp_send_[0] = b.take<T>(C * KV), cp_send_[1] = b.take<T>(C * KV);           // its K, V rows [C, KV]
            cp_recv_[0] = b.take<T>(N * C * KV), cp_recv_[1] = b.take<T>(N * C * KV);   // every rank's [N, C, KV]
            // (An FP8 cache's rows take a byte an element and their scales nKV floats: both fit in
            // a 16-bit row's room, [C, KV] codes then [C, nKV] scales, for any head size >= 4.)
        }
        if (tp_.ranks > 1) {
            sumsq_ = b.take<float2>(std::max(chunk_, max_batch_));   // QK-norm sums [C]
            part_ = b.take<float>(std::max(max_batch_, kScoreRows) * V);   // the ranks' logits, gathered on rank 0
        }
        cublas_ws_ = b.take<char>(kCublasWorkspace);
    }

    void upload_rope() {
        for (int i = 0; i < c_.n_layers; i++) {
            std::vector<float> f = c_.rope(i).inv_freq(c_.head_dim);
            cudaCheck(cudaMemcpy(layers_[i].inv_freq, f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice));
            layers_[i].rope_scale = c_.rope(i).attention_factor;
            layers_[i].window = c_.window(i);
        }
    }

    // y[rows, N] (Y: fp32 or G) = x[rows, K] · W[N, K]ᵀ, fp32 accumulation.
    // FP8 weights (G is fp32): the small-batch kernel for a few rows (decode), else x quantized
    // per row and cuBLASLt's FP8 GEMM (or, for a width cuBLASLt refuses, the small-batch kernel
    // 16 rows at a time). The FP8 GEMM leaves its scales pending (fp8_gemm.h): they are
    // returned, for the kernel that reads y to apply, which must run before the next linear()
    // overwrites x8_scale_. With a tensor hook (it reads y as it is) they are applied here;
    // linear_final always applies them.
    // x is T or A (the attention's output is T, xn_ and a_ are A).
    template <typename Y, typename X>
    PendingScale linear(Y* y, const X* x, const Weight<T>& W, int rows) {
        if (!W.f8.q) {
            if constexpr (std::is_same_v<X, T>) gemm(y, x, W.w, rows, W.K, W.N);
            else fail("linear: a 16-bit weight needs its input in its own type");
            return {};
        }
        if constexpr (std::is_same_v<T, float> || !std::is_same_v<Y, float>) {
            fail("FP8 weights need a 16-bit activation type and fp32 products");
        } else if (rows <= kFp8GemvMaxRows || !Fp8Gemm::supports(W.f8)) {
            for (int r = 0; r < rows; r += kFp8GemvMaxRows)
                fp8_gemv(y + (size_t)r * W.N, x + (size_t)r * W.K, W.f8, std::min(kFp8GemvMaxRows, rows - r), stream_);
        } else {
            quantize_rows_fp8(x8_, x8_scale_, x, rows, W.K, W.f8.ld, stream_);
            PendingScale s = fp8_gemm_->run(y, x8_, x8_scale_, W.f8, rows, stream_);
            if (hook) settle(y, s, rows, W.N);
            return s;
        }
        return {};
    }
    template <typename X>
    void linear_final(float* y, const X* x, const Weight<T>& W, int rows) {
        PendingScale s = linear(y, x, W, rows);
        settle(y, s, rows, W.N);
    }
    // Applies the scales pending on y [rows, cols] (one pass), so that y is final. (Only FP8's
    // products carry scales, and they are fp32.)
    template <typename Y>
    void settle(Y* y, PendingScale& s, int rows, int cols) {
        if constexpr (std::is_same_v<Y, float>)
            if (s.row) scale_rows_cols(y, s.row, s.col, rows, cols, stream_);
        s = {};
    }

    // a [rows, I] (A) = silu(gate) · up of x · Wᵀ, W [2I, K] the fused gate | up weight. FP8
    // weights and a few rows (decode): one kernel, SwiGLU in the product's epilogue; else the
    // product into gu_ [rows, 2I], then swiglu.
    void gate_up_swiglu(A* a, const A* x, const Weight<T>& W, int rows) {
        if constexpr (!std::is_same_v<T, float>)
            if (W.f8.q && rows <= kFp8GemvMaxRows) return fp8_gemv_swiglu(a, x, W.f8, rows, stream_);
        const PendingScale s = linear(gu_, x, W, rows);
        swiglu(a, gu_, rows, W.N / 2, stream_, s);
    }

    // ---- context parallel (cp_engine.cuh) ----

    // This rank's share of one round of a prompt of sequence seq: tokens ids at positions pos, its
    // two chunks (the first `split` of them in the first, starting at pos0[0]; the rest from
    // pos0[1]); rows[kind][q·cmax + i]: the pool row of rank q's i-th token (-1 for this rank's
    // own and past a rank's count). logits: on the rank that ends the prompt.
    void cp_round(int seq, const std::vector<int>& ids, const std::vector<int>& pos, int split, int cmax,
                  const std::vector<int> rows[2], const int pos0[2], uint64_t step, bool logits) {
        meta_.upload(*kv_src_, ids, pos, {seq}, {step}, stream_);
        for (int k = 0; k < 2; k++)   // (pageable: copied out before the call returns)
            cudaCheck(cudaMemcpyAsync(cp_rows_[k], rows[k].data(), rows[k].size() * sizeof(int), cudaMemcpyHostToDevice, stream_));
        cudaCheck(cudaMemcpyAsync(cp_pos0_, pos0, 2 * sizeof(int), cudaMemcpyHostToDevice, stream_));
        cp_split_ = split, cp_cmax_ = cmax;
        cp_round_ = true;   // (a prefill on this rank alone, e.g. rank 0's of a short prompt, exchanges nothing)
        forward_rows((int)ids.size(), /*batch=*/1, /*prefill=*/true, logits ? Out::Logits : Out::CacheOnly);
        cp_round_ = false;
    }

    // After layer L's RoPE has put this rank's n K/V rows in its pools: every rank's rows to every
    // rank. Packed into [cmax, KV] (copy_rows), all-gathered into [N, cmax, KV], then each other
    // rank's rows into their places in the pools. An FP8 cache moves its codes so, and their
    // scales the same way beside them ([cmax, nKV] and [N, cmax, nKV], copy_scale_rows).
    void exchange_kv(const LayerCache<T>& L, int n) {
        const int KV = c_.kv_dim(), nKV = c_.n_kv_heads, N = tp_.cp_ranks, C = cp_cmax_, bs = kv_src_->block_size();
        const int* mine = meta_.rows[L.kind];
        with_pools(L, [&](auto* k, auto* v) {
            using P = std::remove_pointer_t<decltype(k)>;   // T, or an FP8 cache's codes
            constexpr bool fp8 = !std::is_same_v<P, T>;
            P* pool[2] = {k, v};
            float* scale[2] = {L.k_scale, L.v_scale};
            P *send[2], *recv[2];
            float *send_s[2], *recv_s[2];   // FP8: the scales, after the codes
            for (int i = 0; i < 2; i++) {
                send[i] = reinterpret_cast<P*>(cp_send_[i]), recv[i] = reinterpret_cast<P*>(cp_recv_[i]);
                send_s[i] = reinterpret_cast<float*>(send[i] + (size_t)C * KV);       // [C, nKV]
                recv_s[i] = reinterpret_cast<float*>(recv[i] + (size_t)N * C * KV);   // [N, C, nKV]
                copy_rows(send[i], pool[i], nullptr, mine, n, KV, stream_);
                if constexpr (fp8) copy_scale_rows(send_s[i], scale[i], nullptr, mine, n, nKV, bs, stream_);
            }
            ncclCheck(ncclGroupStart());
            for (int i = 0; i < 2; i++) {
                ncclCheck(ncclAllGather(send[i], recv[i], (size_t)C * KV, nccl_type<P>(), tp_.comm, stream_));
                if constexpr (fp8) ncclCheck(ncclAllGather(send_s[i], recv_s[i], (size_t)C * nKV, ncclFloat, tp_.comm, stream_));
            }
            ncclCheck(ncclGroupEnd());
            for (int i = 0; i < 2; i++) {
                copy_rows(pool[i], recv[i], cp_rows_[L.kind], nullptr, N * C, KV, stream_);
                if constexpr (fp8) copy_scale_rows(scale[i], recv_s[i], cp_rows_[L.kind], nullptr, N * C, nKV, bs, stream_);
            }
        });
    }

    // This rank's m query rows are two chunks of the prompt (cp_tokens), each attended as a
    // prefill chunk of its own over every key before it (all in the cache after exchange_kv).
    template <typename C>
    void attend_two_chunks(const AttnParams<T, C>& ap, int m) {
        const int Q = c_.q_dim(), count[2] = {cp_split_, m - cp_split_};
        for (int part = 0, r0 = 0; part < 2; r0 += count[part], part++) {
            if (count[part] == 0) continue;
            AttnParams<T, C> a = ap;
            a.q = ap.q + (size_t)r0 * Q, a.n_q = count[part], a.pos0 = cp_pos0_ + part;
            if (ap.out16) a.out16 = ap.out16 + (size_t)r0 * Q;
            else a.out = ap.out + (size_t)r0 * Q;
            if (count[part] > 1) attention_prefill(a, stream_, PrefillKernel::Best, prefill_ws_);
            else attention_decode(a, attn_ws_, stream_);
        }
    }

    // Tensor parallel: x [n] (fp32) summed over the ranks, on every rank (in place).
    void all_reduce(float* x, size_t n) {
        ncclCheck(ncclAllReduce(x, x, n, ncclFloat, ncclSum, tp_.comm, stream_));
    }
    // The end of a row-parallel product (o, down), its output y [m, H] with scales s pending:
    // x += RMSNorm(y) · w, xn = x in T (OLMo-1: x += y, xn = LayerNorm(x)). Tensor parallel: y
    // is a partial sum on each rank, so its scales are applied (they differ between ranks) and
    // it is summed over the ranks first. hold: the kernel behind waits for the norm's own wait
    // before it launches (the attention half's norm: norm.cuh).
    void residual(float* x, float* y, PendingScale s, const T* w, A* xn, int m, bool hold = false) {
        const int H = c_.hidden;
        const float eps = c_.norm_eps;
        if (tp_.ranks > 1) {
            settle(y, s, m, H);
            all_reduce(y, (size_t)m * H);
        }
        if (c_.family == Family::Olmo1) add_layernorm(x, y, xn, m, H, eps, stream_, s);
        else add_rmsnorm(x, y, w, xn, m, H, eps, stream_, s, hold);
    }

    // The same in T with cuBLAS. In its column-major terms: yᵀ (N x rows) = W (op T of the
    // K x N column-major view) · xᵀ (K x rows).
    template <typename Y>
    void gemm(Y* y, const T* x, const T* W, int rows, int K, int N) {
        const float one = 1.0f, zero = 0.0f;
        cublasCheck(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, N, rows, K, &one, W, cuda_type<T>(), K, x,
                                 cuda_type<T>(), K, &zero, y, cuda_type<Y>(), N, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    }

    // One layer's four products over `rows` rows of zeros (nothing reads their results).
    void rehearse_products(int rows) {
        const LayerWeights<T>& W = w_.layers[0];
        cudaCheck(cudaMemsetAsync(xn_, 0, sizeof(A) * rows * c_.hidden, stream_));
        cudaCheck(cudaMemsetAsync(att_, 0, sizeof(A) * rows * c_.q_dim(), stream_));
        cudaCheck(cudaMemsetAsync(a_, 0, sizeof(A) * rows * c_.intermediate, stream_));
        linear(qkv_, xn_, W.wqkv, rows);
        linear(o_, att_, W.wo, rows);
        linear(gu_, xn_, W.wgu, rows);
        linear(o_, a_, W.wdown, rows);
        cudaCheck(cudaStreamSynchronize(stream_));
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

    // K rows of this prefill chunk, gathered from the pool for the hook ("k_rope"): the values
    // the cache gives back (an FP8 cache's codes times their scales).
    void emit_cache(const std::string& name, const LayerCache<T>& L, int n) {
        if (!hook) return;
        const int KV = c_.kv_dim(), hd = c_.head_dim, bs = kv_src_->block_size();
        std::vector<int> rows(n);
        cudaCheck(cudaMemcpy(rows.data(), meta_.rows[L.kind], n * sizeof(int), cudaMemcpyDeviceToHost));
        std::vector<float> f((size_t)n * KV);
        with_pools(L, [&](auto* k, auto*) {
            using C = std::remove_pointer_t<decltype(k)>;
            std::vector<C> h(KV);
            for (int r = 0; r < n; r++) {
                cudaCheck(cudaMemcpy(h.data(), k + (size_t)rows[r] * KV, KV * sizeof(C), cudaMemcpyDeviceToHost));
                float scale = 1.0f;   // (FP8: the scale of head i / hd)
                for (int i = 0; i < KV; i++) {
                    if constexpr (kFp8Cache<C>) {
                        if (i % hd == 0)
                            cudaCheck(cudaMemcpy(&scale, L.k_scale + kv_scale_index(rows[r], i / hd, c_.n_kv_heads, bs),
                                                 sizeof(float), cudaMemcpyDeviceToHost));
                        f[(size_t)r * KV + i] = scale * e4m3_to_float(h[i]);
                    } else {
                        f[(size_t)r * KV + i] = to_float(h[i]);
                    }
                }
            }
        });
        hook(name, f.data(), n, KV);
    }

    // After the forward: logits_ [B, V] hold each sequence's last-token logits; next_ids_[b]
    // gets a token drawn with s[b], and with to_host (a decode step) also id_slots_[slot, b]:
    // the drawing kernel's own stores cross to the host, so no copy runs between two steps.
    void draw(const std::vector<SamplingParams>& s, bool to_host = false) {
        const int V = c_.vocab, B = (int)s.size();
        for (int b = 0; b < B; b++) {
            const IdSink out = to_host ? IdSink(next_ids_ + b, id_slots_dev_, meta_.slot, B, b) : IdSink(next_ids_ + b);
            if (s[b].greedy()) argmax(out, logits_ + (size_t)b * V, V, stream_);
            else olmo::sample(out, logits_ + (size_t)b * V, V, s[b], meta_.step + b, stream_);
        }
    }

    void sync_out(int B, float* logits, int* ids) {
        if (logits)
            cudaCheck(cudaMemcpyAsync(logits, logits_, sizeof(float) * B * c_.vocab, cudaMemcpyDeviceToHost, stream_));
        if (ids) cudaCheck(cudaMemcpyAsync(host_ids_, next_ids_, sizeof(int) * B, cudaMemcpyDeviceToHost, stream_));
        cudaCheck(cudaStreamSynchronize(stream_));
        if (ids) std::copy(host_ids_, host_ids_ + B, ids);
    }

    // What a forward pass leaves behind, besides the rows' K/V in the cache: the fp32 logits of
    // each sequence's last token in logits_ [batch, V]; each row's log-probability of
    // targets_[row] in logprobs_ [n] (a prefill chunk being scored: score_rows); or nothing
    // more (a prefill chunk before the prompt's last).
    enum class Out { Logits, Scores, CacheOnly };

    // The forward pass over n token rows described by meta_ (a prefill chunk of one sequence,
    // or one token for each of `batch` sequences): a list of launches.
    // ids: the rows' token ids on the device (null: meta_.ids).
    void forward_rows(int n, int batch, bool prefill, Out out = Out::Logits, const int* ids = nullptr) {
        const int H = c_.hidden, Q = c_.q_dim(), KV = c_.kv_dim(), QKV = Q + 2 * KV;
        const bool olmo1 = c_.family == Family::Olmo1;
        const float eps = c_.norm_eps;

        embedding(xn_, x_, w_.embed, ids ? ids : meta_.ids, n, H, stream_);       // [n, H] in A, and in fp32: the residual
        emit("embed", x_, n, H, H);
        if (olmo1) layernorm(xn_, x_, n, H, eps, stream_);
        for (int l = 0; l < c_.n_layers; l++) {
            const LayerWeights<T>& W = w_.layers[l];
            const LayerCache<T>& L = layers_[l];
            const std::string name = "layers." + std::to_string(l) + ".";
            // --- attention half ---
            PendingScale s_qkv = linear(qkv_, xn_, W.wqkv, n);                  // [n, Q+2KV] (tp: this rank's heads)
            if (olmo1 && c_.clip_qkv > 0) {                                      // clips the final values
                settle(qkv_, s_qkv, n, QKV);
                clip(qkv_, (int64_t)n * QKV, c_.clip_qkv, stream_);
            }
            rope(L, W, s_qkv, n);                                                // q -> q_, k/v -> pool rows
            if (cp_round_) exchange_kv(L, n);                                    // context parallel: every rank's K/V rows
            emit(name + "q", qkv_, n, Q, QKV);
            emit(name + "k", qkv_ + Q, n, KV, QKV);
            emit(name + "v", qkv_ + Q + KV, n, KV, QKV);
            emit(name + "q_rope", q_, n, Q, Q);
            emit_cache(name + "k_rope", L, n);
            // The last layer's output is read only by the logits, so once its K/V are in the
            // cache a prefill carries on with its last row alone (rows r0 .. n-1), or with none
            // before the prompt's last chunk. Decode, scoring and the hooks keep every row.
            const bool prune = prefill && l + 1 == c_.n_layers && out != Out::Scores && !hook;
            if (prune && out == Out::CacheOnly) return;
            const size_t r0 = prune ? n - 1 : 0;
            const int m = n - (int)r0;
            attend(L, r0, m, batch, prefill, prune);                             // att_ rows r0 .. n-1
            emit(name + "attn", att_, n, Q, Q);
            float *x = x_ + r0 * H, *o = o_ + r0 * H;
            A *xn = xn_ + r0 * H, *a = a_ + r0 * c_.intermediate;
            residual(x, o, linear(o, att_ + r0 * Q, W.wo, m), W.attn_norm, xn, m, true);   // x += RMSNorm(o); xn = x
            emit(name + "o_proj", o_, n, H, H);                                  //  (OLMo-1: x += o; xn = LN(x))
            emit(name + "resid_attn", x_, n, H, H);
            // --- MLP half ---
            gate_up_swiglu(a, xn, W.wgu, m);                                     // [m, I]
            residual(x, o, linear(o, a, W.wdown, m), W.ff_norm, xn, m);          // also the next layer's LN
            emit(name + "mlp", o_, n, H, H);
            emit(name + "out", x_, n, H, H);
        }
        // Final norm and logits of each sequence's last row (prefill: row n-1; decode: all rows),
        // and of every row when a hook wants them. (Tensor parallel: every rank has x, and makes
        // the logits of its part of the vocabulary; rank 0 gathers them.)
        const bool score = out == Out::Scores;
        const int first = prefill ? (hook || score ? 0 : n - 1) : 0, rows = n - first;
        if (!olmo1) rmsnorm(xn_ + (size_t)first * H, x_ + (size_t)first * H, w_.final_norm, rows, H, H, H, eps, stream_);
        // (OLMo-1: xn_ already holds LN(x) from the last add_layernorm)
        emit("final_norm", xn_ + (size_t)first * H, rows, H, H);
        if (hook) {   // every position's logits, in temporary buffers (tests only, never in a graph)
            float *all = nullptr, *part = nullptr;
            cudaCheck(cudaMalloc(&all, sizeof(float) * rows * c_.vocab));
            if (tp_.ranks > 1) cudaCheck(cudaMalloc(&part, sizeof(float) * rows * c_.vocab));
            logits(all, xn_ + (size_t)first * H, rows, part);                   // [rows, V] fp32
            if (tp_.rank == 0) emit("logits", all, rows, c_.vocab, c_.vocab);
            cudaCheck(cudaFree(all));
            cudaCheck(cudaFree(part));
        }
        if (score) return score_rows(n);
        const int out_rows = prefill ? 1 : batch;
        logits(logits_, xn_ + (size_t)(n - out_rows) * H, out_rows, part_);      // [out_rows, V] fp32
    }

    // Calls f(k, v) with layer L's pools as the kernels take them: T, or an FP8 cache's codes.
    template <typename F>
    void with_pools(const LayerCache<T>& L, F&& f) {
        if constexpr (!std::is_same_v<T, float>)
            if (kv8_) return f(L.k8, L.v8);
        f(L.k_pool, L.v_pool);
    }

    // RoPE with the QK-norm of the n rows of qkv_ (the q|k|v product, its scales s pending): the
    // queries into q_, the keys and values into their rows of layer L's pools.
    void rope(const LayerCache<T>& L, const LayerWeights<T>& W, PendingScale s, int n) {
        const int Q = c_.q_dim(), KV = c_.kv_dim();
        with_pools(L, [&](auto* k, auto* v) {
            using C = std::remove_pointer_t<decltype(k)>;
            RopeParams<T, G, C> rp{qkv_, q_, k, v, n, meta_.pos, meta_.rows[L.kind], c_.n_heads, c_.n_kv_heads, c_.head_dim,
                                   L.inv_freq, L.rope_scale};
            rp.scale = s;
            rp.k_scale = L.k_scale, rp.v_scale = L.v_scale, rp.block_size = kv_src_->block_size();
            if (c_.family != Family::Olmo1) {                                 // full-width QK-norm
                rp.q_norm = W.q_norm, rp.k_norm = W.k_norm, rp.eps = c_.norm_eps;
                if (tp_.ranks > 1) {                                          // its sums span every rank
                    qk_sumsq(sumsq_, qkv_, s, n, Q, KV, stream_);
                    all_reduce(&sumsq_->x, 2 * (size_t)n);
                    rp.sumsq = sumsq_, rp.q_width = Q * tp_.ranks, rp.k_width = KV * tp_.ranks;
                }
            }
            if (hook) rp.normed = qkv_;                                       // (the hook reads it there)
            rope_qkv(rp, stream_);
        });
    }

    // Attention of the m query rows r0 .. r0+m-1 of q_ (a prefill's, or one per sequence of a
    // decode step of `batch`) over layer L's cache, into the same rows of att_. prune: a
    // prefill's last layer carrying on with its last row alone (forward_rows).
    void attend(const LayerCache<T>& L, size_t r0, int m, int batch, bool prefill, bool prune) {
        const int Q = c_.q_dim(), hd = c_.head_dim;
        with_pools(L, [&](auto* k, auto* v) {
            using C = std::remove_pointer_t<decltype(k)>;
            AttnParams<T, C> ap{};
            ap.q = q_ + r0 * Q, ap.k = k, ap.v = v;
            if constexpr (std::is_same_v<A, T>) ap.out = att_ + r0 * Q;
            else ap.out16 = att_ + r0 * Q;                                    // A is fp16
            ap.k_scale = L.k_scale, ap.v_scale = L.v_scale;
            ap.n_q = prefill ? m : 1, ap.pos0 = prune ? meta_.pos + r0 : meta_.pos0, ap.batch = batch;
            ap.nH = c_.n_heads, ap.nKV = c_.n_kv_heads, ap.hd = hd, ap.window = L.window, ap.scale = 1.0f / std::sqrt((float)hd);
            ap.s_cap = max_seq_, ap.block_table = meta_.tables[L.kind], ap.table_stride = stride_;
            ap.block_size = kv_src_->block_size();
            ap.prefill_keys = prefill;                                        // RoPE wrote the chunk's keys
            if (cp_round_ && !prune) return attend_two_chunks(ap, m);         // (context parallel)
            if (prefill && m > 1) attention_prefill(ap, stream_, PrefillKernel::Best, prefill_ws_);
            else attention_decode(ap, attn_ws_, stream_);   // one row per sequence: splits of its keys fill the GPU
        });
    }

    // y [rows, V] (fp32) = the output layer's logits of x [rows, H] (final-normed). Tensor
    // parallel: each rank makes those of its vocabulary rows (GpuWeights::vocab), [rows, V_r],
    // into part at rows · first_r; the others send theirs to rank 0, which copies each block into
    // its columns of y. One row: part is y itself (the blocks are y's columns already).
    void logits(float* y, const A* x, int rows, float* part) {
        if (tp_.ranks == 1) return linear_final(y, x, w_.lm_head, rows);
        auto vocab = [&](int r) { return tp_vocab(tp_.full, r, tp_.ranks); };
        if (rows == 1) part = y;
        auto block = [&](int r) { return part + rows * vocab(r).first; };
        linear_final(block(tp_.rank), x, w_.lm_head, rows);
        ncclCheck(ncclGroupStart());
        if (tp_.rank > 0) ncclCheck(ncclSend(block(tp_.rank), rows * vocab(tp_.rank).count, ncclFloat, 0, tp_.comm, stream_));
        else
            for (int r = 1; r < tp_.ranks; r++)
                ncclCheck(ncclRecv(block(r), rows * vocab(r).count, ncclFloat, r, tp_.comm, stream_));
        ncclCheck(ncclGroupEnd());
        if (tp_.rank > 0 || part == y) return;
        for (int r = 0; r < tp_.ranks; r++) {
            const size_t w = vocab(r).count * sizeof(float);
            cudaCheck(cudaMemcpy2DAsync(y + vocab(r).first, c_.vocab * sizeof(float), block(r), w, w, rows,
                                        cudaMemcpyDeviceToDevice, stream_));
        }
    }

    // logprobs_[r] = log p(targets_[r]) for the n rows of xn_ (final-normed), from their fp32
    // logits computed kScoreRows rows at a time into logits_.
    void score_rows(int n) {
        const int H = c_.hidden, V = c_.vocab;
        for (int r0 = 0; r0 < n; r0 += kScoreRows) {
            const int rows = std::min(kScoreRows, n - r0);
            logits(logits_, xn_ + (size_t)r0 * H, rows, part_);                      // [rows, V] fp32
            if (tp_.rank == 0) token_logprobs(logprobs_ + r0, logits_, targets_ + r0, rows, V, stream_);
        }
    }

    ModelConfig c_;
    int max_batch_, chunk_ = 0, stride_ = 0;
    GpuWeights<T> w_;
    std::unique_ptr<Fp8Gemm> fp8_gemm_;   // FP8 only
    cudaStream_t stream_ = nullptr;
    cublasHandle_t cublas_ = nullptr;
    Arena buffers_, kv_arena_;
    std::vector<LayerCache<T>> layers_;
    float *x_, *o_;
    G *qkv_, *gu_;
    A *xn_, *att_, *a_;
    T* q_;
    uint8_t* x8_ = nullptr;               // FP8 GEMM input [max(chunk, batch), ld] E4M3
    float* x8_scale_ = nullptr;           // its scale per row
    float* logits_;
    int* targets_;
    float* logprobs_;
    int* next_ids_;
    StepMeta meta_;                       // the current call's tokens, in device memory
    char *attn_ws_, *cublas_ws_;
    char* prefill_ws_ = nullptr;          // FP8 cache on Hopper: the prefill's copy of the keys in T
    int* host_ids_ = nullptr;    // pinned: sampled ids coming back (prefill, decode with logits)
    int* id_slots_ = nullptr;             // decode_start: pinned and mapped, [2, B] rows of drawn ids
    int* id_slots_dev_ = nullptr;         //   the same memory as the GPU addresses it
    cudaEvent_t slot_ready_[2] = {};      //   recorded behind the step writing each row
    int slot_n_[2] = {};                  //   and its B
    uint64_t started_ = 0, finished_ = 0; // decode steps started and finished (a step's slot: its count % 2)
    DecodeGraphs graphs_;
    TpRank tp_;                           // tensor parallel (ranks > 1): this rank
    bool kv8_ = false;                    // the KV cache in FP8 (LayerCache)
    const KvCache* kv_src_ = nullptr;     // the block tables: kv_, or the TpEngine's
    float2* sumsq_ = nullptr;             // tensor parallel: the QK-norm's sums of squares [C]
    float* part_ = nullptr;               // tensor parallel: the ranks' parts of the logits [B, V] (logits)
    int* cp_rows_[2] = {};                // context parallel: every rank's tokens' pool rows, per kind [N, C]
    int* cp_pos0_ = nullptr;              //   this rank's two chunks' first positions [2]
    T *cp_send_[2] = {}, *cp_recv_[2] = {};   //   K, V rows: this rank's [C, KV], every rank's [N, C, KV]
    int cp_split_ = 0, cp_cmax_ = 0;      //   rows in its first chunk; rows per rank in the exchange
    bool cp_round_ = false;               //   inside cp_round (a forward whose rows are two chunks)
};

}  // namespace
}  // namespace olmo

#include "tp_engine.cuh"   // TpEngine: several GPUs, each running a CudaEngine on its shard
#include "cp_engine.cuh"   // CpEngine: several GPUs sharing a long prompt, each with the whole model

namespace olmo {

size_t gpu_free_bytes() {
    size_t free = 0, total = 0;
    cudaCheck(cudaMemGetInfo(&free, &total));
    return free;
}

bool cuda_available() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// The attention kernels' head sizes; with a GPU present, also whether this build has code for
// it and whether the head size's attention tiles fit its shared memory (device_caps.h).
std::string cuda_unsupported_reason(const ModelConfig& c) {
    if (!attention_supports_head_dim(c.head_dim))
        return "head_dim " + std::to_string(c.head_dim) + " is not supported by the CUDA engine (" +
               attention_supported_head_dims() + ")";
    if (!cuda_available()) return "";
    if (std::string why = device_problem(); !why.empty()) return why;
    return attention_device_problem(c.head_dim);
}

int cuda_device_count() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

namespace {
// One GPU's engine, or tp GPUs' (TpEngine).
template <typename T, typename G>
std::unique_ptr<Engine> build_cuda_engine(const ModelConfig& c, const Checkpoint* ck, int max_seq, int kv_blocks,
                                          int max_batch, bool fp8, LoadProgress* progress, int max_chunk, int tp, int cp,
                                          bool kv_fp8) {
    if (cp > 1) return std::make_unique<CpEngine<T, G>>(c, ck, max_seq, kv_blocks, max_batch, fp8, progress, max_chunk, cp, kv_fp8);
    if (tp == 1)
        return std::make_unique<CudaEngine<T, G>>(c, ck, max_seq, kv_blocks, max_batch, fp8, progress, max_chunk, TpRank{}, kv_fp8);
    return std::make_unique<TpEngine<T, G>>(c, ck, max_seq, kv_blocks, max_batch, fp8, progress, max_chunk, tp, kv_fp8);
}
}  // namespace

std::unique_ptr<Engine> make_cuda_engine(const ModelConfig& c, const Checkpoint* ck, int max_seq, DeviceDType dt,
                                         int kv_blocks, int max_batch, LoadProgress* progress, int max_chunk, int tp, int cp,
                                         KvDType kv) {
    if (!cuda_available()) fail("no CUDA device available");
    if (std::string why = cuda_unsupported_reason(c); !why.empty()) fail(why);
    if (tp > 1 && cp > 1) fail("--tp and --cp cannot be combined yet");
    const bool kv_fp8 = kv == KvDType::FP8;
    for (auto [n, flag] : {std::pair{tp, "--tp "}, std::pair{cp, "--cp "}})
        if (n > 1 && n > cuda_device_count())
            fail(flag + std::to_string(n) + ": this machine has " + std::to_string(cuda_device_count()) + " GPU(s)");
    if (std::string why = tp_unsupported_reason(c, tp); !why.empty()) fail(why);
    switch (dt) {
        case DeviceDType::F32: return build_cuda_engine<float, float>(c, ck, max_seq, kv_blocks, max_batch, false, progress, max_chunk, tp, cp, kv_fp8);
        case DeviceDType::F16: return build_cuda_engine<__half, float>(c, ck, max_seq, kv_blocks, max_batch, false, progress, max_chunk, tp, cp, kv_fp8);
        case DeviceDType::FP8: {
            cudaDeviceProp p;
            cudaCheck(cudaGetDeviceProperties(&p, 0));
            if (p.major * 10 + p.minor < 89)
                fail("--dtype fp8 needs FP8 tensor cores (compute capability 8.9 or newer); this GPU is " +
                     std::to_string(p.major) + "." + std::to_string(p.minor));
            return build_cuda_engine<__nv_bfloat16, float>(c, ck, max_seq, kv_blocks, max_batch, true, progress, max_chunk, tp, cp, kv_fp8);
        }
        case DeviceDType::BF16: break;
    }
    return build_cuda_engine<__nv_bfloat16, __nv_bfloat16>(c, ck, max_seq, kv_blocks, max_batch, false, progress, max_chunk, tp, cp, kv_fp8);
}

}  // namespace olmo
