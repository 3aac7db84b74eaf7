// attention_forward.cu: causal attention of one sequence, from the naive kernel to tensor cores.
//
//   out[t, h] = Σ_{j <= t} softmax_j(scale · q[t, h] · k[j, h/g]) · v[j, h/g]    (g = nH / nKV)
//
// for S tokens, nH query heads of size hd, nKV KV heads. The work is 2·S²·hd·nH flops (Q·Kᵀ and
// P·V over the causal half of the S x S scores); every step is rated by that count, whatever it
// really computes. Steps 1-3 compute in fp32 on CUDA cores (roofline ~60 TFLOP/s), steps 4-5 in
// bf16 on tensor cores (~800 TFLOP/s dense), step 6 with Hopper's wgmma and TMA.
//
//  step  kernel                          what it changes                                  H200 ms  TFLOP/s  % roof
//  1     attention_naive (engine, fp32)  the definition: scores -> softmax -> P·V, three      178.9    0.8     1.3%
//                                        kernels and an S x S fp32 score matrix in HBM
//  2     tiled_two_pass_kernel (here)    a block keeps 16 queries and 32-key K/V tiles in     15.68    8.8     14.6%
//                                        shared memory; no score matrix, but the softmax
//                                        needs each row's max and sum first: pass 1 over K
//                                        finds them, pass 2 recomputes the scores, P·V
//  3     online_softmax_kernel (here)    online softmax: one pass, the output rescaled by     11.83    11.6    19.4%
//                                        e^(m - m') whenever a row's max grows; K and V
//                                        read once, scores computed once
//  4     attention_prefill (engine)      bf16 on mma.sync tensor cores (FlashAttention-2):    0.409    336.3   42.0%
//                                        128-query tiles, swizzled shared memory, cp.async
//                                        double buffering, exp2 softmax; block table = identity
//  5     attention_prefill (engine)      the same kernel through a shuffled block table:      0.406    338.9   42.4%
//                                        what the paged KV cache costs
//  6     attention_prefill (engine,       Hopper: a TMA producer warp fills K/V pages into     0.265    519.0   64.9%
//        PrefillKernel::Hopper)          swizzled panels, two consumer warpgroups multiply
//                                        with wgmma from shared memory (sm_90a only)
// (H200, the defaults: S 4096, 32/32 heads, hd 128, KV pages of 16 tokens; docs/runs/ladders.log,
// 2026-11-28. At S 16384 step 4 reaches 380.7 TFLOP/s, 47.6%, and step 6 635.2, 79.4%; with
// pages of 128 tokens, one TMA copy per tile, step 6 makes 749.8, 93.7%.)
//
// Each step runs once on the same random inputs (N(0,1), rounded to bf16 so that the fp32 and
// bf16 steps see the same values) and is compared with olmo::cpu::attention (src/cpu_ops.h):
// rel-L2 and max-abs over every output of the checked tokens (all when S <= 1024, else an even
// sample of 1024 tokens and the last). fp32 steps must be within rel-L2 1e-4, bf16 steps 2e-2
// (their output and probabilities are rounded to bf16). Then each is timed, the median of
// --reps runs between CUDA events.
//
// Usage: attention_forward [--seq S] [--heads nH] [--kv-heads nKV] [--hd hd] [--step k]
//                          [--reps n] [--small] [--help]
// Without a GPU it prints one line saying so and exits 0 (nothing is run). Exit status 1 when a
// step fails its check or on a bad flag.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention.cuh"
#include "cpu_ops.h"
#include "dev_common.cuh"

using namespace olmo;
using bf16 = __nv_bfloat16;

