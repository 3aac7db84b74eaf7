// argmax.cuh: greedy decoding's pick on the device (the token with the largest logit), and the
// rank keys that sampling.cuh orders its candidates by.
// defines: argmax; sampling::order_key, rank_key, rank_id, rank_logit
//
// Ranking. Candidate i has the 64-bit rank key
//     key(i) = order_key(logit_i) << 32 | ~i
// where order_key maps floats to uint32 keeping their order. A larger key ranks first; equal
// logits rank by lower id (as torch.argmax and sample_cpu in src/sampler.cpp; dividing by the
// temperature keeps the order). Keys are distinct.
//
// argmax: the largest key, and -1 instead of an id when any logit is NaN or Inf (as sample_cpu
// returns), which the engine reports as an error. The id goes where an IdSink says: a device int,
// and in a decode step also the host's mapped copy (so no copy runs between two steps). Each thread
// reads 8 consecutive logits per step (16-byte loads when the row is aligned) and the block
// combines its threads' keys (block_reduce). On sm_90 the logits are split over a cluster of 8
// blocks: after a cluster barrier, block 0 reads the other blocks' results from their shared memory
// (distributed shared memory) and writes the id. One block alone walks V = 100352 logits in 13
// trips to L2, one after the other, where the cluster's blocks need 2 each: a 1B decode step ran
// 16 us faster without the one-block kernel, and 1.3% faster with the cluster (docs/fp8.md,
// "Session 31"). Without clusters (portable mode: src/device_caps.h) one block reads them all.
// Launched as a programmatic dependent of the output layer where the GPU has those.
#pragma once
#include <cooperative_groups.h>

#include "cuda_common.cuh"

namespace olmo {

// Where a drawn id goes: *dev, and, when host_rows is set, also column col of row *row of
// host_rows [2, width] (a decode step's ids in pinned, mapped host memory: cuda_engine.cu's
// id_slots_; *row is the step's slot, in device memory). The kernel that draws stores both, so
// the host can read the ids as soon as that kernel is done.
struct IdSink {
    int* dev = nullptr;
    int* host_rows = nullptr;
    const int* row = nullptr;
    int width = 0, col = 0;
    IdSink(int* d) : dev(d) {}   // a device int alone
    IdSink(int* d, int* host, const int* r, int w, int c) : dev(d), host_rows(host), row(r), width(w), col(c) {}
    __device__ void store(int id) const {
        *dev = id;
        if (host_rows) host_rows[*row * width + col] = id;
    }
};

namespace sampling {

using u64 = unsigned long long;
constexpr int kArgmaxThreads = 1024;   // per block
constexpr int kArgmaxCluster = 8;      // blocks that split the logits where clusters exist
constexpr int kItems = 8;              // logits per thread per step

// float -> uint32 with a < b  <=>  key(a) < key(b): negative floats have all bits flipped,
// positive ones their sign bit set. Adding +0 first turns -0 into +0, so the two zeros tie.
__device__ inline uint32_t order_key(float f) {
    const uint32_t b = __float_as_uint(f + 0.0f);
    return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}
__device__ inline u64 rank_key(float logit, int i) { return (u64)order_key(logit) << 32 | (uint32_t)~i; }
__device__ inline int rank_id(u64 key) { return (int)~(uint32_t)key; }
__device__ inline float rank_logit(u64 key) {  // the inverse of order_key
    const uint32_t k = (uint32_t)(key >> 32);
    return __uint_as_float((k & 0x80000000u) ? k & 0x7fffffffu : ~k);
}

// Calls f(i, logit_i) for every i < V, kItems consecutive logits per thread per step, read as
// Packs of N.
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
        for (int j = 0; j < kItems; j++)
            if (first + j < V) f(first + j, x[j]);
    }
}

// BLOCKS blocks, one cluster (or one block), each over its slice of the logits: a multiple of
// kItems, so every slice starts as aligned as the row.
template <typename T, int N, int BLOCKS>
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(IdSink out, const T* logits, int V) {
    const int slice = (V + BLOCKS * kItems - 1) / (BLOCKS * kItems) * kItems;
    const int first = min(V, (int)blockIdx.x * slice), n = min(slice, V - first);
    grid_dependency_wait();   // the output layer's logits
    u64 best = 0;   // below every key
    int finite = 1;
    for_each_logit<N>(logits + first, n, [&](int i, float x) { best = max(best, rank_key(x, first + i)), finite &= isfinite(x); });
    best = block_reduce(best, MaxOp{});
    finite = block_reduce(finite, MinOp{});
#if __CUDA_ARCH__ >= 900
    if constexpr (BLOCKS > 1) {
        __shared__ u64 block_best;
        __shared__ int block_finite;
        namespace cg = cooperative_groups;
        const cg::cluster_group cluster = cg::this_cluster();
        if (threadIdx.x == 0) block_best = best, block_finite = finite;
        cluster.sync();
        if (blockIdx.x == 0 && threadIdx.x == 0)
            for (int b = 1; b < BLOCKS; b++) {
                best = max(best, *cluster.map_shared_rank(&block_best, b));
                finite = min(finite, *cluster.map_shared_rank(&block_finite, b));
            }
        cluster.sync();   // no block leaves while block 0 may still read its shared memory
    }
#endif
    if (blockIdx.x == 0 && threadIdx.x == 0) out.store(finite ? rank_id(best) : -1);
}

}  // namespace sampling

// out (a device int, or an IdSink) = index of the largest of logits [V]; ties go to the lowest
// index; -1 when any logit is NaN or Inf.
template <typename T> void argmax(IdSink out, const T* logits, int V, cudaStream_t stream) {
    using namespace sampling;
    if (V < 1) fail("argmax: empty vocabulary");
    const bool vec = aligned16(logits);
    if (!device_caps().clusters) {
        (vec ? argmax_kernel<T, kVec<T>, 1> : argmax_kernel<T, 1, 1>)<<<1, kArgmaxThreads, 0, stream>>>(out, logits, V);
        cudaCheckLaunch();
        return;
    }
    cudaLaunchAttribute attrs[2];
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim = {kArgmaxCluster, 1, 1};
    attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[1].val.programmaticStreamSerializationAllowed = 1;
    launch_with(attrs, device_caps().pdl ? 2 : 1, vec ? argmax_kernel<T, kVec<T>, kArgmaxCluster> : argmax_kernel<T, 1, kArgmaxCluster>,
                kArgmaxCluster, kArgmaxThreads, 0, stream, out, logits, V);
}

}  // namespace olmo
