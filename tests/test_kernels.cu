// test_kernels.cu: the non-attention CUDA kernels (kernels/elementwise.cuh, norm.cuh, rope.cuh,
// sampling.cuh) against the fp32 CPU reference (src/cpu_ops.h, sample_cpu in src/sampler.cpp),
// for fp32, fp16 and bf16 storage.
//
// Inputs are random (never all zero) and rounded to their dtype first, so the CPU computes
// on exactly the values the GPU sees and the only differences are fp32 summation order and the
// GPU's final rounding. Outputs are poisoned with NaN (0xFF bytes) before each launch and every
// element is compared: rel-L2 and max-abs (relative to max |ref|) within the dtype's tolerance,
// no non-finite value. Kernels that consume a GEMM output (swiglu, QK-norm, rope, the fused
// residual norms) are run on input in T and in fp32 (what the engine passes them), with outputs
// in T. Shapes are awkward on purpose: one row, odd rows, widths that are not a multiple of the
// 16-byte vector (the scalar path), misaligned pointers, GQA, large positions.
// Sampling: determinism, top_k = 1 equals argmax, agreement with sample_cpu draw by draw, draws
// inside the top-k / top-p set, and draw frequencies against the renormalized softmax. Every draw
// compared with sample_cpu is made by the cluster sampler (on Hopper) and again in portable mode
// (src/device_caps.h) by the one-block sampler of GPUs without clusters, which must draw the same
// token; so is the non-finite check. With OLMO_PORTABLE=1 the other tests run on one block too.
// DeviceCaps: what the kernels see of the GPU, and portable mode.
// Tests named Timing.* print speeds (leave them out under compute-sanitizer).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu_ops.h"
#include "device_caps.h"
#include "elementwise.cuh"
#include "engine.h"
#include "fp8.h"
#include "kernel_test_util.cuh"
#include "norm.cuh"
#include "rope.cuh"
#include "sampling.cuh"

using namespace olmo;
using namespace olmo::test;

