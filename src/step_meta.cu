// step_meta.cu: the CUDA engine's step metadata, laid out, uploaded and staged (see step_meta.h).
#include "step_meta.h"

#include <algorithm>

#include "cuda_common.cuh"

namespace olmo {

void StepMeta::reserve(int max_rows, int max_batch, int stride) {
    stride_ = stride;
    // rows: ids, pos, 2 x rows; per sequence: step (2 ints), pos0, 2 x table; the slot (layout);
    // the counter of decode steps
    ints_ = 4 * (size_t)max_rows + (size_t)max_batch * (3 + 2 * stride_) + 2;
    for (int m = 0; m < 2; m++) {
        cudaCheck(cudaMallocHost(&host_[m], sizeof(int) * ints_));
        cudaCheck(cudaEventCreateWithFlags(&copied_[m], cudaEventDisableTiming));
        cudaCheck(cudaHostAlloc(&staged_[m], sizeof(int) * ints_, cudaHostAllocMapped));
        cudaCheck(cudaHostGetDevicePointer(&staged_dev_[m], staged_[m], 0));
    }
}

StepMeta::~StepMeta() {
    for (int m = 0; m < 2; m++) cudaFreeHost(host_[m]), cudaEventDestroy(copied_[m]), cudaFreeHost(staged_[m]);
}

// Places the arrays for n rows and B sequences back to back in the device block. The layout
// depends only on (n, B), so a graph captured for a batch size stays valid.
size_t StepMeta::layout(int n, int B) {
    int* m = base_;
    step = reinterpret_cast<uint64_t*>(m), m += 2 * B;   // at the 256-aligned start
    ids = m, m += n;
    pos = m, m += n;
    rows[0] = m, m += n;
    rows[1] = m, m += n;
    pos0 = m, m += B;
    slot = m, m += 1;
    tables[0] = m, m += (size_t)B * stride_;
    tables[1] = m, m += (size_t)B * stride_;
    return m - base_;
}

size_t StepMeta::fill(int* h, const KvCache& kv, const std::vector<int>& token_ids, const std::vector<int>& positions,
                      const std::vector<int>& seqs, const std::vector<uint64_t>& steps, int id_slot) {
    const int n = (int)token_ids.size(), B = (int)seqs.size();
    const size_t used = layout(n, B);
    auto at = [&](int* dev) { return h + (dev - base_); };
    std::copy(token_ids.begin(), token_ids.end(), at(ids));
    std::copy(positions.begin(), positions.end(), at(pos));
    for (int k = 0; k < 2; k++) {
        if (kv.total_blocks(k) == 0) continue;
        for (int r = 0; r < n; r++) at(rows[k])[r] = kv.row(seqs[B == 1 ? 0 : r], k, positions[r]);
        for (int b = 0; b < B; b++) {
            const std::vector<int>& t = kv.table(seqs[b], k);
            int* dst = at(tables[k]) + (size_t)b * stride_;
            std::copy(t.begin(), t.end(), dst);
            std::fill(dst + t.size(), dst + stride_, -1);
        }
    }
    for (int b = 0; b < B; b++) at(pos0)[b] = positions[B == 1 ? 0 : b];
    *at(slot) = id_slot;
    uint64_t* host_step = reinterpret_cast<uint64_t*>(at(reinterpret_cast<int*>(step)));
    for (int b = 0; b < B; b++) host_step[b] = b < (int)steps.size() ? steps[b] : 0;
    return used;
}

void StepMeta::upload(const KvCache& kv, const std::vector<int>& token_ids, const std::vector<int>& positions,
                      const std::vector<int>& seqs, const std::vector<uint64_t>& steps, cudaStream_t stream) {
    const int m = turn_;
    turn_ ^= 1;
    cudaCheck(cudaEventSynchronize(copied_[m]));   // the mirror's previous copy is done
    const size_t used = fill(host_[m], kv, token_ids, positions, seqs, steps, 0);
    cudaCheck(cudaMemcpyAsync(base_, host_[m], sizeof(int) * used, cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaEventRecord(copied_[m], stream));
}

void StepMeta::stage(int slot, const KvCache& kv, const std::vector<int>& token_ids, const std::vector<int>& positions,
                     const std::vector<int>& seqs, const std::vector<uint64_t>& steps) {
    fill(staged_[slot], kv, token_ids, positions, seqs, steps, slot);
}

// block[0, n) = staged[*counter % 2][0, n), then the counter advances. The buffers live in host
// memory: read with ld.global.cv, so no cached line of an earlier step is read again.
__global__ void fetch_staged_kernel(int* block, const int* staged0, const int* staged1, int* counter, int n) {
    const int* src = *counter % 2 ? staged1 : staged0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) block[i] = __ldcv(src + i);
    __syncthreads();   // every thread has read the counter
    if (threadIdx.x == 0) *counter += 1;
}

void StepMeta::fetch_staged(int B, cudaStream_t stream) {
    const int n = (int)layout(B, B);
    fetch_staged_kernel<<<1, 512, 0, stream>>>(base_, staged_dev_[0], staged_dev_[1], counter(), n);
    cudaCheckLaunch();
}

void StepMeta::reset_counter(cudaStream_t stream) { cudaCheck(cudaMemsetAsync(counter(), 0, sizeof(int), stream)); }

}  // namespace olmo
