// step_meta.h: the step metadata of the CUDA engine (cuda_engine.cu): what one forward call
// needs to know about its tokens, filled on the host and uploaded in one copy before it runs.
//
// Rows are tokens (a prefill chunk of one sequence, or one token per sequence in decode); for
// each, its id, its position and the pool row its K/V goes to (kv_cache.h); for each sequence,
// the position of its first token in this call, its block tables and the sampler's draw
// counter. The arrays lie back to back in one block of device memory that the engine carves
// from its buffers, and are filled through a pinned mirror of that block on the host. Where
// each array starts depends only on (rows, batch), so a decode step captured as a CUDA graph
// for a batch size reads the right places at every replay, whatever later uploads put there.
//
// Two ways in. upload() (prefill, scoring) copies the mirror into the block; the mirror is
// double, so an upload waits only for the copy that last read the one it fills. A decode step,
// a CUDA graph, instead has its first kernel fetch its metadata (fetch_staged): stage() fills
// one of two pinned buffers the GPU reads directly (mapped), and no copy-engine operation sits
// between two steps (the default model decodes 2.9% faster so, the 1B and 7B shapes as fast:
// docs/fp8.md, "Session 32"). Which buffer a graph reads is named by a counter in device memory
// that each fetch advances; the engine stages step k into buffer k % 2, and stages step k + 2
// only once step k has finished (at most two decode steps are in flight: cuda_engine.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kv_cache.h"

namespace olmo {

class StepMeta {
public:
    // The arrays of the latest upload, in device memory: the kernels read these.
    int* ids = nullptr;         // [rows]        token ids
    int* pos = nullptr;         // [rows]        position of each token
    int* rows[2] = {};          // [rows]        pool row of each token's K/V, per kind
    int* pos0 = nullptr;        // [batch]       position of each sequence's first token in this call
    int* tables[2] = {};        // [batch, stride] block tables, per kind
    uint64_t* step = nullptr;   // [batch]       draw counter of each sequence, for the sampler (first: 8-aligned)
    int* slot = nullptr;        // [1]           decode: where the step's drawn ids go on the host (cuda_engine.cu)

    StepMeta() = default;
    ~StepMeta();
    StepMeta(const StepMeta&) = delete;
    StepMeta& operator=(const StepMeta&) = delete;

    // Room for calls of at most max_rows rows and max_batch sequences, with block tables of
    // `stride` entries: sizes the block and allocates its pinned host mirror.
    void reserve(int max_rows, int max_batch, int stride);
    size_t ints() const { return ints_; }          // the device block's size, in ints
    void place(int* device) { base_ = device; }    // the device block: ints() ints, 256-byte aligned

    // Fills the arrays on the host and copies them to the device in one transfer on `stream`:
    // rows = token_ids.size() tokens at `positions`, belonging to seqs (prefill: one sequence;
    // decode: one per token); steps[b] is the draw counter of seqs[b] (0 when missing).
    void upload(const KvCache& kv, const std::vector<int>& token_ids, const std::vector<int>& positions,
                const std::vector<int>& seqs, const std::vector<uint64_t>& steps, cudaStream_t stream);

    // Decode steps: stage() fills staging buffer `slot` (the k-th decode step's is k % 2, k
    // counting from 0), one token per sequence, `slot` included; fetch_staged() launches, in the
    // step's graph before anything reads the arrays, the kernel that copies the buffer the device
    // counter names into the block and advances the counter. reset_counter() zeroes it (once).
    void stage(int slot, const KvCache& kv, const std::vector<int>& token_ids, const std::vector<int>& positions,
               const std::vector<int>& seqs, const std::vector<uint64_t>& steps);
    void fetch_staged(int B, cudaStream_t stream);
    void reset_counter(cudaStream_t stream);

private:
    size_t layout(int n, int B);
    // Fills mirror h as layout(n, B) lays the block out; returns the ints used.
    size_t fill(int* h, const KvCache& kv, const std::vector<int>& token_ids, const std::vector<int>& positions,
                const std::vector<int>& seqs, const std::vector<uint64_t>& steps, int id_slot);
    int* counter() const { return base_ + ints_ - 1; }   // the decode steps fetched, past every layout

    int stride_ = 0;
    size_t ints_ = 0;
    int* base_ = nullptr;             // the device block
    int* host_[2] = {};               // upload's pinned mirrors, used in turn
    cudaEvent_t copied_[2] = {};      // recorded after each mirror's latest copy
    int turn_ = 0;                    // the mirror the next upload fills
    int* staged_[2] = {};             // stage()'s pinned, mapped buffers
    int* staged_dev_[2] = {};         //   as the GPU addresses them
};

}  // namespace olmo