namespace {

template <typename T> class Kernels : public ::testing::Test {
protected:
    void SetUp() override { SKIP_WITHOUT_GPU(); }
    std::mt19937 rng{20241120};
    const Tolerance tol = tolerance<T>();
    std::string name(const std::string& what) const { return std::string(dtype_name<T>()) + " " + what; }
};
struct DtypeNames {
    template <typename T> static std::string GetName(int) { return dtype_name<T>(); }
};
using Dtypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(Kernels, Dtypes, DtypeNames);

// ---- elementwise ----

TYPED_TEST(Kernels, Embedding) {
    using T = TypeParam;
    const int V = 37;
    for (int H : {72, 100, 4096})
        for (int rows : {1, 5, 33}) {
            const std::vector<float> table = rounded<T>(randn((size_t)V * H, this->rng));
            std::vector<int> ids(rows);
            for (int r = 0; r < rows; r++) ids[r] = (r * 7 + 3) % V;
            ids[0] = V - 1;
            DeviceArray<T> d_table(to_dtype<T>(table)), d_out((size_t)rows * H);
            DeviceArray<float> d_x((size_t)rows * H);
            DeviceArray<int> d_ids(ids);
            embedding(d_out.get(), d_x.get(), d_table.get(), d_ids.get(), rows, H, 0);
            std::vector<float> ref((size_t)rows * H);
            cpu::embedding(ref.data(), table.data(), ids.data(), rows, H);
            expect_close(download_f32(d_out), ref, kExact, this->name(fmt("embedding H=%d rows=%d", H, rows)));
            expect_close(d_x.download(), ref, kExact, this->name(fmt("embedding, fp32 copy, H=%d rows=%d", H, rows)));
        }
}

TYPED_TEST(Kernels, SwiGLU) {
    using T = TypeParam;
    for_each_input_type<T>([&](auto x) {
        using X = decltype(x);   // gu's type
        for (int I : {100, 1000, 2752})
            for (int rows : {1, 3, 17}) {
                const std::vector<float> gu = rounded<X>(randn((size_t)rows * 2 * I, this->rng, 0.0f, 2.0f));
                DeviceArray<X> d_gu(to_dtype<X>(gu));
                DeviceArray<T> d_out((size_t)rows * I);
                swiglu(d_out.get(), d_gu.get(), rows, I, 0);
                std::vector<float> ref((size_t)rows * I);
                cpu::swiglu(ref.data(), gu.data(), rows, I);
                expect_close(download_f32(d_out), ref, this->tol,
                             this->name(fmt("swiglu %s in I=%d rows=%d", dtype_name<X>(), I, rows)));
            }
    });
}

TYPED_TEST(Kernels, Clip) {
    using T = TypeParam;
    for (int64_t n : {1, 1001, 3 * 4096})
        for (float c : {8.0f, 2.5f}) {
            std::vector<float> x = rounded<T>(randn(n, this->rng, 0.0f, 6.0f));
            DeviceArray<T> d_x(to_dtype<T>(x));
            clip(d_x.get(), n, c, 0);
            cpu::clip(x.data(), n, c);
            expect_close(download_f32(d_x), x, kExact, this->name(fmt("clip n=%lld c=%g", (long long)n, c)));
        }
}

// copy_rows (context parallel's K/V exchange): rows between a packed buffer and scattered pool
// rows, one map null ("row i") or neither, a -1 skipping a row; every other row of dst keeps its
// value (dst starts from other random values, not poison, so all of it is compared).
TYPED_TEST(Kernels, CopyRows) {
    using T = TypeParam;
    struct Maps {
        const char* what;
        std::vector<int> dst, src;  // empty: row i
    };
    const int pool = 40;
    for (int width : {1, 7, 128, 1000})
        for (int n : {1, 5, 33}) {
            std::vector<int> rows(n);
            for (int i = 0; i < n; i++) rows[i] = (i * 13 + 5) % pool;  // distinct pool rows
            if (n > 1) rows[n / 2] = -1;
            const std::vector<int> reversed(rows.rbegin(), rows.rend());
            const std::vector<float> a = rounded<T>(randn((size_t)pool * width, this->rng));
            const std::vector<float> b = rounded<T>(randn((size_t)pool * width, this->rng));
            for (const Maps& maps : {Maps{"pack", {}, rows}, Maps{"unpack", rows, {}}, Maps{"both", rows, reversed}}) {
                DeviceArray<int> d_dst_rows(maps.dst), d_src_rows(maps.src);
                DeviceArray<T> d_src(to_dtype<T>(a)), d_dst(to_dtype<T>(b));
                copy_rows(d_dst.get(), d_src.get(), maps.dst.empty() ? nullptr : d_dst_rows.get(),
                          maps.src.empty() ? nullptr : d_src_rows.get(), n, width, 0);
                std::vector<float> ref = b;
                for (int i = 0; i < n; i++) {
                    const int d = maps.dst.empty() ? i : maps.dst[i], s = maps.src.empty() ? i : maps.src[i];
                    if (d >= 0 && s >= 0) std::copy_n(a.begin() + (size_t)s * width, width, ref.begin() + (size_t)d * width);
                }
                expect_close(download_f32(d_dst), ref, kExact,
                             this->name(fmt("copy_rows %s width=%d n=%d", maps.what, width, n)));
            }
        }
}

// copy_scale_rows (context parallel's exchange of an FP8 cache): the scales of pool rows, nKV of
// them a row at kv_scale_index (blocks of block_size rows), to and from a packed [n, nKV]
// buffer, or from pool rows to pool rows; a -1 skips a row, and every other value of dst keeps
// its own, as in CopyRows.
TEST(KernelsMixed, CopyScaleRows) {
    SKIP_WITHOUT_GPU();
    std::mt19937 rng{20261130};
    struct Maps {
        const char* what;
        std::vector<int> dst, src;  // empty: packed row i
    };
    const int pool = 48;   // pool rows (6 or 3 blocks)
    for (int block_size : {8, 16})
        for (int nKV : {1, 3, 8})
            for (int n : {1, 5, 33}) {
                std::vector<int> rows(n);
                for (int i = 0; i < n; i++) rows[i] = (i * 13 + 5) % pool;  // distinct pool rows
                if (n > 1) rows[n / 2] = -1;
                const std::vector<int> reversed(rows.rbegin(), rows.rend());
                const std::vector<float> a = randn((size_t)pool * nKV, rng), b = randn((size_t)pool * nKV, rng);
                for (const Maps& maps : {Maps{"pack", {}, rows}, Maps{"unpack", rows, {}}, Maps{"both", rows, reversed}}) {
                    DeviceArray<int> d_dst_rows(maps.dst), d_src_rows(maps.src);
                    DeviceArray<float> d_src(a), d_dst(b);
                    copy_scale_rows(d_dst.get(), d_src.get(), maps.dst.empty() ? nullptr : d_dst_rows.get(),
                                    maps.src.empty() ? nullptr : d_src_rows.get(), n, nKV, block_size, 0);
                    auto at = [&](bool pooled, int row, int h) {
                        return pooled ? kv_scale_index(row, h, nKV, block_size) : (int64_t)row * nKV + h;
                    };
                    std::vector<float> ref = b;
                    for (int i = 0; i < n; i++) {
                        const int d = maps.dst.empty() ? i : maps.dst[i], s = maps.src.empty() ? i : maps.src[i];
                        if (d < 0 || s < 0) continue;
                        for (int h = 0; h < nKV; h++) ref[at(!maps.dst.empty(), d, h)] = a[at(!maps.src.empty(), s, h)];
                    }
                    expect_close(d_dst.download(), ref, kExact,
                                 fmt("copy_scale_rows %s block_size=%d nKV=%d n=%d", maps.what, block_size, nKV, n));
                }
            }
}

// ---- norms ----

// Rows x H problems for the norms; `offset` shifts every pointer by one element (misaligned).
struct NormShape {
    int rows, H, offset;
};
const NormShape kNormShapes[] = {{1, 72, 0},   {3, 72, 0},   {17, 100, 0}, {1, 2048, 0}, {5, 2048, 0},
                                 {3, 4096, 0}, {1, 4096, 0}, {3, 4096, 1}, {2, 33, 1}};

TYPED_TEST(Kernels, LayerNorm) {
    using T = TypeParam;
    for (const NormShape& s : kNormShapes) {
        const size_t n = (size_t)s.rows * s.H;
        const std::vector<float> x = rounded<T>(randn(n + s.offset, this->rng, 0.5f, 2.0f));
        DeviceArray<T> d_x(to_dtype<T>(x)), d_out(n + s.offset);
        layernorm(d_out.get() + s.offset, d_x.get() + s.offset, s.rows, s.H, 1e-5f, 0);
        std::vector<float> ref(n), got = download_f32(d_out);
        cpu::layernorm(ref.data(), x.data() + s.offset, s.rows, s.H, 1e-5f);
        expect_close(std::vector<float>(got.begin() + s.offset, got.end()), ref, this->tol,
                     this->name(fmt("layernorm rows=%d H=%d offset=%d", s.rows, s.H, s.offset)));
    }
}

TYPED_TEST(Kernels, RMSNorm) {
    using T = TypeParam;
    for (const NormShape& s : kNormShapes) {
        const size_t n = (size_t)s.rows * s.H;
        const std::vector<float> x = rounded<T>(randn(n + s.offset, this->rng, 0.0f, 2.0f));
        const std::vector<float> w = rounded<T>(randn(s.H + s.offset, this->rng, 1.0f, 0.3f));
        DeviceArray<T> d_x(to_dtype<T>(x)), d_w(to_dtype<T>(w)), d_out(n + s.offset);
        rmsnorm(d_out.get() + s.offset, d_x.get() + s.offset, d_w.get() + s.offset, s.rows, s.H, s.H, s.H, 1e-6f, 0);
        std::vector<float> ref(n), got = download_f32(d_out);
        cpu::rmsnorm(ref.data(), x.data() + s.offset, w.data() + s.offset, s.rows, s.H, 1e-6f);
        expect_close(std::vector<float>(got.begin() + s.offset, got.end()), ref, this->tol,
                     this->name(fmt("rmsnorm rows=%d H=%d offset=%d", s.rows, s.H, s.offset)));
    }
}

// OLMo-2 QK-norm: the q and k column ranges of a fused qkv buffer (in T, or in fp32 as the
// engine's GEMM output), normalized in place over their full width with T weights; v stays
// untouched. Also out of place into a dense [rows, Q] buffer in T.
TYPED_TEST(Kernels, RMSNormQKOfFusedQKV) {
    using T = TypeParam;
    for_each_input_type<T>([&](auto x) {
        using X = decltype(x);   // qkv's type
        struct Case { int rows, nH, nKV, hd; };
        for (const Case c : {Case{1, 8, 2, 64}, Case{5, 4, 4, 128}, Case{3, 16, 2, 128}}) {
            const int Q = c.nH * c.hd, KV = c.nKV * c.hd, QKV = Q + 2 * KV;
            const std::vector<float> qkv = rounded<X>(randn((size_t)c.rows * QKV, this->rng, 0.0f, 3.0f));
            const std::vector<float> wq = rounded<T>(randn(Q, this->rng, 1.0f, 0.3f));
            const std::vector<float> wk = rounded<T>(randn(KV, this->rng, 1.0f, 0.3f));
            DeviceArray<X> d_qkv(to_dtype<X>(qkv));
            DeviceArray<T> d_wq(to_dtype<T>(wq)), d_wk(to_dtype<T>(wk));
            DeviceArray<T> d_q((size_t)c.rows * Q);
            rmsnorm(d_q.get(), d_qkv.get(), d_wq.get(), c.rows, Q, QKV, Q, 1e-6f, 0);  // out of place first
            rmsnorm(d_qkv.get(), d_qkv.get(), d_wq.get(), c.rows, Q, QKV, QKV, 1e-6f, 0);
            rmsnorm(d_qkv.get() + Q, d_qkv.get() + Q, d_wk.get(), c.rows, KV, QKV, QKV, 1e-6f, 0);

            std::vector<float> ref = qkv, ref_q((size_t)c.rows * Q);
            for (int r = 0; r < c.rows; r++) {
                float* row = ref.data() + (size_t)r * QKV;
                cpu::rmsnorm(row, row, wq.data(), 1, Q, 1e-6f);
                cpu::rmsnorm(row + Q, row + Q, wk.data(), 1, KV, 1e-6f);
                std::copy(row, row + Q, ref_q.begin() + (size_t)r * Q);
            }
            const std::string shape =
                fmt("%s qkv rows=%d nH=%d nKV=%d hd=%d", dtype_name<X>(), c.rows, c.nH, c.nKV, c.hd);
            const std::vector<float> got = download_f32(d_qkv);
            expect_close(got, ref, tolerance<X>(), this->name("rmsnorm qk in place " + shape));
            expect_close(download_f32(d_q), ref_q, this->tol, this->name("rmsnorm q strided " + shape));
            std::vector<float> v_got, v_ref;
            for (int r = 0; r < c.rows; r++)
                for (int j = Q + KV; j < QKV; j++)
                    v_got.push_back(got[(size_t)r * QKV + j]), v_ref.push_back(qkv[(size_t)r * QKV + j]);
            expect_close(v_got, v_ref, kExact, this->name("rmsnorm qk leaves v " + shape));
        }
    });
}

// The fused residual kernels keep the residual stream x in fp32 (see norm.cuh); y (the o_proj
// or down_proj output) is T, or fp32 as in the engine.
TYPED_TEST(Kernels, AddLayerNorm) {
    using T = TypeParam;
    for_each_input_type<T>([&](auto y_type) {
        using Y = decltype(y_type);
        for (const NormShape& s : kNormShapes) {
            if (s.offset) continue;
            const size_t n = (size_t)s.rows * s.H;
            const std::vector<float> x = randn(n, this->rng, 0.3f, 2.0f);
            const std::vector<float> y = rounded<Y>(randn(n, this->rng, 0.0f, 1.0f));
            DeviceArray<float> d_x(x);
            DeviceArray<Y> d_y(to_dtype<Y>(y));
            DeviceArray<T> d_xn(n);
            add_layernorm(d_x.get(), d_y.get(), d_xn.get(), s.rows, s.H, 1e-5f, 0);
            std::vector<float> sum(n), ref_xn(n);
            for (size_t i = 0; i < n; i++) sum[i] = x[i] + y[i];
            cpu::layernorm(ref_xn.data(), sum.data(), s.rows, s.H, 1e-5f);
            const std::string shape = fmt("%s y rows=%d H=%d", dtype_name<Y>(), s.rows, s.H);
            expect_close(d_x.download(), sum, kFp32Tol, this->name("add_layernorm x " + shape));
            expect_close(download_f32(d_xn), ref_xn, this->tol, this->name("add_layernorm xn " + shape));
        }
    });
}

TYPED_TEST(Kernels, AddRMSNorm) {
    using T = TypeParam;
    for_each_input_type<T>([&](auto y_type) {
        using Y = decltype(y_type);
        for (const NormShape& s : kNormShapes) {
            if (s.offset) continue;
            const size_t n = (size_t)s.rows * s.H;
            const std::vector<float> x = randn(n, this->rng, 0.0f, 2.0f);
            const std::vector<float> y = rounded<Y>(randn(n, this->rng, 0.0f, 0.5f));
            const std::vector<float> w = rounded<T>(randn(s.H, this->rng, 1.0f, 0.3f));
            DeviceArray<float> d_x(x);
            DeviceArray<Y> d_y(to_dtype<Y>(y));
            DeviceArray<T> d_w(to_dtype<T>(w)), d_xb(n);
            add_rmsnorm(d_x.get(), d_y.get(), d_w.get(), d_xb.get(), s.rows, s.H, 1e-6f, 0);
            std::vector<float> ref(n);
            cpu::rmsnorm(ref.data(), y.data(), w.data(), s.rows, s.H, 1e-6f);
            for (size_t i = 0; i < n; i++) ref[i] += x[i];
            const std::string shape = fmt("%s y rows=%d H=%d", dtype_name<Y>(), s.rows, s.H);
            const std::vector<float> x_got = d_x.download(), xb_got = download_f32(d_xb);
            expect_close(x_got, ref, kFp32Tol, this->name("add_rmsnorm x " + shape));
            expect_close(xb_got, ref, this->tol, this->name("add_rmsnorm xb " + shape));
            // holding the kernel behind until the wait (the engine's norm after o) changes no value
            d_x.upload(x);
            d_xb.poison();
            add_rmsnorm(d_x.get(), d_y.get(), d_w.get(), d_xb.get(), s.rows, s.H, 1e-6f, 0, {}, true);
            EXPECT_EQ(d_x.download(), x_got) << "add_rmsnorm with hold: x differs, " << shape;
            EXPECT_EQ(download_f32(d_xb), xb_got) << "add_rmsnorm with hold: xb differs, " << shape;
        }
    });
}

// The final norm reads the fp32 residual stream and writes T.
TYPED_TEST(Kernels, NormsOfFp32Input) {
    using T = TypeParam;
    for (const NormShape& s : kNormShapes) {
        const size_t n = (size_t)s.rows * s.H;
        const std::vector<float> x = randn(n + s.offset, this->rng, 0.5f, 2.0f);
        const std::vector<float> w = rounded<T>(randn(s.H + s.offset, this->rng, 1.0f, 0.3f));
        DeviceArray<float> d_x(x);
        DeviceArray<T> d_w(to_dtype<T>(w)), d_ln(n + s.offset), d_rms(n + s.offset);
        layernorm(d_ln.get() + s.offset, d_x.get() + s.offset, s.rows, s.H, 1e-5f, 0);
        rmsnorm(d_rms.get() + s.offset, d_x.get() + s.offset, d_w.get() + s.offset, s.rows, s.H, s.H, s.H, 1e-6f, 0);
        std::vector<float> ref_ln(n), ref_rms(n), ln = download_f32(d_ln), rms = download_f32(d_rms);
        cpu::layernorm(ref_ln.data(), x.data() + s.offset, s.rows, s.H, 1e-5f);
        cpu::rmsnorm(ref_rms.data(), x.data() + s.offset, w.data() + s.offset, s.rows, s.H, 1e-6f);
        const std::string shape = fmt("rows=%d H=%d offset=%d", s.rows, s.H, s.offset);
        expect_close(std::vector<float>(ln.begin() + s.offset, ln.end()), ref_ln, this->tol, this->name("layernorm fp32 in " + shape));
        expect_close(std::vector<float>(rms.begin() + s.offset, rms.end()), ref_rms, this->tol, this->name("rmsnorm fp32 in " + shape));
    }
}

// The FP8 engine hands its linear layers fp16 while its weights stay bf16 (CudaEngine::A): the
// embedding, add_rmsnorm and the final rmsnorm write fp16 from bf16 weights. Each output is
// the fp16 rounding of the fp32 value (exactly: the embedding's bf16 rows, add_rmsnorm's own
// fp32 residual), and a value past fp16's range comes out infinite, which the engine reports
// as non-finite logits.
TEST(KernelsMixed, Fp16OutputsFromBf16Weights) {
    SKIP_WITHOUT_GPU();
    using T = __nv_bfloat16;
    using O = __half;
    std::mt19937 rng{20261129};
    const int V = 37;
    for (int H : {72, 100, 4096})
        for (int rows : {1, 5}) {
            const std::string shape = fmt(" H=%d rows=%d", H, rows);
            const size_t n = (size_t)rows * H;
            // embedding
            const std::vector<float> table = rounded<T>(randn((size_t)V * H, rng));
            std::vector<int> ids(rows);
            for (int r = 0; r < rows; r++) ids[r] = (r * 7 + 3) % V;
            DeviceArray<T> d_table(to_dtype<T>(table));
            DeviceArray<O> d_out(n);
            DeviceArray<float> d_res(n);
            DeviceArray<int> d_ids(ids);
            embedding(d_out.get(), d_res.get(), d_table.get(), d_ids.get(), rows, H, 0);
            std::vector<float> ref(n);
            cpu::embedding(ref.data(), table.data(), ids.data(), rows, H);
            expect_close(download_f32(d_out), rounded<O>(ref), kExact, "embedding to fp16" + shape);
            expect_close(d_res.download(), ref, kExact, "embedding, fp32 copy" + shape);
            // add_rmsnorm: xb is the fp16 rounding of the new residual
            const std::vector<float> x = randn(n, rng, 0.0f, 2.0f), y = randn(n, rng, 0.0f, 0.5f);
            const std::vector<float> w = rounded<T>(randn(H, rng, 1.0f, 0.3f));
            DeviceArray<float> d_x(x), d_y(y);
            DeviceArray<T> d_w(to_dtype<T>(w));
            DeviceArray<O> d_xb(n), d_rms(n);
            add_rmsnorm(d_x.get(), d_y.get(), d_w.get(), d_xb.get(), rows, H, 1e-6f, 0);
            std::vector<float> sum(n);
            cpu::rmsnorm(sum.data(), y.data(), w.data(), rows, H, 1e-6f);
            for (size_t i = 0; i < n; i++) sum[i] += x[i];
            const std::vector<float> x_gpu = d_x.download();
            expect_close(x_gpu, sum, kFp32Tol, "add_rmsnorm x" + shape);
            expect_close(download_f32(d_xb), rounded<O>(x_gpu), kExact, "add_rmsnorm xb to fp16" + shape);
            // rmsnorm of the fp32 residual (the final norm)
            rmsnorm(d_rms.get(), d_x.get(), d_w.get(), rows, H, H, H, 1e-6f, 0);
            std::vector<float> ref_rms(n);
            cpu::rmsnorm(ref_rms.data(), x_gpu.data(), w.data(), rows, H, 1e-6f);
            expect_close(download_f32(d_rms), ref_rms, tolerance<O>(), "rmsnorm to fp16" + shape);
        }
    // Past 65504: infinite (so the logits are non-finite and the engine says so), not clamped.
    const int H = 128;
    std::vector<float> x(H, 70000.0f), y = randn(H, rng, 0.0f, 0.5f), w(H, 1.0f);
    x[5] = -70000.0f, x[7] = 3.0f;
    DeviceArray<float> d_x(x), d_y(y);
    DeviceArray<T> d_w(to_dtype<T>(w));
    DeviceArray<O> d_xb(H);
    add_rmsnorm(d_x.get(), d_y.get(), d_w.get(), d_xb.get(), 1, H, 1e-6f, 0);
    const std::vector<float> xb = download_f32(d_xb);
    EXPECT_TRUE(std::isinf(xb[0]) && xb[0] > 0) << xb[0];
    EXPECT_TRUE(std::isinf(xb[5]) && xb[5] < 0) << xb[5];
    EXPECT_TRUE(std::isfinite(xb[7])) << xb[7];
}

// ---- rope ----

// The CPU reference of rope_qkv's first steps: each token's row of qkv [rows, Q + 2KV] split into
// q [rows, Q], k and v [rows, KV], with the QK-norm (eps 1e-6) applied to q and k when q_w is given.
struct QkvParts {
    std::vector<float> q, k, v;
};
QkvParts split_qkv(const std::vector<float>& qkv, int rows, int Q, int KV, const std::vector<float>* q_w,
                   const std::vector<float>* k_w) {
    QkvParts p;
    for (int r = 0; r < rows; r++) {
        const float* row = qkv.data() + (size_t)r * (Q + 2 * KV);
        p.q.insert(p.q.end(), row, row + Q);
        p.k.insert(p.k.end(), row + Q, row + Q + KV);
        p.v.insert(p.v.end(), row + Q + KV, row + Q + 2 * KV);
    }
    if (q_w) {
        cpu::rmsnorm(p.q.data(), p.q.data(), q_w->data(), rows, Q, 1e-6f);
        cpu::rmsnorm(p.k.data(), p.k.data(), k_w->data(), rows, KV, 1e-6f);
    }
    return p;
}

// qkv (the GEMM output) is T, or fp32 as in the engine; q and the K/V cache rows are T. With
// norm, the OLMo-2/3 QK-norm comes first (each token's whole q and whole k RMS-normalized), and
// the normalized q|k is also written back into qkv (the engine's hooks read it there).
TYPED_TEST(Kernels, RopeQKV) {
    using T = TypeParam;
    for_each_input_type<T>([&](auto x) {
        using X = decltype(x);   // qkv's type
        struct Case { int rows, nH, nKV, hd, pos0; double theta; float attn_factor; bool norm; };
        const float yarn = 1.2079441541679836f;
        for (const Case c : {Case{1, 8, 8, 64, 0, 1e4, 1.0f, false}, Case{1, 32, 8, 128, 40000, 5e5, yarn, true},
                             Case{7, 16, 4, 128, 5, 5e5, 1.0f, true}, Case{33, 8, 1, 64, 40000, 1e4, 1.0f, false},
                             Case{5, 4, 2, 128, 65530, 5e5, yarn, false}, Case{3, 5, 1, 72, 17, 1e4, 1.0f, true},
                             Case{2, 6, 3, 256, 9, 5e5, 1.0f, true}, Case{4, 2, 2, 8, 1, 1e4, 1.0f, true},
                             Case{130, 4, 2, 64, 3, 1e4, 1.0f, true}}) {
            const int Q = c.nH * c.hd, KV = c.nKV * c.hd, QKV = Q + 2 * KV, pool_rows = 3 * c.rows + 2;
            std::vector<float> inv_freq(c.hd / 2);
            for (int d = 0; d < c.hd / 2; d++) inv_freq[d] = (float)(1.0 / std::pow(c.theta, 2.0 * d / c.hd));
            const std::vector<float> qkv = rounded<X>(randn((size_t)c.rows * QKV, this->rng, 0.0f, 2.0f));
            const std::vector<float> q_w = rounded<T>(randn(Q, this->rng, 1.0f, 0.3f));
            const std::vector<float> k_w = rounded<T>(randn(KV, this->rng, 1.0f, 0.3f));
            // Token r has position pos0 + r and goes to a scattered pool row (a paged cache).
            std::vector<int> pos(c.rows), rows(pool_rows);
            for (int r = 0; r < c.rows; r++) pos[r] = c.pos0 + r;
            std::iota(rows.begin(), rows.end(), 0);
            std::shuffle(rows.begin(), rows.end(), this->rng);
            rows.resize(c.rows);
            DeviceArray<X> d_qkv(to_dtype<X>(qkv));
            DeviceArray<T> d_q((size_t)c.rows * Q), d_k((size_t)pool_rows * KV), d_v((size_t)pool_rows * KV);
            DeviceArray<T> d_qw(to_dtype<T>(q_w)), d_kw(to_dtype<T>(k_w));
            DeviceArray<float> d_inv(inv_freq);
            DeviceArray<int> d_pos(pos), d_rows(rows);
            RopeParams<T, X> p{d_qkv.get(), d_q.get(), d_k.get(), d_v.get(), c.rows, d_pos.get(), d_rows.get(),
                               c.nH, c.nKV, c.hd, d_inv.get(), c.attn_factor};
            if (c.norm) p.q_norm = d_qw.get(), p.k_norm = d_kw.get(), p.eps = 1e-6f;
            rope_qkv(p, 0);   // as decode and prefill run it
            const std::vector<float> q_got = download_f32(d_q), k_all = download_f32(d_k), v_all = download_f32(d_v);
            if (c.norm) {     // as under the engine's tensor hooks: the normalized q|k also written back, in place
                p.normed = d_qkv.get();
                rope_qkv(p, 0);
                EXPECT_EQ(download_f32(d_q), q_got) << "rope_qkv with the normalized q|k written back: other q";
            }

            // the CPU reference: split, QK-norm, then rotate q and k in place
            auto [q, k, v] = split_qkv(qkv, c.rows, Q, KV, c.norm ? &q_w : nullptr, &k_w);
            const std::string shape = fmt("%s qkv rows=%d nH=%d nKV=%d hd=%d pos0=%d af=%.3f norm=%d", dtype_name<X>(),
                                          c.rows, c.nH, c.nKV, c.hd, c.pos0, c.attn_factor, (int)c.norm);
            if (c.norm) {   // qkv now holds the normalized q|k (before the rotation) and v as it was
                std::vector<float> want;
                for (int r = 0; r < c.rows; r++) {
                    want.insert(want.end(), q.begin() + (size_t)r * Q, q.begin() + (size_t)(r + 1) * Q);
                    want.insert(want.end(), k.begin() + (size_t)r * KV, k.begin() + (size_t)(r + 1) * KV);
                    want.insert(want.end(), v.begin() + (size_t)r * KV, v.begin() + (size_t)(r + 1) * KV);
                }
                expect_close(download_f32(d_qkv), rounded<X>(want), std::is_same_v<X, float> ? kFp32Tol : this->tol,
                             this->name("qk-norm " + shape));
            }
            cpu::rope(q.data(), c.rows, c.nH, c.hd, c.pos0, inv_freq.data(), c.attn_factor);
            cpu::rope(k.data(), c.rows, c.nKV, c.hd, c.pos0, inv_freq.data(), c.attn_factor);

            std::vector<float> k_got, v_got;
            std::vector<bool> written(pool_rows, false);
            for (int r = 0; r < c.rows; r++) {
                k_got.insert(k_got.end(), k_all.begin() + (size_t)rows[r] * KV, k_all.begin() + (size_t)(rows[r] + 1) * KV);
                v_got.insert(v_got.end(), v_all.begin() + (size_t)rows[r] * KV, v_all.begin() + (size_t)(rows[r] + 1) * KV);
                written[rows[r]] = true;
            }
            size_t touched_elsewhere = 0;  // pool rows nobody writes must stay NaN
            for (size_t i = 0; i < k_all.size(); i++)
                if (!written[i / KV] && (!std::isnan(k_all[i]) || !std::isnan(v_all[i]))) touched_elsewhere++;
            expect_close(q_got, q, this->tol, this->name("rope q " + shape));
            expect_close(k_got, k, this->tol, this->name("rope k " + shape));
            expect_close(v_got, rounded<T>(v), kExact, this->name("rope v " + shape));   // v: one rounding into T
            EXPECT_EQ(touched_elsewhere, 0u) << "cache rows outside the written positions changed";
        }
    });
}

// An FP8 KV cache (C = uint8_t): the keys and values of each (token, KV head) become E4M3 codes
// and one scale in kv_scale_index order (fp8.h). Against the CPU: split, QK-norm and rotation as
// above, then fp8_round_trip of each head row. The rotated keys agree with the CPU's to ~1e-6
// before rounding, so a code may differ by one step where a value lies on a rounding boundary:
// the keys are compared in rel-L2 (bar 5e-3; the quantization itself is ~2e-2) and max-abs (one step, 2^-3 of the head's largest
// value, which 448 stands for); the values are not computed at all, so they must match exactly,
// and so must the keys' and values' scales up to float rounding. Rows nobody writes keep
// their poison (codes 0xFF, NaN scales).
template <typename T>
void rope_into_fp8_cache(std::mt19937& rng) {
    for_each_input_type<T>([&](auto x) {
        using X = decltype(x);
        struct Case { int rows, nH, nKV, hd, pos0, bs; bool norm; };
        for (const Case c : {Case{1, 8, 8, 128, 300, 16, true}, Case{1, 32, 8, 128, 40000, 16, true},
                             Case{3, 5, 1, 72, 17, 8, true}, Case{2, 6, 3, 256, 9, 16, false}, Case{4, 2, 2, 8, 1, 8, true},
                             Case{130, 4, 2, 64, 3, 16, true}, Case{7, 16, 4, 128, 5, 32, false}}) {
            const int Q = c.nH * c.hd, KV = c.nKV * c.hd, QKV = Q + 2 * KV, pool_rows = (3 * c.rows + 2 + c.bs) / c.bs * c.bs;
            std::vector<float> inv_freq(c.hd / 2);
            for (int d = 0; d < c.hd / 2; d++) inv_freq[d] = (float)(1.0 / std::pow(5e5, 2.0 * d / c.hd));
            const std::vector<float> qkv = rounded<X>(randn((size_t)c.rows * QKV, rng, 0.0f, 2.0f));
            const std::vector<float> q_w = rounded<T>(randn(Q, rng, 1.0f, 0.3f)), k_w = rounded<T>(randn(KV, rng, 1.0f, 0.3f));
            std::vector<int> pos(c.rows), rows(pool_rows);
            for (int r = 0; r < c.rows; r++) pos[r] = c.pos0 + r;
            std::iota(rows.begin(), rows.end(), 0);
            std::shuffle(rows.begin(), rows.end(), rng);
            rows.resize(c.rows);
            DeviceArray<X> d_qkv(to_dtype<X>(qkv));
            DeviceArray<T> d_q((size_t)c.rows * Q), d_qw(to_dtype<T>(q_w)), d_kw(to_dtype<T>(k_w));
            DeviceArray<uint8_t> d_k((size_t)pool_rows * KV), d_v((size_t)pool_rows * KV);
            DeviceArray<float> d_ks((size_t)pool_rows * c.nKV), d_vs((size_t)pool_rows * c.nKV), d_inv(inv_freq);
            DeviceArray<int> d_pos(pos), d_rows(rows);
            RopeParams<T, X, uint8_t> p{d_qkv.get(), d_q.get(), d_k.get(), d_v.get(), c.rows, d_pos.get(), d_rows.get(),
                                        c.nH, c.nKV, c.hd, d_inv.get(), 1.0f};
            p.k_scale = d_ks.get(), p.v_scale = d_vs.get(), p.block_size = c.bs;
            if (c.norm) p.q_norm = d_qw.get(), p.k_norm = d_kw.get(), p.eps = 1e-6f;
            rope_qkv(p, 0);

            auto [q, k, v] = split_qkv(qkv, c.rows, Q, KV, c.norm ? &q_w : nullptr, &k_w);   // the CPU reference
            cpu::rope(q.data(), c.rows, c.nH, c.hd, c.pos0, inv_freq.data(), 1.0f);
            cpu::rope(k.data(), c.rows, c.nKV, c.hd, c.pos0, inv_freq.data(), 1.0f);
            std::vector<float> k_scale, v_scale;   // the CPU's scales, per (token, head)
            for (int i = 0; i < c.rows * c.nKV; i++) {
                float ka = 0.0f, va = 0.0f;
                for (int d = 0; d < c.hd; d++)
                    ka = std::max(ka, std::fabs(k[(size_t)i * c.hd + d])), va = std::max(va, std::fabs(v[(size_t)i * c.hd + d]));
                k_scale.push_back(fp8_row_scale(ka)), v_scale.push_back(fp8_row_scale(va));
                fp8_round_trip(k.data() + (size_t)i * c.hd, c.hd);
                fp8_round_trip(v.data() + (size_t)i * c.hd, c.hd);
            }

            const std::vector<uint8_t> k_codes = d_k.download(), v_codes = d_v.download();
            const std::vector<float> ks = d_ks.download(), vs = d_vs.download();
            std::vector<float> k_got, v_got, ks_got, vs_got;
            std::vector<bool> written(pool_rows, false);
            for (int r = 0; r < c.rows; r++) {
                written[rows[r]] = true;
                for (int h = 0; h < c.nKV; h++) {
                    const int64_t at = kv_scale_index(rows[r], h, c.nKV, c.bs);
                    ks_got.push_back(ks[at]), vs_got.push_back(vs[at]);
                    for (int d = 0; d < c.hd; d++) {
                        const size_t i = (size_t)rows[r] * KV + h * c.hd + d;
                        k_got.push_back(ks[at] * e4m3_to_float(k_codes[i]));
                        v_got.push_back(vs[at] * e4m3_to_float(v_codes[i]));
                    }
                }
            }
            size_t touched_elsewhere = 0;
            for (int row = 0; row < pool_rows; row++)
                for (int h = 0; h < c.nKV; h++) {
                    if (written[row]) continue;
                    const int64_t at = kv_scale_index(row, h, c.nKV, c.bs);
                    touched_elsewhere += !std::isnan(ks[at]) || !std::isnan(vs[at]);
                    for (int d = 0; d < c.hd; d++)
                        touched_elsewhere += k_codes[(size_t)row * KV + h * c.hd + d] != 0xFF ||
                                             v_codes[(size_t)row * KV + h * c.hd + d] != 0xFF;
                }
            const std::string shape = fmt("%s/%s qkv rows=%d nH=%d nKV=%d hd=%d bs=%d norm=%d", dtype_name<T>(),
                                          dtype_name<X>(), c.rows, c.nH, c.nKV, c.hd, c.bs, (int)c.norm);
            expect_close(download_f32(d_q), rounded<T>(q), tolerance<T>(), "rope q, FP8 cache " + shape);
            expect_close(k_got, k, Tolerance{5e-3, 0.125}, "rope k into FP8 " + shape);
            expect_close(ks_got, k_scale, Tolerance{1e-5, 1e-5}, "k scales " + shape);
            expect_close(v_got, v, kExact, "v into FP8 " + shape);
            expect_close(vs_got, v_scale, kExact, "v scales " + shape);
            EXPECT_EQ(touched_elsewhere, 0u) << "cache rows outside the written positions changed";
        }
    });
}

TEST(KernelsFp8Cache, RopeQKVIntoFp8Cache) {
    SKIP_WITHOUT_GPU();
    std::mt19937 rng(77);
    rope_into_fp8_cache<__half>(rng);
    rope_into_fp8_cache<__nv_bfloat16>(rng);
}

// ---- sampling ----

// The warpers of transformers (min-p: p_i >= min_p * p_max), independently, in double: the allowed candidates and their
// renormalized probabilities (0 for the others).
std::vector<double> reference_distribution(const std::vector<float>& logits, const SamplingParams& s) {
    const int V = (int)logits.size();
    std::vector<int> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::vector<double> z(V);
    for (int i = 0; i < V; i++) z[i] = logits[i] / s.temperature;  // float division, as both samplers
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return z[a] > z[b]; });
    const int k = s.top_k > 0 ? std::min(s.top_k, V) : V;
    std::vector<double> p(V, 0.0);
    double sum = 0;
    for (int r = 0; r < k; r++) sum += p[order[r]] = std::exp(z[order[r]] - z[order[0]]);
    double cum = 0;
    int keep = k;
    for (int r = 0; r < k && s.top_p < 1.0f; r++)
        if ((cum += p[order[r]] / sum) >= s.top_p) {
            keep = r + 1;
            break;
        }
    while (s.min_p > 0.0f && keep > 1 && z[order[0]] - z[order[keep - 1]] > -std::log((double)s.min_p)) keep--;
    double kept = 0;
    for (int r = 0; r < V; r++) {
        if (r < keep) kept += p[order[r]];
        else p[order[r]] = 0.0;
    }
    for (double& x : p) x /= kept;
    return p;
}