namespace {

const char* kHelp =
    "attention_forward: the attention ladder (naive -> tiled -> online softmax -> tensor cores -> paged -> Hopper)\n"
    "  --seq S        sequence length (default 4096)\n"
    "  --heads nH     query heads (default 32)\n"
    "  --kv-heads n   KV heads, dividing nH (default nH; fewer: grouped-query attention)\n"
    "  --hd hd        head size, a multiple of 8 up to 256 (default 128)\n"
    "  --block-size b tokens per KV page, a power of two from 8 to 1024 (default 16, the engine's)\n"
    "  --step k       run only step k (1-6; default all)\n"
    "  --reps n       timed runs per step, the median is shown (default 10)\n"
    "  --small        S 512, 8 heads: a quick check\n";

struct Shape {
    int S, nH, nKV, hd, block = 16;  // block: tokens per KV page (the engine's: 16)
    int pages() const { return (S + block - 1) / block; }
    float scale() const { return 1.0f / std::sqrt((float)hd); }
    double flops() const { return 2.0 * S * S * (double)hd * nH; }
};

// ------------------------------------------------------------------------------------------
// Steps 2 and 3: fp32 attention on CUDA cores, one block per (16 queries, head), 4 warps.
// Per tile of 32 keys: K and V rows into shared memory (K rows padded by one float, so the 32
// lanes reading 32 different keys at the same dim hit 32 different banks), then
//   scores  warp w: rows w, w+4, w+8, w+12; lane = key. s = scale · q·k, -inf past the diagonal
//   softmax per row across the warp's lanes (warp_reduce), probabilities to shared memory
//   P·V     thread: dims d0, d0+128 (< HD), its group of rows; o[r][d] += Σ_j p[r][j] · v[j][d]
// HD is the tile width of hd (64, 128, 256); dims hd..HD-1 are zero in shared memory.
// ------------------------------------------------------------------------------------------
constexpr int kBQ = 16, kBK = 32, kThreads = 128, kRowsPerWarp = kBQ / (kThreads / 32);

struct Fp32Attn {
    const float* q;  // [S, nH*hd]
    const float* k;  // [S, nKV*hd]
    const float* v;  // [S, nKV*hd]
    float* out;      // [S, nH*hd]
    int S, nH, nKV, hd;
    float scale;
};

// Which outputs a thread accumulates in P·V: dims d0 + W·e (e < E), rows rg + G·i (i < R).
template <int HD>
struct PvMap {
    static constexpr int W = HD < kThreads ? HD : kThreads, E = HD / W, G = kThreads / W, R = kBQ / G;
};

// Shared memory, in floats: Q [16][HD], K [32][HD+1], V [32][HD], P [16][32], corr [16], l [16].
template <int HD>
struct Fp32Smem {
    static constexpr int kQ = 0, kK = kQ + kBQ * HD, kV = kK + kBK * (HD + 1), kP = kV + kBK * HD, kCorr = kP + kBQ * kBK,
                         kL = kCorr + kBQ, kFloats = kL + kBQ;
    static constexpr int bytes() { return kFloats * 4; }
};

// Rows row0 .. row0+n-1 of a [S, ld] matrix, columns col0 .. col0+hd-1, into an [n][stride]
// shared tile; rows past S and dims past hd are zero.
template <int HD>
__device__ void load_tile(float* dst, int stride, int n, const float* src, int ld, int col0, int row0, const Fp32Attn& p) {
    for (int i = threadIdx.x; i < n * HD; i += kThreads) {
        const int r = i / HD, d = i % HD;
        dst[r * stride + d] = row0 + r < p.S && d < p.hd ? src[(int64_t)(row0 + r) * ld + col0 + d] : 0.0f;
    }
}

// s[i] = scale · q·k for the warp's row r = warp + 4i (query q0 + r) and key key0 + lane.
template <int HD>
__device__ void tile_scores(float (&s)[kRowsPerWarp], const float* sq, const float* sk, int q0, int key0, float scale) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float acc[kRowsPerWarp] = {};
    for (int d = 0; d < HD; d++) {
        const float kd = sk[lane * (HD + 1) + d];
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; i++) acc[i] += sq[(warp + 4 * i) * HD + d] * kd;
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; i++) s[i] = key0 + lane > q0 + warp + 4 * i ? -INFINITY : acc[i] * scale;
}

// o = o · corr[r] (when corr is given) + Σ_j P[r][j] · V[j] for this thread's outputs.
template <int HD>
__device__ void tile_pv(float (&o)[PvMap<HD>::R][PvMap<HD>::E], const float* sp, const float* sv, const float* corr) {
    using M = PvMap<HD>;
    const int d0 = threadIdx.x % M::W, rg = threadIdx.x / M::W;
#pragma unroll
    for (int i = 0; i < M::R; i++) {
        const int r = rg + M::G * i;
#pragma unroll
        for (int e = 0; e < M::E; e++) {
            float acc = corr ? o[i][e] * corr[r] : o[i][e];
            for (int j = 0; j < kBK; j++) acc += sp[r * kBK + j] * sv[j * HD + d0 + M::W * e];
            o[i][e] = acc;
        }
    }
}

