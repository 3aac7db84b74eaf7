// decode_graphs.cu: the cache of decode-step graphs (see decode_graphs.h).
#include "decode_graphs.h"

#include <algorithm>

#include "cuda_common.cuh"

namespace olmo {

DecodeGraphs::~DecodeGraphs() {
    for (auto& g : graphs_) cudaGraphExecDestroy(g.exec);
}

void DecodeGraphs::launch(int batch, const std::vector<SamplingParams>& sampling, bool fed, cudaStream_t stream,
                          const std::function<void()>& record) {
    auto hit = std::find_if(graphs_.begin(), graphs_.end(),
                            [&](const Graph& g) { return g.batch == batch && g.sampling == sampling && g.fed == fed; });
    if (hit == graphs_.end()) {
        if (graphs_.size() == kMaxGraphs) {
            cudaCheck(cudaGraphExecDestroy(graphs_.back().exec));
            graphs_.pop_back();
        }
        graphs_.insert(graphs_.begin(), Graph{batch, sampling, fed, capture(stream, record)});
    } else {
        std::rotate(graphs_.begin(), hit, hit + 1);   // most recently used first
    }
    cudaCheck(cudaGraphLaunch(graphs_.front().exec, stream));
}

cudaGraphExec_t DecodeGraphs::capture(cudaStream_t stream, const std::function<void()>& record) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    record();
    cudaCheck(cudaStreamEndCapture(stream, &graph));
    cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
    cudaCheck(cudaGraphDestroy(graph));
    return exec;
}

}  // namespace olmo
