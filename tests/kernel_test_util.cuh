// kernel_test_util.cuh: what the kernel tests share: a GPU check, random inputs rounded to a
// storage type, NaN-poisoned device arrays, and the element-by-element comparison (rel-L2 and
// max-abs against a CPU reference) whose printed lines are the figures the reports quote.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_common.cuh"

namespace olmo {
namespace test {

inline bool gpu_present() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define SKIP_WITHOUT_GPU() \
    if (!gpu_present()) GTEST_SKIP() << "no CUDA GPU found: GPU kernel test skipped"

template <typename... A> std::string fmt(const char* f, A... a) {
    char buf[256];
    std::snprintf(buf, sizeof buf, f, a...);
    return buf;
}

// ---- dtypes and tolerances ----

template <typename T> const char* dtype_name();
template <> inline const char* dtype_name<float>() { return "fp32"; }
template <> inline const char* dtype_name<__half>() { return "fp16"; }
template <> inline const char* dtype_name<__nv_bfloat16>() { return "bf16"; }

// rel_l2 bounds ||got - ref|| / ||ref||; max_abs bounds max |got - ref| / max |ref|. For 16-bit
// types the error is one rounding (at most half an ulp: 2^-9 bf16, 2^-12 fp16, relative).
struct Tolerance {
    double rel_l2, max_abs;
};
template <typename T> Tolerance tolerance();
template <> inline Tolerance tolerance<float>() { return {1e-5, 1e-5}; }
template <> inline Tolerance tolerance<__half>() { return {2e-3, 1e-3}; }
template <> inline Tolerance tolerance<__nv_bfloat16>() { return {1e-2, 8e-3}; }
const Tolerance kExact{0.0, 0.0};
const Tolerance kFp32Tol{1e-6, 1e-5};   // an fp32 result whatever T is

inline std::vector<float> randn(size_t n, std::mt19937& rng, float mean = 0.0f, float sd = 1.0f) {
    std::normal_distribution<float> dist(mean, sd);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

template <typename T> std::vector<T> to_dtype(const std::vector<float>& f) {
    std::vector<T> t(f.size());
    for (size_t i = 0; i < f.size(); i++) t[i] = from_float<T>(f[i]);
    return t;
}
template <typename T> std::vector<float> to_f32(const std::vector<T>& t) {
    std::vector<float> f(t.size());
    for (size_t i = 0; i < t.size(); i++) f[i] = to_float(t[i]);
    return f;
}
// f rounded to T and back: what the GPU kernel sees.
template <typename T> std::vector<float> rounded(const std::vector<float>& f) { return to_f32(to_dtype<T>(f)); }

// Calls f with a value of each input type a GEMM-output consumer is tested with: T, then fp32
// (the engine's GEMM outputs); once when T is fp32.
template <typename T, typename F> void for_each_input_type(F f) {
    f(T{});
    if constexpr (!std::is_same_v<T, float>) f(float{});
}

// A device array, NaN-poisoned (0xFF bytes; -1 for int) when made and on poison().
template <typename T> class DeviceArray {
public:
    explicit DeviceArray(size_t n) : n_(n) {
        cudaCheck(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)));
        poison();
    }
    explicit DeviceArray(const std::vector<T>& h) : DeviceArray(h.size()) { upload(h); }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
    ~DeviceArray() { cudaFree(p_); }

    T* get() const { return p_; }
    void poison() { cudaCheck(cudaMemset(p_, 0xFF, n_ * sizeof(T))); }
    void upload(const std::vector<T>& h) { cudaCheck(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice)); }
    std::vector<T> download() const {
        std::vector<T> h(n_);
        cudaCheck(cudaDeviceSynchronize());
        cudaCheck(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }

private:
    T* p_ = nullptr;
    size_t n_;
};

// A device array's contents as fp32.
template <typename T> std::vector<float> download_f32(const DeviceArray<T>& d) { return to_f32(d.download()); }

// Compares every element; prints the errors (the numbers in the report come from these lines).
inline void expect_close(const std::vector<float>& got, const std::vector<float>& ref, Tolerance tol, const std::string& what) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    double err2 = 0, ref2 = 0, max_abs = 0, max_ref = 0;
    size_t non_finite = 0, first_bad = 0, worst = 0;
    for (size_t i = 0; i < got.size(); i++) {
        if (!std::isfinite(got[i])) {
            if (non_finite++ == 0) first_bad = i;
            continue;
        }
        const double d = std::fabs((double)got[i] - ref[i]);
        err2 += d * d;
        ref2 += (double)ref[i] * ref[i];
        if (d > max_abs) max_abs = d, worst = i;
        max_ref = std::max(max_ref, std::fabs((double)ref[i]));
    }
    const double rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
    std::printf("  %-58s rel-L2 %.2e  max-abs %.2e  (max|ref| %.3g)\n", what.c_str(), rel_l2, max_abs, max_ref);
    EXPECT_EQ(non_finite, 0u) << what << ": first non-finite output at element " << first_bad;
    EXPECT_LE(rel_l2, tol.rel_l2) << what;
    EXPECT_LE(max_abs, tol.max_abs * max_ref) << what << ": worst element " << worst << " got " << got[worst]
                                              << " want " << ref[worst];
}

}  // namespace test
}  // namespace olmo