// GPU draws for steps first .. first + n - 1, one launch each (the device step counter moves
// between them).
template <typename T>
std::vector<int> gpu_draws(const T* logits, int V, const SamplingParams& s, int n, uint64_t first = 0) {
    std::vector<uint64_t> steps(n);
    std::iota(steps.begin(), steps.end(), first);
    DeviceArray<uint64_t> d_steps(steps);
    DeviceArray<int> d_ids(n);
    for (int j = 0; j < n; j++)
        sample(d_ids.get() + j, logits, V, s, d_steps.get() + j, 0);
    return d_ids.download();
}

// On sm_90 argmax splits the logits over a cluster of 8 blocks (empty slices at small V, the
// maximum or a tie in any slice); in portable mode one block reads them all.
TYPED_TEST(Kernels, Argmax) {
    using T = TypeParam;
    for (Portable mode : {Portable::Off, Portable::Sm86}) {  // clusters on sm_90, then one block
        PortableScope portable(mode);
        for (int V : {1, 65, 1000, 1001, 100352}) {
            std::vector<float> x = rounded<T>(randn(V, this->rng, 0.0f, 3.0f));
            std::vector<std::pair<std::string, std::vector<float>>> cases = {{"random", x}};
            if (V > 1) {
                std::vector<float> last = x, tie = x, zeros(V, -1.0f);
                last[V - 1] = 100.0f;
                tie[V / 3] = tie[V / 2] = 100.0f;
                zeros[V / 3] = -0.0f, zeros[V / 2] = 0.0f;  // -0 and +0 tie: the lower index wins
                cases.insert(cases.end(), {{"max last", last}, {"tie", tie}, {"signed zeros", zeros}});
            }
            for (const auto& [what, logits] : cases)
                for (int offset : {0, 1}) {  // offset 1: misaligned logits, scalar loads
                    std::vector<float> padded(offset, 5.0f);
                    padded.insert(padded.end(), logits.begin(), logits.end());
                    DeviceArray<T> d_x(to_dtype<T>(padded));
                    DeviceArray<int> d_id(1);
                    argmax(d_id.get(), d_x.get() + offset, V, 0);
                    EXPECT_EQ(d_id.download()[0], cpu::argmax(logits.data(), V))
                        << this->name(fmt("argmax V=%d offset=%d portable %d ", V, offset, (int)mode)) << what;
                }
        }
    }
}

