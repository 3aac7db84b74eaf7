// engine.h: what ./generate and the tests see of a model: feed tokens, get logits or the next
// token. Two implementations share this interface: the fp32 CPU reference (cpu_engine.cpp)
// and the CUDA engine (cuda_engine.cu).
#pragma once
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "kv_cache.h"
#include "safetensors.h"
#include "sampler.h"
#include "weights.h"

namespace olmo {

// What the first request will look like, so that loading can do the one-time work (kernel
// modules, cuBLAS's first calls, CUDA-graph capture) before it: a prompt of prompt_len tokens,
// then decode steps of `batch` sequences drawing with `sampling` (one entry per sequence), or
// returning logits when `sampling` is empty (beam search).
struct WarmUp {
    int prompt_len = 1;
    int batch = 1;
    std::vector<SamplingParams> sampling;
};

// Called with every named intermediate tensor of a prefill (golden tests): name as in the
// golden files ("embed", "layers.3.q_rope", "logits", ...), data [rows, cols] in fp32.
using ActivationHook = std::function<void(const std::string& name, const float* data, int rows, int cols)>;

// Where an engine's memory goes and how full its KV pool is (--stats).
struct MemoryUse {
    size_t weights = 0, kv_pool = 0, other = 0;   // bytes
    std::string weight_format;                     // how the weights are stored, in words
    std::string kv_format;                         // how the KV pool is stored, in words
    int blocks_total = 0, blocks_free = 0, blocks_peak_used = 0, block_size = 0;
};

// The KV pool of an engine: blocks of kKvBlockSize tokens, kv_blocks of them per pool kind, or
// (kv_blocks 0) enough for one sequence of max_seq tokens plus a copy-on-write spare.
constexpr int kKvBlockSize = 16;
int kv_pool_blocks(int max_seq, int kv_blocks);

// Rows of logits [kScoreRows, V] an engine computes at once while scoring (Engine::score).
constexpr int kScoreRows = 64;

// An engine holds the weights and a paged KV cache (kv_cache.h) shared by any number of
// sequences. A sequence is created empty, fed a prompt with prefill(), then extended one token
// at a time with decode(), which serves several sequences in one step (batched generation,
// beams). fork() makes a beam that shares its parent's cache blocks.
class Engine {
public:
    virtual ~Engine() = default;
    virtual const ModelConfig& config() const = 0;
    int max_seq() const { return max_seq_; }

    // --- sequences ---
    int new_sequence() { return kv_->new_sequence(); }
    int fork_sequence(int parent) {
        drop_ahead();
        return kv_->fork(parent);
    }
    void free_sequence(int seq);
    int seq_len(int seq) const { return kv_->len(seq); }
    const KvCache& kv_cache() const { return *kv_; }

    // --- compute ---
    // Appends `ids` to `seq` and returns the fp32 logits of its last position [V].
    std::vector<float> prefill(int seq, const std::vector<int>& ids);
    // The same, then draws the next token (step numbers the draws for the RNG); on the GPU only
    // the id leaves the device, and the logits [V] too when `logits` is given (log-probabilities).
    int prefill_sample(int seq, const std::vector<int>& ids, const SamplingParams& s, uint64_t step,
                       std::vector<float>* logits = nullptr);
    // One decode step: seqs[b] gets token ids[b]; returns logits [B, V].
    std::vector<float> decode(const std::vector<int>& seqs, const std::vector<int>& ids);
    // The same, drawing each sequence's next token with its own sampling parameters and RNG
    // step (a sequence's k-th generated token uses step k, so batching does not change draws);
    // `logits`, when given, also gets the logits the tokens were drawn from [B, V].
    //
    // ahead (pipelined decode; engines whose pipelined() is true, else ignored): before it
    // waits for this step's ids, the call also starts the step after it, for the same sequences
    // and sampling at steps + 1, each fed the token drawn now while it is still on the device.
    // The host's work between two steps (reading the ids, streaming the text, the next launch)
    // then overlaps the GPU's. The next call finds that step running when it asks for it: these
    // sequences or some of them (the others ended), each with the id returned now and steps + 1,
    // no logits. Any other call (or prefill, score, fork, reset) first drops it; the K/V rows it
    // wrote were never committed and are written again. Needs no logits and room for one more
    // token in every sequence, else no step is started ahead.
    std::vector<int> decode_sample(const std::vector<int>& seqs, const std::vector<int>& ids,
                                   const std::vector<SamplingParams>& s, const std::vector<uint64_t>& steps,
                                   std::vector<float>* logits = nullptr, bool ahead = false);
    virtual bool pipelined() const { return false; }

