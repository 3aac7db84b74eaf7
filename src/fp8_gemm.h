// fp8_gemm.h: the FP8 GEMM for many tokens (prefill, large batches), through cuBLASLt:
//     y [rows, N] fp32 = (xs ⊙ x8) [rows, K] · (W.scale ⊙ W.q) [N, K]ᵀ
// x8: the activations in E4M3 with one fp32 scale per token (row), quantized on the fly by
// quantize_rows_fp8 (kernels/fp8.cuh); W: per-output-channel E4M3 weights (fp8.h). cuBLASLt
// multiplies the codes on the tensor cores at the FP8 rate with fp32 accumulation and stores
// the sums unscaled: run() returns the two scale vectors (fp8.h PendingScale) for the kernel
// that reads y to apply as it loads (the norms, SwiGLU, RoPE), or for scale_rows_cols
// (kernels/fp8.cuh) where a reader cannot. (cuBLASLt's own "outer vector" scaling would fold
// them into the GEMM, but on sm_90 it offers no algorithm for it: measured with cuBLAS 13 on
// the H200, docs/fp8.md.)
// In cuBLASLt's column-major terms yᵀ [N, rows] = op(A) · B with A = W.q seen as a
// [ld, N] matrix, transposed, and B = x8ᵀ [ld, rows]: the "TN" layout FP8 requires. The padded
// columns K..ld are zeros in both, so the product runs over ld.
//
// A plan (descriptors and the algorithm cuBLASLt's heuristic picks) is made once per (rows,
// N, K) and kept; each call then only points the descriptor at this matrix's scales.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <tuple>

#include "fp8.h"

namespace olmo {

class Fp8Gemm {
public:
    // workspace: device memory cuBLASLt may use (shared with cuBLAS: same stream).
    Fp8Gemm(void* workspace, size_t workspace_bytes);
    ~Fp8Gemm();
    Fp8Gemm(const Fp8Gemm&) = delete;
    Fp8Gemm& operator=(const Fp8Gemm&) = delete;

    // Whether cuBLASLt runs W: on sm_90 its FP8 GEMMs want the output width a multiple of 16
    // (the layer widths of real checkpoints are; a test's odd vocabulary may not be).
    static bool supports(const Fp8Matrix& W) { return W.N % 16 == 0; }
    // x8 [rows, W.ld] E4M3 and xs [rows] on the device; y [rows, W.N] fp32, unscaled: the
    // returned {xs, W.scale} are still to be applied (they must outlive y's reader).
    PendingScale run(float* y, const uint8_t* x8, const float* xs, const Fp8Matrix& W, int rows, cudaStream_t stream);

private:
    struct Plan {
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
        cublasLtMatmulAlgo_t algo;
    };
    Plan& plan(int rows, const Fp8Matrix& W);

    cublasLtHandle_t lt_ = nullptr;
    void* workspace_;
    size_t workspace_bytes_;
    std::map<std::tuple<int, int, int>, Plan> plans_;   // by (rows, N, ld)
};

}  // namespace olmo