// out[q0 + r] = o / l, where l [16] is in shared memory; rows past S and dims past hd are not stored.
template <int HD>
__device__ void store_rows(const float (&o)[PvMap<HD>::R][PvMap<HD>::E], const float* sl, int q0, int h, const Fp32Attn& p) {
    using M = PvMap<HD>;
    const int d0 = threadIdx.x % M::W, rg = threadIdx.x / M::W;
#pragma unroll
    for (int i = 0; i < M::R; i++) {
        const int r = rg + M::G * i;
#pragma unroll
        for (int e = 0; e < M::E; e++) {
            const int d = d0 + M::W * e;
            if (q0 + r < p.S && d < p.hd) p.out[(int64_t)(q0 + r) * p.nH * p.hd + h * p.hd + d] = o[i][e] / sl[r];
        }
    }
}

// A block's queries q0 .. q0+15 of head h (the latest blocks, with the most keys, are launched
// first), its shared memory, and the softmax statistics of each warp's rows: running max m and
// sum l of row warp + 4i in m[i], l[i] (the same in every lane).
template <int HD>
struct Fp32Block {
    using S = Fp32Smem<HD>;
    const Fp32Attn& p;
    float* smem;
    int q0, h, kvh, tiles, warp, lane;
    float m[kRowsPerWarp], l[kRowsPerWarp] = {};
    // Starts with Q in shared memory (visible after the first load_kv).
    __device__ Fp32Block(const Fp32Attn& p_, float* smem_)
        : p(p_), smem(smem_), q0((gridDim.x - 1 - blockIdx.x) * kBQ), h(blockIdx.y), kvh(blockIdx.y / (p_.nH / p_.nKV)),
          tiles((q0 + kBQ - 1) / kBK + 1), warp(threadIdx.x / 32), lane(threadIdx.x % 32) {
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; i++) m[i] = -INFINITY;
        load_tile<HD>(smem + S::kQ, HD, kBQ, p.q, p.nH * p.hd, h * p.hd, q0, p);
    }
    // K (and V) of key tile t into shared memory, once every thread is done with the last tile.
    __device__ void load_kv(int t, bool with_v) {
        __syncthreads();
        load_tile<HD>(smem + S::kK, HD + 1, kBK, p.k, p.nKV * p.hd, kvh * p.hd, t * kBK, p);
        if (with_v) load_tile<HD>(smem + S::kV, HD, kBK, p.v, p.nKV * p.hd, kvh * p.hd, t * kBK, p);
        __syncthreads();
    }
    __device__ void scores(float (&s)[kRowsPerWarp], int t) const {
        tile_scores<HD>(s, smem + S::kQ, smem + S::kK, q0, t * kBK, p.scale);
    }
    // Probability p of the warp's row warp + 4i and key lane of the tile, for tile_pv.
    __device__ void put_p(int i, float p_ij) const { smem[S::kP + (warp + 4 * i) * kBK + lane] = p_ij; }
    // out = o / l.
    __device__ void store(const float (&o)[PvMap<HD>::R][PvMap<HD>::E]) const {
        if (lane == 0) {
#pragma unroll
            for (int i = 0; i < kRowsPerWarp; i++) smem[S::kL + warp + 4 * i] = l[i];
        }
        __syncthreads();
        store_rows<HD>(o, smem + S::kL, q0, h, p);
    }
};

// Step 2. Pass 1: m = max_j s_j and l = Σ_j e^(s_j - m) per row (l rescaled when m grows).
// Pass 2: the scores again, p_j = e^(s_j - m), o += P·V; out = o / l.
// (m is finite after the first tile: every row sees key 0.)
template <int HD>
__global__ void __launch_bounds__(kThreads) tiled_two_pass_kernel(const Fp32Attn p) {
    using S = Fp32Smem<HD>;
    extern __shared__ float smem[];
    Fp32Block<HD> b(p, smem);
    float s[kRowsPerWarp];
    for (int t = 0; t < b.tiles; t++) {
        b.load_kv(t, false);
        b.scores(s, t);
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; i++) {
            const float m_new = fmaxf(b.m[i], warp_reduce(s[i], MaxOp{}));
            b.l[i] = b.l[i] * expf(b.m[i] - m_new) + warp_reduce(expf(s[i] - m_new), SumOp{});
            b.m[i] = m_new;
        }
    }
    float o[PvMap<HD>::R][PvMap<HD>::E] = {};
    for (int t = 0; t < b.tiles; t++) {
        b.load_kv(t, true);
        b.scores(s, t);
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; i++) b.put_p(i, expf(s[i] - b.m[i]));
        __syncthreads();
        tile_pv<HD>(o, smem + S::kP, smem + S::kV, nullptr);
    }
    b.store(o);
}

