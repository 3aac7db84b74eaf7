// cpu_ops.cpp: fp32 reference ops (see cpu_ops.h). Plain loops, written for reading.
#include "cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace olmo::cpu {

void matmul(float* y, const float* x, const float* W, int T, int K, int N) {
    // Row-by-row dot products; the inner loop is contiguous in both x and W so it vectorizes.
#pragma omp parallel for collapse(2) schedule(static)
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            const float* xr = x + (int64_t)t * K;
            const float* wr = W + (int64_t)n * K;
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += xr[k] * wr[k];
            y[(int64_t)t * N + n] = acc;
        }
}

void embedding(float* out, const float* table, const int* ids, int T, int H) {
    for (int t = 0; t < T; t++)
        std::memcpy(out + (int64_t)t * H, table + (int64_t)ids[t] * H, sizeof(float) * H);
}

void layernorm(float* out, const float* x, int T, int H, float eps) {
    for (int t = 0; t < T; t++) {
        const float* xr = x + (int64_t)t * H;
        float mean = 0.0f, var = 0.0f;
        for (int i = 0; i < H; i++) mean += xr[i];
        mean /= H;
        for (int i = 0; i < H; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= H;
        float rstd = 1.0f / std::sqrt(var + eps);
        for (int i = 0; i < H; i++) out[(int64_t)t * H + i] = (xr[i] - mean) * rstd;
    }
}

void rmsnorm(float* out, const float* x, const float* w, int T, int H, float eps) {
    for (int t = 0; t < T; t++) {
        const float* xr = x + (int64_t)t * H;
        float ss = 0.0f;
        for (int i = 0; i < H; i++) ss += xr[i] * xr[i];
        float rstd = 1.0f / std::sqrt(ss / H + eps);
        for (int i = 0; i < H; i++) out[(int64_t)t * H + i] = w[i] * (xr[i] * rstd);
    }
}

void clip(float* x, int64_t n, float c) {
    for (int64_t i = 0; i < n; i++) x[i] = std::min(std::max(x[i], -c), c);
}

void rope(float* x, int T, int n_heads, int hd, int pos0, const float* inv_freq, float attn_factor) {
    const int half = hd / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_heads; h++) {
            float* v = x + ((int64_t)t * n_heads + h) * hd;
            for (int d = 0; d < half; d++) {
                float angle = (float)(pos0 + t) * inv_freq[d];
                float c = std::cos(angle) * attn_factor, s = std::sin(angle) * attn_factor;
                float a = v[d], b = v[d + half];
                v[d] = a * c - b * s;          // x·cos + rotate_half(x)·sin, first half
                v[d + half] = b * c + a * s;   // second half
            }
        }
}

void attention(float* out, const float* q, const float* kc, const float* vc, int T, int pos0,
               int nH, int nKV, int hd, int window, float scale, const int* table, int block_size) {
    const int group = nH / nKV, kv_stride = nKV * hd;
    auto row = [&](int j) -> int64_t { return table ? (int64_t)table[j / block_size] * block_size + j % block_size : j; };
    std::vector<float> p(pos0 + T);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nH; h++) {
            const int i = pos0 + t;                              // absolute query position
            const int j0 = window > 0 ? std::max(0, i - window + 1) : 0;
            const float* qv = q + ((int64_t)t * nH + h) * hd;
            const int kvh = h / group;
            float mx = -INFINITY;
            for (int j = j0; j <= i; j++) {                      // scores, scaled
                const float* kv = kc + row(j) * kv_stride + kvh * hd;
                float s = 0.0f;
                for (int d = 0; d < hd; d++) s += qv[d] * kv[d];
                p[j] = s * scale;
                mx = std::max(mx, p[j]);
            }
            float sum = 0.0f;                                     // softmax
            for (int j = j0; j <= i; j++) { p[j] = std::exp(p[j] - mx); sum += p[j]; }
            float* o = out + ((int64_t)t * nH + h) * hd;
            for (int d = 0; d < hd; d++) o[d] = 0.0f;
            for (int j = j0; j <= i; j++) {                      // weighted sum of values
                const float* vv = vc + row(j) * kv_stride + kvh * hd;
                const float w = p[j] / sum;
                for (int d = 0; d < hd; d++) o[d] += w * vv[d];
            }
        }
}

void swiglu(float* out, const float* gu, int T, int I) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < I; i++) {
            float g = gu[(int64_t)t * 2 * I + i], u = gu[(int64_t)t * 2 * I + I + i];
            out[(int64_t)t * I + i] = g / (1.0f + std::exp(-g)) * u;
        }
}

int argmax(const float* x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

void token_logprobs(float* out, const float* logits, const int* targets, int rows, int V) {
    for (int r = 0; r < rows; r++) {
        const float* z = logits + (int64_t)r * V;
        if (targets[r] < 0) { out[r] = 0.0f; continue; }
        double m = -INFINITY, sum = 0.0;
        bool finite = true;
        for (int j = 0; j < V; j++) {
            finite = finite && std::isfinite(z[j]);
            m = std::max(m, (double)z[j]);
        }
        for (int j = 0; j < V && finite; j++) sum += std::exp(z[j] - m);
        out[r] = finite ? (float)((z[targets[r]] - m) - std::log(sum)) : NAN;
    }
}

}  // namespace olmo::cpu
