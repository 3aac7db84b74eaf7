// sampling.cuh: picking the next token on the device, so only its id crosses to the host.
// defines: sample (settings: SamplingParams, src/sampler.h); candidates are ranked by the keys of
// argmax.cuh (a larger key first; equal logits by lower id; keys are distinct, so "the n best
// candidates" is always a set {i : key(i) >= t} for a threshold key t)
//
// sample: transformers' warpers in their order (temperature, top-k, top-p, min-p), then a draw.
//  1. m = max logit / temperature. A candidate's depth is d = m - logit / temperature >= 0 and
//     its unnormalized probability exp(-d) is held as the fixed-point integer
//     w = round(exp(-d) * 2^40): sums of w are exact in any order, so results cannot depend on
//     thread timing. Candidates deeper than 28 (exp(-28) < 2^-40) get w = 0 and are never drawn.
//  2. Each step selects from the top: the candidate at which the running total over the
//     candidates in rank order first reaches a target.
//        top-k: by count, target k: keeps exactly k candidates.
//        top-p: by weight, target ceil(top_p * W), W the weight kept so far: the smallest set of
//               most likely candidates whose probability reaches top_p.
//        min-p: by count, target the number of candidates with depth <= -ln(min_p) (those with
//               p_i >= min_p * p_max, a prefix in rank order), counted over the cluster.
//        draw:  by weight, target r + 1 with r = floor(u * W) and u in [0, 1) a counter-based
//               random number of (seed, step): inverse-CDF sampling that walks the candidates
//               from the most likely one, as sample_cpu does with the same u, so the two pick
//               the same token unless rounding moves a boundary.
//  3. Bins by depth. One pass builds a histogram (count and weight) over 2048 bins: 2047 equal
//     slices of depth between 0 and min(28, depth of the worst candidate), and a last bin for
//     the candidates that weigh 0. The bin is a non-decreasing function of depth, so bins are
//     runs of consecutive ranks, and its running totals (cumulated once) say in which bin each
//     target falls. Bins split the logits by value, so a bin rarely holds more than a few
//     hundred candidates.
//  4. Windows. To resolve a target inside its bin, that bin and the bins above it, as many as
//     fit 1024 candidates, are gathered, sorted by key (bitonic sort in shared memory) and
//     summed: the window. A later target that falls in the same window (top-p and the draw
//     after a small top-k) needs no new pass. A bin that alone holds more than 1024 candidates
//     (exact ties, or thousands of nearly equal logits) is narrowed by radix select over the
//     key's digits (11, 11, 10 bits of the logit key, then of the id) until the candidates
//     that share the digits fixed so far fit.
// The work is spread over a cluster of 8 blocks (sm_90 thread block cluster): each block copies
// its slice of the logits into shared memory once, histograms are summed across the cluster
// through distributed shared memory, and every block gathers the same window, so all blocks
// make the same decisions without broadcasts. One launch, no workspace. *step is read on the
// device, so a captured CUDA graph draws a fresh number on each replay once the caller advances
// it. Without clusters (before sm_90, portable mode: src/device_caps.h), or where the slices do
// not fit a block's shared memory, one block does the same steps with the same code (a group
// of one block, OneBlock) and reads the logits from global memory at each pass: the same
// integers, so the same token. Non-finite input: if any logit is NaN or Inf, the kernels write
// -1 instead of an id (as sample_cpu returns), which the engine reports as an error.
#pragma once
#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>

#include "argmax.cuh"  // the rank keys
#include "cuda_common.cuh"
#include "sampler.h"  // SamplingParams, splitmix64