// A decode step's drawing kernel also stores its id into the host's pinned, mapped rows [2, B]
// (IdSink), at the row a device int names and column b: argmax and sample, clusters and one
// block, finite and non-finite logits. The other entries stay as they were.
TYPED_TEST(Kernels, DrawnIdAlsoReachesItsHostRow) {
    using T = TypeParam;
    const int V = 100352, B = 3, b = 2;
    int *host = nullptr, *host_dev = nullptr;
    cudaCheck(cudaHostAlloc(&host, sizeof(int) * 2 * B, cudaHostAllocMapped));
    cudaCheck(cudaHostGetDevicePointer(&host_dev, host, 0));
    std::vector<float> x = rounded<T>(randn(V, this->rng, 0.0f, 2.0f));
    std::vector<float> bad = x;
    bad[V / 2] = NAN;
    const SamplingParams s{0.8f, 0, 0.95f, 3};
    DeviceArray<uint64_t> d_step(std::vector<uint64_t>{5});
    for (int row : {0, 1})
        for (bool finite : {true, false})
            for (Portable mode : {Portable::Off, Portable::Sm86}) {  // clusters on sm_90, then one block
                PortableScope portable(mode);
                DeviceArray<T> d_x(to_dtype<T>(finite ? x : bad));
                DeviceArray<int> d_row(std::vector<int>{row}), d_id(1);
                const std::string what = this->name(fmt("row %d finite %d portable %d ", row, (int)finite, (int)mode));
                for (bool greedy : {true, false}) {
                    std::fill(host, host + 2 * B, -7);
                    const IdSink out(d_id.get(), host_dev, d_row.get(), B, b);
                    if (greedy) argmax(out, d_x.get(), V, 0);
                    else sample(out, d_x.get(), V, s, d_step.get(), 0);
                    cudaCheck(cudaDeviceSynchronize());
                    const int id = d_id.download()[0];
                    const int want = !finite ? -1 : greedy ? cpu::argmax(x.data(), V) : gpu_draws(d_x.get(), V, s, 1, 5)[0];
                    EXPECT_EQ(id, want) << what << (greedy ? "argmax" : "sample");
                    for (int i = 0; i < 2 * B; i++)
                        EXPECT_EQ(host[i], i == row * B + b ? id : -7) << what << (greedy ? "argmax" : "sample") << " entry " << i;
                }
            }
    cudaCheck(cudaFreeHost(host));
}

