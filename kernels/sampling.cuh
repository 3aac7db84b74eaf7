// sampling.cuh: picking the next token on the device, so only its id crosses to the host.
// defines: SamplerParams, argmax, sample
//
// Ranking. Candidate i has the 64-bit rank key
//     key(i) = order_key(logit_i) << 32 | ~i
// where order_key maps floats to uint32 keeping their order. A larger key ranks first; equal
// logits rank by lower id (as torch.argmax and sample_cpu in src/sampler.cpp; dividing by the
// temperature keeps the order). Keys are distinct, so "the n best candidates" is always a set
// {i : key(i) >= t} for a threshold key t.
//
// argmax: the largest key, by a block-wide max reduction.
//
// sample: transformers' warpers in their order (temperature, top-k, top-p), then a draw.
//  1. m = max logit / temperature. A candidate's unnormalized probability exp(logit/temp - m),
//     in (0, 1], is held as the fixed-point integer w = round(exp(...) * 2^40): sums of w are
//     exact in any order (results cannot depend on thread timing) and cannot overflow for
//     V < 2^18 (see Histogram). Candidates with exp(...) < 2^-41 get w = 0 and are never drawn.
//  2. Each step selects from the top: the largest threshold t such that the candidates with
//     key >= t number (or weigh) at least a target.
//        top-k: by count, target k: keeps exactly k candidates.
//        top-p: by weight, target ceil(top_p * W), W the weight kept so far: the smallest set of
//               most likely candidates whose probability reaches top_p.
//        draw:  by weight, target r + 1 with r = floor(u * W) and u in [0, 1) a counter-based
//               random number of (seed, step): inverse-CDF sampling that walks the candidates
//               from the most likely one, as sample_cpu does with the same u, so the two pick
//               the same token unless rounding moves a boundary.
//  3. Long lists (more than 1024 candidates): radix select over the key's digits, most
//     significant first: 3 digits (11, 11, 10 bits) of the logit key, then 3 of the id, only
//     when several candidates share that logit. One pass over the logits builds a 2048-bin
//     histogram (count and weight) of the candidates whose key matches the digits fixed so
//     far; a scan from the top bin finds the bin where the running total reaches the target;
//     its digit is fixed and the next pass looks inside that bin only. Lanes of a warp that hit
//     the same bin combine first (__match_any_sync, __reduce_*_sync): one shared atomic per bin
//     per warp.
//  4. Short lists (<= 1024 candidates, e.g. after top-k): one pass gathers them into shared
//     memory, a bitonic sort orders them by key, and prefix sums over the sorted weights apply
//     top-p and find the drawn token directly.
// One block of 1024 threads, one launch, no workspace. Each pass gives every thread 8
// consecutive logits, read with 16-byte loads; the logits stay in L2 between passes. *step is
// read on the device, so a captured CUDA graph draws a fresh number on each replay once the
// caller advances it. Logits must be finite.
#pragma once
#include <cmath>

#include "cuda_common.cuh"