namespace olmo {

namespace sampling {

namespace cg = cooperative_groups;
constexpr int kThreads = 1024;       // per block; also the most candidates a window holds
constexpr int kCluster = 8;          // blocks of the cluster that samples
constexpr int kBins = 2 * kThreads;  // histogram bins: two per thread when cumulating
constexpr int kTail = kBins - 1;     // the depth bin of the candidates that weigh 0
constexpr float kMaxDepth = 28.0f;   // deeper candidates weigh 0
constexpr int kMaxVocab = 1 << 18;   // vocabularies must be smaller

// Logits per block: V split over the cluster, a multiple of 8 so each slice stays 16-byte aligned.
__host__ __device__ constexpr int slice_size(int V) { return ((V + kCluster - 1) / kCluster + 7) / 8 * 8; }

// Radix digit d of the 64-bit rank key: d = 0, 1, 2 cut the logit half into 11, 11, 10 bits;
// d = 3, 4, 5 the id half likewise.
__device__ constexpr int digit_bits(int d) { return d % 3 == 2 ? 10 : 11; }
__device__ constexpr int digit_shift(int d) { return (d < 3 ? 32 : 0) + (d % 3 == 0 ? 21 : d % 3 == 1 ? 10 : 0); }

// The uniform number of draw `step`: splitmix64 of (seed, step), exactly sample_cpu's
// uniform(); its top 53 bits u53 give u = u53 / 2^53, returned here as u * 2^64.
__device__ inline u64 uniform_u64(u64 seed, u64 step) {
    return splitmix64(seed + kGolden64 * (step + 1)) >> 11 << 11;
}

// A candidate's depth bin and weight (step 1 and 3 of the header).
struct Scores {
    float temperature;
    float max_score;  // max logit / temperature
    float bin_scale;  // depth bins per unit of depth
    __device__ float depth(float logit) const { return max_score - logit / temperature; }
    __device__ int bin(float logit) const {
        const float d = depth(logit);
        return d >= kMaxDepth ? kTail : (int)fminf(d * bin_scale, kTail - 1);
    }
    // round(exp(logit / temperature - max_score) * 2^40), as sample_cpu computes p (in double)
    __device__ u64 weight(float logit) const {
        const float d = depth(logit);
        return d >= kMaxDepth ? 0 : __float2ull_rn(expf(-d) * 0x1p40f);
    }
};

// Count and weight per bin; after Cluster::build_histogram, running totals through each bin.
struct Histogram {
    unsigned count[kBins];
    u64 weight[kBins];
};

// Adds a candidate of weight w <= 2^40 to bin `bin` (bin < 0: nothing). All 32 lanes call it.
// The lanes in the bin of the warp's first lane with a bin combine, and one of them does the
// shared atomics: one atomic where a warp's candidates share a bin (ties, the digits inside a
// crowded bin, the tail) instead of 32 on one address. Other lanes add their own (depth bins
// rarely collide).
__device__ inline void warp_histogram_add(Histogram& h, int bin, u64 w) {
    const unsigned active = __ballot_sync(0xffffffffu, bin >= 0);
    if (active == 0) return;
    const int lead_bin = __shfl_sync(0xffffffffu, bin, __ffs(active) - 1);
    const unsigned peers = __ballot_sync(0xffffffffu, bin == lead_bin);
    if (bin == lead_bin) {
        const unsigned hi = __reduce_add_sync(peers, (unsigned)(w >> 20));  // 20-bit halves: 32 of
        const unsigned lo = __reduce_add_sync(peers, (unsigned)w & 0xfffffu);  // them fit 32 bits
        w = ((u64)hi << 20) + lo;
        if ((int)(threadIdx.x % 32) != __ffs(peers) - 1) return;
    } else if (bin < 0) {
        return;
    }
    atomicAdd(&h.count[bin], bin == lead_bin ? (unsigned)__popc(peers) : 1u);
    if (w > 0) atomicAdd(&h.weight[bin], w);
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

// The first i < n with cum[i] >= x (n if none), cum non-decreasing: a binary search that every
// thread does alike. before(cum, i): the running total above entry i.
template <typename C> __device__ int first_reaching(const C* cum, int n, u64 x) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (cum[mid] >= x) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}
template <typename C> __device__ u64 before(const C* cum, int i) { return i > 0 ? cum[i - 1] : 0; }

// Bitonic sort of list[0, n), n <= kThreads, descending; the slots up to the next power of two
// are padded with 0, below every key.
__device__ inline void sort_descending(u64* list, int n) {
    int size = 1;
    while (size < n) size *= 2;
    const int j = threadIdx.x;
    if (j >= n && j < size) list[j] = 0;
    for (int run = 2; run <= size; run *= 2)
        for (int stride = run / 2; stride > 0; stride /= 2) {
            __syncthreads();
            const int partner = j ^ stride;
            const bool descending = (j & run) == 0;
            if (j < size && partner > j && (list[j] < list[partner]) == descending) {
                const u64 t = list[j];
                list[j] = list[partner], list[partner] = t;
            }
        }
    __syncthreads();
}

// The candidates still in: those with key >= cut (cut only rises), how many and their weight.
struct Kept {
    u64 cut, count, weight;
};

// A run of candidates consecutive in rank order: depth bins lo..hi and, once `digits` radix
// digits are fixed, keys whose bits from digit_shift(digits - 1) up equal `prefix`.
struct Window {
    int lo = 0, hi = -1, digits = 0;
    u64 prefix = 0;
    u64 above_count = 0, above_weight = 0;  // of the candidates ranked above the window
    int n = 0;                              // gathered, in Shared::list
    __device__ bool holds(int bin, u64 key) const {
        const u64 fixed = digits == 0 ? 0 : ~0ull << digit_shift(digits - 1);
        return lo <= bin && bin <= hi && (key & fixed) == prefix;
    }
};

struct Shared {
    Histogram depth;              // depth bins of the whole vocabulary
    Histogram digit;              // radix digits inside one crowded depth bin
    u64 list[kThreads];           // the window's candidates (keys), best first
    u64 list_weight[kThreads];    // running totals of their weights
    u64 found[2][kThreads];       // this block's candidates of a window being gathered
    int found_count[2];
    float extremes[2];            // this block's largest and smallest logit
    unsigned within;              // this block's candidates within the min-p depth
};
// The block's slice of the logits (as float) follows Shared in dynamic shared memory.
constexpr int kMaxSharedBytes = sizeof(Shared) + sizeof(float) * slice_size(kMaxVocab - 1);
// Static shared memory of the kernels (block_reduce, block_inclusive_scan): under 1 KB.
constexpr int kStaticSharedBytes = 1024;

// One block alone, with the calls of cg::cluster_group that Cluster makes.
struct OneBlock {
    __device__ void sync() const { __syncthreads(); }
    __device__ unsigned block_rank() const { return 0; }
    __device__ unsigned num_blocks() const { return 1; }
    template <typename U> __device__ U* map_shared_rank(U* p, unsigned) const { return p; }
};

// One block's view of the group that samples (cg::cluster_group or OneBlock): its slice of the
// logits (L: float in shared memory, or T in global memory), the scores, the current window.
template <typename Group, typename L>
struct Cluster {
    Group group;
    Shared& sh;
    const L* slice;  // logits of ids first .. first + n - 1
    int first, n;
    Scores s;
    Window window;
    int gathers = 0;

