// bench_fp8.cu: the FP8 small-batch product (kernels/fp8.cuh) on the OLMo-2-7B layer shapes
// (or, with `bench_fp8 HIDDEN INTERMEDIATE`, on an MHA layer of that width: the 80-layer shape is
// 8192 28672), against the bandwidth roofline and cuBLAS's bf16 GEMM of the same shape in the
// same run.
//   For each (N, K) and rows = 1, 2, 4, 8, 16: fp8_gemv time, the weight bytes it streams
//   (N16 · ld) over that time, and cuBLAS bf16 (cublasGemmEx, fp32 output) on the bf16 weights:
//   time and bytes/time. "chained": 16 launches of fp8_gemv back to back (different weights, as
//   the layers of a decode step follow each other) captured in a CUDA graph as the engine's
//   decode step is, time per launch: neither the host's launch cost nor a gap between kernels
//   is in it. fp8_gemv reads fp16 tokens, as in the engine (CudaEngine::A); "bf16 in" is the
//   same product reading bf16 tokens (chained), for comparison. On gate|up, also the decode MLP's first half chained: fp8_gemv + swiglu against
//   fp8_gemv_swiglu (SwiGLU in the product's epilogue). "copy" is cudaMemcpy device to device
//   of the FP8 bytes: read + write, counted once, so its figure is half the traffic it makes;
//   the roofline we quote is 4.25 TB/s.
// Weights rotate through several copies larger than the L2 together, so reads come from HBM.
// Prefill (4096 tokens): the FP8 path's three steps (activations quantized per token, the
// cuBLASLt FP8 GEMM, the scale pass) next to cuBLAS bf16, in TFLOP/s of the GEMM's 2·M·N·K.
// Each figure is the median of 50 timings with CUDA events.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fp8.cuh"
#include "fp8_gemm.h"
#include "sampler.h"

using namespace olmo;
using bf16 = __nv_bfloat16;
using In = __half;   // what the FP8 engine's products read (CudaEngine::A in src/cuda_engine.cu)

namespace {

template <typename T> __global__ void fill(T* x, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = from_float<T>(((splitmix64(seed * kGolden64 + i) >> 40) * (1.0f / 16777216.0f) - 0.5f) * 0.1f);
}

// Median time of f(i), or with `chain` > 1 of a CUDA graph of f(0) .. f(chain - 1) divided by chain.
template <typename F> float median_ms(F f, int chain = 1) {
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraphExec_t exec = nullptr;
    if (chain > 1) {
        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int c = 0; c < chain; c++) f(c, stream);
        cudaCheck(cudaStreamEndCapture(stream, &graph));
        cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
        cudaCheck(cudaGraphDestroy(graph));
    }
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    std::vector<float> t;
    for (int i = 0; i < 55; i++) {
        cudaCheck(cudaEventRecord(a, stream));
        if (exec) cudaCheck(cudaGraphLaunch(exec, stream));
        else f(i, stream);
        cudaCheck(cudaEventRecord(b, stream));
        cudaCheck(cudaEventSynchronize(b));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, a, b));
        if (i >= 5) t.push_back(ms);
    }
    if (exec) cudaCheck(cudaGraphExecDestroy(exec));
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    cudaCheck(cudaStreamDestroy(stream));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2] / chain;
}

