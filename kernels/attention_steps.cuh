// attention_steps.cuh: the warp-level steps of flash attention on tensor cores, shared by the
// prefill and the decode kernel. Per tile of keys K_j, V_j (rows of the tile: keys) a warp does
//     S   = Q · K_jᵀ                                   warp_scores
//     S   = -inf where a key is hidden (causal/window)  mask_scores (only on partial tiles)
//     m', l', P = online softmax of S (below)          online_softmax
//     O   = O · 2^(c·(m - m')) + P · V_j                 warp_pv (the rescale: online_softmax)
// and at the end out = O / l. A warp owns MT m-tiles of 16 query rows and sees NT n-tiles of 8
// keys. Accumulator fragments give each lane rows lane/4 and lane/4+8 of an m-tile (index
// `half` 0/1 below), two columns each; the 4 lanes of a row hold its other columns.
// defines: attn::kLog2e, attn::quad_sum, attn::warp_scores, attn::QFromSmem, attn::QInRegisters,
//          attn::mask_scores, attn::max_tree, attn::kRescaleSlack, attn::softmax_scores, attn::rescale_o,
//          attn::online_softmax, attn::pack_probabilities, attn::softmax_packed, attn::warp_pv
#pragma once
#include <cmath>
#include <cstdint>

#include "tensor_core.cuh"

namespace olmo {
namespace attn {

constexpr float kLog2e = 1.4426950408889634f;

// Sum over the 4 lanes that share a row of an accumulator fragment (every one of them gets it).
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

// s = Q·Kᵀ for this warp. q_frag(mt, kk, a) gives the A fragment of m-tile mt, dims kk .. kk+15
// (prefill: an ldmatrix from shared memory at each use; decode: registers filled once). One
// ldmatrix.x4 of K gives the B fragments of two n-tiles, reused by all MT m-tiles. K lane
// addresses: rows lane%8 + 8*(lane/16), chunk (lane/8)%2 (matrices: keys 0-7 dims 0-7, keys 0-7
// dims 8-15, keys 8-15 ...). With few accumulators (decode: one m-tile, two n-tiles) the even
// and odd 16-wide slices of HD accumulate in two separate chains, halving the chain of
// dependent mma; the prefill kernel has 8 or 16 independent ones already. With many, at HD 128
// and 256, the HD loop is unrolled by 2 only, which keeps the fragment loads ptxas hoists within
// the 255 registers (fully unrolled it spills).
template <typename T, int HD, int MT, int NT, typename QFrag>
__device__ __forceinline__ void warp_scores(float (&s)[MT][NT][4], QFrag q_frag, SmemTile<HD> k, int lane) {
    using Tile = SmemTile<HD>;
    constexpr bool FEW = MT * NT < 8;  // accumulators
    constexpr int CHAINS = FEW ? 2 : 1, UNROLL = HD >= 128 && !FEW ? 2 : HD / 16;
    const uint32_t ka = k.at((lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1);
    float acc[CHAINS][MT][NT][4] = {};
#pragma unroll UNROLL
    for (int kk = 0; kk < HD; kk += 16) {
        float(&chain)[MT][NT][4] = acc[kk / 16 % CHAINS];
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) q_frag(mt, kk, a[mt]);
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
            uint32_t b[4];  // keys n*8 .. n*8+15: {n-tile n: b0, b1}, {n-tile n+1: b0, b1}
            ldmatrix_x4(b, Tile::step(ka, n * 8, kk / 8));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_16x8x16<T>(chain[mt][n], a[mt], b[0], b[1]);
                mma_16x8x16<T>(chain[mt][n + 1], a[mt], b[2], b[3]);
            }
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) s[mt][n][i] = CHAINS == 1 ? acc[0][mt][n][i] : acc[0][mt][n][i] + acc[CHAINS - 1][mt][n][i];
}

// The A fragments of Q (rows lane%16, chunk lane/16 of each 16 x 16 block) straight from a
// shared-memory tile, one ldmatrix.x4 per use.
template <int HD>
struct QFromSmem {
    uint32_t qa;  // this lane's address in m-tile 0, dims 0..15
    __device__ QFromSmem(SmemTile<HD> q, int lane) : qa(q.at(lane & 15, lane >> 4)) {}
    __device__ void operator()(int mt, int kk, uint32_t (&a)[4]) const { ldmatrix_x4(a, SmemTile<HD>::step(qa, mt * 16, kk / 8)); }
};
// ... or all of them for one m-tile (HD/16 slices, 32 registers at HD 128), read once.
template <int HD>
struct QInRegisters {
    uint32_t f[HD / 16][4];
    __device__ QInRegisters(SmemTile<HD> q, int lane) {
        const QFromSmem<HD> src(q, lane);
#pragma unroll
        for (int kk = 0; kk < HD; kk += 16) src(0, kk, f[kk / 16]);
    }
    __device__ void operator()(int, int kk, uint32_t (&a)[4]) const {
#pragma unroll
        for (int i = 0; i < 4; i++) a[i] = f[kk / 16][i];
    }
};

// Sets s = -inf where key j is hidden from the row at position pos: j > pos, or j <= pos - window.
// key0 is the key of n-tile 0, column 0; row_pos(r) the position of the warp's row r.
template <int MT, int NT, typename RowPos>
__device__ __forceinline__ void mask_scores(float (&s)[MT][NT][4], RowPos row_pos, int key0, int window, int lane) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int pos = row_pos(mt * 16 + half * 8 + lane / 4);
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const int j = key0 + n * 8 + (lane & 3) * 2 + i;
                    if (j > pos || (window > 0 && j <= pos - window)) s[mt][n][2 * half + i] = -INFINITY;
                }
        }
}