    // Calls f(id, logit) for each of the block's candidates, and f(-1, 0) for the padding of the
    // last round, so that all lanes of a warp make the same calls (f may use warp intrinsics).
    template <typename F> __device__ void for_each(F f) const {
        for (int base = 0; base < n; base += blockDim.x) {
            const int j = base + threadIdx.x;
            f(j < n ? first + j : -1, j < n ? to_float(slice[j]) : 0.0f);
        }
    }

    // h = the histogram over the whole cluster of the candidates that bin_of(id, logit) puts in
    // a bin (>= 0), as running totals through each bin.
    template <typename F> __device__ void build_histogram(Histogram& h, F bin_of) {
        __syncthreads();  // h may still be read from the previous use
        for (int b = threadIdx.x; b < kBins; b += blockDim.x) h.count[b] = 0, h.weight[b] = 0;
        __syncthreads();
        for_each([&](int i, float x) {
            const int bin = i < 0 ? -1 : bin_of(i, x);
            warp_histogram_add(h, bin, bin < 0 ? 0 : s.weight(x));
        });
        sum_over_cluster(h);
        const int b = 2 * threadIdx.x;  // running totals, two bins per thread
        const unsigned c1 = h.count[b + 1];
        const u64 w1 = h.weight[b + 1];
        const u64 count = block_inclusive_scan((u64)h.count[b] + c1), weight = block_inclusive_scan(h.weight[b] + w1);
        h.count[b] = (unsigned)(count - c1), h.count[b + 1] = (unsigned)count;
        h.weight[b] = weight - w1, h.weight[b + 1] = weight;
        __syncthreads();
    }

    // Every block's h becomes the sum of all blocks' h, in place: block r adds up its share of
    // the bins over the cluster and writes the sums back to every block (the shares are disjoint).
    __device__ void sum_over_cluster(Histogram& h) {
        group.sync();  // every block's h is complete
        const int blocks = (int)group.num_blocks(), share = kBins / blocks;
        const int first_bin = (int)group.block_rank() * share;
        for (int b = first_bin + threadIdx.x; b < first_bin + share; b += blockDim.x) {
            unsigned count = 0;
            u64 weight = 0;
            for (int r = 0; r < blocks; r++) {
                const Histogram* other = group.map_shared_rank(&h, r);
                count += other->count[b], weight += other->weight[b];
            }
            for (int r = 0; r < blocks; r++) {
                Histogram* other = group.map_shared_rank(&h, r);
                other->count[b] = count, other->weight[b] = weight;
            }
        }
        group.sync();  // every block has the sums
    }

