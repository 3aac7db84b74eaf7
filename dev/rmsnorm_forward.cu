// rmsnorm_forward.cu: a memory-bound kernel, from one thread per row to the bandwidth limit.
//
// The operation is the engine's residual step of OLMo-2/3 (post-norm), for `rows` tokens of
// hidden size H:
//     x  += w · y / sqrt(mean(y²) + eps)     x: the fp32 residual stream [rows, H], y: fp32 [rows, H]
//     xb  = bf16(x)                          the next GEMM's input [rows, H]; w: bf16 [H]
// It does ~5 flops per element and moves 14 bytes (read y and x, write x and xb), so its speed
// is the memory bandwidth it reaches: rated in GB/s of the bytes each step moves, against the
// H200's ~4.25 TB/s. Steps 1-3 run it as two kernels, a norm that writes t = w·y·rstd to an fp32
// temporary and a residual add x += t, xb = bf16(x) (22 bytes per element); step 4 fuses them.
//
//  step  kernels                            what it changes                                H200 ms  GB/s  % roof
//  1     thread-per-row norm (here) + add    one thread per row: a warp's 32 loads hit 32       1.617   913    21.5%
//                                            rows, 32 memory transactions per instruction
//  2     block-per-row norm (here) + add     a block per row, thread i takes elements i,        0.491   3007   70.8%
//                                            i+blockDim, ...: a warp reads 128 contiguous bytes
//                                            (coalesced); the sum of squares is a block_reduce
//  3     rmsnorm (engine) + add, 16-byte     16-byte loads and stores (8 elements per           0.368   4014   94.4%
//                                            instruction): fewer instructions, more bytes in
//                                            flight per thread
//  4     add_rmsnorm (engine, norm.cuh)      fused into one kernel: the temporary's write and   0.231   4071   95.8%
//                                            read disappear, 14 bytes per element instead of 22
// (H200, the defaults: 16384 rows x 4096; docs/runs/ladders.log.)
//
// Each step runs once from the same x, y, w (N(0,1); w rounded to bf16) and is compared with
// olmo::cpu::rmsnorm (src/cpu_ops.h) plus the add: rel-L2 and max-abs over x and xb together,
// within 1e-4 (x agrees to fp32 rounding; an element of xb may round the other way). Then each
// is timed: the median of --reps runs between CUDA events (x keeps accumulating; the values
// stay small).
//
// Usage: rmsnorm_forward [--rows n] [--hidden H] [--step k] [--reps n] [--help]
// Without a GPU it prints one line saying so and exits 0 (nothing is run). Exit status 1 when a
// step fails its check or on a bad flag.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "dev_common.cuh"
#include "norm.cuh"

using namespace olmo;
using bf16 = __nv_bfloat16;

namespace {

const char* kHelp =
    "rmsnorm_forward: the memory-bound ladder (thread per row -> block per row -> 16-byte loads -> fused)\n"
    "  --rows n     tokens (default 16384)\n"
    "  --hidden H   hidden size, a multiple of 8 (default 4096)\n"
    "  --step k     run only step k (1-4; default all)\n"
    "  --reps n     timed runs per step, the median is shown (default 20)\n";

constexpr float kEps = 1e-6f;

// Step 1: thread r normalizes row r: t[r] = w · y[r] / sqrt(mean(y[r]²) + eps).
__global__ void rmsnorm_thread_per_row_kernel(float* t, const float* y, const bf16* w, int rows, int H) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* yr = y + (int64_t)r * H;
    float ss = 0.0f;
    for (int i = 0; i < H; i++) ss += yr[i] * yr[i];
    const float rstd = 1.0f / sqrtf(ss / H + kEps);
    for (int i = 0; i < H; i++) t[(int64_t)r * H + i] = to_float(w[i]) * (yr[i] * rstd);
}

// Step 2: block r normalizes row r; thread i takes elements i, i + blockDim.x, ...
__global__ void rmsnorm_block_per_row_kernel(float* t, const float* y, const bf16* w, int H) {
    const float* yr = y + (int64_t)blockIdx.x * H;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) ss += yr[i] * yr[i];
    const float rstd = 1.0f / sqrtf(block_reduce(ss, SumOp{}) / H + kEps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) t[(int64_t)blockIdx.x * H + i] = to_float(w[i]) * (yr[i] * rstd);
}

// Steps 1-3, the second kernel: x += t; xb = bf16(x), N elements per load (N = 4: 16 bytes of
// fp32). n (the element count) is a multiple of N.
template <int N>
__global__ void residual_add_kernel(float* x, const float* t, bf16* xb, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n / N; i += (int64_t)gridDim.x * blockDim.x) {
        Pack<float, N> a = reinterpret_cast<Pack<float, N>*>(x)[i];
        const Pack<float, N> b = reinterpret_cast<const Pack<float, N>*>(t)[i];
        Pack<bf16, N> o;
#pragma unroll
        for (int j = 0; j < N; j++) {
            a.v[j] += b.v[j];
            o.v[j] = from_float<bf16>(a.v[j]);
        }
        reinterpret_cast<Pack<float, N>*>(x)[i] = a;
        reinterpret_cast<Pack<bf16, N>*>(xb)[i] = o;
    }
}

template <int N>
void residual_add(float* x, const float* t, bf16* xb, int64_t n) {
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n / N + threads - 1) / threads, 1 << 20);
    residual_add_kernel<N><<<(unsigned)blocks, threads>>>(x, t, xb, n);
    cudaCheckLaunch();
}