// Step 3. One pass; per tile and row: m' = max(m, max_j s_j), corr = e^(m - m'),
// p_j = e^(s_j - m'), l = l·corr + Σ_j p_j, o = o·corr + P·V; out = o / l.
template <int HD>
__global__ void __launch_bounds__(kThreads) online_softmax_kernel(const Fp32Attn p) {
    using S = Fp32Smem<HD>;
    extern __shared__ float smem[];
    Fp32Block<HD> b(p, smem);
    float s[kRowsPerWarp], o[PvMap<HD>::R][PvMap<HD>::E] = {};
    for (int t = 0; t < b.tiles; t++) {
        b.load_kv(t, true);
        b.scores(s, t);
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; i++) {
            const float m_new = fmaxf(b.m[i], warp_reduce(s[i], MaxOp{}));
            const float corr = expf(b.m[i] - m_new), p_ij = expf(s[i] - m_new);
            b.l[i] = b.l[i] * corr + warp_reduce(p_ij, SumOp{});
            b.m[i] = m_new;
            b.put_p(i, p_ij);
            if (b.lane == 0) smem[S::kCorr + b.warp + 4 * i] = corr;
        }
        __syncthreads();
        tile_pv<HD>(o, smem + S::kP, smem + S::kV, smem + S::kCorr);
    }
    b.store(o);
}

// Launches step 2 (two_pass) or 3 on the tile width of p.hd.
void launch_fp32(const Fp32Attn& p, bool two_pass) {
    attn::dispatch_hd(p.hd, [&](auto hd) {
        constexpr int HD = decltype(hd)::value;
        constexpr auto two = tiled_two_pass_kernel<HD>;
        constexpr auto one = online_softmax_kernel<HD>;
        allow_smem<two>(Fp32Smem<HD>::bytes());
        allow_smem<one>(Fp32Smem<HD>::bytes());
        const dim3 grid((p.S + kBQ - 1) / kBQ, p.nH);
        (two_pass ? two : one)<<<grid, kThreads, Fp32Smem<HD>::bytes()>>>(p);
        cudaCheckLaunch();
    });
}

// ------------------------------------------------------------------------------------------
// Inputs, the reference, and the engine's kernels' parameters.
// ------------------------------------------------------------------------------------------

struct Inputs {
    std::vector<float> q, k, v;  // [S, nH*hd], [S, nKV*hd] x 2, values exact in bf16
    std::vector<int> check;      // the tokens whose outputs are checked
    std::vector<float> ref;      // cpu::attention at those tokens [check.size(), nH*hd]
};

std::vector<float> random_bf16_values(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    std::vector<float> x(n);
    for (float& e : x) e = to_float(from_float<bf16>(dist(rng)));
    return x;
}

Inputs make_inputs(const Shape& s) {
    Inputs in;
    in.q = random_bf16_values((size_t)s.S * s.nH * s.hd, 1);
    in.k = random_bf16_values((size_t)s.S * s.nKV * s.hd, 2);
    in.v = random_bf16_values((size_t)s.S * s.nKV * s.hd, 3);
    const int stride = (s.S + 1023) / 1024;
    for (int t = 0; t < s.S; t += stride) in.check.push_back(t);
    if (in.check.back() != s.S - 1) in.check.push_back(s.S - 1);
    const size_t row = (size_t)s.nH * s.hd;
    in.ref.resize(in.check.size() * row);
#pragma omp parallel for schedule(dynamic, 8)
    for (int i = 0; i < (int)in.check.size(); i++) {
        const int t = in.check[i];
        cpu::attention(in.ref.data() + i * row, in.q.data() + t * row, in.k.data(), in.v.data(), 1, t, s.nH, s.nKV, s.hd, 0,
                       s.scale());
    }
    return in;
}