    // The window for a target that the current one does not cover: the depth bin where the
    // running total reaches it, widened upwards as far as kThreads candidates allow. A bin that
    // alone holds more is narrowed digit by digit (radix select within the bin).
    __device__ Window window_for(u64 target, bool by_weight, const Kept& kept) {
        const Histogram& h = sh.depth;
        const int b = by_weight ? first_reaching(h.weight, kBins, target) : first_reaching(h.count, kBins, target);
        const u64 through = min((u64)h.count[b], kept.count);  // candidates still in, down to bin b
        const int lo = through <= (u64)kThreads ? 0 : first_reaching(h.count, kBins, through - kThreads) + 1;
        if (lo <= b) return Window{lo, b, 0, 0, before(h.count, lo), before(h.weight, lo)};
        return narrow(Window{b, b, 0, 0, before(h.count, b), before(h.weight, b)}, target, by_weight, kept);
    }

    // Narrows window w (one depth bin) digit by digit until the candidates that share the digits
    // fixed so far and hold target fit kThreads: radix select within the bin. Rarely needed, so
    // kept out of line.
    __device__ __noinline__ Window narrow(Window w, u64 target, bool by_weight, const Kept& kept) {
        while (w.digits < 6) {  // after all 6 the key, and so the candidate, is known
            const int shift = digit_shift(w.digits), mask = (1 << digit_bits(w.digits)) - 1;
            build_histogram(sh.digit, [&](int i, float x) {  // bin 0: the largest digit, ranked first
                const u64 key = rank_key(x, i);
                return key >= kept.cut && w.holds(s.bin(x), key) ? mask - ((int)(key >> shift) & mask) : -1;
            });
            const Histogram& g = sh.digit;
            const u64 rest = target - (by_weight ? w.above_weight : w.above_count);
            const int d = by_weight ? first_reaching(g.weight, kBins, rest) : first_reaching(g.count, kBins, rest);
            w.above_count += before(g.count, d), w.above_weight += before(g.weight, d);
            w.prefix |= (u64)(mask - d) << shift, w.digits++;
            if (g.count[d] - before(g.count, d) <= (u64)kThreads) break;
        }
        return w;
    }

    // Fills every block's list with w's candidates that are still in (key >= cut), sorted best
    // first, and their running weights. Each block collects its own in found[buffer], then every
    // block copies all of them. The two buffers alternate, so a block may collect the next window
    // while others still copy this one: a cluster sync lies between.
    __device__ void gather(Window& w, u64 cut) {
        const int buffer = gathers++ % 2;
        if (threadIdx.x == 0) sh.found_count[buffer] = 0;
        __syncthreads();
        for_each([&](int i, float x) {
            if (i < 0) return;
            const u64 key = rank_key(x, i);
            if (key >= cut && w.holds(s.bin(x), key)) sh.found[buffer][atomicAdd(&sh.found_count[buffer], 1)] = key;
        });
        group.sync();  // every block has collected its own
        const int j = threadIdx.x;
        w.n = 0;  // thread j copies the j-th candidate, in block order
        for (int r = 0; r < (int)group.num_blocks(); r++) {
            const int count = *group.map_shared_rank(&sh.found_count[buffer], r);
            if (w.n <= j && j < w.n + count) sh.list[j] = group.map_shared_rank(sh.found[buffer], r)[j - w.n];
            w.n += count;
        }
        sort_descending(sh.list, w.n);
        sh.list_weight[j] = block_inclusive_scan(j < w.n ? s.weight(rank_logit(sh.list[j])) : 0);
        __syncthreads();
    }

    // How many candidates of the cluster have depth <= max_depth (with one sync of the cluster).
    __device__ u64 count_within(float max_depth) {
        unsigned mine = 0;
        for_each([&](int i, float x) { mine += i >= 0 && s.depth(x) <= max_depth; });
        mine = block_reduce(mine, SumOp{});
        if (threadIdx.x == 0) sh.within = mine;
        group.sync();
        u64 total = 0;
        for (int r = 0; r < (int)group.num_blocks(); r++) total += *group.map_shared_rank(&sh.within, r);
        return total;
    }