// 4096 tokens through W: each step of the FP8 path timed alone, and cuBLAS bf16.
void prefill(const char* name, const Fp8Matrix& W, const bf16* wb, cublasHandle_t h) {
    const int rows = 4096;
    bf16* x;
    uint8_t* x8;
    float *xs, *y;
    void* ws;
    cudaCheck(cudaMalloc(&x, (size_t)rows * W.K * sizeof(bf16)));
    cudaCheck(cudaMalloc(&x8, (size_t)rows * W.ld));
    cudaCheck(cudaMalloc(&xs, rows * sizeof(float)));
    cudaCheck(cudaMalloc(&y, (size_t)rows * W.N * sizeof(float)));
    cudaCheck(cudaMalloc(&ws, 32 << 20));
    fill<<<1024, 256>>>(x, (size_t)rows * W.K, 7);
    {
        Fp8Gemm gemm(ws, 32 << 20);
        const double flop = 2.0 * rows * W.N * W.K;
        const float tq = median_ms([&](int, cudaStream_t st) { quantize_rows_fp8(x8, xs, x, rows, W.K, W.ld, st); });
        // the GEMM with its scale pass
        const float tg = median_ms([&](int, cudaStream_t st) { gemm.run(y, x8, xs, W, rows, st); });
        const float ts = median_ms([&](int, cudaStream_t st) { scale_rows_cols(y, xs, W.scale, rows, W.N, st); });
        const float one = 1.0f, zero = 0.0f;
        const float tb = median_ms([&](int, cudaStream_t st) {
            cublasCheck(cublasSetStream(h, st));
            cublasCheck(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, W.N, rows, W.K, &one, wb, CUDA_R_16BF, W.K, x,
                                     CUDA_R_16BF, W.K, &zero, y, CUDA_R_32F, W.N, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
        });
        std::printf("%-8s prefill %d tokens: quantize %.3f ms, FP8 GEMM %.3f ms (%.0f TFLOP/s), scale pass %.3f ms "
                    "(in the GEMM figure); FP8 path %.3f ms = %.0f TFLOP/s | bf16 cuBLAS %.3f ms = %.0f TFLOP/s\n",
                    name, rows, tq, tg - ts, flop / (tg - ts) / 1e9, ts, tq + tg, flop / (tq + tg) / 1e9, tb,
                    flop / tb / 1e9);
    }
    cudaFree(x), cudaFree(x8), cudaFree(xs), cudaFree(y), cudaFree(ws);
}

}  // namespace