// A NaN or Inf anywhere in the logits: argmax and sample write -1 instead of an id, as
// sample_cpu returns (the engine turns it into an error naming the step).
TYPED_TEST(Kernels, NonFiniteLogitsGiveMinusOne) {
    using T = TypeParam;
    for (int V : {1000, 100352})
        for (float bad : {NAN, INFINITY, -INFINITY})
            for (int at : {0, V / 2, V - 1}) {
                std::vector<float> x = rounded<T>(randn(V, this->rng, 0.0f, 2.0f));
                x[at] = bad;
                DeviceArray<T> d_x(to_dtype<T>(x));
                DeviceArray<int> d_id(1);
                const std::string what = this->name(fmt("V=%d %f at %d ", V, bad, at));
                const SamplingParams s{0.8f, 0, 0.95f, 3};
                for (Portable mode : {Portable::Off, Portable::Sm86}) {  // clusters on sm_90, then one block
                    PortableScope portable(mode);
                    argmax(d_id.get(), d_x.get(), V, 0);
                    EXPECT_EQ(d_id.download()[0], -1) << "argmax " << what << " portable " << (int)mode;
                    EXPECT_EQ(gpu_draws(d_x.get(), V, s, 1)[0], -1) << "sample " << what << " portable " << (int)mode;
                }
                EXPECT_EQ(sample_cpu(x.data(), V, s, 0), -1) << "sample_cpu " << what;
            }
}