    __device__ bool window_covers(u64 target, bool by_weight) const {
        if (window.n == 0) return false;
        const u64 above = by_weight ? window.above_weight : window.above_count;
        return above < target && target <= above + (by_weight ? sh.list_weight[window.n - 1] : (u64)window.n);
    }

    // The candidates ranked down to the one where the running total (count or weight) of the
    // candidates still in first reaches target (1 <= target <= kept's total).
    __device__ Kept select(u64 target, bool by_weight, const Kept& kept) {
        if (!window_covers(target, by_weight)) {
            window = window_for(target, by_weight, kept);
            gather(window, kept.cut);
        }
        const Window& w = window;
        const int j = by_weight ? first_reaching(sh.list_weight, w.n, target - w.above_weight)
                                : (int)(target - w.above_count - 1);
        return {sh.list[j], w.above_count + j + 1, w.above_weight + sh.list_weight[j]};
    }
};

// Copies logits[0, n) into slice as float (N per load) and returns their max and min (min
// -inf when any of them is NaN or Inf).
template <int N, typename T> __device__ void load_slice(float* slice, const T* logits, int n, float& hi, float& lo) {
    hi = -INFINITY, lo = INFINITY;
#pragma unroll 4
    for (int j = threadIdx.x * N; j < n; j += blockDim.x * N) {
        float x[N];
        if (j + N <= n) {
            const Pack<T, N> p = *reinterpret_cast<const Pack<T, N>*>(logits + j);
            for (int k = 0; k < N; k++) x[k] = to_float(p.v[k]);
        } else {
            for (int k = 0; k < N; k++) x[k] = j + k < n ? to_float(logits[j + k]) : 0.0f;
        }
        for (int k = 0; k < N && j + k < n; k++)
            slice[j + k] = x[k], hi = fmaxf(hi, x[k]), lo = isfinite(x[k]) ? fminf(lo, x[k]) : -INFINITY;
    }
}

__device__ inline u64 nucleus_target(float top_p, u64 total) {
    return max(1ull, min(total, (u64)ceil((double)top_p * (double)total)));
}

// The steps of the header by every block of `group`, each holding candidates first .. first+n-1
// in `slice` and their largest (hi) and smallest (lo, -inf for any NaN or Inf) logit: the token
// drawn goes to `out`.
template <typename Group, typename L>
__device__ void sample_from(Group group, Shared& sh, const L* slice, int first, int n, float hi, float lo, IdSink out,
                            int V, const SamplingParams& p, const uint64_t* step) {
    hi = block_reduce(hi, MaxOp{}), lo = block_reduce(lo, MinOp{});
    if (threadIdx.x == 0) sh.extremes[0] = hi, sh.extremes[1] = lo;
    group.sync();
    for (int r = 0; r < (int)group.num_blocks(); r++) {
        const float* other = group.map_shared_rank(sh.extremes, r);
        hi = fmaxf(hi, other[0]), lo = fminf(lo, other[1]);
    }
    if (!isfinite(hi) || !isfinite(lo)) {  // every block saw the same extremes, so all leave here
        if (group.block_rank() == 0 && threadIdx.x == 0) out.store(-1);
        group.sync();  // no block exits while another may still read its extremes
        return;
    }
    const float max_score = hi / p.temperature, range = fminf(kMaxDepth, max_score - lo / p.temperature);
    Cluster<Group, L> c{group, sh, slice, first, n, Scores{p.temperature, max_score, kTail / fmaxf(range, 1e-6f)}};
    c.build_histogram(sh.depth, [&](int, float x) { return c.s.bin(x); });

    Kept kept{0, (u64)V, sh.depth.weight[kBins - 1]};
    // A k-th best in the tail bin weighs 0: top-k then keeps every candidate that can be drawn.
    if (p.top_k > 0 && p.top_k < V && sh.depth.count[kTail - 1] >= (unsigned)p.top_k)
        kept = c.select(p.top_k, false, kept);
    if (p.top_p < 1.0f) kept = c.select(nucleus_target(p.top_p, kept.weight), true, kept);
    // Min-p cuts at depth -ln(min_p); from depth 28 on, only candidates that weigh 0 are cut.
    if (p.min_p > 0.0f && -logf(p.min_p) < kMaxDepth) {
        const u64 within = c.count_within(-logf(p.min_p));
        if (within < kept.count) kept = c.select(within, false, kept);
    }
    const u64 u = uniform_u64(p.seed, *step);
    const Kept drawn = c.select(__umul64hi(u, kept.weight) + 1, true, kept);  // target floor(u * W) + 1
    if (group.block_rank() == 0 && threadIdx.x == 0) out.store(rank_id(drawn.cut));
    group.sync();  // no block exits while another may still read its shared memory
}

// A cluster of kCluster blocks (the launch sets the cluster shape; clusters exist from sm_90 on,
// and sample() launches this kernel only there), each with its slice in shared memory.
template <typename T, int N>
__global__ void __launch_bounds__(kThreads) sample_kernel(IdSink out, const T* logits, int V, SamplingParams p, const uint64_t* step) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    float* slice = reinterpret_cast<float*>(shared_bytes + sizeof(Shared));
    const cg::cluster_group group = cg::this_cluster();
    const int first = (int)group.block_rank() * slice_size(V), n = max(0, min(slice_size(V), V - first));
    float hi, lo;
    load_slice<N>(slice, logits + min(first, V), n, hi, lo);
    sample_from(group, *reinterpret_cast<Shared*>(shared_bytes), slice, first, n, hi, lo, out, V, p, step);
#endif
}

// One block over all V logits, read from global memory at each pass (no clusters needed).
template <typename T>
__global__ void __launch_bounds__(kThreads) sample_one_block_kernel(IdSink out, const T* logits, int V, SamplingParams p,
                                                                    const uint64_t* step) {
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    float hi = -INFINITY, lo = INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        const float x = to_float(logits[i]);
        hi = fmaxf(hi, x), lo = isfinite(x) ? fminf(lo, x) : -INFINITY;
    }
    sample_from(OneBlock{}, *reinterpret_cast<Shared*>(shared_bytes), logits, 0, V, hi, lo, out, V, p, step);
}

}  // namespace sampling