int main(int argc, char** argv) {
    const int H = argc == 3 ? std::atoi(argv[1]) : 4096, I = argc == 3 ? std::atoi(argv[2]) : 11008;
    if (argc != 1 && (argc != 3 || H <= 0 || I <= 0)) {
        std::fprintf(stderr, "usage: bench_fp8 [HIDDEN INTERMEDIATE]   (default: 4096 11008, OLMo-2-7B)\n");
        return 2;
    }
    struct Shape { const char* name; int N, K; };
    const Shape shapes[] = {{"q|k|v", 3 * H, H}, {"o", H, H}, {"gate|up", 2 * I, H}, {"down", H, I}, {"lm head", 100352, H}};
    cublasHandle_t h;
    cublasCheck(cublasCreate(&h));
    std::printf("%-8s %6s %6s %4s | %9s %8s | %12s | %14s | %9s %8s | %8s\n", "matrix", "N", "K", "rows", "fp8 us",
                "GB/s", "chained GB/s", "bf16 in, GB/s", "bf16 us", "GB/s", "speedup");
    for (const Shape& s : shapes) {
        const int copies = std::max<int>(2, (int)(200e6 / ((double)s.N * s.K)) + 1);   // > 2x the L2 in FP8
        std::vector<Fp8Matrix> w(copies);
        std::vector<bf16*> wb(copies);
        bf16* x;   // 16 tokens, for cuBLAS (and fp8_gemv's "bf16 in")
        In* xh;    // the same values, for fp8_gemv
        float* y;
        cudaCheck(cudaMalloc(&x, 16 * (size_t)s.K * sizeof(bf16)));
        cudaCheck(cudaMalloc(&xh, 16 * (size_t)s.K * sizeof(In)));
        cudaCheck(cudaMalloc(&y, 16 * (size_t)s.N * sizeof(float)));
        fill<<<1024, 256>>>(x, 16 * (size_t)s.K, 99);
        fill<<<1024, 256>>>(xh, 16 * (size_t)s.K, 99);
        for (int c = 0; c < copies; c++) {
            const int ld = fp8_padded_cols(s.K), N16 = fp8_padded_rows(s.N);
            cudaCheck(cudaMalloc(&wb[c], (size_t)s.N * s.K * sizeof(bf16)));
            fill<<<1024, 256>>>(wb[c], (size_t)s.N * s.K, c + 1);
            w[c] = Fp8Matrix{nullptr, nullptr, s.N, s.K, ld};
            cudaCheck(cudaMalloc(&w[c].q, (size_t)N16 * ld));
            cudaCheck(cudaMalloc(&w[c].scale, N16 * sizeof(float)));
            cudaCheck(cudaMemset(w[c].q, 0, (size_t)N16 * ld));
            quantize_rows_fp8(w[c].q, w[c].scale, wb[c], s.N, s.K, ld, 0);
        }
        cudaCheck(cudaDeviceSynchronize());
        const double fp8_bytes = (double)fp8_padded_rows(s.N) * fp8_padded_cols(s.K), bf16_bytes = 2.0 * s.N * s.K;
        for (int rows : {1, 2, 4, 8, 16}) {
            auto run = [&](int i, cudaStream_t st) { fp8_gemv(y, xh, w[i % copies], rows, st); };
            const float t8 = median_ms(run), chained = median_ms(run, 16);
            const float chained_bf16 = median_ms([&](int i, cudaStream_t st) { fp8_gemv(y, x, w[i % copies], rows, st); }, 16);
            const float one = 1.0f, zero = 0.0f;
            const float tb = median_ms([&](int i, cudaStream_t st) {
                cublasCheck(cublasSetStream(h, st));
                cublasCheck(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.N, rows, s.K, &one, wb[i % copies], CUDA_R_16BF,
                                         s.K, x, CUDA_R_16BF, s.K, &zero, y, CUDA_R_32F, s.N, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT));
            });
            std::printf("%-8s %6d %6d %4d | %9.1f %8.0f | %12.0f | %14.0f | %9.1f %8.0f | %7.2fx\n", s.name, s.N, s.K,
                        rows, t8 * 1e3, fp8_bytes / t8 / 1e6, fp8_bytes / chained / 1e6, fp8_bytes / chained_bf16 / 1e6,
                        tb * 1e3, bf16_bytes / tb / 1e6, tb / t8);
        }
        const float tc = median_ms([&](int i, cudaStream_t st) {
            const size_t n = (size_t)fp8_bytes;
            cudaCheck(cudaMemcpyAsync(w[(i + 1) % copies].q, w[i % copies].q, n, cudaMemcpyDeviceToDevice, st));
        });
        for (int warps : {1, 2, 4, 8, 12, 16}) {   // the automatic choice against each fixed one, 1 token
            const float t = median_ms([&](int i, cudaStream_t st) { fp8_gemv(y, xh, w[i % copies], 1, st, warps); });
            std::printf("%-8s rows 1, %2d warps per block%s: %.1f us, %.0f GB/s\n", s.name, warps,
                        warps == fp8_gemv_shape<In, 1, kFp8GemvDepth>(w[0]).warps ? " (auto)" : "", t * 1e3,
                        fp8_bytes / t / 1e6);
        }
        for (int depth : {2, 3, 4}) {   // slots in each warp's ring (kFp8GemvDepth), 1 token, automatic shape
            auto run = [&](int i, cudaStream_t st) {
                const Fp8Matrix& W = w[i % copies];
                if (depth == 2) fp8_gemv_launch<In, 1, 2>(y, nullptr, xh, W, 1, st, 0);
                else if (depth == 3) fp8_gemv_launch<In, 1, 3>(y, nullptr, xh, W, 1, st, 0);
                else fp8_gemv_launch<In, 1, 4>(y, nullptr, xh, W, 1, st, 0);
            };
            const float t = median_ms(run), chained = median_ms(run, 16);
            std::printf("%-8s rows 1, depth %2d%s: %.1f us, %.0f GB/s; chained %.0f GB/s\n", s.name, depth,
                        depth == kFp8GemvDepth ? " (engine)" : "", t * 1e3, fp8_bytes / t / 1e6, fp8_bytes / chained / 1e6);
        }
        if (std::string(s.name) == "gate|up") {   // SwiGLU in the product's epilogue, against the product + swiglu
            In* a = nullptr;
            cudaCheck(cudaMalloc(&a, 16 * (size_t)s.N / 2 * sizeof(In)));
            for (int rows : {1, 8}) {
                const float apart = median_ms([&](int i, cudaStream_t st) {
                    fp8_gemv(y, xh, w[i % copies], rows, st);
                    swiglu(a, y, rows, s.N / 2, st);
                }, 16);
                const float fused = median_ms([&](int i, cudaStream_t st) { fp8_gemv_swiglu(a, xh, w[i % copies], rows, st); }, 16);
                std::printf("%-8s rows %d, chained: fp8_gemv + swiglu %.1f us, fp8_gemv_swiglu %.1f us (%.0f GB/s)\n",
                            s.name, rows, apart * 1e3, fused * 1e3, fp8_bytes / fused / 1e6);
            }
            cudaFree(a);
        }
        std::printf("%-8s copy of the FP8 bytes: %.1f us, %.0f GB/s (read + write: %.0f GB/s of traffic)\n", s.name,
                    tc * 1e3, fp8_bytes / tc / 1e6, 2 * fp8_bytes / tc / 1e6);
        prefill(s.name, w[0], wb[0], h);
        for (int c = 0; c < copies; c++) cudaFree(wb[c]), cudaFree(w[c].q), cudaFree(w[c].scale);
        cudaFree(x), cudaFree(xh), cudaFree(y);
    }
    cublasDestroy(h);
}
