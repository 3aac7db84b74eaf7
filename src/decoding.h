// decoding.h: the decoding loops on top of an Engine: batched generation of several prompts
// (each with its own sampler and stop condition) and beam search as transformers does it.
#pragma once
#include <functional>
#include <vector>

#include "engine.h"

namespace olmo {

struct Request {
    std::vector<int> prompt;
    SamplingParams sampling;
    int max_new_tokens = 128;
};

// Called as each token is produced: (request index, token id, is_eos).
using TokenCallback = std::function<void(int, int, bool)>;

// Runs all requests to completion, one decode step serving every live sequence. A request
// stops after an eos id (included in its output) or max_new_tokens. Requests whose KV blocks
// cannot all be reserved at once, or beyond the engine's max_batch(), wait until others
// finish; one that cannot fit even alone is an error. Returns the new tokens of each request.
std::vector<std::vector<int>> generate(Engine& eng, const std::vector<Request>& reqs, const std::vector<int>& eos,
                                       const TokenCallback& on_token = nullptr);

// Beam search with transformers' semantics (GenerationMixin._beam_search, do_sample=False):
// keep num_beams running beams; each step takes the top 2*num_beams continuations of all
// beams by summed log-probability; continuations ending in eos (among the top num_beams) are
// finished hypotheses scored sum_logprobs / generated_len^length_penalty; stop when no running
// beam can beat the worst finished one (early_stopping=false heuristic) or at max_new_tokens.
// Beams share KV blocks (Engine::fork_sequence) instead of copying caches.
struct BeamResult {
    std::vector<int> tokens;   // new tokens of the best hypothesis (ending in eos if it finished)
    float score = 0;
};
BeamResult beam_search(Engine& eng, const std::vector<int>& prompt, int num_beams, int max_new_tokens,
                       float length_penalty, const std::vector<int>& eos);

}  // namespace olmo