TYPED_TEST(Kernels, SampleIsDeterministicAndTopK1IsArgmax) {
    using T = TypeParam;
    const int V = 100352;
    const std::vector<float> x = rounded<T>(randn(V, this->rng, 0.0f, 2.0f));
    DeviceArray<T> d_x(to_dtype<T>(x));
    const SamplingParams s{0.7f, 50, 0.9f, 42};
    const std::vector<int> a = gpu_draws(d_x.get(), V, s, 16), b = gpu_draws(d_x.get(), V, s, 16);
    EXPECT_EQ(a, b) << "same seed and step gave different tokens";
    EXPECT_GT(std::set<int>(a.begin(), a.end()).size(), 1u) << "16 steps all drew the same token";
    const SamplingParams other_seed{0.7f, 50, 0.9f, 43};
    EXPECT_NE(a, gpu_draws(d_x.get(), V, other_seed, 16)) << "the seed changes nothing";
    for (const SamplingParams& greedy : {SamplingParams{1.0f, 1, 1.0f, 7}, SamplingParams{0.5f, 1, 0.3f, 8}})
        for (int id : gpu_draws(d_x.get(), V, greedy, 4)) EXPECT_EQ(id, cpu::argmax(x.data(), V));
}

// Draws of sample() for steps 0..n-1 against sample_cpu with the same (seed, step): all equal
// (one may differ where rounding moves a boundary), none outside the allowed set.
struct SamplerCase {
    int V;
    float spread;  // > 0: logits rounded to multiples of it, so many exact ties (the id bytes decide)
    SamplingParams s;
    int offset = 0;  // 1: logits start one element past an aligned address (scalar loads)
};
template <typename T> void expect_matches_cpu_sampler(const SamplerCase& c, int n, std::mt19937& rng) {
    std::vector<float> x = rounded<T>(randn(c.V, rng, 0.0f, 2.5f));
    if (c.spread > 0)
        for (float& v : x) v = std::round(v / c.spread) * c.spread;
    std::vector<float> padded(c.offset, 9.0f);
    padded.insert(padded.end(), x.begin(), x.end());
    DeviceArray<T> d_x(to_dtype<T>(padded));
    auto draws_in = [&](Portable mode) {
        PortableScope portable(mode);
        return gpu_draws(d_x.get() + c.offset, c.V, c.s, n);
    };
    const std::vector<int> ids = draws_in(Portable::Off), one_block = draws_in(Portable::Sm86);
    const std::vector<double> p = reference_distribution(x, c.s);
    int mismatches = 0, outside = 0;
    for (int j = 0; j < n; j++) {
        mismatches += ids[j] != sample_cpu(x.data(), c.V, c.s, j);
        outside += ids[j] < 0 || ids[j] >= c.V || p[ids[j]] == 0.0;
    }
    const std::string what = fmt("%s sample V=%d t=%.2f k=%d p=%.2f min_p=%.2g ties=%d offset=%d", dtype_name<T>(),
                                 c.V, c.s.temperature, c.s.top_k, c.s.top_p, c.s.min_p, c.spread > 0, c.offset);
    std::printf("  %-58s %d draws: %d differ from sample_cpu, %d outside the set\n", what.c_str(), n, mismatches,
                outside);
    EXPECT_EQ(outside, 0) << what;
    EXPECT_LE(mismatches, n >= 16 ? 1 : 0) << what;  // a boundary moved by rounding is rare
    EXPECT_EQ(one_block, ids) << what << ": the one-block sampler (portable mode) drew other tokens";
}

