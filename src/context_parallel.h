// context_parallel.h: ring attention, the way a long prompt's prefill is to be split over `ranks`
// GPUs (issue 15's --cp): which tokens each rank holds, the order in which the K/V blocks travel
// round the ring, and the merge of partial attention outputs by their log-sum-exp. Here in plain
// C++ as the reference (ring_attention simulates every rank in one process, tests compare it
// with cpu::attention); the GPU version, with NCCL send/recv overlapped with the flash kernel,
// is not written yet (docs/tensor_parallel.md).
//
// Causal load balance: the T tokens of the prompt are cut into 2N chunks c_0 .. c_{2N-1} (sizes
// differing by one at most); rank r holds c_r and its mirror c_{2N-1-r}. Under the causal mask a
// query at position i sees i + 1 keys, so a rank holding only early chunks would finish first
// and wait; an early chunk and its mirror add up to about the same work on every rank.
//
// The ring, N steps: at step s rank r holds the K/V of rank (r - s) mod N (its own at s = 0),
// computes its queries' attention to those keys alone (causal by absolute position, and the
// sliding window) as a partial output o_s with its log-sum-exp l_s per query head, and passes
// the K/V on to rank r + 1. Partials merge exactly:
//     l = log(e^l_a + e^l_b),   o = e^(l_a - l) · o_a + e^(l_b - l) · o_b
// A query that sees no key of a block gets l = -inf there and takes nothing from it.
#pragma once
#include <vector>

namespace olmo {

// Tokens [first, first + count) of a prompt.
struct CpRange {
    int first, count;
};
// The two chunks rank r of `ranks` holds of a T-token prompt, in order (either may be empty).
std::vector<CpRange> cp_tokens(int T, int rank, int ranks);

// Partial attention, in the merge form: for nq queries q [nq, nH*hd] at positions qpos and nk
// keys k, v [nk, nKV*hd] at positions kpos (query head h reads KV head h / (nH/nKV)), over the
// keys each query sees (kpos <= qpos, and qpos - kpos < window when window > 0):
// o [nq, nH*hd] normalized by that block's own sum, lse [nq, nH] = its log-sum-exp of the
// scaled scores (-inf and o = 0 when it sees none).
void attention_partial(float* o, float* lse, const float* q, const int* qpos, int nq, const float* k, const float* v,
                       const int* kpos, int nk, int nH, int nKV, int hd, int window, float scale);

// (o, lse) [nq, nH*hd], [nq, nH] merged with (o2, lse2), in place (see the file comment).
void merge_partial(float* o, float* lse, const float* o2, const float* lse2, int nq, int nH, int hd);

// The whole ring, simulated: out [T, nH*hd] = causal attention of q over k, v (token t at
// position t; [T, nH*hd] and [T, nKV*hd]) computed as `ranks` ranks would, each for the queries
// of its chunks, in N ring steps of partials and merges.
void ring_attention(float* out, const float* q, const float* k, const float* v, int T, int nH, int nKV, int hd,
                    int window, float scale, int ranks);

}  // namespace olmo