namespace olmo {

struct SamplerParams {
    float temperature = 1.0f;  // > 0 (greedy decoding is argmax)
    int top_k = 0;             // 0 = off
    float top_p = 1.0f;        // 1 = off
};

namespace sampling {

using u64 = unsigned long long;
constexpr int kThreads = 1024;  // one block; also the longest list sorted in shared memory
constexpr int kItems = 8;       // logits per thread per step of a pass
constexpr int kBins = 2048;     // 2^11, for the widest digit

// Digit d of the 64-bit rank key: d = 0, 1, 2 cut the logit half into 11, 11, 10 bits; d = 3,
// 4, 5 the id half likewise.
__device__ constexpr int digit_bits(int d) { return d % 3 == 2 ? 10 : 11; }
__device__ constexpr int digit_shift(int d) { return (d < 3 ? 32 : 0) + (d % 3 == 0 ? 21 : d % 3 == 1 ? 10 : 0); }

// float -> uint32 with a < b  <=>  key(a) < key(b): negative floats have all bits flipped,
// positive ones their sign bit set. Adding +0 first turns -0 into +0, so the two zeros tie.
__device__ inline uint32_t order_key(float f) {
    const uint32_t b = __float_as_uint(f + 0.0f);
    return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}
__device__ inline u64 rank_key(float logit, int i) { return (u64)order_key(logit) << 32 | (uint32_t)~i; }
__device__ inline int rank_id(u64 key) { return (int)~(uint32_t)key; }

// The uniform number of draw `step`: splitmix64 of (seed, step), exactly sample_cpu's
// uniform(); its top 53 bits u53 give u = u53 / 2^53, returned here as u * 2^64.
__device__ inline u64 uniform_u64(u64 seed, u64 step) {
    u64 z = seed + 0x9E3779B97F4A7C15ull * (step + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z >> 11 << 11;
}

template <typename T> struct Scores {
    const T* logits;
    int V;
    float temperature;
    float max_score;  // max logit / temperature
    // round(exp(logit / temperature - max_score) * 2^40), as sample_cpu computes p (in double)
    __device__ u64 weight(float logit) const {
        return __float2ull_rn(expf(logit / temperature - max_score) * 0x1p40f);
    }
};

// Calls f(i, logit_i) for every i < V, and f(-1, 0) for slots past the end, so that all lanes
// of a warp make the same calls (f may use warp-wide intrinsics). In each step a thread takes
// kItems consecutive logits, read as Packs of N.
template <int N, typename T, typename F> __device__ void for_each_logit(const T* logits, int V, F f) {
    for (int base = 0; base < V; base += blockDim.x * kItems) {
        const int first = base + threadIdx.x * kItems;
        float x[kItems];
        if (first + kItems <= V) {
            for (int k = 0; k < kItems / N; k++) {
                const Pack<T, N> p = reinterpret_cast<const Pack<T, N>*>(logits + first)[k];
                for (int j = 0; j < N; j++) x[k * N + j] = to_float(p.v[j]);
            }
        } else {
            for (int j = 0; j < kItems; j++) x[j] = first + j < V ? to_float(logits[first + j]) : 0.0f;
        }
        for (int j = 0; j < kItems; j++) f(first + j < V ? first + j : -1, x[j]);
    }
}

// Inclusive prefix sum over the block's threads (in thread order).
__device__ inline u64 block_inclusive_scan(u64 v) {
    __shared__ u64 warp_total[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int offset = 1; offset < 32; offset *= 2) {
        const u64 up = __shfl_up_sync(0xffffffffu, v, offset);
        if (lane >= offset) v += up;
    }
    __syncthreads();  // a previous call may still be reading warp_total
    if (lane == 31) warp_total[warp] = v;
    __syncthreads();
    for (int w = 0; w < warp; w++) v += warp_total[w];
    return v;
}

// Weights w <= 2^40 are summed as three 14-bit chunks, so every update is a native 32-bit
// shared atomic (64-bit ones are compare-and-swap loops) and no chunk sum overflows for V < 2^18.
struct Histogram {
    unsigned weight_chunk[3][kBins];
    unsigned count[kBins];
    unsigned first_id[kBins];  // the lowest id in the bin (the only one when count is 1)
    __device__ u64 weight(int b) const {
        return ((u64)weight_chunk[2][b] << 28) + ((u64)weight_chunk[1][b] << 14) + weight_chunk[0][b];
    }
};

// Adds candidate `id` (weight w, when by_weight) to bin `bin` (bin < 0: nothing). All 32 lanes
// call it; lanes that share a bin combine, and the lowest of them does the atomics.
__device__ inline void warp_histogram_add(Histogram& h, int bin, bool by_weight, u64 w, int id) {
    if (__all_sync(0xffffffffu, bin < 0)) return;  // common once the first digits are fixed
    const unsigned peers = __match_any_sync(0xffffffffu, bin);
    if (bin < 0) return;
    const bool leader = (int)(threadIdx.x % 32) == __ffs(peers) - 1;
    if (by_weight)
        for (int c = 0; c < 3; c++) {
            const unsigned sum = __reduce_add_sync(peers, (unsigned)(w >> (14 * c)) & 0x3fffu);
            if (leader) atomicAdd(&h.weight_chunk[c][bin], sum);
        }
    const unsigned first = __reduce_min_sync(peers, (unsigned)id);
    if (leader) {
        atomicAdd(&h.count[bin], (unsigned)__popc(peers));
        atomicMin(&h.first_id[bin], first);
    }
}

struct Selection {
    u64 key;     // threshold: the selected candidates have key >= key
    int id;      // the candidate at the threshold (the last one selected)
    u64 count;   // how many candidates are selected
    u64 weight;  // their total weight (computed only when selecting by weight)
};

// Radix select among the candidates with key >= cut: the largest threshold t such that those
// with key >= t number (by_weight false) or weigh at least target (<= their total).
template <int N, typename T>
__device__ Selection select_from_top(Histogram& hist, const Scores<T>& s, u64 cut, bool by_weight, u64 target) {
    __shared__ Selection chosen;               // through the chosen bin
    __shared__ u64 chosen_above[2], chosen_bin_count;
    u64 prefix = 0, above_count = 0, above_weight = 0;  // the digits fixed so far; what ranks above them
    for (int d = 0; d < 6; d++) {
        const int shift = digit_shift(d), bits = digit_bits(d);
        const u64 fixed = d == 0 ? 0 : ~0ull << (shift + bits);
        for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
            hist.weight_chunk[0][b] = hist.weight_chunk[1][b] = hist.weight_chunk[2][b] = 0;
            hist.count[b] = 0, hist.first_id[b] = ~0u;
        }
        __syncthreads();
        for_each_logit<N>(s.logits, s.V, [&](int i, float x) {
            int bin = -1;
            u64 w = 0;
            if (i >= 0) {
                const u64 key = rank_key(x, i);
                if (key >= cut && (key & fixed) == prefix) {
                    bin = (int)(key >> shift) & ((1 << bits) - 1);
                    w = by_weight ? s.weight(x) : 0;
                }
            }
            warp_histogram_add(hist, bin, by_weight, w, i);
        });
        __syncthreads();
        // Thread j holds bins hi = 2047-2j and lo = hi-1: scans run from the top bin down.
        const int hi = kBins - 1 - 2 * (int)threadIdx.x, lo = hi - 1;
        const u64 count_upto = above_count + block_inclusive_scan((u64)hist.count[hi] + hist.count[lo]);
        const u64 weight_upto = above_weight + block_inclusive_scan(hist.weight(hi) + hist.weight(lo));
        const u64 upto = by_weight ? weight_upto : count_upto;  // through bin lo
        const u64 h_hi = by_weight ? hist.weight(hi) : hist.count[hi];
        const u64 h_lo = by_weight ? hist.weight(lo) : hist.count[lo];
        const u64 before = upto - h_hi - h_lo;                  // above bin hi
        const int b = before < target && target <= before + h_hi ? hi
                      : before + h_hi < target && target <= upto ? lo : -1;
        if (b >= 0) {
            const u64 count_above = count_upto - hist.count[lo] - (b == hi ? hist.count[hi] : 0);
            const u64 weight_above = weight_upto - hist.weight(lo) - (b == hi ? hist.weight(hi) : 0);
            chosen = {prefix | (u64)b << shift, (int)hist.first_id[b], count_above + hist.count[b],
                      weight_above + hist.weight(b)};
            chosen_above[0] = count_above, chosen_above[1] = weight_above, chosen_bin_count = hist.count[b];
        }
        __syncthreads();
        prefix = chosen.key, above_count = chosen_above[0], above_weight = chosen_above[1];
        if (d == 2 && chosen_bin_count == 1) break;  // one candidate has this logit: its id is known
    }
    return chosen;
}

// Total weight of the candidates with key >= cut.
template <int N, typename T> __device__ u64 kept_weight(const Scores<T>& s, u64 cut) {
    u64 sum = 0;
    for_each_logit<N>(s.logits, s.V, [&](int i, float x) {
        if (i >= 0 && rank_key(x, i) >= cut) sum += s.weight(x);
    });
    return block_reduce(sum, SumOp{});
}

__device__ inline u64 nucleus_target(float top_p, u64 total) {
    return max(1ull, min(total, (u64)ceil((double)top_p * (double)total)));
}

// The n <= kThreads candidates with key >= cut, sorted in shared memory (thread j holds the
// j-th best); then top-p (if top_p < 1) and the draw with u by prefix sums. Returns the id.
template <int N, typename T>
__device__ int finish_sorted(u64* list, const Scores<T>& s, u64 cut, int n, float top_p, u64 u) {
    __shared__ int filled, winner;
    list[threadIdx.x] = 0;  // below every key: padding sorts last
    if (threadIdx.x == 0) filled = 0;
    __syncthreads();
    for_each_logit<N>(s.logits, s.V, [&](int i, float x) {
        if (i >= 0 && rank_key(x, i) >= cut) list[atomicAdd(&filled, 1)] = rank_key(x, i);
    });
    for (int size = 2; size <= kThreads; size *= 2)  // bitonic sort, descending
        for (int stride = size / 2; stride > 0; stride /= 2) {
            __syncthreads();
            const int j = threadIdx.x, partner = j ^ stride;
            const bool descending = (j & size) == 0;
            if (partner > j && (list[j] < list[partner]) == descending) {
                const u64 t = list[j];
                list[j] = list[partner], list[partner] = t;
            }
        }
    __syncthreads();
    const int id = rank_id(list[threadIdx.x]);
    u64 w = (int)threadIdx.x < n ? s.weight(to_float(s.logits[id])) : 0;
    u64 upto = block_inclusive_scan(w);  // weight of the candidates ranked up to this one
    if (top_p < 1.0f) {                  // drop those after the smallest set reaching top_p
        if (upto - w >= nucleus_target(top_p, block_reduce(w, SumOp{}))) w = 0;
        upto = block_inclusive_scan(w);
    }
    const u64 r = __umul64hi(u, block_reduce(w, SumOp{}));  // floor(u * total)
    if (w > 0 && upto - w <= r && r < upto) winner = id;
    __syncthreads();
    return winner;
}

template <typename T, int N>
__global__ void __launch_bounds__(kThreads)
sample_kernel(int* out_id, const T* logits, int V, SamplerParams p, u64 seed, const int* step) {
    __shared__ union {  // the radix selects and the sorted list are never live at once
        Histogram hist;
        u64 list[kThreads];
    } work;
    float top = -INFINITY;
    for_each_logit<N>(logits, V, [&](int i, float x) {
        if (i >= 0) top = fmaxf(top, x);
    });
    const Scores<T> s{logits, V, p.temperature, block_reduce(top, MaxOp{}) / p.temperature};
    const u64 u = uniform_u64(seed, (unsigned)*step);

    u64 cut = 0, kept = V;  // the candidates with key >= cut are still in (cut only rises); how many
    if (p.top_k > 0 && p.top_k < V) cut = select_from_top<N>(work.hist, s, 0, false, p.top_k).key, kept = p.top_k;
    int id;
    if (kept <= kThreads) {
        id = finish_sorted<N>(work.list, s, cut, (int)kept, p.top_p, u);
    } else {
        u64 weight = kept_weight<N>(s, cut);
        if (p.top_p < 1.0f) {
            const Selection nucleus = select_from_top<N>(work.hist, s, cut, true, nucleus_target(p.top_p, weight));
            cut = max(cut, nucleus.key), kept = nucleus.count, weight = nucleus.weight;
        }
        id = kept <= kThreads ? finish_sorted<N>(work.list, s, cut, (int)kept, 1.0f, u)
                              : select_from_top<N>(work.hist, s, cut, true, __umul64hi(u, weight) + 1).id;
    }
    if (threadIdx.x == 0) *out_id = id;
}

template <typename T, int N> __global__ void __launch_bounds__(kThreads) argmax_kernel(int* out_id, const T* logits, int V) {
    u64 best = 0;
    for_each_logit<N>(logits, V, [&](int i, float x) {
        if (i >= 0) best = max(best, rank_key(x, i));
    });
    best = block_reduce(best, MaxOp{});
    if (threadIdx.x == 0) *out_id = rank_id(best);
}

}  // namespace sampling

// *out_id (device) = index of the largest of logits [V]; ties go to the lowest index.
template <typename T> void argmax(int* out_id, const T* logits, int V, cudaStream_t stream) {
    if (V < 1) fail("argmax: empty vocabulary");
    if (aligned16(logits)) sampling::argmax_kernel<T, kVec<T>><<<1, sampling::kThreads, 0, stream>>>(out_id, logits, V);
    else sampling::argmax_kernel<T, 1><<<1, sampling::kThreads, 0, stream>>>(out_id, logits, V);
    cudaCheckLaunch();
}

// *out_id (device) = a token drawn from softmax(logits [V] / temperature) restricted by top-k
// and top-p; the random number is a function of (seed, *step) (step: device pointer).
template <typename T>
void sample(int* out_id, const T* logits, int V, const SamplerParams& p, uint64_t seed, const int* step,
            cudaStream_t stream) {
    if (V < 1 || V >= (1 << 18)) fail("sample: vocabulary size " + std::to_string(V) + " outside [1, 2^18)");
    if (!(p.temperature > 0.0f) || !std::isfinite(p.temperature))
        fail("sample: temperature must be > 0, got " + std::to_string(p.temperature));
    if (p.top_k < 0) fail("sample: top_k must be >= 0, got " + std::to_string(p.top_k));
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail("sample: top_p must be in (0, 1], got " + std::to_string(p.top_p));
    if (aligned16(logits))
        sampling::sample_kernel<T, kVec<T>><<<1, sampling::kThreads, 0, stream>>>(out_id, logits, V, p, seed, step);
    else
        sampling::sample_kernel<T, 1><<<1, sampling::kThreads, 0, stream>>>(out_id, logits, V, p, seed, step);
    cudaCheckLaunch();
}

}  // namespace olmo
