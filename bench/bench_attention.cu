// bench_attention.cu: speed of the attention kernels (kernels/attention.cuh) on the issue's bars.
//   prefill  bf16, causal, batch 1: hd 128 with 32/32 heads at S = 4096 and 16384 and 40/8
//            heads at S = 16384; hd 64 with 32/32 heads at S = 4096. TFLOP/s counting causal
//            FLOPs = 2·S²·hd·heads (QKᵀ and PV, half the square), for each step of the ladder:
//            naive (S <= 4096), mma.sync flash, Hopper flash.
//   decode   bf16, hd 128, batch 1, one new token over 32768 cached keys, 32/32 and 40/8 heads:
//            effective bandwidth = K+V bytes / time. Four caches in rotation (each larger than
//            the L2 for MHA; together 4x it for GQA), so the reads come from HBM. Timed both as
//            launches from the host and as CUDA-graph replays (as the engine runs decode); also
//            the split kernel alone, K/V pipelines of 2 to 6 stages, the same cache read through
//            a shuffled block table, and a plain kernel reading the same bytes (the roofline).
//            The same caches in FP8 (--kv-dtype fp8: E4M3 codes and a scale per row and KV
//            head, src/fp8.h), graph replays, 3, 4 and 6 stages, bandwidth of codes + scales.
//   batched decode  bf16, hd 128, 40/8 heads, one launch for all sequences of a step (graph
//            replays): 16 x 2048 keys, and mixed lengths (one of 32768 keys with 15 of 512).
// The cache is paged with blocks of 16 tokens; unless said otherwise the block table is the
// identity (block i of sequence b is pool block b * blocks per sequence + i).
// Each figure is the median of many launches timed with CUDA events after a warm-up, on
// uniform random inputs (never zeros); at S = 16384 also the mean of 400 launches in a row
// ("sustained": the H200 then sits at its 700 W limit and lowers its clock). A correctness
// line compares each kernel with the naive one on the same inputs. Usage: bench_attention
// [results.txt] (key value lines, read by bench/bench_attention_torch.py to print the
// comparison with PyTorch; "-" for none) [part].
#include <algorithm>
#include <cmath>
#include <cuda_fp8.h>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attention.cuh"
#include "fp8.h"

using namespace olmo;
using bf16 = __nv_bfloat16;

namespace {

// x[i] = uniform in [-scale, scale), from a hash of (seed, i).
__global__ void fill_uniform(bf16* x, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed * 0xD1B54A32D192ED03ull;
        h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29;
        x[i] = __float2bfloat16_rn(scale * ((float)(h >> 40) / (float)(1 << 23) - 1.0f));
    }
}

// Rows of hd values of x [rows, nKV*hd] as an FP8 cache holds them: codes, and scales at
// kv_scale_index (blocks of kBlock rows). One warp per (row, KV head).
__global__ void quantize_cache(const bf16* x, uint8_t* codes, float* scales, int rows, int nKV, int hd, int block) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (warp >= rows * nKV) return;
    const int row = warp / nKV, h = warp % nKV;
    const bf16* in = x + (size_t)warp * hd;
    float amax = 0.0f;
    for (int d = lane; d < hd; d += 32) amax = fmaxf(amax, fabsf(__bfloat162float(in[d])));
    amax = warp_reduce(amax, MaxOp{});
    const float inv = fp8_row_inverse_scale(amax);
    for (int d = lane; d < hd; d += 32)
        codes[(size_t)warp * hd + d] = __nv_cvt_float_to_fp8(__bfloat162float(in[d]) * inv, __NV_SATFINITE, __NV_E4M3);
    if (lane == 0) scales[kv_scale_index(row / block, row % block, h, nKV, block)] = fp8_row_scale(amax);
}

bf16* device_random(size_t n, uint64_t seed, float scale = 1.0f) {
    bf16* p;
    cudaCheck(cudaMalloc(&p, n * sizeof(bf16)));
    fill_uniform<<<1024, 256>>>(p, n, seed, scale);
    cudaCheckLaunch();
    return p;
}

constexpr int kBlock = 16;  // tokens per KV block

template <typename P> struct CacheOf;   // the cache storage C of AttnParams<T, C>
template <typename T, typename C> struct CacheOf<AttnParams<T, C>> { using type = C; };

