// dev_common.cuh: what the dev/ ladders share: flags, device buffers, the check against the CPU
// reference, timing with CUDA events, and the table they print.
//
// A ladder is a list of steps, each one kernel (or a few) computing the same result. Every step
// is run once and compared with the CPU reference (olmo::cpu, src/cpu_ops.h) as
//     rel-L2 = ||out - ref|| / ||ref||,   max-abs = max |out - ref|,
// then timed (median of `reps` runs, CUDA events around each) and printed as one row:
//     step | what it changes | ms | TFLOP/s or GB/s | % of the H200 roofline | rel-L2 | max-abs | ok
// Rooflines (H200): ~800 TFLOP/s bf16 dense on tensor cores, ~60 TFLOP/s fp32 without them,
// ~4.25 TB/s HBM copy bandwidth.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common.h"
#include "cuda_common.cuh"
#include "engine.h"

namespace dev {

using olmo::fail;

constexpr double kTensorCoreTflops = 800.0, kFp32Tflops = 60.0, kHbmGBps = 4250.0;

// ---- flags: --name value pairs ----

struct Flags {
    std::vector<std::string> args;
    Flags(int argc, char** argv) : args(argv + 1, argv + argc) {}
    bool has(const std::string& name) const { return std::find(args.begin(), args.end(), name) != args.end(); }
    // The integer after `name`, or `fallback` when the flag is absent; fails unless in [lo, hi].
    int get(const std::string& name, int fallback, int lo, int hi) const {
        auto it = std::find(args.begin(), args.end(), name);
        if (it == args.end()) return fallback;
        char* end = nullptr;
        const long v = it + 1 == args.end() ? 0 : std::strtol((it + 1)->c_str(), &end, 10);
        if (it + 1 == args.end() || *end != '\0' || v < lo || v > hi)
            fail(name + " needs an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        return (int)v;
    }
    // Fails on a flag not in `known` (each takes a value unless listed in `switches`).
    void check(const std::vector<std::string>& known, const std::vector<std::string>& switches) const {
        for (size_t i = 0; i < args.size(); i++) {
            const bool sw = std::find(switches.begin(), switches.end(), args[i]) != switches.end();
            if (!sw && std::find(known.begin(), known.end(), args[i]) == known.end())
                fail("unknown flag " + args[i] + " (see --help)");
            if (!sw) i++;
        }
    }
};

// Prints one line and returns false when there is no GPU to run on (the program then exits 0).
inline bool gpu_present(const char* program) {
    if (olmo::cuda_available()) return true;
    printf("%s: no CUDA GPU present; this program runs kernels and needs one (nothing run)\n", program);
    return false;
}

// ---- device buffers ----

template <typename T>
struct DeviceBuffer {
    T* ptr = nullptr;
    size_t n = 0;
    explicit DeviceBuffer(size_t count) : n(count) { cudaCheck(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T))); }
    DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void upload(const std::vector<T>& host) {
        if (host.size() != n) fail("DeviceBuffer::upload: size mismatch");
        cudaCheck(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<T> download() const {
        std::vector<T> host(n);
        cudaCheck(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
        return host;
    }
};

// Host values in T (rounded to nearest even) and back.
template <typename T>
std::vector<T> to_device_type(const std::vector<float>& x) {
    std::vector<T> y(x.size());
    for (size_t i = 0; i < x.size(); i++) y[i] = olmo::from_float<T>(x[i]);
    return y;
}
template <typename T>
std::vector<float> to_float(const std::vector<T>& x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); i++) y[i] = olmo::to_float(x[i]);
    return y;
}

// ---- the check ----

struct Diff {
    double rel_l2 = 0, max_abs = 0;
    bool finite = true;
};
// out against ref, element by element.
inline Diff compare(const std::vector<float>& out, const std::vector<float>& ref) {
    if (out.size() != ref.size()) fail("compare: sizes differ");
    double e2 = 0, r2 = 0;
    Diff e;
    for (size_t i = 0; i < out.size(); i++) {
        const double d = (double)out[i] - ref[i];
        e.finite = e.finite && std::isfinite(out[i]);
        e2 += d * d, r2 += (double)ref[i] * ref[i];
        e.max_abs = std::max(e.max_abs, std::fabs(d));
    }
    e.rel_l2 = r2 > 0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
    if (!e.finite) e.rel_l2 = e.max_abs = INFINITY;
    return e;
}

// ---- timing ----

// Median time in ms of run() over `reps` calls after one warm-up call, each call between two
// CUDA events on the default stream.
inline double median_ms(const std::function<void()>& run, int reps) {
    run();
    cudaCheck(cudaDeviceSynchronize());
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    std::vector<float> t(reps);
    for (int i = 0; i < reps; i++) {
        cudaCheck(cudaEventRecord(a));
        run();
        cudaCheck(cudaEventRecord(b));
        cudaCheck(cudaEventSynchronize(b));
        cudaCheck(cudaEventElapsedTime(&t[i], a, b));
    }
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[reps / 2];
}

// ---- the table ----

enum class Unit { Tflops, GBps };

inline void print_header(Unit unit) {
    printf("%-4s %-52s %10s %10s %8s %9s %9s  %s\n", "step", "what it changes", "ms", unit == Unit::Tflops ? "TFLOP/s" : "GB/s",
           "% roof", "rel-L2", "max-abs", "check");
}

// One row: `work` is flops (Tflops) or bytes (GBps) of one run; `roof` the roofline in the same
// unit per second (TFLOP/s or GB/s). Returns whether the error is within tol (rel-L2).
inline bool print_row(int step, const std::string& what, double ms, double work, Unit unit, double roof, const Diff& e,
                      double tol) {
    const double rate = unit == Unit::Tflops ? work / (ms * 1e-3) / 1e12 : work / (ms * 1e-3) / 1e9;
    const bool ok = e.finite && e.rel_l2 <= tol;
    printf("%-4d %-52s %10.3f %10.1f %7.1f%% %9.2e %9.2e  %s\n", step, what.c_str(), ms, rate, 100.0 * rate / roof,
           e.rel_l2, e.max_abs, ok ? "ok" : "FAIL");
    return ok;
}

// A row for a step that does not run (not written yet, or too large): its reason instead.
inline void print_skipped(int step, const std::string& what, const std::string& why) {
    printf("%-4d %-52s %s\n", step, what.c_str(), why.c_str());
}

// main()'s body: runs `body`, prints an olmo::Error on one line and returns 1 for it.
inline int run_main(const char* program, const std::function<int()>& body) {
    try {
        return body();
    } catch (const std::exception& e) {
        fprintf(stderr, "%s: %s\n", program, e.what());
        return 1;
    }
}

}  // namespace dev
