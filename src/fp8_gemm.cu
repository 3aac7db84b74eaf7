// fp8_gemm.cu: see fp8_gemm.h.
#include "fp8_gemm.h"

#include <string>

#include "cuda_common.cuh"

namespace olmo {

namespace {

template <typename V>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
    cublasCheck(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

}  // namespace

Fp8Gemm::Fp8Gemm(void* workspace, size_t workspace_bytes) : workspace_(workspace), workspace_bytes_(workspace_bytes) {
    cublasCheck(cublasLtCreate(&lt_));
}

Fp8Gemm::~Fp8Gemm() {
    for (auto& [key, p] : plans_) {
        cublasLtMatrixLayoutDestroy(p.a);
        cublasLtMatrixLayoutDestroy(p.b);
        cublasLtMatrixLayoutDestroy(p.d);
        cublasLtMatmulDescDestroy(p.desc);
    }
    cublasLtDestroy(lt_);
}

Fp8Gemm::Plan& Fp8Gemm::plan(int rows, const Fp8Matrix& W) {
    const auto key = std::make_tuple(rows, W.N, W.ld);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    Plan p;
    cublasCheck(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    cublasCheck(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, W.ld, W.N, W.ld));   // W.q as [ld, N]
    cublasCheck(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, W.ld, rows, W.ld));  // x8 as [ld, rows]
    cublasCheck(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, W.N, rows, W.N));        // y as [N, rows]
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                     sizeof(workspace_bytes_)));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
        fail("cuBLASLt offers no FP8 GEMM for " + std::to_string(rows) + " x " + std::to_string(W.N) + " x " +
             std::to_string(W.ld) + " on this GPU (" + cublasGetStatusString(st) + "); FP8 needs sm_89 or newer");
    p.algo = result.algo;
    return plans_[key] = p;
}

PendingScale Fp8Gemm::run(float* y, const uint8_t* x8, const float* xs, const Fp8Matrix& W, int rows,
                          cudaStream_t stream) {
    Plan& p = plan(rows, W);
    const float one = 1.0f, zero = 0.0f;
    cublasCheck(cublasLtMatmul(lt_, p.desc, &one, W.q, p.a, x8, p.b, &zero, y, p.d, y, p.d, &p.algo, workspace_,
                               workspace_bytes_, stream));
    return {xs, W.scale};
}

}  // namespace olmo