// A device block table of `rows` rows of `stride` entries: entry i of row b is block
// b * stride + i, or (shuffled) a random permutation of all rows * stride blocks.
int* device_table(int rows, int stride, bool shuffled) {
    std::vector<int> t((size_t)rows * stride);
    for (size_t i = 0; i < t.size(); i++) t[i] = (int)i;
    if (shuffled) std::shuffle(t.begin(), t.end(), std::mt19937(1));
    int* d;
    cudaCheck(cudaMalloc(&d, t.size() * sizeof(int)));
    cudaCheck(cudaMemcpy(d, t.data(), t.size() * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}

// Median time in ms of run(i) over `reps` launches, events recorded between launches so that
// the host stays ahead of the GPU and launch latency is not timed.
template <typename F>
double median_ms(F&& run, int warmup, int reps) {
    for (int i = 0; i < warmup; i++) run(i);
    std::vector<cudaEvent_t> ev(reps + 1);
    for (auto& e : ev) cudaCheck(cudaEventCreate(&e));
    cudaCheck(cudaEventRecord(ev[0]));
    for (int i = 0; i < reps; i++) {
        run(i);
        cudaCheck(cudaEventRecord(ev[i + 1]));
    }
    cudaCheck(cudaEventSynchronize(ev[reps]));
    std::vector<float> t(reps);
    for (int i = 0; i < reps; i++) cudaCheck(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
    for (auto& e : ev) cudaCheck(cudaEventDestroy(e));
    std::sort(t.begin(), t.end());
    return t[reps / 2];
}

// Mean time in ms of one run() over `reps` launches back to back, timed as one span: for seconds
// of work, so that the GPU runs at its sustained clock under its power limit (a median of a few
// launches may still run at boost clocks, and so depends on what ran just before).
template <typename F>
double sustained_ms(F&& run, int reps) {
    for (int i = 0; i < 3; i++) run();
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    cudaCheck(cudaEventRecord(a));
    for (int i = 0; i < reps; i++) run();
    cudaCheck(cudaEventRecord(b));
    cudaCheck(cudaEventSynchronize(b));
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, a, b));
    for (cudaEvent_t e : {a, b}) cudaCheck(cudaEventDestroy(e));
    return ms / reps;
}

// Median time in ms of one run(i, stream) when `calls` of them are replayed as a CUDA graph
// (no launch gaps from the host; the way the engine replays decode steps).
template <typename F>
double graph_ms(F&& run, int calls, int reps) {
    cudaStream_t st;
    cudaCheck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    run(0, st);  // one-time setup outside the capture
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaCheck(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; i++) run(i, st);
    cudaCheck(cudaStreamEndCapture(st, &graph));
    cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
    std::vector<float> t(reps);
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    for (int i = -3; i < reps; i++) {
        cudaCheck(cudaEventRecord(a, st));
        cudaCheck(cudaGraphLaunch(exec, st));
        cudaCheck(cudaEventRecord(b, st));
        cudaCheck(cudaEventSynchronize(b));
        if (i >= 0) cudaCheck(cudaEventElapsedTime(&t[i], a, b));
    }
    for (cudaEvent_t e : {a, b}) cudaCheck(cudaEventDestroy(e));
    cudaCheck(cudaGraphExecDestroy(exec));
    cudaCheck(cudaGraphDestroy(graph));
    cudaCheck(cudaStreamDestroy(st));
    std::sort(t.begin(), t.end());
    return t[reps / 2] / calls;
}

// The read roofline of decode: every thread sums 16-byte loads of k and v (n bf16 each) with
// a grid stride; the sum is stored only if it is a value that random data never gives.
__global__ void stream_read(const uint4* k, const uint4* v, size_t n16, uint32_t* sink) {
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 a = __ldcs(k + i), b = __ldcs(v + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
    }
    if (acc == 0x9E3779B9u) *sink = acc;
}

// rel-L2 of a against b (device bf16 arrays of n elements).
double rel_l2(const bf16* a, const bf16* b, size_t n) {
    std::vector<bf16> ha(n), hb(n);
    cudaCheck(cudaMemcpy(ha.data(), a, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hb.data(), b, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
        e += (x - y) * (x - y), r += y * y;
    }
    return std::isfinite(e) ? std::sqrt(e / r) : INFINITY;
}

struct Results {
    FILE* f;
    void put(const char* key, double value) {
        if (f) fprintf(f, "%s %.4f\n", key, value);
    }
};

// The prefill ladder on one shape: the naive kernels (S <= 4096: they hold S x S x heads fp32
// scores), the mma.sync flash kernel (its best key tile) and, where it runs, the Hopper kernel.
// Key "prefill_S_nH_nKV_hd": the fastest flash figure, compared with PyTorch's.
constexpr int kSustainedReps = 400;  // S 16384: 1.4-1.9 s of back-to-back launches
void bench_prefill(int S, int nH, int nKV, int hd, Results& res) {
    const size_t nq = (size_t)S * nH * hd, nkv = (size_t)S * nKV * hd;
    bf16 *q = device_random(nq, 1), *k = device_random(nkv, 2), *v = device_random(nkv, 3), *out, *ref;
    int* pos0;
    cudaCheck(cudaMalloc(&out, nq * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ref, nq * sizeof(bf16)));
    cudaCheck(cudaMalloc(&pos0, sizeof(int)));
    cudaCheck(cudaMemset(pos0, 0, sizeof(int)));
    int* table = device_table(1, S / kBlock, false);
    const AttnParams<bf16> p{q, k, v, out, S, pos0, nH, nKV, hd, 0, 1.0f / std::sqrt((float)hd), S, table, S / kBlock, kBlock, 1};
    const double flops = 2.0 * S * (double)S * hd * nH;
    const int reps = S <= 4096 ? 50 : 12;
    auto tflops = [&](double ms) { return flops / ms / 1e9; };
    printf("prefill S=%-6d %d/%d heads hd %d (TFLOP/s)\n", S, nH, nKV, hd);
    float* ws = nullptr;
    if (S <= 4096) {
        cudaCheck(cudaMalloc(&ws, attention_naive_workspace_bytes(1, S, nH, S)));
        AttnParams<bf16> pn = p;
        pn.out = ref;
        const double ms = median_ms([&](int) { attention_naive(pn, ws, 0); }, 1, 3);
        printf("  naive (scores in HBM)      %9.3f ms %7.1f\n", ms, tflops(ms));
    }
    double best = 0;
    auto step = [&](const char* what, PrefillKernel kernel) {
        const double ms = median_ms([&](int) { attention_prefill(p, 0, kernel); }, 3, reps);
        best = std::max(best, tflops(ms));
        printf("  %-26s %9.3f ms %7.1f", what, ms, tflops(ms));
        if (ws) printf("   rel-L2 vs naive %.2e", rel_l2(out, ref, nq));
        printf("\n");
        return tflops(ms);
    };
    char key[96];
    const double mma = step("mma.sync flash (FA2)", PrefillKernel::MmaSync);
    snprintf(key, sizeof key, "prefill_mma_%d_%d_%d_%d", S, nH, nKV, hd);
    res.put(key, mma);
    if (attention_prefill_hopper_runs(hd)) {
        const double hopper = step("Hopper flash (TMA, wgmma)", PrefillKernel::Hopper);
        snprintf(key, sizeof key, "prefill_hopper_%d_%d_%d_%d", S, nH, nKV, hd);
        res.put(key, hopper);
    }
    snprintf(key, sizeof key, "prefill_%d_%d_%d_%d", S, nH, nKV, hd);
    res.put(key, best);
    if (S >= 16384) {  // the fastest kernel again, at the power limit
        const PrefillKernel kernel = attention_prefill_hopper_runs(hd) ? PrefillKernel::Hopper : PrefillKernel::MmaSync;
        const double ms = sustained_ms([&] { attention_prefill(p, 0, kernel); }, kSustainedReps);
        printf("  %-26s %9.3f ms %7.1f\n", "the same, sustained", ms, tflops(ms));
        snprintf(key, sizeof key, "prefill_sustained_%d_%d_%d_%d", S, nH, nKV, hd);
        res.put(key, tflops(ms));
    }
    if (ws) cudaCheck(cudaFree(ws));
    for (bf16* b : {q, k, v, out, ref}) cudaCheck(cudaFree(b));
    for (int* b : {pos0, table}) cudaCheck(cudaFree(b));
}

void bench_decode(int nH, int nKV, Results& res) {
    const int hd = 128, ctx = 32768, sets = 4;
    const size_t nkv = (size_t)ctx * nKV * hd, nq = (size_t)nH * hd;
    std::vector<bf16*> q(sets), k(sets), v(sets);
    for (int s = 0; s < sets; s++) {
        q[s] = device_random(nq, 10 + s);
        k[s] = device_random(nkv, 20 + s);
        v[s] = device_random(nkv, 30 + s);
    }
    bf16 *out, *ref;
    int* pos0;
    void* ws;
    float* naive_ws;
    cudaCheck(cudaMalloc(&out, nq * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ref, nq * sizeof(bf16)));
    cudaCheck(cudaMalloc(&pos0, sizeof(int)));
    const int last = ctx - 1;
    cudaCheck(cudaMemcpy(pos0, &last, sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMalloc(&ws, attention_decode_workspace_bytes(nH, hd, ctx, 1)));
    cudaCheck(cudaMalloc(&naive_ws, attention_naive_workspace_bytes(1, 1, nH, ctx)));
    int *table = device_table(1, ctx / kBlock, false), *shuffled = device_table(1, ctx / kBlock, true);
    auto params = [&](int s, const int* t = nullptr) {
        return AttnParams<bf16>{q[s], k[s], v[s], out, 1, pos0, nH, nKV, hd, 0, 1.0f / std::sqrt((float)hd), ctx,
                                t ? t : table, ctx / kBlock, kBlock, 1};
    };
    const double bytes = 2.0 * nkv * sizeof(bf16);
    uint32_t* sink;
    cudaCheck(cudaMalloc(&sink, sizeof(uint32_t)));
    const double ms_read = graph_ms(
        [&](int i, cudaStream_t st) {
            stream_read<<<132 * 8, 512, 0, st>>>(reinterpret_cast<const uint4*>(k[i % sets]),
                                                 reinterpret_cast<const uint4*>(v[i % sets]), nkv / 8, sink);
            cudaCheckLaunch();
        },
        20, 30);
    cudaCheck(cudaFree(sink));
    const double ms = median_ms([&](int i) { attention_decode(params(i % sets), ws, 0); }, 20, 400);
    const double ms_graph = graph_ms([&](int i, cudaStream_t st) { attention_decode(params(i % sets), ws, st); }, 20, 30);
    const double ms_shuffled =
        graph_ms([&](int i, cudaStream_t st) { attention_decode(params(i % sets, shuffled), ws, st); }, 20, 30);
    const int count = attn::decode_slot_count<bf16, bf16, 128>(ctx, nKV, 1);
    // The split kernel alone (without the combine), to see where the time goes.
    float* o_part = static_cast<float*>(ws);
    float* lse_part = o_part + (size_t)count * nH * hd;
    const double ms_split = median_ms(
        [&](int i) {
            attn::attention_decode_kernel<bf16, bf16, 128, attn::kDecodeStages><<<dim3(nKV, count), attn::kDecodeThreads, attn::decode_smem_bytes<128>()>>>(
                params(i % sets), count, o_part, lse_part);
            cudaCheckLaunch();
        },
        20, 400);
    AttnParams<bf16> pn = params(0);
    pn.out = ref;
    attention_naive(pn, naive_ws, 0);
    attention_decode(params(0), ws, 0);
    const double err = rel_l2(out, ref, nq);
    printf("decode ctx=%d %2d/%-2d heads: %7.2f us %5.2f TB/s  (split kernel alone %7.2f us %5.2f TB/s; %d splits)  rel-L2 vs naive %.2e\n",
           ctx, nH, nKV, ms * 1e3, bytes / ms / 1e9, ms_split * 1e3, bytes / ms_split / 1e9, count, err);
    printf("  as a CUDA graph (20 calls per replay): %7.2f us %5.2f TB/s\n", ms_graph * 1e3, bytes / ms_graph / 1e9);
    printf("  read roofline: a plain kernel reading the same K+V bytes (graph): %7.2f us %5.2f TB/s\n", ms_read * 1e3,
           bytes / ms_read / 1e9);
    // Other K/V pipeline depths (the default: attention.cuh's decode_stages), as graph replays
    // of decode over the caches params_of(i) gives (bf16 or FP8), `b` bytes each.
    auto depth = [&](auto stages, auto params_of, double b, const char* what) {
        constexpr int S = decltype(stages)::value;
        using C = typename CacheOf<decltype(params_of(0))>::type;
        const int splits = attn::decode_slot_count<bf16, C, 128, S>(ctx, nKV, 1);
        const double t = graph_ms(
            [&](int i, cudaStream_t st) { attn::launch_decode<bf16, C, 128, S>(params_of(i % sets), ws, splits, st); }, 20, 30);
        printf("  %s, %d stages (%d splits): %7.2f us %5.2f TB/s\n", what, S, splits, t * 1e3, b / t / 1e9);
    };
    auto params_bf16 = [&](int s) { return params(s); };
    depth(std::integral_constant<int, 2>{}, params_bf16, bytes, "graph");
    depth(std::integral_constant<int, 4>{}, params_bf16, bytes, "graph");
    depth(std::integral_constant<int, 5>{}, params_bf16, bytes, "graph");
    depth(std::integral_constant<int, 6>{}, params_bf16, bytes, "graph");
    printf("  graph, shuffled block table: %7.2f us %5.2f TB/s\n", ms_shuffled * 1e3, bytes / ms_shuffled / 1e9);
    char key[64];

    // The same caches in FP8.
    std::vector<uint8_t*> k8(sets), v8(sets);
    std::vector<float*> ks(sets), vs(sets);
    for (int s = 0; s < sets; s++) {
        for (uint8_t** c : {&k8[s], &v8[s]}) cudaCheck(cudaMalloc(c, nkv));
        for (float** f : {&ks[s], &vs[s]}) cudaCheck(cudaMalloc(f, (size_t)ctx * nKV * sizeof(float)));
        const int blocks = (ctx * nKV * 32 + 255) / 256;
        quantize_cache<<<blocks, 256>>>(k[s], k8[s], ks[s], ctx, nKV, hd, kBlock);
        quantize_cache<<<blocks, 256>>>(v[s], v8[s], vs[s], ctx, nKV, hd, kBlock);
        cudaCheckLaunch();
    }
    auto params8 = [&](int s) {
        const AttnParams<bf16> p = params(s);
        AttnParams<bf16, uint8_t> f{p.q, k8[s], v8[s], p.out, p.n_q, p.pos0, p.nH, p.nKV, p.hd, p.window, p.scale, p.s_cap,
                                    p.block_table, p.table_stride, p.block_size, p.batch};
        f.k_scale = ks[s], f.v_scale = vs[s];
        return f;
    };
    const double bytes8 = 2.0 * nkv + 2.0 * ctx * nKV * sizeof(float);
    const double ms8 = graph_ms([&](int i, cudaStream_t st) { attention_decode(params8(i % sets), ws, st); }, 20, 30);
    attention_decode(params8(0), ws, 0);
    printf("  FP8 cache (graph): %7.2f us %5.2f TB/s of codes and scales, %.2fx the bf16 cache's time; rel-L2 vs naive "
           "over bf16 %.2e\n", ms8 * 1e3, bytes8 / ms8 / 1e9, ms8 / ms_graph, rel_l2(out, ref, nq));
    depth(std::integral_constant<int, 3>{}, params8, bytes8, "FP8 cache");
    depth(std::integral_constant<int, 4>{}, params8, bytes8, "FP8 cache");
    depth(std::integral_constant<int, 6>{}, params8, bytes8, "FP8 cache");
    snprintf(key, sizeof key, "decode_%d_%d_fp8_graph", nH, nKV);
    res.put(key, bytes8 / ms8 / 1e9);
    for (int s = 0; s < sets; s++) {
        for (uint8_t* c : {k8[s], v8[s]}) cudaCheck(cudaFree(c));
        for (float* f : {ks[s], vs[s]}) cudaCheck(cudaFree(f));
    }
    snprintf(key, sizeof key, "decode_%d_%d", nH, nKV);
    res.put(key, bytes / ms / 1e9);
    snprintf(key, sizeof key, "decode_%d_%d_graph", nH, nKV);
    res.put(key, bytes / ms_graph / 1e9);
    for (int s = 0; s < sets; s++)
        for (bf16* b : {q[s], k[s], v[s]}) cudaCheck(cudaFree(b));
    for (void* b : {(void*)out, (void*)ref, (void*)pos0, ws, (void*)naive_ws, (void*)table, (void*)shuffled})
        cudaCheck(cudaFree(b));
}

// One decode step of len.size() sequences (sequence b has len[b] keys) in one launch, timed as
// graph replays; effective bandwidth over all K+V bytes read. Checked against the naive kernel.
void bench_decode_batch(int nH, int nKV, const std::vector<int>& len, const char* what, const char* key, Results& res) {
    const int hd = 128, batch = (int)len.size(), s_cap = *std::max_element(len.begin(), len.end());
    const int stride = s_cap / kBlock;
    const size_t nq = (size_t)batch * nH * hd, pool = (size_t)batch * s_cap * nKV * hd;
    bf16 *q = device_random(nq, 40), *k = device_random(pool, 41), *v = device_random(pool, 42), *out, *ref;
    int *pos0, *table = device_table(batch, stride, false);
    void* ws;
    float* naive_ws;
    std::vector<int> last(batch);
    double keys = 0;
    for (int b = 0; b < batch; b++) last[b] = len[b] - 1, keys += len[b];
    cudaCheck(cudaMalloc(&out, nq * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ref, nq * sizeof(bf16)));
    cudaCheck(cudaMalloc(&pos0, batch * sizeof(int)));
    cudaCheck(cudaMemcpy(pos0, last.data(), batch * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMalloc(&ws, attention_decode_workspace_bytes(nH, hd, s_cap, batch)));
    cudaCheck(cudaMalloc(&naive_ws, attention_naive_workspace_bytes(batch, 1, nH, s_cap)));
    const AttnParams<bf16> p{q, k, v, out, 1, pos0, nH, nKV, hd, 0, 1.0f / std::sqrt((float)hd), s_cap, table, stride, kBlock, batch};
    const double bytes = 2.0 * keys * nKV * hd * sizeof(bf16);
    const double ms = graph_ms([&](int, cudaStream_t st) { attention_decode(p, ws, st); }, 20, 30);
    AttnParams<bf16> pn = p;
    pn.out = ref;
    attention_naive(pn, naive_ws, 0);
    attention_decode(p, ws, 0);
    printf("decode batch of %2d, %-28s %2d/%-2d heads: %7.2f us %5.2f TB/s (graph; %d slots per KV head)  rel-L2 vs naive %.2e\n",
           batch, what, nH, nKV, ms * 1e3, bytes / ms / 1e9, attn::decode_slot_count<bf16, bf16, 128>(s_cap, nKV, batch),
           rel_l2(out, ref, nq));
    res.put(key, bytes / ms / 1e9);
    for (void* b : {(void*)q, (void*)k, (void*)v, (void*)out, (void*)ref, (void*)pos0, (void*)table, ws, (void*)naive_ws})
        cudaCheck(cudaFree(b));
}

}  // namespace

int main(int argc, char** argv) {
    try {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
            printf("bench_attention: no CUDA GPU present\n");
            return 1;
        }
        cudaDeviceProp prop;
        cudaCheck(cudaGetDeviceProperties(&prop, 0));
        printf("%s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
        Results res{argc > 1 && std::string(argv[1]) != "-" ? fopen(argv[1], "w") : nullptr};
        // A part alone: the parts whose name starts with argv[2] ("prefill", "decode", "decode_40_8", "batch").
        const std::string only = argc > 2 ? argv[2] : "";
        auto want = [&](const std::string& part) { return part.compare(0, only.size(), only) == 0; };
        if (want("prefill")) {
            bench_prefill(4096, 32, 32, 128, res);
            bench_prefill(16384, 32, 32, 128, res);
            bench_prefill(16384, 40, 8, 128, res);
            bench_prefill(4096, 32, 32, 64, res);
        }
        if (want("decode_32_32")) bench_decode(32, 32, res);
        if (want("decode_40_8")) bench_decode(40, 8, res);
        if (want("batch")) {
            bench_decode_batch(40, 8, std::vector<int>(16, 2048), "2048 keys each", "decode_batch_16x2048_40_8_graph", res);
            std::vector<int> mixed(16, 512);
            mixed[5] = 32768;
            bench_decode_batch(40, 8, mixed, "1 x 32768 + 15 x 512 keys", "decode_batch_mixed_40_8_graph", res);
        }
        if (res.f) fclose(res.f);
    } catch (const std::exception& e) {
        fprintf(stderr, "bench_attention: %s\n", e.what());
        return 1;
    }
    return 0;
}
