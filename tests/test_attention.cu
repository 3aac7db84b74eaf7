// test_attention.cu: the attention kernels (kernels/attention.cuh) against olmo::cpu::attention.
//
// Each case draws fresh normal inputs, rounds them to the storage type (the CPU reference
// gets the same rounded values), poisons the cache rows past the live length and the output
// with NaN, runs one kernel, and checks every element: finite, rel-L2 and max-abs under the
// type's tolerance. Shapes cover n_q = 1, odd n_q, n_q not a tile multiple, GQA ratios
// 1/2/4/5/8, hd 64/128, windows shorter than n_q, chunks appended at pos0 > 0 and caches of
// 3000+ keys for decode; for each dtype (float, __half, __nv_bfloat16). Cross-checks: decode ==
// prefill for n_q = 1, and naive == flash prefill.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attention.cuh"
#include "cpu_ops.h"

using namespace olmo;

namespace {

bool gpu_available() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define SKIP_WITHOUT_GPU() \
    if (!gpu_available()) GTEST_SKIP() << "no CUDA GPU present: attention kernel tests skipped"

struct Shape {
    int n_q, pos0, nH, nKV, hd, window, s_cap;
    std::string str() const {
        char b[160];
        snprintf(b, sizeof b, "n_q=%d pos0=%d nH=%d nKV=%d hd=%d window=%d s_cap=%d", n_q, pos0, nH, nKV, hd, window,
                 s_cap);
        return b;
    }
};

// Prefill-like shapes (also run through the naive kernels).
const Shape kPrefillShapes[] = {
    // n_q pos0 nH nKV  hd  win s_cap
    {1, 0, 4, 4, 64, 0, 16},            // one token, empty cache before it
    {77, 0, 8, 8, 64, 0, 96},           // odd n_q, MHA
    {200, 0, 8, 2, 128, 0, 256},        // GQA 4, n_q not a multiple of the tile
    {130, 37, 8, 4, 128, 0, 200},       // GQA 2, chunk appended at pos0 = 37
    {150, 100, 16, 2, 64, 50, 300},     // GQA 8, window 50 < n_q, cache offset
    {61, 5, 10, 2, 128, 33, 70},        // GQA 5 (as 40 q / 8 kv heads), window
    {257, 300, 4, 4, 128, 100, 600},    // window over a long offset: leading tiles skipped
    {515, 0, 4, 4, 128, 0, 515},        // many full tiles, s_cap == n_q
    {129, 3, 2, 1, 64, 0, 140},         // GQA 2 with a single KV head
};

// Decode-like shapes: few query rows per KV head, long caches.
const Shape kDecodeShapes[] = {
    {1, 2999, 8, 8, 128, 0, 3000},      // MHA, 3000 keys
    {1, 2999, 8, 4, 64, 0, 3072},       // GQA 2
    {1, 2999, 8, 2, 128, 1000, 4000},   // GQA 4, window
    {1, 2999, 8, 1, 128, 0, 3000},      // GQA 8
    {1, 2999, 10, 2, 64, 0, 3100},      // GQA 5
    {1, 0, 4, 4, 128, 0, 64},           // first token
    {1, 100, 8, 2, 128, 0, 40000},      // short live length in a big cache: dead splits exit
    {2, 500, 16, 2, 128, 0, 600},       // n_q 2 x group 8 = 16 rows
    {3, 700, 4, 1, 64, 300, 800},       // n_q 3, window
};

template <typename T> struct Tol;
template <> struct Tol<float> { static constexpr double rel = 1e-5, abs = 1e-4; static constexpr const char* name = "f32"; };
template <> struct Tol<__half> { static constexpr double rel = 5e-3, abs = 2e-2; static constexpr const char* name = "f16"; };
template <> struct Tol<__nv_bfloat16> { static constexpr double rel = 1e-2, abs = 5e-2; static constexpr const char* name = "bf16"; };

float to_f(float x) { return x; }
float to_f(__half x) { return __half2float(x); }
float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> T from_f(float x) {
    if constexpr (std::is_same_v<T, float>) return x;
    else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
    else return __float2bfloat16_rn(x);
}

template <typename T>
struct DeviceBuffer {
    T* ptr = nullptr;
    size_t n = 0;
    explicit DeviceBuffer(size_t count) : n(count) { cudaCheck(cudaMalloc(&ptr, std::max<size_t>(1, n) * sizeof(T))); }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void poison() { cudaCheck(cudaMemset(ptr, 0xFF, n * sizeof(T))); }  // all-ones bits: NaN in every dtype
};

// One attention problem on the host (rounded to T, as float) and the device.
template <typename T>
struct Problem {
    Shape s;
    std::vector<float> q, k, v;  // q [n_q, nH*hd]; k, v [pos0+n_q, nKV*hd] (the live rows)
    DeviceBuffer<T> dq, dk, dv, dout;
    DeviceBuffer<int> dpos;