// The maximum of x[i0 .. i0+N-1] as a tree of depth ceil(log2 N): a chain of N dependent maxima
// would wait on each one's latency.
template <int N, int M>
__device__ __forceinline__ float max_tree(const float (&x)[M], int i0 = 0) {
    if constexpr (N == 1) return x[i0];
    else return fmaxf(max_tree<N / 2>(x, i0), max_tree<N - N / 2>(x, i0 + N / 2));
}

// Online softmax (FlashAttention-2), per row, with c = scale·log2(e) so exp(scale·x) = 2^(c·x):
//   m' = max(m, max_j s_j)                 running max of the raw scores (but see below)
//   p_j = 2^(c·s_j - c·m')                 this tile's probabilities (overwrite s)
//   l' = l·2^(c·(m - m')) + Σ_j p_j        running denominator (a per-lane partial sum;
//                                          the 4 lanes of a row add theirs at the end)
//   o' = o·2^(c·(m - m'))                  rescaled before P·V is added
// A row that has seen only masked (-inf) keys keeps m = -inf and uses 0 as its reference, so
// no (-inf) - (-inf) = NaN appears; its p and l stay 0.
// m need not be the true maximum, only a reference that keeps p finite: a row keeps its m while
// the tile's maximum is at most kRescaleSlack above it in units of c (so p ≤ 2^8 = 256, which
// fp32 l and o and 16-bit P hold with their full relative precision), and moves it only past
// that (FlashAttention-4's conditional rescaling). Then almost every tile after a row's first
// keeps every m, and the warp skips the rescale of o (exact: the factor would be 1).
// softmax_scores does the first three lines, rescale_o the last, online_softmax both (the
// Hopper kernel runs them apart, with a P·V in flight in between).

// How far (in units of c, i.e. a factor 2^8) a tile's maximum may exceed a row's reference m
// before m moves.
constexpr float kRescaleSlack = 8.0f;

// The first three lines: m, l and P (in s), and each row's factor corr = 2^(c·(m - m')) for o.
// Returns whether every row of the warp kept its m (then corr is 1 throughout). A row moves its m
// only when one of its scores passed m + slack, and each lane can tell that of its own scores:
// the warp asks once (__any_sync), and only when some score did pass does it take the rows'
// maxima over their 4 lanes (two shuffles each), off the path of the common tile.
template <int MT, int NT>
__device__ __forceinline__ bool softmax_scores(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                               float (&corr)[MT][2], float c) {
    float mx[MT][2];    // the lane's maximum of each of its rows' scores in this tile
    bool past = false;  // some score of this lane's rows passed its m + slack
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            float t[NT];
#pragma unroll
            for (int n = 0; n < NT; n++) t[n] = fmaxf(s[mt][n][2 * half], s[mt][n][2 * half + 1]);
            mx[mt][half] = max_tree<NT>(t);  // a tree: a chain of NT maxima would wait on each one
            // NaN (so false) while the row has seen only masked keys; +inf at its first visible one.
            past = past || (mx[mt][half] - m[mt][half]) * c > kRescaleSlack;
        }
    const bool move = __any_sync(0xffffffffu, past);
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            corr[mt][half] = 1.0f;
            if (move) {  // the rows' maxima over their 4 lanes; the rows past their slack move
                float x = fmaxf(m[mt][half], mx[mt][half]);
                x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
                x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
                if ((x - m[mt][half]) * c > kRescaleSlack) {
                    corr[mt][half] = exp2_approx((m[mt][half] - x) * c);
                    m[mt][half] = x;
                }
            }
            // p and the lane's sum in four parts (short chains of dependent adds).
            const float ref = m[mt][half] == -INFINITY ? 0.0f : m[mt][half] * c;
            float sum[4] = {};
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int i = 2 * half; i < 2 * half + 2; i++) {
                    s[mt][n][i] = exp2_approx(fmaf(s[mt][n][i], c, -ref));
                    sum[(n * 2 + i) % 4] += s[mt][n][i];
                }
            l[mt][half] = l[mt][half] * corr[mt][half] + ((sum[0] + sum[1]) + (sum[2] + sum[3]));
        }
    return !move;
}

