// logprob.cuh: the log-probability of one target token per row of fp32 logits (perplexity).
// defines: token_logprobs
//
//   out[r] = log_softmax(z_r)[t_r] = (z_r[t_r] - m) - log sum_j exp(z_r[j] - m),   m = max_j z_r[j]
//   z_r = logits row r [V], t_r = targets[r]
// (z_t - m first: at logits of 1e38 the sum m + log(...) would round the log away.)
//
// One block per row, one pass over the row. Thread i keeps an online logsumexp of the logits
// it visits, a pair (m_i, s_i) = (max seen, sum of exp(z - m_i)): a new z > m_i rescales
// s_i <- s_i exp(m_i - z) + 1 and sets m_i = z, else s_i += exp(z - m_i). Every exponent is
// <= 0, so nothing overflows however large the logits. The block then takes m = max_i m_i and
// s = sum_i s_i exp(m_i - m) (two block reductions; a thread that saw nothing has s_i = 0 and
// adds 0). Sums are fp32 (terms in [0, 1], at most V of them: relative error ~1e-6); the CPU
// reference cpu::token_logprobs computes in double.
// Non-finite logits (NaN or Inf) anywhere in a row make its output NaN, which the engine
// reports; a row with target < 0 (nothing to score) gets 0.
#pragma once
#include <cmath>

#include "cuda_common.cuh"

namespace olmo {

namespace logprob {
constexpr int kThreads = 512;
}

template <typename T>
__global__ void token_logprobs_kernel(float* out, const T* logits, const int* targets, int V) {
    const int r = blockIdx.x, t = targets[r];
    const T* z = logits + (int64_t)r * V;
    float m = -INFINITY, s = 0.0f;
    int bad = 0;
    if (t >= 0)
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            const float x = to_float(z[j]);
            if (!isfinite(x)) bad = 1;
            else if (x > m) s = s * expf(m - x) + 1.0f, m = x;   // s = 0 while m = -inf: exp(-inf) = 0
            else s += expf(x - m);
        }
    const float m_all = block_reduce(m, MaxOp());
    const float s_all = block_reduce(s > 0.0f ? s * expf(m - m_all) : 0.0f, SumOp());
    bad = block_reduce(bad, MaxOp());
    if (threadIdx.x != 0) return;
    if (t < 0) out[r] = 0.0f;
    else out[r] = bad ? NAN : (to_float(z[t]) - m_all) - logf(s_all);
}

// out [rows] = log-probability of targets[r] under logits row r; logits [rows, V] (the engine
// passes fp32), targets [rows] (device; < 0: nothing to score, out 0).
template <typename T>
void token_logprobs(float* out, const T* logits, const int* targets, int rows, int V, cudaStream_t stream) {
    if (rows == 0) return;
    token_logprobs_kernel<T><<<rows, logprob::kThreads, 0, stream>>>(out, logits, targets, V);
    cudaCheckLaunch();
}

}  // namespace olmo
