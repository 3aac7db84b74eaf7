// context_parallel.cpp: ring attention's chunks, partials and merge (see context_parallel.h).
#include "context_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace olmo {

std::vector<CpRange> cp_tokens(int T, int rank, int ranks) {
    const int chunks = 2 * ranks;
    auto chunk = [&](int c) {   // chunk c of `chunks` near-equal ones: the first T % chunks get one more
        const int base = T / chunks, extra = T % chunks;
        return CpRange{c * base + std::min(c, extra), base + (c < extra ? 1 : 0)};
    };
    return {chunk(rank), chunk(chunks - 1 - rank)};
}

void attention_partial(float* o, float* lse, const float* q, const int* qpos, int nq, const float* k, const float* v,
                       const int* kpos, int nk, int nH, int nKV, int hd, int window, float scale) {
    const int group = nH / nKV;
    std::vector<float> p(nk);
    for (int i = 0; i < nq; i++)
        for (int h = 0; h < nH; h++) {
            const float* qv = q + ((int64_t)i * nH + h) * hd;
            float* ov = o + ((int64_t)i * nH + h) * hd;
            auto visible = [&](int j) { return kpos[j] <= qpos[i] && (window <= 0 || qpos[i] - kpos[j] < window); };
            float mx = -INFINITY;
            for (int j = 0; j < nk; j++) {   // scaled scores of the visible keys
                if (!visible(j)) continue;
                const float* kv = k + ((int64_t)j * nKV + h / group) * hd;
                float s = 0.0f;
                for (int d = 0; d < hd; d++) s += qv[d] * kv[d];
                p[j] = s * scale;
                mx = std::max(mx, p[j]);
            }
            std::fill(ov, ov + hd, 0.0f);
            lse[(int64_t)i * nH + h] = -INFINITY;
            if (mx == -INFINITY) continue;   // no key of this block is visible
            float sum = 0.0f;
            for (int j = 0; j < nk; j++) {
                if (!visible(j)) continue;
                p[j] = std::exp(p[j] - mx);
                sum += p[j];
            }
            for (int j = 0; j < nk; j++) {
                if (!visible(j)) continue;
                const float* vv = v + ((int64_t)j * nKV + h / group) * hd;
                const float w = p[j] / sum;
                for (int d = 0; d < hd; d++) ov[d] += w * vv[d];
            }
            lse[(int64_t)i * nH + h] = mx + std::log(sum);
        }
}

void merge_partial(float* o, float* lse, const float* o2, const float* lse2, int nq, int nH, int hd) {
    for (int64_t r = 0; r < (int64_t)nq * nH; r++) {
        const float a = lse[r], b = lse2[r];
        if (b == -INFINITY) continue;   // the new block adds nothing
        const float l = a == -INFINITY ? b : std::max(a, b) + std::log1p(std::exp(-std::fabs(a - b)));
        const float wa = a == -INFINITY ? 0.0f : std::exp(a - l), wb = std::exp(b - l);
        for (int d = 0; d < hd; d++) o[r * hd + d] = wa * o[r * hd + d] + wb * o2[r * hd + d];
        lse[r] = l;
    }
}

namespace {

// The rows of `x` ([T, width]) of the tokens in `ranges`, back to back, and their positions.
void gather(std::vector<float>& rows, std::vector<int>& pos, const float* x, int width, const std::vector<CpRange>& ranges) {
    rows.clear(), pos.clear();
    for (const CpRange& c : ranges)
        for (int t = c.first; t < c.first + c.count; t++) {
            rows.insert(rows.end(), x + (int64_t)t * width, x + (int64_t)(t + 1) * width);
            pos.push_back(t);
        }
}

}  // namespace

void ring_attention(float* out, const float* q, const float* k, const float* v, int T, int nH, int nKV, int hd,
                    int window, float scale, int ranks) {
    const int qw = nH * hd, kw = nKV * hd;
    std::vector<float> qr, kr, vr, o, lse, o_s, lse_s;
    std::vector<int> qpos, kpos, vpos;
    for (int r = 0; r < ranks; r++) {
        gather(qr, qpos, q, qw, cp_tokens(T, r, ranks));   // this rank's queries
        const int nq = (int)qpos.size();
        o.assign((size_t)nq * qw, 0.0f), lse.assign((size_t)nq * nH, -INFINITY);
        o_s.resize(o.size()), lse_s.resize(lse.size());
        for (int s = 0; s < ranks; s++) {   // the K/V of rank r - s arrive at step s
            const std::vector<CpRange> held = cp_tokens(T, (r - s + ranks) % ranks, ranks);
            gather(kr, kpos, k, kw, held);
            gather(vr, vpos, v, kw, held);
            attention_partial(o_s.data(), lse_s.data(), qr.data(), qpos.data(), nq, kr.data(), vr.data(), kpos.data(),
                              (int)kpos.size(), nH, nKV, hd, window, scale);
            merge_partial(o.data(), lse.data(), o_s.data(), lse_s.data(), nq, nH, hd);
        }
        for (int i = 0; i < nq; i++) std::copy_n(o.begin() + (size_t)i * qw, qw, out + (int64_t)qpos[i] * qw);
    }
}

}  // namespace olmo