// The last line: o' = o·corr, row by row.
template <int MT, int DT>
__device__ __forceinline__ void rescale_o(float (&o)[MT][DT][4], const float (&corr)[MT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int d = 0; d < DT; d++)
#pragma unroll
            for (int i = 0; i < 4; i++) o[mt][d][i] *= corr[mt][i >> 1];
}

template <int MT, int NT, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                               float (&o)[MT][DT][4], float c) {
    float corr[MT][2];
    if (!softmax_scores<MT, NT>(s, m, l, corr, c)) rescale_o<MT, DT>(o, corr);
}

// The probabilities' accumulator fragments of n-tiles 2kk, 2kk+1 are exactly the A fragment of
// a 16-key slice once packed to 16 bits.
template <typename T, int NT>
__device__ __forceinline__ void pack_probabilities(uint32_t (&a)[NT / 2][4], const float (&p)[NT][4]) {
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        a[kk][0] = pack2<T>(p[2 * kk][0], p[2 * kk][1]);
        a[kk][1] = pack2<T>(p[2 * kk][2], p[2 * kk][3]);
        a[kk][2] = pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]);
        a[kk][3] = pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3]);
    }
}

// softmax_scores and pack_probabilities of one 16-row slice (the Hopper kernel's tiles),
// exponentials first: each row's p with its m as it stands, packed as they come, the lane's sums
// on the way. If every lane's sum for each of its rows is at most 2^kRescaleSlack - 1, no p
// passed that, so no row would move its m (softmax_scores' test), and the maxima are never
// taken. Only when some sum passed it, or a row has seen no key yet (m = -inf), does the warp
// run softmax_scores on the scores, which are still whole, and pack again. The results are bit
// for bit softmax_scores' (the same p, sums added in the same order) while |c·m| < 2^16, where
// the two roundings of c·s - c·m differ by less than the 0.0056 units between 2^8 and 255.
template <typename T, int NT>
__device__ __forceinline__ bool softmax_packed(float (&s)[1][NT][4], float (&m)[1][2], float (&l)[1][2],
                                               float (&corr)[1][2], float c, uint32_t (&a)[NT / 2][4]) {
    if (!__any_sync(0xffffffffu, m[0][0] == -INFINITY || m[0][1] == -INFINITY)) {
        const float ref[2] = {m[0][0] * c, m[0][1] * c};
        float sum[2][4] = {};  // per row half, in softmax_scores' four parts
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const float p0 = exp2_approx(fmaf(s[0][n][2 * half], c, -ref[half]));
                const float p1 = exp2_approx(fmaf(s[0][n][2 * half + 1], c, -ref[half]));
                sum[half][(n * 2 + 2 * half) % 4] += p0;
                sum[half][(n * 2 + 2 * half + 1) % 4] += p1;
                a[n / 2][n % 2 * 2 + half] = pack2<T>(p0, p1);  // pack_probabilities' place for it
            }
        const float ls[2] = {(sum[0][0] + sum[0][1]) + (sum[0][2] + sum[0][3]),
                             (sum[1][0] + sum[1][1]) + (sum[1][2] + sum[1][3])};
        // One less than 2^slack: p and softmax_scores' test round differently (above), and a row
        // that test would move has a p above 255. !(x <= bound): a NaN sum takes the exact path.
        constexpr float bound = (1 << (int)kRescaleSlack) - 1;
        if (!__any_sync(0xffffffffu, !(ls[0] <= bound) || !(ls[1] <= bound))) {
            for (int half = 0; half < 2; half++) {
                l[0][half] += ls[half];
                corr[0][half] = 1.0f;
            }
            return true;
        }
    }
    const bool same = softmax_scores<1, NT>(s, m, l, corr, c);
    pack_probabilities<T, NT>(a, s[0]);
    return same;
}

// o += P·V: the probabilities packed as A fragments (pack_probabilities; all packed first, so
// the fp32 scores die before the loop); V's B fragments come from ldmatrix.trans with lane rows
// lane%16 (keys), chunk lane/16 (matrices: keys 0-7 dims 0-7, keys 8-15 dims 0-7, keys 0-7 dims 8-15, ...).
template <typename T, int HD, int MT, int NT>
__device__ __forceinline__ void warp_pv(float (&o)[MT][HD / 8][4], const float (&p)[MT][NT][4], SmemTile<HD> v,
                                        int lane) {
    using Tile = SmemTile<HD>;
    uint32_t a[MT][NT / 2][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) pack_probabilities<T, NT>(a[mt], p[mt]);
    const uint32_t va = v.at(lane & 15, lane >> 4);
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
#pragma unroll
        for (int d = 0; d < HD / 8; d += 2) {
            uint32_t b[4];  // dims d*8 .. d*8+15: {n-tile d: b0, b1}, {n-tile d+1: b0, b1}
            ldmatrix_x4_trans(b, Tile::step(va, kk * 16, d));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_16x8x16<T>(o[mt][d], a[mt][kk], b[0], b[1]);
                mma_16x8x16<T>(o[mt][d + 1], a[mt][kk], b[2], b[3]);
            }
        }
    }
}

}  // namespace attn
}  // namespace olmo
