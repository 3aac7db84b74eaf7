// ops.cu: the engine's kernels behind the untyped entry points of ops.h. The kernels are
// included from kernels/*.cuh, not copied; this file only turns a DType value into the template
// argument and copies the arguments into the kernels' parameter structs. It includes no torch
// header and is compiled with the engine's NVCC flags (python/setup.py).
#include "ops.h"

#include "attention.cuh"
#include "norm.cuh"
#include "rope.cuh"

namespace olmo::ext {
namespace {

template <typename T> struct Tag {
    using type = T;
};

// Calls f(Tag<T>{}) for the storage type T that t names.
template <typename F> void with_type(DType t, F&& f) {
    switch (t) {
        case DType::F32: return f(Tag<float>{});
        case DType::F16: return f(Tag<__half>{});
        case DType::BF16: return f(Tag<__nv_bfloat16>{});
    }
    fail("olmo_kernels: unknown dtype");
}

template <typename T> AttnParams<T> typed(const AttnArgs& a) {
    AttnParams<T> p{};
    p.q = static_cast<const T*>(a.q);
    p.k = static_cast<const T*>(a.k);
    p.v = static_cast<const T*>(a.v);
    p.out = static_cast<T*>(a.out);
    p.n_q = a.n_q;
    p.pos0 = a.pos0;
    p.nH = a.nH;
    p.nKV = a.nKV;
    p.hd = a.hd;
    p.window = a.window;
    p.scale = a.scale;
    p.s_cap = a.s_cap;
    p.block_table = a.block_table;
    p.table_stride = a.table_stride;
    p.block_size = a.block_size;
    p.batch = a.batch;
    return p;
}

__global__ void fence_kernel() {}

}  // namespace

void attention_prefill(const AttnArgs& a, cudaStream_t stream) {
    with_type(a.dtype, [&](auto tag) { olmo::attention_prefill(typed<typename decltype(tag)::type>(a), stream); });
}

void attention_decode(const AttnArgs& a, void* workspace, cudaStream_t stream) {
    with_type(a.dtype,
              [&](auto tag) { olmo::attention_decode(typed<typename decltype(tag)::type>(a), workspace, stream); });
}

size_t attention_decode_workspace_bytes(int nH, int hd, int s_cap, int batch, int n_q) {
    return olmo::attention_decode_workspace_bytes(nH, hd, s_cap, batch, n_q);
}

bool attention_supports_head_dim(int hd) { return olmo::attention_supports_head_dim(hd); }

int attention_decode_max_rows() { return attn::kDecodeRows; }

void stream_fence(cudaStream_t stream) {
    fence_kernel<<<1, 32, 0, stream>>>();
    cudaCheckLaunch();
}

void layernorm(DType t, void* out, const void* x, int rows, int H, float eps, cudaStream_t stream) {
    with_type(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        olmo::layernorm(static_cast<T*>(out), static_cast<const T*>(x), rows, H, eps, stream);
    });
}

void rmsnorm(DType x_type, DType w_type, void* out, const void* x, const void* w, int rows, int H, int64_t ld_in,
             int64_t ld_out, float eps, cudaStream_t stream) {
    with_type(x_type, [&](auto xtag) {
        using X = typename decltype(xtag)::type;
        with_type(w_type, [&](auto wtag) {
            using W = typename decltype(wtag)::type;
            olmo::rmsnorm(static_cast<X*>(out), static_cast<const X*>(x), static_cast<const W*>(w), rows, H, ld_in,
                          ld_out, eps, stream);
        });
    });
}

void rope_qkv(const RopeArgs& a, cudaStream_t stream) {
    with_type(a.cache_type, [&](auto ttag) {
        using T = typename decltype(ttag)::type;
        auto launch = [&](auto xtag) {
            using X = typename decltype(xtag)::type;
            RopeParams<T, X> p{};
            p.qkv = static_cast<const X*>(a.qkv);
            p.q_out = static_cast<T*>(a.q_out);
            p.k_cache = static_cast<T*>(a.k_cache);
            p.v_cache = static_cast<T*>(a.v_cache);
            p.rows = a.rows;
            p.pos = a.pos;
            p.cache_row = a.cache_row;
            p.n_heads = a.n_heads;
            p.n_kv_heads = a.n_kv_heads;
            p.head_dim = a.head_dim;
            p.inv_freq = a.inv_freq;
            p.attn_factor = a.attn_factor;
            olmo::rope_qkv(p, stream);
        };
        if (a.qkv_type == DType::F32) launch(Tag<float>{});
        else if (a.qkv_type == a.cache_type) launch(Tag<T>{});
        else fail("rope_qkv: qkv must be float32 or the cache's dtype");
    });
}

}  // namespace olmo::ext
