// decode_graphs.h: the CUDA engine's decode steps as CUDA graphs (cuda_engine.cu). A decode
// step's launches are captured once as a graph and replayed with one launch. Its inputs live in
// device memory (step_meta.h), fetched anew by the graph's first kernel, but the sampling
// settings are kernel arguments, baked into the graph: so there is one graph per (batch size,
// sampling settings, where the token ids come from: the metadata, or the step before on the
// device).
// The cache keeps the kMaxGraphs most recently used graphs (a long batched run shrinks its batch
// step by step; settings change between requests) and destroys the rest.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "sampler.h"

namespace olmo {

class DecodeGraphs {
public:
    static constexpr size_t kMaxGraphs = 16;

    DecodeGraphs() = default;
    ~DecodeGraphs();
    DecodeGraphs(const DecodeGraphs&) = delete;
    DecodeGraphs& operator=(const DecodeGraphs&) = delete;

    // Launches on `stream` the graph of a step over `batch` sequences drawing with `sampling`
    // (empty: logits only), fed its ids by the step before or not. A graph not in the cache is
    // first captured from the launches `record` makes on the stream.
    void launch(int batch, const std::vector<SamplingParams>& sampling, bool fed, cudaStream_t stream,
                const std::function<void()>& record);

private:
    struct Graph {
        int batch;
        std::vector<SamplingParams> sampling;   // empty: logits only
        bool fed;                               // ids from the step before, on the device
        cudaGraphExec_t exec;
    };
    static cudaGraphExec_t capture(cudaStream_t stream, const std::function<void()>& record);

    std::vector<Graph> graphs_;   // most recently used first
};

}  // namespace olmo