// The checked tokens' rows of a device output [S, nH*hd], as floats.
template <typename T>
std::vector<float> checked_rows(const dev::DeviceBuffer<T>& out, const Inputs& in, const Shape& s) {
    const std::vector<T> all = out.download();
    const size_t row = (size_t)s.nH * s.hd;
    std::vector<float> x(in.check.size() * row);
    for (size_t i = 0; i < in.check.size(); i++)
        for (size_t c = 0; c < row; c++) x[i * row + c] = to_float(all[in.check[i] * row + c]);
    return x;
}

// A paged copy of a [S, nKV*hd] cache: logical block b in pool block table[b] (`block` tokens each).
template <typename T>
std::vector<T> paged(const std::vector<float>& kv, const std::vector<int>& table, int width, int block) {
    std::vector<T> pool(table.size() * block * width, from_float<T>(0.0f));
    const size_t rows = kv.size() / width;
    for (size_t j = 0; j < rows; j++)
        for (int c = 0; c < width; c++) pool[((size_t)table[j / block] * block + j % block) * width + c] = from_float<T>(kv[j * width + c]);
    return pool;
}

// The engine's kernels' view of one sequence at pos0 0, with a device table of s.block-token pages.
template <typename T>
AttnParams<T> engine_params(const Shape& s, const T* q, const T* k, const T* v, T* out, const int* pos0, const int* table) {
    AttnParams<T> p{};
    p.q = q, p.k = k, p.v = v, p.out = out;
    p.n_q = s.S, p.pos0 = pos0, p.nH = s.nH, p.nKV = s.nKV, p.hd = s.hd, p.window = 0, p.scale = s.scale();
    p.s_cap = s.S, p.block_table = table, p.table_stride = s.pages(), p.block_size = s.block, p.batch = 1;
    return p;
}

// ------------------------------------------------------------------------------------------
// The steps
// ------------------------------------------------------------------------------------------

struct Ladder {
    Shape s;
    const Inputs& in;
    int reps, only;
    bool all_ok = true;
    bool wants(int step) const { return only == 0 || only == step; }

    // Runs `run` once, checks `out`, times it and prints the row.
    template <typename T, typename F>
    void step(int n, const std::string& what, const dev::DeviceBuffer<T>& out, F run, double roof, double tol, int step_reps) {
        cudaCheck(cudaMemset(out.ptr, 0xff, out.n * sizeof(T)));  // NaN: an output never written fails
        run();
        cudaCheck(cudaDeviceSynchronize());
        const dev::Diff e = dev::compare(checked_rows(out, in, s), in.ref);
        const double ms = dev::median_ms(run, step_reps);
        all_ok &= dev::print_row(n, what, ms, s.flops(), dev::Unit::Tflops, roof, e, tol);
    }

    void fp32_steps() {
        dev::DeviceBuffer<float> q(in.q), k(in.k), v(in.v), out(in.q.size());
        if (wants(1)) naive(q, k, v, out);
        const Fp32Attn p{q.ptr, k.ptr, v.ptr, out.ptr, s.S, s.nH, s.nKV, s.hd, s.scale()};
        if (wants(2))
            step(2, "tiled fp32, two passes over K (max+sum, then P·V)", out, [&] { launch_fp32(p, true); }, dev::kFp32Tflops,
                 1e-4, reps);
        if (wants(3))
            step(3, "online softmax fp32: one pass, o rescaled", out, [&] { launch_fp32(p, false); }, dev::kFp32Tflops, 1e-4,
                 reps);
    }

    void naive(const dev::DeviceBuffer<float>& q, const dev::DeviceBuffer<float>& k, const dev::DeviceBuffer<float>& v,
               const dev::DeviceBuffer<float>& out) {
        const std::string what = "naive fp32: scores -> softmax -> P·V, S x S in HBM";
        const size_t scores_bytes = attention_naive_workspace_bytes(1, s.S, s.nH, s.S);
        size_t free_bytes = 0, total = 0;
        cudaCheck(cudaMemGetInfo(&free_bytes, &total));
        if (scores_bytes > free_bytes / 2)
            return dev::print_skipped(1, what, "skipped: the score matrix would take " + std::to_string(scores_bytes >> 30) + " GiB");
        std::vector<int> identity(s.pages());
        std::iota(identity.begin(), identity.end(), 0);
        dev::DeviceBuffer<int> pos0(std::vector<int>{0}), table(identity);
        dev::DeviceBuffer<float> scores(scores_bytes / sizeof(float));
        const AttnParams<float> p = engine_params<float>(s, q.ptr, k.ptr, v.ptr, out.ptr, pos0.ptr, table.ptr);
        step(1, what, out, [&] { attention_naive(p, scores.ptr, 0); }, dev::kFp32Tflops, 1e-4, std::max(3, reps / 3));
    }

