// cpu_ops.h: the fp32 CPU reference of every op in the forward pass.
//
// These functions define what each GPU kernel in kernels/ must compute; cpu_engine.cpp is a
// list of calls to them, and the kernel tests compare each kernel against its function here.
// Layouts (row-major everywhere):
//   activations      x      [T, H]
//   projections      q      [T, nH*hd]   k, v [T, nKV*hd]   (head h occupies columns h*hd..)
//   KV cache (layer) kc, vc [S_cap, nKV*hd]  position p's keys at row p
//   weights          W      [out, in]    y = x · Wᵀ
#pragma once
#include <cstdint>
#include <vector>

namespace olmo::cpu {

// y[T, N] = x[T, K] · W[N, K]ᵀ
void matmul(float* y, const float* x, const float* W, int T, int K, int N);

// out[t] = table[ids[t]]   (out [T, H], table [V, H])
void embedding(float* out, const float* table, const int* ids, int T, int H);

// OLMo-1 LayerNorm without weight or bias: (x - mean) / sqrt(var + eps), biased variance.
void layernorm(float* out, const float* x, int T, int H, float eps);

// RMSNorm: out = w * x / sqrt(mean(x²) + eps); `x` and `out` may alias.
void rmsnorm(float* out, const float* x, const float* w, int T, int H, float eps);

// x = clamp(x, -c, c) over n elements (OLMo-1 clip_qkv).
void clip(float* x, int64_t n, float c);

// Rotary embedding, rotate_half layout, in place on x [T, n_heads*hd]; token t has position
// pos0 + t. inv_freq [hd/2]; both cos and sin are multiplied by attn_factor (YaRN, else 1).
void rope(float* x, int T, int n_heads, int hd, int pos0, const float* inv_freq, float attn_factor);

// Causal attention for T new queries at positions pos0..pos0+T-1 over keys 0..pos0+T-1 held in
// the cache. q, out [T, nH*hd]; kc, vc [rows, nKV*hd]. Query head h reads KV head
// h / (nH/nKV). window > 0: query i sees only keys j with i - window < j <= i.
// The key of position j is in row j, or with a block table (paged cache, see kv_cache.h) in
// row table[j / block_size] * block_size + j % block_size.
void attention(float* out, const float* q, const float* kc, const float* vc, int T, int pos0,
               int nH, int nKV, int hd, int window, float scale, const int* table = nullptr,
               int block_size = 0);

// out[T, I] = silu(gate) * up, where gu [T, 2I] holds gate in columns 0..I-1, up in I..2I-1.
void swiglu(float* out, const float* gu, int T, int I);

// index of the largest value; ties go to the lowest index (as torch.argmax).
int argmax(const float* x, int n);

// Log-probability of each row's target token (perplexity): for r < rows with targets[r] >= 0,
//   out[r] = log_softmax(z_r)[t_r] = (z_r[t_r] - m) - log sum_j exp(z_r[j] - m),  m = max_j z_r[j]
// with z_r = logits [rows, V] row r, in double (no exp can overflow: every exponent is <= 0).
// out[r] = 0 for targets[r] < 0 (a row with nothing to score); NaN when z_r holds NaN or Inf.
void token_logprobs(float* out, const float* logits, const int* targets, int rows, int V);

}  // namespace olmo::cpu
