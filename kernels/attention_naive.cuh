// attention_naive.cuh: the simple attention kernels, read these first. The naive one is the
// oracle the fast kernels are tested against; the warp-per-row one is the fp32 path of
// attention_prefill and attention_decode (tensor cores take 16-bit operands).
// defines: attn::launch_naive, attn::launch_rowwise (and their kernels)
//
// For the row of query token t, head h of sequence b (position i, KV head h / (nH / nKV)):
//   naive    s_j = scale · q·k_j for the visible keys j (-inf for the others);
//            p = softmax(s);   out = Σ_j p_j · v_j
//            three kernels over an fp32 score matrix: scores, then softmax in place, then P·V.
//   rowwise  one warp walks the visible keys in order with the online softmax
//              s = scale · q·k_j,  m' = max(m, s),  l' = l·e^(m - m') + e^(s - m'),
//              o' = o·e^(m - m') + e^(s - m') · v_j;     out = o / l
//            (no score matrix: one pass over K and V), lane i holding dims i, i+32, ... of q and o.
#pragma once
#include <cmath>

#include "attention_params.cuh"
#include "cuda_common.cuh"

namespace olmo {
namespace attn {

// ---- naive: one score row per (sequence b, token t, head h), row = (b*n_q + t)*nH + h ----
// scores[row][j] (fp32, row stride s_cap) for j < pos0[b] + n_q.

template <typename T>
struct NaiveRow {  // what a score row is about
    int b, h, kvh, pos, n_keys;
    KeyRange keys;  // the keys it sees
    __device__ NaiveRow(const AttnParams<T>& p, int row) {
        b = row / (p.n_q * p.nH), h = row % p.nH, kvh = h / (p.nH / p.nKV);
        pos = p.pos0[b] + row / p.nH % p.n_q, n_keys = p.pos0[b] + p.n_q;
        keys = visible_keys(pos, pos, p.window);
    }
};

// scores[row][j] = scale · q·k_j, or -inf where key j is hidden. Grid (rows, key blocks).
template <typename T>
__global__ void naive_scores_kernel(const AttnParams<T> p, float* scores) {
    const int row = blockIdx.x, j = blockIdx.y * blockDim.x + threadIdx.x;
    const NaiveRow<T> r(p, row);
    if (j >= r.n_keys) return;
    float s = -INFINITY;
    if (j >= r.keys.lo && j < r.keys.hi) {
        const T* qr = p.q + (int64_t)row * p.hd;
        const T* kr = p.k + pages_of(p, r.b).row(j) * p.nKV * p.hd + r.kvh * p.hd;
        float dot = 0.0f;
        for (int d = 0; d < p.hd; d++) dot += to_float(qr[d]) * to_float(kr[d]);
        s = dot * p.scale;
    }
    scores[(int64_t)row * p.s_cap + j] = s;
}

// scores[row] = softmax(scores[row]) in place, one block per row.
template <typename T>
__global__ void naive_softmax_kernel(const AttnParams<T> p, float* scores) {
    float* x = scores + (int64_t)blockIdx.x * p.s_cap;
    const int n = NaiveRow<T>(p, blockIdx.x).n_keys;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, x[j]);
    mx = block_reduce(mx, MaxOp{});
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) sum += (x[j] = expf(x[j] - mx));
    const float inv = 1.0f / block_reduce(sum, SumOp{});
    for (int j = threadIdx.x; j < n; j += blockDim.x) x[j] *= inv;
}

// out[row][d] = Σ_j probs[row][j] · v_j[d], one thread per output element.
template <typename T>
__global__ void naive_pv_kernel(const AttnParams<T> p, const float* probs) {
    const int row = blockIdx.x, d = threadIdx.x;
    const NaiveRow<T> r(p, row);
    const Pages pg = pages_of(p, r.b);
    const float* pr = probs + (int64_t)row * p.s_cap;
    float acc = 0.0f;
    for (int j = r.keys.lo; j < r.keys.hi; j++) acc += pr[j] * to_float(p.v[pg.row(j) * p.nKV * p.hd + r.kvh * p.hd + d]);
    p.out[(int64_t)row * p.hd + d] = from_float<T>(acc);
}

// scores: [batch * n_q * nH, s_cap] fp32.
template <typename T>
void launch_naive(const AttnParams<T>& p, float* scores, cudaStream_t stream) {
    const int rows = p.batch * p.n_q * p.nH;
    naive_scores_kernel<T><<<dim3(rows, (p.s_cap + 127) / 128), 128, 0, stream>>>(p, scores);
    cudaCheckLaunch();
    naive_softmax_kernel<T><<<rows, 256, 0, stream>>>(p, scores);
    cudaCheckLaunch();
    naive_pv_kernel<T><<<rows, p.hd, 0, stream>>>(p, scores);
    cudaCheckLaunch();
}

// ---- warp per row: one warp per (sequence, token, head) row, HD / 32 dims per lane (HD the
// tile width of hd; slots at dims >= hd stay 0) ----

template <typename T, int HD>
__global__ void attention_rowwise_kernel(const AttnParams<T> p) {
    constexpr int E = HD / 32;
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (row >= p.batch * p.n_q * p.nH) return;
    const int b = row / (p.n_q * p.nH), t = row / p.nH % p.n_q, h = row % p.nH, kvh = h / (p.nH / p.nKV);
    const int pos = p.pos0[b] + t, ld = p.nKV * p.hd;
    const KeyRange keys = visible_keys(pos, pos, p.window);
    const Pages pg = pages_of(p, b);
    auto has = [&](int e) { return lane + 32 * e < p.hd; };  // slot e holds a dim of the head
    const T* qr = p.q + (int64_t)row * p.hd + lane;
    float q[E], o[E] = {}, m = -INFINITY, l = 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++) q[e] = has(e) ? to_float(qr[32 * e]) : 0.0f;
    for (int j = keys.lo; j < keys.hi; j++) {
        const int64_t at = pg.row(j) * ld + kvh * p.hd + lane;
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++)
            if (has(e)) dot += q[e] * to_float(p.k[at + 32 * e]);
        const float s = warp_reduce(dot, SumOp{}) * p.scale, m_new = fmaxf(m, s);
        const float corr = expf(m - m_new), pj = expf(s - m_new);
        l = l * corr + pj;
#pragma unroll
        for (int e = 0; e < E; e++)
            if (has(e)) o[e] = o[e] * corr + pj * to_float(p.v[at + 32 * e]);
        m = m_new;
    }
    T* out = p.out + (int64_t)row * p.hd + lane;
#pragma unroll
    for (int e = 0; e < E; e++)
        if (has(e)) out[32 * e] = from_float<T>(o[e] / l);
}

template <typename T>
void launch_rowwise(const AttnParams<T>& p, cudaStream_t stream) {
    const int rows = p.batch * p.n_q * p.nH, threads = 128;
    dispatch_hd(p.hd, [&](auto hd) {
        attention_rowwise_kernel<T, decltype(hd)::value><<<(rows * 32 + threads - 1) / threads, threads, 0, stream>>>(p);
        cudaCheckLaunch();
    });
}

}  // namespace attn
}  // namespace olmo