struct Buffers {
    int rows, H;
    std::vector<float> x0, y, w;  // w: bf16 values as floats
    dev::DeviceBuffer<float> x, y_d, t;
    dev::DeviceBuffer<bf16> w_d, xb;
    Buffers(int rows_, int H_, std::vector<float> x0_, std::vector<float> y_, std::vector<float> w_)
        : rows(rows_), H(H_), x0(std::move(x0_)), y(std::move(y_)), w(std::move(w_)), x(x0), y_d(y),
          t((size_t)rows * H), w_d(dev::to_device_type<bf16>(w)), xb((size_t)rows * H) {}
    int64_t n() const { return (int64_t)rows * H; }
    // x and xb as one vector, the way the check compares them.
    std::vector<float> result() const {
        std::vector<float> r = x.download(), b = dev::to_float(xb.download());
        r.insert(r.end(), b.begin(), b.end());
        return r;
    }
};

std::vector<float> random_values(size_t n, uint32_t seed, bool bf16_exact) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    std::vector<float> x(n);
    for (float& e : x) e = bf16_exact ? to_float(from_float<bf16>(dist(rng))) : dist(rng);
    return x;
}

// The reference x0 + cpu::rmsnorm(y)·w and its bf16 rounding, as one vector (Buffers::result).
std::vector<float> reference(const Buffers& b) {
    std::vector<float> t(b.x0.size());
    cpu::rmsnorm(t.data(), b.y.data(), b.w.data(), b.rows, b.H, kEps);
    std::vector<float> r(2 * t.size());
    for (size_t i = 0; i < t.size(); i++) {
        r[i] = b.x0[i] + t[i];
        r[t.size() + i] = to_float(from_float<bf16>(r[i]));
    }
    return r;
}

struct Ladder {
    Buffers& b;
    const std::vector<float>& ref;
    int reps, only;
    bool all_ok = true;

    void step(int n, const std::string& what, double bytes_per_element, const std::function<void()>& run) {
        if (only != 0 && only != n) return;
        b.x.upload(b.x0);
        cudaCheck(cudaMemset(b.xb.ptr, 0xff, b.xb.n * sizeof(bf16)));  // NaN: an output never written fails
        run();
        cudaCheck(cudaDeviceSynchronize());
        const dev::Diff e = dev::compare(b.result(), ref);
        const double ms = dev::median_ms(run, reps), bytes = bytes_per_element * b.n() + 2.0 * b.H;
        all_ok &= dev::print_row(n, what, ms, bytes, dev::Unit::GBps, dev::kHbmGBps, e, 1e-4);
    }

    void run() {
        const int rows = b.rows, H = b.H;
        const int64_t n = b.n();
        dev::print_header(dev::Unit::GBps);
        step(1, "thread per row (uncoalesced), then the add", 22, [&] {
            rmsnorm_thread_per_row_kernel<<<(rows + 127) / 128, 128>>>(b.t.ptr, b.y_d.ptr, b.w_d.ptr, rows, H);
            cudaCheckLaunch();
            residual_add<1>(b.x.ptr, b.t.ptr, b.xb.ptr, n);
        });
        step(2, "block per row, coalesced 4-byte loads, then the add", 22, [&] {
            rmsnorm_block_per_row_kernel<<<rows, row_threads(H)>>>(b.t.ptr, b.y_d.ptr, b.w_d.ptr, H);
            cudaCheckLaunch();
            residual_add<1>(b.x.ptr, b.t.ptr, b.xb.ptr, n);
        });
        step(3, "16-byte loads: the engine's rmsnorm, then the add", 22, [&] {
            rmsnorm(b.t.ptr, b.y_d.ptr, b.w_d.ptr, rows, H, H, H, kEps, 0);
            residual_add<4>(b.x.ptr, b.t.ptr, b.xb.ptr, n);
        });
        step(4, "fused: the engine's add_rmsnorm, one kernel", 14,
             [&] { add_rmsnorm(b.x.ptr, b.y_d.ptr, b.w_d.ptr, b.xb.ptr, rows, H, kEps, 0); });
    }
};

int run(int argc, char** argv) {
    const dev::Flags f(argc, argv);
    if (f.has("--help")) return printf("%s", kHelp), 0;
    f.check({"--rows", "--hidden", "--step", "--reps"}, {"--help"});
    const int rows = f.get("--rows", 16384, 1, 1 << 20), H = f.get("--hidden", 4096, 8, 1 << 16);
    const int only = f.get("--step", 0, 0, 4), reps = f.get("--reps", 20, 1, 1000);
    if (H % 8 != 0) fail("--hidden " + std::to_string(H) + " is not a multiple of 8");
    if ((int64_t)rows * H > (int64_t)1 << 31) fail("--rows x --hidden is over 2^31 elements");
    if (!dev::gpu_present("rmsnorm_forward")) return 0;
    printf("rmsnorm_forward: x += rmsnorm(y)·w, xb = bf16(x); %d rows x %d, fp32 x and y, bf16 w and xb\n", rows, H);
    const size_t n = (size_t)rows * H;
    Buffers b(rows, H, random_values(n, 1, false), random_values(n, 2, false), random_values(H, 3, true));
    const std::vector<float> ref = reference(b);
    Ladder ladder{b, ref, reps, only};
    ladder.run();
    return ladder.all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return dev::run_main("rmsnorm_forward", [&] { return run(argc, argv); });
}
