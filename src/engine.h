// engine.h: what ./generate and the tests see of a model: feed tokens, get logits or the next
// token. Two implementations share this interface: the fp32 CPU reference (cpu_forward.cpp)
// and the CUDA engine (gpu_forward.cu).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config.h"
#include "safetensors.h"

namespace olmo {

struct SamplingParams {
    float temperature = 0.0f;  // 0 = greedy (argmax)
    int top_k = 0;             // 0 = off
    float top_p = 1.0f;        // 1 = off
    uint64_t seed = 0;
};

// Called with every named intermediate tensor of a prefill (golden tests): name as in the
// golden files ("embed", "layers.3.q_rope", "logits", ...), data [rows, cols] in fp32.
using ActivationHook = std::function<void(const std::string& name, const float* data, int rows, int cols)>;

class Engine {
public:
    virtual ~Engine() = default;
    virtual const ModelConfig& config() const = 0;
    int max_seq() const { return max_seq_; }
    int n_past() const { return n_past_; }     // tokens already in the KV cache
    void reset() { n_past_ = 0; }
    // Appends `ids` to the sequence (a prefill when there are several, a decode step for one)
    // and returns the fp32 logits of the last position [V].
    virtual std::vector<float> forward(const std::vector<int>& ids) = 0;
    // The same, then draws the next token (step numbers the draws for the RNG). Only the id
    // leaves the device on the GPU.
    virtual int forward_sample(const std::vector<int>& ids, const SamplingParams& s, uint64_t step) = 0;
    // Peak memory the engine allocated (bytes): device memory on the GPU, buffers on the CPU.
    virtual size_t memory_bytes() const = 0;
    ActivationHook hook;
protected:
    int max_seq_ = 0, n_past_ = 0;
    // Checks that `n` more tokens fit in the context; throws a clear error otherwise.
    void check_room(size_t n) const;
};

std::unique_ptr<Engine> make_cpu_engine(const ModelConfig& c, const Checkpoint& ckpt, int max_seq);

enum class DeviceDType { BF16, F16, F32 };
bool cuda_available();   // false when built without CUDA or no GPU is present
// ckpt == nullptr: random weights (benchmarks at real sizes without a checkpoint).
std::unique_ptr<Engine> make_cuda_engine(const ModelConfig& c, const Checkpoint* ckpt, int max_seq, DeviceDType dt);

// CPU sampler (the GPU has its own kernel with the same rules): temperature, then top-k, then
// top-p, then a draw from a counter-based RNG of (seed, step). temperature 0 = argmax.
int sample_cpu(const float* logits, int V, const SamplingParams& s, uint64_t step);

}  // namespace olmo