// The kernel resolves each target in a window of <= 1024 candidates gathered from its depth
// bin and the bins above; a later target may fall in the same window (small top-k, small
// vocabularies). The cases cover top-k / top-p on and off, windows reused and not.
TYPED_TEST(Kernels, SampleMatchesCpuSampler) {
    for (const SamplerCase& c : {SamplerCase{100352, 0, {1.0f, 0, 1.0f, 1}}, SamplerCase{100352, 0, {0.7f, 50, 1.0f, 2}},
                                 SamplerCase{100352, 0, {0.8f, 0, 0.9f, 3}}, SamplerCase{100352, 0, {0.6f, 40, 0.95f, 4}},
                                 SamplerCase{50304, 0, {1.3f, 1000, 0.5f, 5}}, SamplerCase{100352, 0, {1.5f, 5000, 0.9f, 6}},
                                 SamplerCase{100352, 0, {2.0f, 0, 0.3f, 7}}})
        expect_matches_cpu_sampler<TypeParam>(c, 48, this->rng);
}

// Exact ties. With logits rounded to multiples of 2 at V = 100352, thousands of candidates share
// a logit (and so a depth bin): the kernel narrows such a bin by radix digits of the key, down
// to the id digits, for top-k, top-p and the draw.
TYPED_TEST(Kernels, SampleMatchesCpuSamplerWithTies) {
    for (const SamplerCase& c : {SamplerCase{3000, 0.25f, {1.0f, 20, 0.97f, 8}}, SamplerCase{3000, 0.25f, {2.0f, 0, 0.6f, 9}},
                                 SamplerCase{3000, 0.25f, {1.0f, 0, 1.0f, 10}}, SamplerCase{3000, 0.25f, {1.0f, 1500, 0.99f, 11}},
                                 SamplerCase{1, 0, {1.0f, 3, 0.5f, 12}}, SamplerCase{3001, 0.25f, {1.0f, 0, 0.8f, 13}, 1},
                                 SamplerCase{1001, 0, {0.9f, 100, 0.9f, 14}, 1}, SamplerCase{100352, 2.0f, {1.0f, 0, 1.0f, 15}},
                                 SamplerCase{100352, 2.0f, {1.0f, 30000, 0.95f, 16}}, SamplerCase{100352, 2.0f, {3.0f, 0, 0.5f, 17}, 1}})
        expect_matches_cpu_sampler<TypeParam>(c, 16, this->rng);
}

// Steps above 2^32 (the API's counters are 64-bit): the kernel draws what sample_cpu draws at
// the same step, not what it draws at the step's low 32 bits (as a 32-bit counter would).
TYPED_TEST(Kernels, SampleStepAbove2To32MatchesCpuSampler) {
    using T = TypeParam;
    const int V = 50304, n = 16;
    const std::vector<float> x = rounded<T>(randn(V, this->rng, 0.0f, 2.5f));
    DeviceArray<T> d_x(to_dtype<T>(x));
    const SamplingParams s{1.0f, 0, 1.0f, 21};
    const uint64_t first = (uint64_t(1) << 32) + 5;
    const std::vector<int> ids = gpu_draws(d_x.get(), V, s, n, first);
    int mismatches = 0, as_narrowed = 0;
    for (int j = 0; j < n; j++) {
        mismatches += ids[j] != sample_cpu(x.data(), V, s, first + j);
        as_narrowed += ids[j] == sample_cpu(x.data(), V, s, (uint32_t)(first + j));
    }
    EXPECT_LE(mismatches, 1) << this->name("step 2^32 + 5.. ");
    EXPECT_LT(as_narrowed, n / 2) << this->name("the draws follow the low 32 bits of the step ");
}

// Min-p after top-k and top-p: a cut by count (the candidates within depth -ln(min_p)), alone,
// after the others, on ties, with min_p = 1 (the ties of the best only) and with a cut deeper
// than the candidates that weigh anything (nothing to do).
TYPED_TEST(Kernels, SampleMatchesCpuSamplerWithMinP) {
    for (const SamplerCase& c : {SamplerCase{100352, 0, {1.0f, 0, 1.0f, 31, 0.05f}},
                                 SamplerCase{100352, 0, {0.7f, 50, 0.9f, 32, 0.1f}},
                                 SamplerCase{100352, 0, {1.5f, 0, 0.95f, 33, 0.002f}},
                                 SamplerCase{3000, 0.25f, {1.0f, 0, 1.0f, 34, 0.3f}},
                                 SamplerCase{1001, 0.5f, {0.9f, 0, 1.0f, 35, 1.0f}, 1},
                                 SamplerCase{100352, 0, {1.0f, 0, 1.0f, 36, 1e-13f}}})
        expect_matches_cpu_sampler<TypeParam>(c, 16, this->rng);
}

// Every path of the kernel, one draw each, one (dtype, path) per test: compute-sanitizer
// racecheck takes one to several minutes per launch of this kernel (a cluster of 8 blocks of
// 1024 threads), so scripts/final_check.sh racechecks these tests one process each. Paths: a
// vocabulary smaller than the cluster's slices (some blocks hold no logits), V = 1, misaligned
// logits with the top-k window reused by top-p, a large vocabulary, and ~2700 exact ties in one
// depth bin, which needs the radix narrowing down to the id digits; min-p's count over the cluster.
struct SamplerPath {
    const char* name;
    SamplerCase c;
};
const SamplerPath kSamplerPaths[] = {
    {"small_vocab", {40, 0, {0.8f, 0, 1.0f, 21}}},
    {"one_token", {1, 0, {1.0f, 3, 0.5f, 22}}},
    {"misaligned_topk_topp", {1001, 0, {0.9f, 100, 0.9f, 23}, 1}},
    {"large_vocab", {100352, 0, {0.6f, 40, 0.95f, 24}}},
    {"exact_ties", {3000, 8.0f, {1.0f, 2000, 0.95f, 25}}},
    {"min_p", {100352, 0, {0.8f, 0, 0.95f, 26, 0.05f}}},
};
class SampleOnce : public ::testing::TestWithParam<std::tuple<int, SamplerPath>> {
protected:
    void SetUp() override { SKIP_WITHOUT_GPU(); }
};
TEST_P(SampleOnce, MatchesCpuSampler) {
    const auto& [dtype, path] = GetParam();
    std::mt19937 rng(7);
    if (dtype == 0) expect_matches_cpu_sampler<float>(path.c, 1, rng);
    if (dtype == 1) expect_matches_cpu_sampler<__half>(path.c, 1, rng);
    if (dtype == 2) expect_matches_cpu_sampler<__nv_bfloat16>(path.c, 1, rng);
}
std::string sampler_path_name(const ::testing::TestParamInfo<SampleOnce::ParamType>& info) {
    static const char* const dtypes[] = {"fp32", "fp16", "bf16"};
    return std::string(dtypes[std::get<0>(info.param)]) + "_" + std::get<1>(info.param).name;
}
INSTANTIATE_TEST_SUITE_P(Paths, SampleOnce, ::testing::Combine(::testing::Values(0, 1, 2), ::testing::ValuesIn(kSamplerPaths)),
                         sampler_path_name);

class SamplingStats : public ::testing::Test {
protected:
    void SetUp() override { SKIP_WITHOUT_GPU(); }
};

// 20000 draws on a small vocabulary: never outside the allowed set, and the counts fit the
// renormalized softmax (chi-square over bins with >= 5 expected draws, the rest pooled).
TEST_F(SamplingStats, FrequenciesMatchRenormalizedSoftmax) {
    std::mt19937 rng(99);
    const int V = 40, n = 20000;
    const std::vector<float> x = randn(V, rng, 0.0f, 1.5f);
    DeviceArray<float> d_x(x);
    for (const SamplingParams& s : {SamplingParams{0.8f, 0, 1.0f, 11}, SamplingParams{1.0f, 10, 0.8f, 12},
                                    SamplingParams{1.5f, 0, 0.7f, 13}, SamplingParams{1.0f, 25, 1.0f, 14}}) {
        const std::vector<double> p = reference_distribution(x, s);
        std::vector<int> count(V, 0);
        for (int id : gpu_draws(d_x.get(), V, s, n)) {
            ASSERT_TRUE(id >= 0 && id < V) << "drawn id " << id;
            count[id]++;
        }
        double chi2 = 0, pooled_expected = 0, pooled_seen = 0;
        int bins = 0, outside = 0;
        for (int i = 0; i < V; i++) {
            if (p[i] == 0.0) {
                outside += count[i];
            } else if (p[i] * n >= 5) {
                chi2 += (count[i] - p[i] * n) * (count[i] - p[i] * n) / (p[i] * n);
                bins++;
            } else {
                pooled_expected += p[i] * n, pooled_seen += count[i];
            }
        }
        if (pooled_expected > 0) chi2 += (pooled_seen - pooled_expected) * (pooled_seen - pooled_expected) / pooled_expected, bins++;
        const int df = bins - 1;
        const double limit = df + 5 * std::sqrt(2.0 * df);  // ~5 standard deviations
        std::printf("  sample V=%d t=%.1f k=%d p=%.1f: chi2 %.1f with %d dof (limit %.1f), %d draws outside\n", V,
                    s.temperature, s.top_k, s.top_p, chi2, df, limit, outside);
        EXPECT_EQ(outside, 0);
        EXPECT_LT(chi2, limit);
    }
}

