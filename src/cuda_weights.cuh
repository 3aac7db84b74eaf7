// cuda_weights.cuh: the model's weights on the GPU (the CUDA engine's half that does not run):
// where each tensor lives, and how it gets there from a checkpoint (or from a random draw, for
// benchmarks).
//
// All weights live in one allocation (an Arena) carved into tensors in the order of the weight
// table (weights.h); q|k|v and gate|up are fused, so each is one GEMM. A linear layer's weight
// is a Weight<T>: in T (bf16, fp16 or fp32), or with --dtype fp8 in E4M3 with one fp32 scale per
// output channel (fp8.h). In FP8 the linear weights pass through a staging buffer in T, one
// group at a time (a layer's four matrices, or the output layer), and are quantized from there,
// so the model in T never has to fit on the GPU. Weights a checkpoint already stores in FP8
// (fp8_checkpoint.h) are placed as stored, with their own scales.
//
// Used only by cuda_engine.cu (one translation unit), hence a header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"
#include "cuda_common.cuh"
#include "fp8.cuh"
#include "fp8_checkpoint.h"
#include "gpu_loader.h"
#include "tensor_parallel.h"
#include "weights.h"

namespace olmo {
namespace {

// A bump allocator over one cudaMalloc: take() while counting (no base yet), allocate(), then
// take() again in the same order to hand out the pointers.
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

// n elements of device memory for the length of a scope (n = 0: none).
template <typename U>
struct DeviceBuffer {
    U* p = nullptr;
    explicit DeviceBuffer(size_t n) { if (n) cudaCheck(cudaMalloc(&p, n * sizeof(U))); }
    ~DeviceBuffer() { if (p) cudaFree(p); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Fills n elements with a deterministic hash of (seed, i), uniform in [-scale, scale].
template <typename T>
__global__ void fill_random_kernel(T* p, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint64_t z = splitmix64(seed * kGolden64 + i);
        p[i] = from_float<T>(((z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale);
    }
}

// The weight of a linear layer, y = x · Wᵀ with W [N, K]: in T, or with --dtype fp8 in FP8
// (fp8.h: q [N16, ld] E4M3 and one scale per row), never both.
template <typename T>
struct Weight {
    T* w = nullptr;   // [N, K]
    Fp8Matrix f8;     // f8.q != nullptr: FP8, and w is null
    int N = 0, K = 0;
};

template <typename T>
struct LayerWeights {
    Weight<T> wqkv;   // [Q+2KV, H]   q | k | v rows
    Weight<T> wo;     // [H, Q]
    T* q_norm;        // [Q]          (OLMo-2/3)
    T* k_norm;        // [KV]
    T* attn_norm;     // [H]          post_attention_layernorm (OLMo-2/3)
    T* ff_norm;       // [H]          post_feedforward_layernorm (OLMo-2/3)
    Weight<T> wgu;    // [2I, H]      gate | up rows
    Weight<T> wdown;  // [H, I]
};

// Which part of the model a GPU holds: rank `rank` of `ranks` (tensor_parallel.h), full being
// the whole model; one rank: all of it.
struct TpShard {
    int rank = 0, ranks = 1;
    ModelConfig full;
};

template <typename T>
class GpuWeights {
public:
    // Measures the arena; allocate() and load() come after the caller has checked it fits.
    // c: the model this GPU runs (with tp.ranks > 1, its shard: tp_shard_config(tp.full)).
    GpuWeights(const ModelConfig& c, const Checkpoint* ck, bool fp8, const TpShard& tp = {})
        : c_(c), fp8_(fp8), tp_(tp), table_(weight_table(tp.ranks > 1 ? tp.full : c, ck)) {
        layers.resize(c.n_layers);
        carve();
    }

    size_t bytes() const { return arena_.used; }
    bool fp8() const { return fp8_; }
    // The output layer's rows (vocabulary entries) this GPU holds: all, or its tp_vocab range.
    TpRange vocab() const { return tp_.ranks > 1 ? tp_vocab(tp_.full, tp_.rank, tp_.ranks) : TpRange{0, c_.vocab}; }

    // The staging buffer an FP8 load quantizes from: the largest group in T (0 without FP8).
    // Tensor parallel: a whole layer's split tensors, and (FP8) room for one slice to quantize.
    size_t staging_bytes() const {
        const size_t H = c_.hidden, I = c_.intermediate, Q = c_.q_dim(), KV = c_.kv_dim();
        const size_t group = (Q + 2 * KV) * H + H * Q + 3 * I * H, head = (size_t)c_.vocab * H;
        if (tp_.ranks > 1) {   // (the output layer goes through staging whole, then is sliced)
            size_t layer = 0;
            for (Param p : kTpSplit) layer += param_shape(tp_.full, p).numel();
            const size_t slice = std::max({(Q + 2 * KV) * H, H * Q, 2 * I * H});   // this rank's largest
            return sizeof(T) * std::max(layer + (fp8_ ? slice : 0), head);
        }
        return fp8_ ? sizeof(T) * std::max(group, head) : 0;   // (one GPU: the output layer loads in place)
    }

    void allocate(cudaStream_t stream) {
        arena_.allocate();
        carve();
        if (fp8_) cudaCheck(cudaMemsetAsync(arena_.base, 0, arena_.size, stream));   // FP8 padding rows and columns
    }

    // Fills every tensor from ck, or with random values when ck is null (benchmarks).
    void load(const Checkpoint* ck, LoadProgress* progress, cudaStream_t stream) {
        stream_ = stream;
        if (!ck) randomize();
        else if (tp_.ranks > 1) upload_shard(*ck, progress);
        else if (fp8_) upload_fp8(*ck, progress);
        else {
            std::vector<void*> dst;
            for (const WeightSlot& s : table_) dst.push_back(slot_ptr(s));
            load_to_device(*ck, table_, dst, device_dtype<T>(), progress);
        }
    }

    std::string format() const {
        const char* t = std::is_same_v<T, float> ? "fp32" : std::is_same_v<T, __half> ? "fp16" : "bf16";
        return fp8_ ? std::string("fp8 e4m3 linear layers (fp32 scale per output channel), ") + t + " embedding and norms"
                    : std::string(t);
    }

    T* embed = nullptr;            // [V, H]
    T* final_norm = nullptr;       // [H]
    Weight<T> lm_head;             // [V, H]: the embedding itself when tied (T only)
    std::vector<LayerWeights<T>> layers;

private:
    // Lays out every tensor. Called twice: first to measure (arena empty), then to assign
    // pointers into the allocated arena.
    void carve() {
        auto take = [&](Param p) { return arena_.take<T>(param_shape(c_, p).numel()); };
        embed = take(Param::Embed);
        if (fp8_ || has_lm_head(table_)) lm_head = take_weight(Param::LmHead);
        else lm_head = Weight<T>{embed + vocab().first * c_.hidden, {}, (int)vocab().count, (int)c_.hidden};   // tied: weights.h
        final_norm = take(Param::FinalNorm);
        for (LayerWeights<T>& L : layers) {
            L.wqkv = take_weight(Param::Wqkv);
            L.wo = take_weight(Param::Wo);
            L.q_norm = take(Param::QNorm);
            L.k_norm = take(Param::KNorm);
            L.attn_norm = take(Param::AttnNorm);
            L.ff_norm = take(Param::FfNorm);
            L.wgu = take_weight(Param::Wgu);
            L.wdown = take_weight(Param::Wdown);
        }
    }

    // A linear layer's weight: in T, or in FP8 with its padding (fp8.h).
    Weight<T> take_weight(Param p) {
        const ParamShape s = param_shape(c_, p);
        Weight<T> W;
        W.N = p == Param::LmHead ? (int)vocab().count : (int)s.rows, W.K = (int)s.cols;
        if (!fp8_) {
            W.w = arena_.take<T>((size_t)W.N * W.K);
            return W;
        }
        const int N16 = fp8_padded_rows(W.N), ld = fp8_padded_cols(W.K);
        W.f8 = Fp8Matrix{arena_.take<uint8_t>((size_t)N16 * ld), arena_.take<float>(N16), W.N, W.K, ld};
        return W;
    }

    // The tensor a weight slot lands in, at the slot's row (FP8 weights: see upload_fp8).
    T* slot_ptr(const WeightSlot& s) { return tensor_ptr(s.param, s.layer) + s.offset(); }
    // Engine tensor p (of `layer`, for per-layer tensors), in T.
    T* tensor_ptr(Param p, int layer) {
        LayerWeights<T>* L = layer >= 0 ? &layers[layer] : nullptr;
        T* base = nullptr;
        switch (p) {
            case Param::Embed: base = embed; break;
            case Param::LmHead: base = lm_head.w; break;
            case Param::FinalNorm: base = final_norm; break;
            case Param::Wqkv: base = L->wqkv.w; break;
            case Param::Wo: base = L->wo.w; break;
            case Param::QNorm: base = L->q_norm; break;
            case Param::KNorm: base = L->k_norm; break;
            case Param::AttnNorm: base = L->attn_norm; break;
            case Param::FfNorm: base = L->ff_norm; break;
            case Param::Wgu: base = L->wgu.w; break;
            case Param::Wdown: base = L->wdown.w; break;
        }
        return base;
    }

    // ---- FP8 weights: staged one group at a time ----

    // The linear weights of group g (layer g, or the output layer for g = n_layers), in order.
    std::vector<Weight<T>*> linear_group(int g) {
        if (g == c_.n_layers) return {&lm_head};
        LayerWeights<T>& L = layers[g];
        return {&L.wqkv, &L.wo, &L.wgu, &L.wdown};
    }
    static int place_in_group(Param p) { return p == Param::Wo ? 1 : p == Param::Wgu ? 2 : p == Param::Wdown ? 3 : 0; }
    // Where each weight of group g starts in the staging buffer (back to back).
    std::vector<T*> staging_places(T* staging, int g) {
        std::vector<T*> at;
        for (Weight<T>* W : linear_group(g)) at.push_back(staging), staging += (size_t)W->N * W->K;
        return at;
    }
    void quantize_group(int g, const std::vector<T*>& from) {
        const std::vector<Weight<T>*> ws = linear_group(g);
        for (size_t i = 0; i < ws.size(); i++)
            quantize_rows_fp8(ws[i]->f8.q, ws[i]->f8.scale, from[i], ws[i]->N, ws[i]->K, ws[i]->f8.ld, stream_);
    }
    // The FP8 matrix slot s of group g lands in; its first row is s.row_offset.
    Fp8Matrix& slot_fp8(int g, const WeightSlot& s) { return linear_group(g)[place_in_group(s.param)]->f8; }

    // Group g's slots stored in T: loaded into their places in staging, then quantized.
    void load_and_quantize(const Checkpoint& ck, int g, const std::vector<WeightSlot>& slots, const std::vector<T*>& at,
                           LoadProgress* progress, const GpuLoadOptions& part) {
        std::vector<void*> dst;
        for (const WeightSlot& s : slots) dst.push_back(at[place_in_group(s.param)] + s.offset());
        load_to_device(ck, slots, dst, device_dtype<T>(), progress, part);
        for (const WeightSlot& s : slots) {
            Fp8Matrix& m = slot_fp8(g, s);
            quantize_rows_fp8(m.q + s.row_offset * m.ld, m.scale + s.row_offset, at[place_in_group(s.param)] + s.offset(),
                              (int)s.shape[0], m.K, m.ld, stream_);
        }
    }

    // Group g's slots stored in FP8: codes [rows, K] raw into their places in staging, then
    // copied row by row to [rows, ld] (the padding columns stay zero); scales from the checkpoint.
    void load_stored_fp8(const Checkpoint& ck, int g, const std::vector<WeightSlot>& slots, const std::vector<T*>& at,
                         LoadProgress* progress, const GpuLoadOptions& part) {
        std::vector<void*> dst;
        for (const WeightSlot& s : slots) dst.push_back(at[place_in_group(s.param)] + s.offset());
        load_to_device(ck, slots, dst, DeviceDType::FP8, progress, part);
        for (size_t i = 0; i < slots.size(); i++) {
            const WeightSlot& s = slots[i];
            Fp8Matrix& m = slot_fp8(g, s);
            const size_t rows = s.shape[0];
            cudaCheck(cudaMemcpy2DAsync(m.q + s.row_offset * m.ld, m.ld, dst[i], m.K, m.K, rows, cudaMemcpyDeviceToDevice,
                                        stream_));
            const std::vector<float> scale = fp8_row_scales(ck, s);   // (pageable: copied out before the call returns)
            cudaCheck(cudaMemcpyAsync(m.scale + s.row_offset, scale.data(), rows * sizeof(float), cudaMemcpyHostToDevice,
                                      stream_));
        }
    }

    // The tensors that stay in T load straight into place; each group of linear weights goes
    // through staging, stored in T (quantized here) or in FP8 (placed as stored).
    void upload_fp8(const Checkpoint& ck, LoadProgress* progress) {
        size_t total = 0;
        for (const TensorView* v : checkpoint_views(ck, table_)) total += v->nbytes();   // every check first
        if (progress) progress->start(total);
        GpuLoadOptions part;
        LoadBuffers buffers;   // one set for all the calls below
        part.part_of_load = true, part.buffers = &buffers;
        DeviceBuffer<T> staging(staging_bytes() / sizeof(T));
        std::vector<std::vector<WeightSlot>> groups(c_.n_layers + 1), stored(c_.n_layers + 1);
        std::vector<WeightSlot> direct;
        std::vector<void*> direct_dst;
        for (const WeightSlot& s : table_) {
            const int g = s.param == Param::LmHead ? c_.n_layers : s.layer;
            if (!is_linear(s.param)) direct.push_back(s), direct_dst.push_back(slot_ptr(s));
            else (ck.find(s.name)->dtype == DType::F8_E4M3 ? stored : groups)[g].push_back(s);
        }
        load_to_device(ck, direct, direct_dst, device_dtype<T>(), progress, part);
        for (int g = 0; g <= c_.n_layers; g++) {
            const std::vector<T*> at = staging_places(staging.p, g);
            if (groups[g].empty() && stored[g].empty()) {   // the output layer is the embedding (tied)
                quantize_group(g, {embed});
                continue;
            }
            if (!groups[g].empty()) load_and_quantize(ck, g, groups[g], at, progress, part);
            if (!stored[g].empty()) load_stored_fp8(ck, g, stored[g], at, progress, part);
            cudaCheck(cudaStreamSynchronize(stream_));   // the staging buffer is reused by the next group
        }
        if (progress) progress->finish();
    }

    // ---- tensor parallel: this rank's slices ----

    // Each layer's split tensors load whole into staging (in the full model's layout), then this
    // rank's slice of each is copied into place (FP8: into staging's end, then quantized). The
    // output layer loads whole into staging too, and this rank keeps its vocabulary rows; the
    // other tensors load whole, straight into place. With --dtype fp8, a linear weight stored in
    // FP8 keeps its codes: they load whole into staging as bytes, and the slice of the codes and
    // of their row scales is placed (place_codes) instead. (A tensor stored partly in FP8, e.g.
    // q in FP8 and k, v not, loads dequantized and is quantized again after slicing.)
    void upload_shard(const Checkpoint& ck, LoadProgress* progress) {
        size_t total = 0;
        for (const TensorView* v : checkpoint_views(ck, table_)) total += v->nbytes();
        if (progress) progress->start(total);
        GpuLoadOptions part;
        LoadBuffers buffers;   // one set for all the calls below
        part.part_of_load = true, part.buffers = &buffers;
        DeviceBuffer<T> staging(staging_bytes() / sizeof(T));
        std::vector<std::vector<WeightSlot>> split(c_.n_layers);
        std::vector<WeightSlot> whole, head;
        std::vector<void*> whole_dst;
        for (const WeightSlot& s : table_) {
            if (s.layer >= 0 && tp_split(s.param)) split[s.layer].push_back(s);
            else if (s.param == Param::LmHead) head.push_back(s);
            else whole.push_back(s), whole_dst.push_back(slot_ptr(s));
        }
        load_to_device(ck, whole, whole_dst, device_dtype<T>(), progress, part);
        if (head.empty()) place_vocab(embed);   // tied: the embedding is the output layer
        else load_whole_and_place(ck, Param::LmHead, -1, head, staging.p, nullptr, progress, part);
        cudaCheck(cudaStreamSynchronize(stream_));
        T* at = staging.p;
        std::vector<T*> full;   // where each of kTpSplit lies whole in staging
        for (Param p : kTpSplit) full.push_back(at), at += param_shape(tp_.full, p).numel();
        for (int l = 0; l < c_.n_layers; l++) {
            for (size_t i = 0; i < full.size(); i++) {
                std::vector<WeightSlot> slots;
                for (const WeightSlot& s : split[l])
                    if (s.param == kTpSplit[i]) slots.push_back(s);
                if (!slots.empty())
                    load_whole_and_place(ck, kTpSplit[i], l, slots, full[i], at, progress, part);
            }
            cudaCheck(cudaStreamSynchronize(stream_));   // the staging buffer is reused by the next layer
        }
        if (progress) progress->finish();
    }

    // The checkpoint slots of engine tensor p (of layer l) into src, whole, then this rank's part
    // into place (scratch: room for a slice in T, FP8 only). The engine in FP8 and every slot
    // stored in FP8: the codes load as bytes and keep their scales (as_codes).
    void load_whole_and_place(const Checkpoint& ck, Param p, int l, const std::vector<WeightSlot>& slots, T* src,
                              T* scratch, LoadProgress* progress, const GpuLoadOptions& part) {
        const bool as_codes = fp8_ && std::all_of(slots.begin(), slots.end(), [&](const WeightSlot& s) {
                                  return ck.find(s.name)->dtype == DType::F8_E4M3;
                              });
        std::vector<void*> dst;
        for (const WeightSlot& s : slots)
            dst.push_back(as_codes ? (void*)(reinterpret_cast<uint8_t*>(src) + s.offset()) : (void*)(src + s.offset()));
        load_to_device(ck, slots, dst, as_codes ? DeviceDType::FP8 : device_dtype<T>(), progress, part);
        if (as_codes) {
            std::vector<float> scales(param_shape(tp_.full, p).rows);   // every row's, in the full tensor's order
            for (const WeightSlot& s : slots) {
                const std::vector<float> f = fp8_row_scales(ck, s);
                std::copy(f.begin(), f.end(), scales.begin() + s.row_offset);
            }
            place_codes(p, l, reinterpret_cast<const uint8_t*>(src), scales);
        } else if (p == Param::LmHead) {
            place_vocab(src);
        } else {
            place_slice(p, l, src, scratch);
        }
    }

    // This rank's slice of FP8 codes, given whole in src [rows, cols] with each row's scale, into
    // the engine's FP8 matrix of tensor p (of layer l): rows by tp_slice, each row padded to ld.
    void place_codes(Param p, int l, const uint8_t* src, const std::vector<float>& row_scale) {
        const TpSlice sl = tp_slice(tp_.full, p, tp_.rank, tp_.ranks);
        const int64_t cols = param_shape(tp_.full, p).cols;
        Fp8Matrix& m = p == Param::LmHead ? lm_head.f8 : linear_group(l)[place_in_group(p)]->f8;
        std::vector<float> scale;   // the slice's rows' scales, in order
        for (const TpRange& r : sl.rows) {
            cudaCheck(cudaMemcpy2DAsync(m.q + (int64_t)scale.size() * m.ld, m.ld, src + r.first * cols + sl.cols.first, cols,
                                        sl.cols.count, r.count, cudaMemcpyDeviceToDevice, stream_));
            scale.insert(scale.end(), row_scale.begin() + r.first, row_scale.begin() + r.first + r.count);
        }
        cudaCheck(cudaMemcpyAsync(m.scale, scale.data(), scale.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
        cudaCheck(cudaStreamSynchronize(stream_));   // (scale is pageable host memory, freed on return)
    }

    // This rank's vocabulary rows of the output layer, given whole in src, into place (quantized
    // in FP8). Tied in T, lm_head already points into the embedding.
    void place_vocab(const T* src) {
        const TpRange v = vocab();
        const T* from = src + v.first * c_.hidden;
        if (fp8_) quantize_rows_fp8(lm_head.f8.q, lm_head.f8.scale, from, lm_head.N, lm_head.K, lm_head.f8.ld, stream_);
        else if (lm_head.w != from) cudaCheck(cudaMemcpyAsync(lm_head.w, from, v.count * c_.hidden * sizeof(T), cudaMemcpyDeviceToDevice, stream_));
    }

    // This rank's slice (tp_slice) of layer l's tensor p, given whole in src, into its place; a
    // linear weight in FP8 goes through scratch and is quantized from there.
    void place_slice(Param p, int l, const T* src, T* scratch) {
        const TpSlice sl = tp_slice(tp_.full, p, tp_.rank, tp_.ranks);
        const int64_t cols = param_shape(tp_.full, p).cols;
        Weight<T>* W = is_linear(p) ? linear_group(l)[place_in_group(p)] : nullptr;
        T* dst = W && fp8_ ? scratch : tensor_ptr(p, l);
        for (const TpRange& r : sl.rows) {
            cudaCheck(cudaMemcpy2DAsync(dst, sl.cols.count * sizeof(T), src + r.first * cols + sl.cols.first,
                                        cols * sizeof(T), sl.cols.count * sizeof(T), r.count, cudaMemcpyDeviceToDevice,
                                        stream_));
            dst += r.count * sl.cols.count;
        }
        if (W && fp8_) quantize_rows_fp8(W->f8.q, W->f8.scale, scratch, W->N, W->K, W->f8.ld, stream_);
    }

    // Random weights for benchmarks: uniform with std ~0.02 for matrices, small norms.
    void randomize() {
        const size_t H = c_.hidden, Q = c_.q_dim(), KV = c_.kv_dim(), V = c_.vocab;
        uint64_t seed = 1;
        auto fill = [&](T* p, size_t n, float scale) {
            fill_random_kernel<<<1024, 256, 0, stream_>>>(p, n, seed++, scale);
            cudaCheckLaunch();
        };
        DeviceBuffer<T> staging(staging_bytes() / sizeof(T));   // FP8: drawn in T, then quantized
        auto fill_group = [&](int g) {
            const std::vector<Weight<T>*> ws = linear_group(g);
            std::vector<T*> at = staging_places(staging.p, g);
            if (!fp8_)
                for (size_t i = 0; i < ws.size(); i++) at[i] = ws[i]->w;
            for (size_t i = 0; i < ws.size(); i++) fill(at[i], (size_t)ws[i]->N * ws[i]->K, 0.035f);
            if (fp8_) {
                quantize_group(g, at);
                cudaCheck(cudaStreamSynchronize(stream_));   // the staging buffer is reused by the next group
            }
        };
        fill(embed, V * H, 0.035f);
        if (has_lm_head(table_)) fill_group(c_.n_layers);
        else if (fp8_) quantize_group(c_.n_layers, {embed + vocab().first * H});
        fill(final_norm, H, 0.1f);
        for (int l = 0; l < c_.n_layers; l++) {
            LayerWeights<T>& L = layers[l];
            fill_group(l);
            fill(L.q_norm, Q, 0.1f);
            fill(L.k_norm, KV, 0.1f);
            fill(L.attn_norm, H, 0.1f);
            fill(L.ff_norm, H, 0.1f);
        }
    }

    ModelConfig c_;
    bool fp8_;
    TpShard tp_;
    std::vector<WeightSlot> table_;   // the checkpoint tensors and where they land (weights.h)
    Arena arena_;
    cudaStream_t stream_ = nullptr;   // load()'s stream
};

}  // namespace
}  // namespace olmo