    // Log-probabilities of a text (perplexity): appends ids to seq and returns, for i in [1, n),
    // log p(ids[i] | the sequence's earlier tokens, ids[0..i-1]) [n-1], each from the fp32
    // logits of its position. The logits never exist for all rows at once: each engine takes
    // kScoreRows rows at a time and reduces each to the target's log-probability (on the GPU,
    // on the device: kernels/logprob.cuh); prompts longer than a prefill chunk run in chunks.
    std::vector<float> score(int seq, const std::vector<int>& ids);

    // --- one sequence, for simple generation and tests: the engine's default sequence ---
    void reset();                                           // frees every sequence
    int n_past() const { return kv_->alive(seq0_) ? kv_->len(seq0_) : 0; }
    std::vector<float> forward(const std::vector<int>& ids);             // prefill, or decode for one id
    // ahead: a decode step also starts the next one, as decode_sample's `ahead` does.
    int forward_sample(const std::vector<int>& ids, const SamplingParams& s, uint64_t step, bool ahead = false);

    // Runs a request shaped like `w` on scratch sequences and frees them, so the first real
    // request pays no set-up. The CPU engine has none to pay and does nothing.
    virtual void warm_up(const WarmUp& w) { (void)w; }

    virtual MemoryUse memory() const = 0;
    // The most sequences one decode step may carry (generate() admits no more at once).
    virtual int max_batch() const { return INT32_MAX; }
    ActivationHook hook;   // called with named intermediates during prefill (golden tests)

protected:
    // kv_blocks: blocks per pool kind; 0 = enough for one sequence of max_seq tokens.
    void init_kv(const ModelConfig& c, int max_seq, int kv_blocks);
    // m with the KV pool's block counts filled in.
    MemoryUse with_pool_use(MemoryUse m) const;
    // warm_up's work, through the public calls: see engine.cpp.
    void rehearse(const WarmUp& w);
    // Implementations: the KV rows are reserved before and committed after these calls.
    // prefill_impl fills logits [V] (if not null) and *id (if not null, drawn with s, step).
    virtual void prefill_impl(int seq, const std::vector<int>& ids, float* logits, int* id, const SamplingParams& s,
                              uint64_t step) = 0;
    // score_impl fills logprobs [n-1]: row i's log-probability of ids[i+1] (see score()).
    virtual void score_impl(int seq, const std::vector<int>& ids, float* logprobs) = 0;
    // decode_impl fills logits [B, V] (if not null) and ids_out [B] (if not null), or both.
    virtual void decode_impl(const std::vector<int>& seqs, const std::vector<int>& ids, float* logits, int* ids_out,
                             const std::vector<SamplingParams>& s, const std::vector<uint64_t>& steps) = 0;
    // Copies KV block src to dst in every layer of `kind` (copy on write of a shared block).
    virtual void copy_block(int kind, int src, int dst) = 0;
    // Pipelined decode (decode_sample's `ahead`), for engines whose pipelined() is true; at most
    // two steps are in flight. decode_start enqueues a step that draws ids, fed `ids` [B], or when
    // ids is null the ids the step before it drew (still on the device; the same sequences in
    // the same order). decode_finish waits for the oldest step in flight and gives its ids [B].
    // decode_drop waits for every step in flight and forgets them.
    virtual void decode_start(const std::vector<int>& seqs, const int* ids, const std::vector<SamplingParams>& s,
                              const std::vector<uint64_t>& steps) {
        (void)seqs, (void)ids, (void)s, (void)steps;
    }
    virtual void decode_finish(int* ids_out) { (void)ids_out; }
    virtual void decode_drop() {}

    int max_seq_ = 0;
    std::unique_ptr<KvCache> kv_;
    int seq0_ = -1;
    int peak_used_ = 0;

private:
    void check_ids(const std::vector<int>& ids) const;
    void reserve(int seq, size_t n);