    Problem(const Shape& shape, uint32_t seed)
        : s(shape), dq((size_t)s.n_q * s.nH * s.hd), dk((size_t)s.s_cap * s.nKV * s.hd),
          dv((size_t)s.s_cap * s.nKV * s.hd), dout((size_t)s.n_q * s.nH * s.hd), dpos(1) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        const size_t live = (size_t)(s.pos0 + s.n_q) * s.nKV * s.hd;
        q = upload(dq, dq.n, rng, normal);
        dk.poison();  // rows past the live length stay NaN
        dv.poison();
        k = upload(dk, live, rng, normal);
        v = upload(dv, live, rng, normal);
        cudaCheck(cudaMemcpy(dpos.ptr, &s.pos0, sizeof(int), cudaMemcpyHostToDevice));
    }
    static std::vector<float> upload(DeviceBuffer<T>& d, size_t n, std::mt19937& rng, std::normal_distribution<float>& dist) {
        std::vector<T> h(n);
        std::vector<float> f(n);
        for (size_t i = 0; i < n; i++) f[i] = to_f(h[i] = from_f<T>(dist(rng)));
        cudaCheck(cudaMemcpy(d.ptr, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
        return f;
    }
    float scale() const { return 1.0f / std::sqrt((float)s.hd); }
    AttnParams<T> params() const {
        return {dq.ptr, dk.ptr, dv.ptr, dout.ptr, s.n_q, dpos.ptr, s.nH, s.nKV, s.hd, s.window, scale(), s.s_cap};
    }
    // The CPU result for queries at pos0 (the shape's by default; any smaller one also works).
    std::vector<float> reference(int pos0 = -1) const {
        std::vector<float> out(dout.n);
        cpu::attention(out.data(), q.data(), k.data(), v.data(), s.n_q, pos0 < 0 ? s.pos0 : pos0, s.nH, s.nKV, s.hd,
                       s.window, scale());
        return out;
    }
    // Poisons the output, runs `kernel`, returns the output as float.
    template <typename F>
    std::vector<float> run(F kernel) {
        dout.poison();
        kernel(params());
        cudaCheck(cudaDeviceSynchronize());
        return output();
    }
    std::vector<float> output() const {
        std::vector<T> h(dout.n);
        cudaCheck(cudaMemcpy(h.data(), dout.ptr, h.size() * sizeof(T), cudaMemcpyDeviceToHost));
        std::vector<float> f(h.size());
        for (size_t i = 0; i < h.size(); i++) f[i] = to_f(h[i]);
        return f;
    }
};

// Every element finite, rel-L2 and max-abs under the tolerances.
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double rel_tol, double abs_tol,
                  const std::string& what) {
    ASSERT_EQ(got.size(), ref.size());
    double err2 = 0, ref2 = 0, max_abs = 0;
    size_t bad = 0, first_bad = got.size();
    for (size_t i = 0; i < got.size(); i++) {
        if (!std::isfinite(got[i])) {
            if (bad++ == 0) first_bad = i;
            continue;
        }
        const double d = (double)got[i] - ref[i];
        err2 += d * d, ref2 += (double)ref[i] * ref[i];
        max_abs = std::max(max_abs, std::fabs(d));
    }
    const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " non-finite outputs, first at " << first_bad;
    EXPECT_LE(rel, rel_tol) << what << ": rel-L2 " << rel;
    EXPECT_LE(max_abs, abs_tol) << what << ": max-abs " << max_abs;
    printf("  %-72s rel-L2 %.2e  max-abs %.2e\n", what.c_str(), rel, max_abs);
}

template <typename T>
void run_naive(const AttnParams<T>& p) {
    DeviceBuffer<float> ws(attention_naive_workspace_bytes(p.n_q, p.nH, p.s_cap) / sizeof(float));
    attention_naive(p, ws.ptr, 0);
    cudaCheck(cudaDeviceSynchronize());
}
template <typename T>
void run_decode(const AttnParams<T>& p) {
    DeviceBuffer<char> ws(attention_decode_workspace_bytes(p.nH, p.hd, p.s_cap, p.n_q));
    ws.poison();  // the combine must read only what the split kernel wrote
    attention_decode(p, ws.ptr, 0);
    cudaCheck(cudaDeviceSynchronize());
}
template <typename T>
void run_prefill(const AttnParams<T>& p) {
    attention_prefill(p, 0);
}

template <typename T>
class Attention : public ::testing::Test {};
using DTypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(Attention, DTypes);

TYPED_TEST(Attention, NaiveMatchesCpu) {
    SKIP_WITHOUT_GPU();
    uint32_t seed = 1;
    for (const Shape& s : kPrefillShapes) {
        Problem<TypeParam> pr(s, seed++);
        expect_close(pr.run(run_naive<TypeParam>), pr.reference(), Tol<TypeParam>::rel, Tol<TypeParam>::abs,
                     std::string("naive ") + Tol<TypeParam>::name + " " + s.str());
    }
}

TYPED_TEST(Attention, PrefillMatchesCpu) {
    SKIP_WITHOUT_GPU();
    uint32_t seed = 100;
    for (const Shape& s : kPrefillShapes) {
        Problem<TypeParam> pr(s, seed++);
        expect_close(pr.run(run_prefill<TypeParam>), pr.reference(), Tol<TypeParam>::rel, Tol<TypeParam>::abs,
                     std::string("prefill ") + Tol<TypeParam>::name + " " + s.str());
    }
}

TYPED_TEST(Attention, PrefillOnDecodeShapesMatchesCpu) {
    SKIP_WITHOUT_GPU();
    uint32_t seed = 200;
    for (const Shape& s : kDecodeShapes) {
        Problem<TypeParam> pr(s, seed++);
        expect_close(pr.run(run_prefill<TypeParam>), pr.reference(), Tol<TypeParam>::rel, Tol<TypeParam>::abs,
                     std::string("prefill ") + Tol<TypeParam>::name + " " + s.str());
    }
}

TYPED_TEST(Attention, DecodeMatchesCpu) {
    SKIP_WITHOUT_GPU();
    uint32_t seed = 300;
    for (const Shape& s : kDecodeShapes) {
        Problem<TypeParam> pr(s, seed++);
        expect_close(pr.run(run_decode<TypeParam>), pr.reference(), Tol<TypeParam>::rel, Tol<TypeParam>::abs,
                     std::string("decode ") + Tol<TypeParam>::name + " " + s.str());
    }
}

// Same inputs through two GPU paths: decode == prefill (n_q = 1), naive == flash prefill.
TYPED_TEST(Attention, DecodeEqualsPrefill) {
    SKIP_WITHOUT_GPU();
    uint32_t seed = 400;
    for (const Shape& s : kDecodeShapes) {
        if (s.n_q != 1) continue;
        Problem<TypeParam> pr(s, seed++);
        const std::vector<float> a = pr.run(run_prefill<TypeParam>), b = pr.run(run_decode<TypeParam>);
        expect_close(b, a, Tol<TypeParam>::rel, Tol<TypeParam>::abs,
                     std::string("decode vs prefill ") + Tol<TypeParam>::name + " " + s.str());
    }
}

TYPED_TEST(Attention, NaiveEqualsFlash) {
    SKIP_WITHOUT_GPU();
    uint32_t seed = 500;
    for (const Shape& s : kPrefillShapes) {
        Problem<TypeParam> pr(s, seed++);
        const std::vector<float> a = pr.run(run_naive<TypeParam>), b = pr.run(run_prefill<TypeParam>);
        expect_close(b, a, Tol<TypeParam>::rel, Tol<TypeParam>::abs,
                     std::string("flash vs naive ") + Tol<TypeParam>::name + " " + s.str());
    }
}

// Decode captured once in a CUDA graph, replayed with new positions written to *pos0: the
// launch shape must not depend on the position, and rows past it must be ignored.
TEST(AttentionGraph, DecodeReplaysWithNewPositions) {
    SKIP_WITHOUT_GPU();
    using T = __nv_bfloat16;
    Problem<T> pr({1, 1999, 8, 2, 128, 0, 2048}, 11);  // cache rows 0..1999 hold real values
    DeviceBuffer<char> ws(attention_decode_workspace_bytes(8, 128, 2048));
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;  // captured as the engine does, possibly the first call (one-time setup inside)
    cudaGraphExec_t exec;
    cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    attention_decode(pr.params(), ws.ptr, stream);
    cudaCheck(cudaStreamEndCapture(stream, &graph));
    cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
    for (int pos : {5, 700, 1999, 64}) {
        cudaCheck(cudaMemcpy(pr.dpos.ptr, &pos, sizeof(int), cudaMemcpyHostToDevice));
        pr.dout.poison();
        cudaCheck(cudaGraphLaunch(exec, stream));
        cudaCheck(cudaStreamSynchronize(stream));
        expect_close(pr.output(), pr.reference(pos), Tol<T>::rel, Tol<T>::abs,
                     "graph replay decode bf16 pos0=" + std::to_string(pos));
    }
    cudaCheck(cudaGraphExecDestroy(exec));
    cudaCheck(cudaGraphDestroy(graph));
    cudaCheck(cudaStreamDestroy(stream));
}

TEST(AttentionArgs, RejectsBadShapes) {
    SKIP_WITHOUT_GPU();
    Problem<__nv_bfloat16> pr({4, 0, 8, 8, 128, 0, 16}, 7);
    AttnParams<__nv_bfloat16> p = pr.params();
    p.hd = 96;
    EXPECT_THROW(attention_prefill(p, 0), Error);
    p = pr.params();
    p.nKV = 3;
    EXPECT_THROW(attention_prefill(p, 0), Error);
    p = pr.params();
    p.n_q = 3, p.nKV = 1;  // 3 tokens x 8 heads = 24 rows per KV head: too many for decode
    EXPECT_THROW(attention_decode(p, nullptr, 0), Error);
}

}  // namespace