// What the kernels see of the GPU (src/device_caps.h): on Hopper the sm_90 paths (clusters,
// dependent launches, 227 KB per block), and portable mode turns them off and caps the shared
// memory.
TEST(DeviceCaps, HopperPathsAndPortableMode) {
    SKIP_WITHOUT_GPU();
    PortableScope off(Portable::Off);
    const DeviceCaps c = device_caps();
    std::printf("  compute %d.%d, clusters %d, dependent launch %d, %d KiB of shared memory per block\n", c.major,
                c.minor, c.clusters, c.pdl, c.smem_per_block / 1024);
    EXPECT_EQ(device_problem(), "");
    EXPECT_GE(c.major, 8);
    if (c.major == 9) {
        EXPECT_TRUE(c.clusters && c.pdl);
        EXPECT_EQ(c.smem_per_block, 227 * 1024);
    }
    for (Portable mode : {Portable::Sm86, Portable::Sm80}) {
        PortableScope portable(mode);
        const DeviceCaps p = device_caps();
        EXPECT_FALSE(p.clusters || p.pdl);
        EXPECT_EQ(p.smem_per_block, std::min(c.smem_per_block, kSmemBytes[(int)mode]));
        EXPECT_EQ(p.major * 10 + p.minor, c.major * 10 + c.minor);
    }
}

TEST(SamplingParams, InvalidSettingsThrow) {
    int* out = nullptr;
    const float* logits = nullptr;
    const uint64_t* step = nullptr;
    EXPECT_THROW(sample(out, logits, 100, SamplingParams{0.0f, 0, 1.0f}, step, 0), Error);
    EXPECT_THROW(sample(out, logits, 100, SamplingParams{1.0f, -1, 1.0f}, step, 0), Error);
    EXPECT_THROW(sample(out, logits, 100, SamplingParams{1.0f, 0, 0.0f}, step, 0), Error);
    EXPECT_THROW(sample(out, logits, 100, SamplingParams{1.0f, 0, 1.5f}, step, 0), Error);
    EXPECT_THROW(sample(out, logits, 0, SamplingParams{1.0f, 0, 1.0f}, step, 0), Error);
    EXPECT_THROW(argmax(out, logits, 0, 0), Error);
}

// ---- speed (printed, not asserted beyond valid outputs) ----

class Timing : public ::testing::Test {
protected:
    void SetUp() override { SKIP_WITHOUT_GPU(); }
    // Microseconds per call of f, averaged over `reps` calls after a warm-up.
    template <typename F> double time_us(F f, int reps = 200) {
        f();
        cudaEvent_t start, stop;
        cudaCheck(cudaEventCreate(&start));
        cudaCheck(cudaEventCreate(&stop));
        cudaCheck(cudaEventRecord(start));
        for (int i = 0; i < reps; i++) f();
        cudaCheck(cudaEventRecord(stop));
        cudaCheck(cudaEventSynchronize(stop));
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, start, stop));
        cudaCheck(cudaEventDestroy(start));
        cudaCheck(cudaEventDestroy(stop));
        return 1000.0 * ms / reps;
    }
};

TEST_F(Timing, SamplingAtVocab100k) {
    std::mt19937 rng(5);
    const int V = 100352;
    const std::vector<float> x = randn(V, rng, 0.0f, 2.0f);
    DeviceArray<float> d_x(x);
    DeviceArray<int> d_id(1);
    DeviceArray<uint64_t> d_step(std::vector<uint64_t>{0});
    std::printf("  argmax fp32 V=%d: %.1f us\n", V, time_us([&] { argmax(d_id.get(), d_x.get(), V, 0); }));
    EXPECT_EQ(d_id.download()[0], cpu::argmax(x.data(), V));
    for (Portable mode : {Portable::Off, Portable::Sm86}) {  // the cluster sampler on sm_90, then one block
        PortableScope portable(mode);
        for (const SamplingParams& s : {SamplingParams{1.0f, 0, 1.0f, 1}, SamplingParams{0.7f, 50, 1.0f, 1},
                                        SamplingParams{0.8f, 0, 0.95f, 1}, SamplingParams{0.7f, 50, 0.9f, 1},
                                        SamplingParams{1.0f, 5000, 0.95f, 1}}) {
            const double us = time_us([&] { sample(d_id.get(), d_x.get(), V, s, d_step.get(), 0); });
            std::printf("  sample%s fp32 V=%d t=%.1f k=%d p=%.2f: %.1f us\n", mode == Portable::Off ? "" : " (one block)",
                        V, s.temperature, s.top_k, s.top_p, us);
            const int id = d_id.download()[0];
            EXPECT_TRUE(id >= 0 && id < V);
        }
    }
    // The slow path: logits rounded to multiples of 2, so the draw lands among thousands of ties.
    std::vector<float> tied = x;
    for (float& v : tied) v = std::round(v / 2.0f) * 2.0f;
    DeviceArray<float> d_tied(tied);
    const double us = time_us([&] { sample(d_id.get(), d_tied.get(), V, SamplingParams{1.0f, 0, 1.0f, 1}, d_step.get(), 0); });
    std::printf("  sample fp32 V=%d, logits rounded to multiples of 2 (ties): %.1f us\n", V, us);
    EXPECT_EQ(d_id.download()[0], sample_cpu(tied.data(), V, SamplingParams{1.0f, 0, 1.0f, 1}, 0));
}

TEST_F(Timing, NormsRopeSwiglu) {
    using T = __nv_bfloat16;
    std::mt19937 rng(6);
    const int H = 4096, I = 11008, nH = 32, hd = 128, QKV = 3 * nH * hd;
    const DeviceArray<T> w(to_dtype<T>(randn(H, rng, 1.0f, 0.1f)));
    DeviceArray<float> inv_freq(std::vector<float>(hd / 2, 0.01f));
    for (int rows : {1, 4096}) {
        std::vector<int> positions(rows);
        std::iota(positions.begin(), positions.end(), 100);
        DeviceArray<int> pos_rows(positions);   // positions double as pool rows here
        DeviceArray<T> x(to_dtype<T>(randn((size_t)rows * H, rng))), y(to_dtype<T>(randn((size_t)rows * H, rng)));
        DeviceArray<float> xf(randn((size_t)rows * H, rng));
        DeviceArray<float> qkv(randn((size_t)rows * QKV, rng)), yf(randn((size_t)rows * H, rng));   // fp32 GEMM outputs
        DeviceArray<T> q((size_t)rows * nH * hd);
        DeviceArray<T> kc((size_t)(rows + 100) * nH * hd), vc((size_t)(rows + 100) * nH * hd);
        DeviceArray<float> gu(randn((size_t)rows * 2 * I, rng));
        DeviceArray<T> a((size_t)rows * I);
        auto report = [&](const char* op, double us, double bytes) {
            std::printf("  bf16 %-12s rows=%-5d %8.1f us  %7.1f GB/s\n", op, rows, us, bytes / us * 1e-3);
        };
        const double row_bytes = (double)rows * H * sizeof(T);
        report("add_rmsnorm", time_us([&] { add_rmsnorm(xf.get(), yf.get(), w.get(), x.get(), rows, H, 1e-6f, 0); }), 7 * row_bytes);
        report("rmsnorm", time_us([&] { rmsnorm(y.get(), x.get(), w.get(), rows, H, H, H, 1e-6f, 0); }), 2 * row_bytes);
        report("layernorm", time_us([&] { layernorm(y.get(), x.get(), rows, H, 1e-5f, 0); }), 2 * row_bytes);
        report("rope_qkv", time_us([&] {
                   rope_qkv(RopeParams<T, float>{qkv.get(), q.get(), kc.get(), vc.get(), rows, pos_rows.get(),
                                                 pos_rows.get(), nH, nH, hd, inv_freq.get(), 1.0f},
                            0);
               }),
               rows * QKV * (sizeof(float) + sizeof(T)));
        report("swiglu", time_us([&] { swiglu(a.get(), gu.get(), rows, I, 0); }), rows * I * (2 * sizeof(float) + sizeof(T)));
        const std::vector<float> out = download_f32(y);
        EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return std::isfinite(v); }));
    }
}

}  // namespace