// out (a device int, or an IdSink) = a token drawn from softmax(logits [V] / temperature)
// restricted by top-k, top-p and min-p (p.repetition_penalty is not applied here: see sampler.h);
// the random number is a function of (p.seed, *step) (step: device pointer, all 64 bits used, as
// sample_cpu's); -1 when any logit is NaN or Inf. p must not be greedy() (greedy decoding is
// argmax).
template <typename T>
void sample(IdSink out, const T* logits, int V, const SamplingParams& p, const uint64_t* step, cudaStream_t stream) {
    using namespace sampling;
    if (V < 1 || V >= kMaxVocab) fail("sample: vocabulary size " + std::to_string(V) + " outside [1, 2^18)");
    if (p.greedy() || !std::isfinite(p.temperature))
        fail("sample: temperature must be finite and >= 1e-5 (below, decoding is greedy), got " +
             std::to_string(p.temperature));
    if (p.top_k < 0) fail("sample: top_k must be >= 0, got " + std::to_string(p.top_k));
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail("sample: top_p must be in (0, 1], got " + std::to_string(p.top_p));
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail("sample: min_p must be in [0, 1], got " + std::to_string(p.min_p));
    const DeviceCaps caps = device_caps();
    const int bytes = sizeof(Shared) + sizeof(float) * slice_size(V), dynamic_max = caps.smem_per_block - kStaticSharedBytes;
    if (caps.clusters && bytes <= dynamic_max) {
        allow_smem<sample_kernel<T, kVec<T>>>(std::min(kMaxSharedBytes, dynamic_max));  // more than the default 48 KiB
        allow_smem<sample_kernel<T, 1>>(std::min(kMaxSharedBytes, dynamic_max));
        cudaLaunchAttribute cluster;
        cluster.id = cudaLaunchAttributeClusterDimension;
        cluster.val.clusterDim = {kCluster, 1, 1};
        launch_with(&cluster, 1, aligned16(logits) ? sample_kernel<T, kVec<T>> : sample_kernel<T, 1>, kCluster, kThreads,
                    bytes, stream, out, logits, V, p, step);
    } else {
        allow_smem<sample_one_block_kernel<T>>((int)sizeof(Shared));
        sample_one_block_kernel<T><<<1, kThreads, sizeof(Shared), stream>>>(out, logits, V, p, step);
        cudaCheckLaunch();
    }
}

}  // namespace olmo