    // Steps 4 and 5: the engine's flash prefill through an identity or a shuffled block table;
    // step 6: its Hopper kernel, through the shuffled table.
    void tensor_core_step(int n, bool shuffled, PrefillKernel kernel) {
        std::vector<int> table(s.pages());
        std::iota(table.begin(), table.end(), 0);
        if (shuffled) std::shuffle(table.begin(), table.end(), std::mt19937(7));
        const int width = s.nKV * s.hd;
        dev::DeviceBuffer<bf16> q(dev::to_device_type<bf16>(in.q)), out(in.q.size());
        dev::DeviceBuffer<bf16> k(paged<bf16>(in.k, table, width, s.block)), v(paged<bf16>(in.v, table, width, s.block));
        dev::DeviceBuffer<int> pos0(std::vector<int>{0}), d_table(table);
        const AttnParams<bf16> p = engine_params<bf16>(s, q.ptr, k.ptr, v.ptr, out.ptr, pos0.ptr, d_table.ptr);
        const std::string what = kernel == PrefillKernel::Hopper ? "Hopper: TMA producer warp, wgmma consumer warpgroups"
                                 : shuffled                       ? "paged: the same through a shuffled block table"
                                                                  : "tensor cores bf16 (mma.sync), flash-attention-2";
        step(n, what, out, [&] { attention_prefill(p, 0, kernel); }, dev::kTensorCoreTflops, 2e-2, reps);
    }

    void run() {
        dev::print_header(dev::Unit::Tflops);
        if (wants(1) || wants(2) || wants(3)) fp32_steps();
        if (wants(4)) tensor_core_step(4, false, PrefillKernel::MmaSync);
        if (wants(5)) tensor_core_step(5, true, PrefillKernel::MmaSync);
        if (!wants(6)) return;
        if (attention_prefill_hopper_runs(s.hd)) tensor_core_step(6, true, PrefillKernel::Hopper);
        else dev::print_skipped(6, "Hopper: TMA producer warp, wgmma consumer warpgroups", "needs sm_90a code and hd 64, 128 or 256");
    }
};

int run(int argc, char** argv) {
    const dev::Flags f(argc, argv);
    if (f.has("--help")) return printf("%s", kHelp), 0;
    f.check({"--seq", "--heads", "--kv-heads", "--hd", "--block-size", "--step", "--reps"}, {"--small", "--help"});
    const bool small = f.has("--small");
    Shape s;
    s.S = f.get("--seq", small ? 512 : 4096, 1, 65536);
    s.nH = f.get("--heads", small ? 8 : 32, 1, 256);
    s.nKV = f.get("--kv-heads", s.nH, 1, s.nH);
    s.hd = f.get("--hd", 128, 8, 256);
    s.block = f.get("--block-size", 16, 8, 1024);
    if ((s.block & (s.block - 1)) != 0) fail("--block-size " + std::to_string(s.block) + ": not a power of two");
    const int only = f.get("--step", 0, 0, 6), reps = f.get("--reps", 10, 1, 1000);
    if (s.nH % s.nKV != 0) fail("--kv-heads " + std::to_string(s.nKV) + " does not divide --heads " + std::to_string(s.nH));
    if (!attention_supports_head_dim(s.hd)) fail("--hd " + std::to_string(s.hd) + ": " + attention_supported_head_dims());
    if (s.nH / s.nKV > attn::kPrefillBM) fail("more than 128 query heads per KV head");
    if (!dev::gpu_present("attention_forward")) return 0;
    const Inputs in = make_inputs(s);
    printf("attention_forward: S %d, heads %d/%d (q/kv), hd %d, causal, KV pages of %d tokens; %.1f GFLOP per run; checked on %zu tokens\n",
           s.S, s.nH, s.nKV, s.hd, s.block, s.flops() / 1e9, in.check.size());
    Ladder ladder{s, in, reps, only};
    ladder.run();
    return ladder.all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return dev::run_main("attention_forward", [&] { return run(argc, argv); });
}
