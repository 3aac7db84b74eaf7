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
    bool want_logits = false;   // hand the callback the logits of each step (log-probabilities)
};

// One new token as the loop reports it: its request, id, whether it is an eos id, whether the
// request ends after it anyway (eos or max_new_tokens), and (when the request wants them, else
// null) the model's raw logits [V] it was drawn from, before any repetition penalty,
// temperature or other warper.
struct NewToken {
    int req, id;
    bool eos, last;
    const float* logits;
};
// Called as each token is produced; returning true ends that request after this token (a stop
// string was seen).
using TokenCallback = std::function<bool(const NewToken&)>;

// Runs all requests to completion, one decode step serving every live sequence. A request
// stops after an eos id (included in its output), max_new_tokens, or when the callback says so.
// Requests whose KV blocks cannot all be reserved at once, or beyond the engine's max_batch(),
// wait until others finish; one that cannot fit even alone is an error. Returns the new tokens
// of each request.
//
// Picking: the engine draws (on the GPU only the ids leave the device) unless a live request
// has a repetition penalty. The penalty needs each sequence's history (prompt + generated), so
// such a step asks the engine for logits, and the host penalizes them and picks with sample_cpu
// (greedy: argmax, exactly transformers' ids on the fp32 paths). This is simpler than keeping
// every sequence's history on the device for a penalty kernel, and costs, per sequence and
// token, the copy of V floats to the host, the penalty (O(history)) and the host pick (O(V),
// O(V log V) with top-p): see README.md, "Sampling on the host".
//
// Pipelined (on an engine that can: the GPU's): while the host reads one step's ids and
// reports them, the next step already runs, fed those ids on the device (Engine::decode_sample's
// `ahead`). When a request ends, the others take their tokens from that step; it is dropped
// (one step's work lost) only when a callback or eos ends every request, or the batch changes.
// The ids are the same as without.
std::vector<std::vector<int>> generate(Engine& eng, const std::vector<Request>& reqs, const std::vector<int>& eos,
                                       const TokenCallback& on_token = nullptr, bool pipelined = true);

// Beam search with transformers' semantics (GenerationMixin._beam_search, do_sample=False):
// keep num_beams running beams; each step takes the top 2*num_beams continuations of all
// beams by summed log-probability; continuations ending in eos (among the top num_beams) are
// finished hypotheses scored sum_logprobs / generated_len^length_penalty; stop when no running
// beam can beat the worst finished one (early_stopping=false heuristic) or at max_new_tokens.
// Beams share KV blocks (Engine::fork_sequence) instead of copying caches. A repetition penalty
// applies to each beam's log-probabilities over prompt + beam, as transformers' beam search
// applies its logits processors. The other sampling settings do not apply (do_sample=False).
struct BeamResult {
    std::vector<int> tokens;      // new tokens of the best hypothesis (ending in eos if it finished)
    std::vector<float> logprobs;  // each token's raw log-softmax (before the penalty)
    float score = 0;
};
BeamResult beam_search(Engine& eng, const std::vector<int>& prompt, int num_beams, int max_new_tokens,
                       float length_penalty, const std::vector<int>& eos, float repetition_penalty = 1.0f);

}  // namespace olmo