    // The decode step started ahead (decode_sample's `ahead`), while it is in flight: its
    // sequences (-1 for one freed since), the ids it was fed, its sampling and steps.
    struct Ahead {
        std::vector<int> seqs, ids;
        std::vector<SamplingParams> s;
        std::vector<uint64_t> steps;
    };
    std::optional<Ahead> ahead_;
    // decode_sample's pipelined path (engine.cpp), and the start of the step after `steps`.
    std::vector<int> decode_pipelined(const std::vector<int>& seqs, const std::vector<int>& ids,
                                      const std::vector<SamplingParams>& s, const std::vector<uint64_t>& steps,
                                      const std::vector<int>& at, bool ahead);
    void start_ahead(const std::vector<int>& seqs, const int* ids, const std::vector<SamplingParams>& s,
                     const std::vector<uint64_t>& steps);
    // Where each of seqs is in the step ahead, fed ids[b] at steps[b] with s[b]; empty when it
    // is not that step (or none is in flight).
    std::vector<int> find_ahead(const std::vector<int>& seqs, const std::vector<int>& ids,
                                const std::vector<SamplingParams>& s, const std::vector<uint64_t>& steps) const;
    void drop_ahead();
    // Whether every one of seqs has room (context and pool) for one more token after this step.
    bool room_for_next(const std::vector<int>& seqs) const;
};

// How the KV cache stores keys and values (--kv-dtype). Same: in the engine's own storage type,
// fp32 on the CPU, the --dtype's on the GPU. FP8: each (token, KV head) row of head_dim values as
// E4M3 codes with one fp32 scale (src/fp8.h).
enum class KvDType { Same, FP8 };

// progress (may be null) counts the checkpoint bytes as they load (weights.h). tp_ranks > 1:
// the forward pass simulates that many tensor-parallel ranks (tensor_parallel.h) in one
// process, each with its shard of the weights and KV cache, their partial sums added where the
// GPUs would all-reduce them (tests: the split must reproduce the unsplit model). cp_ranks > 1:
// a prompt's attention (from position 0) is computed as a ring of that many GPUs would
// (context_parallel.h), each for the queries of its chunks. kv FP8: the pools stay fp32 but hold
// what an FP8 cache gives back (each row rounded through fp8_round_trip as it is written); not
// with cp_ranks > 1, whose ring reads the new rows before they are rounded.
std::unique_ptr<Engine> make_cpu_engine(const ModelConfig& c, const Checkpoint& ckpt, int max_seq, int kv_blocks = 0,
                                        LoadProgress* progress = nullptr, int tp_ranks = 1, int cp_ranks = 1,
                                        KvDType kv = KvDType::Same);

// FP8: bf16 activations and KV cache, the linear layers' weights in FP8 E4M3 (fp8.h), their
// inputs in fp16 (cuda_engine.cu, CudaEngine::A).
enum class DeviceDType { BF16, F16, F32, FP8 };
bool cuda_available();   // false when built without CUDA or no GPU is present
// Why the CUDA engine cannot run this model's shape (e.g. its head size), or "" when it can.
std::string cuda_unsupported_reason(const ModelConfig& c);
// ckpt == nullptr: random weights (benchmarks at real sizes without a checkpoint).
// max_batch: the most sequences one decode step may carry. max_chunk: the most rows a prefill
// runs at once (0: the largest that memory allows, 4096 to 16384; the tests set a small one).
// tp > 1: tensor parallel over GPUs 0 .. tp-1 through NCCL (tensor_parallel.h). cp > 1: context
// parallel, a long prompt's prefill shared by GPUs 0 .. cp-1, each with the whole model
// (context_parallel.h); not both. kv: the KV cache's storage (KvDType).
std::unique_ptr<Engine> make_cuda_engine(const ModelConfig& c, const Checkpoint* ckpt, int max_seq, DeviceDType dt,
                                         int kv_blocks = 0, int max_batch = 64, LoadProgress* progress = nullptr,
                                         int max_chunk = 0, int tp = 1, int cp = 1, KvDType kv = KvDType::Same);
int cuda_device_count();   // 0 without CUDA

}  // namespace olmo
