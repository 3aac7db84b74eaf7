// test_pipelined.cpp: pipelined decode (Engine::decode_sample's `ahead`, generate()'s default):
// the next step starts before the current one's ids reach the host, fed them on the device.
//
// On the CPU, an engine whose "model" is a formula runs the Engine's own bookkeeping of the step
// ahead (which step is running, which sequences it serves, what it reserved and committed,
// when it is dropped) with steps queued as a GPU's would be; its tokens depend on the position,
// the draw counter and the token fed, so a step run at the wrong place gives other ids. On the
// GPU, the CUDA engine's ids equal those of the same engine without pipelining: greedy and
// sampled, one request and batches whose requests end at different steps, and the chat's loop.
#include <deque>

#include "decoding.h"
#include "golden.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

// Token ids of the formula model: the token after `id` at position `pos`, drawn at counter
// `step`; -1 (non-finite logits) at position poison.
struct Formula {
    int vocab = 97, poison = -1;
    int next(int id, int pos, uint64_t step) const {
        return pos == poison ? -1 : (int)((id * 131 + pos * 7 + (int)step * 13 + 3) % vocab);
    }
};

// Two layers, one with a sliding window of 20 keys (so blocks leave the window as it runs), and
// a pipelined decode whose steps wait in a queue until finished or dropped.
class FormulaEngine : public Engine {
public:
    Formula f;
    int stepped = 0;                // decode steps run start to finish (decode_impl)
    int started = 0, dropped = 0;   // pipelined steps started (ahead or not), and dropped

    FormulaEngine(int max_seq, int kv_blocks) {
        c_.vocab = f.vocab;
        c_.n_layers = 2;
        c_.layer_sliding = {false, true};
        c_.sliding_window = 20;
        init_kv(c_, max_seq, kv_blocks);
    }
    const ModelConfig& config() const override { return c_; }
    MemoryUse memory() const override { return with_pool_use({}); }
    bool pipelined() const override { return true; }

protected:
    void prefill_impl(int seq, const std::vector<int>& ids, float* logits, int* id, const SamplingParams&,
                      uint64_t step) override {
        const int last = kv_->len(seq) + (int)ids.size() - 1;
        one_hot(logits, f.next(ids.back(), last, 0));
        if (id) *id = f.next(ids.back(), last, step);
    }
    void score_impl(int, const std::vector<int>& ids, float* logprobs) override {
        std::fill(logprobs, logprobs + ids.size() - 1, 0.0f);
    }
    void decode_impl(const std::vector<int>& seqs, const std::vector<int>& ids, float* logits, int* ids_out,
                     const std::vector<SamplingParams>&, const std::vector<uint64_t>& steps) override {
        stepped++;
        for (size_t b = 0; b < seqs.size(); b++) {
            check_reserved(seqs[b]);
            if (logits) one_hot(logits + b * c_.vocab, f.next(ids[b], kv_->len(seqs[b]), 0));
            if (ids_out) ids_out[b] = f.next(ids[b], kv_->len(seqs[b]), steps[b]);
        }
    }
    void copy_block(int, int, int) override {}

    void decode_start(const std::vector<int>& seqs, const int* ids, const std::vector<SamplingParams>&,
                      const std::vector<uint64_t>& steps) override {
        EXPECT_LT(queue_.size(), 2u) << "more than two steps in flight";
        if (!ids) {
            EXPECT_EQ(drawn_.size(), seqs.size()) << "fed by a step of another batch";
        }
        std::vector<int> out(seqs.size());
        for (size_t b = 0; b < seqs.size(); b++) {
            check_reserved(seqs[b]);
            out[b] = f.next(ids ? ids[b] : drawn_[b], kv_->len(seqs[b]), steps[b]);
        }
        drawn_ = out;
        queue_.push_back(out);
        started++;
    }
    void decode_finish(int* ids_out) override {
        ASSERT_FALSE(queue_.empty()) << "no step in flight";
        std::copy(queue_.front().begin(), queue_.front().end(), ids_out);
        queue_.pop_front();
    }
    void decode_drop() override {
        dropped += (int)queue_.size();
        queue_.clear();
    }

private:
    ModelConfig c_;
    std::deque<std::vector<int>> queue_;   // the steps in flight, oldest first: their ids
    std::vector<int> drawn_;               // the ids the latest step drew (what a fed step reads)

    // The row of the token at position len(seq) is reserved in both kinds of layers.
    void check_reserved(int seq) const {
        for (int k = 0; k < 2; k++) EXPECT_NO_THROW((void)kv_->row(seq, k, kv_->len(seq))) << "sequence " << seq;
    }
    void one_hot(float* logits, int id) const {
        if (!logits) return;
        std::fill(logits, logits + c_.vocab, 0.0f);
        if (id >= 0) logits[id] = 1.0f;
        else logits[0] = NAN;
    }
};

bool all_free(const Engine& e) {
    const KvCache& kv = e.kv_cache();
    return kv.free_blocks(0) + kv.free_blocks(1) == kv.total_blocks(0) + kv.total_blocks(1);
}

// Requests of different lengths (1 to 40 new tokens), two with eos ids that end them early.
std::vector<Request> mixed_requests(int vocab) {
    std::vector<Request> reqs;
    std::mt19937 rng(3);
    for (int n : {40, 1, 23, 2, 37, 30}) {
        Request r;
        for (int i = 0; i < 1 + n % 7; i++) r.prompt.push_back(rng() % vocab);
        r.max_new_tokens = n;
        r.sampling = SamplingParams{0.8f, 10, 0.9f, 5u + (uint64_t)n};
        reqs.push_back(r);
    }
    return reqs;
}

// generate(): the same ids pipelined or not, with requests ending by length, by eos and by the
// callback; blocks all returned. Each request that ends while others run leaves the step ahead
// to them: the pipelined run makes at most one step more than the step-by-step one (started
// after the last token), and most of its steps are pipelined (a step after which a request
// reaches its length is not started ahead).
TEST(Pipelined, GenerateEqualsStepByStep) {
    for (int eos : {-1, 5, 60}) {
        const std::vector<int> stop = eos < 0 ? std::vector<int>{} : std::vector<int>{eos};
        FormulaEngine plain(64, 64), piped(64, 64);   // room for every request at once
        const std::vector<Request> reqs = mixed_requests(plain.f.vocab);
        auto told = [](const NewToken& t) { return t.req == 4 && t.id % 5 == 0; };   // a stop string, say
        const auto want = generate(plain, reqs, stop, told, /*pipelined=*/false);
        const auto got = generate(piped, reqs, stop, told, /*pipelined=*/true);
        EXPECT_EQ(got, want) << "eos " << eos;
        EXPECT_EQ(plain.started, 0);
        const int steps = piped.stepped + piped.started;
        EXPECT_GE(steps, plain.stepped) << "eos " << eos;
        EXPECT_LE(steps, plain.stepped + 1) << "eos " << eos;
        EXPECT_GT(piped.started, plain.stepped / 2) << "eos " << eos;
        EXPECT_LE(piped.dropped, 1) << "eos " << eos;
        std::printf("eos %d: %d steps step by step; pipelined %d started, %d dropped, %d step by step\n", eos,
                    plain.stepped, piped.started, piped.dropped, piped.stepped);
        EXPECT_TRUE(all_free(piped));
        EXPECT_TRUE(all_free(plain));
    }
}

// A pool too small for all requests at once: they queue; no step is started ahead while one
// waits, and the ids are the same.
TEST(Pipelined, QueuedRequestsEqualStepByStep) {
    FormulaEngine plain(64, 12), piped(64, 12);
    const std::vector<Request> reqs = mixed_requests(plain.f.vocab);
    EXPECT_EQ(generate(piped, reqs, {}, nullptr, true), generate(plain, reqs, {}, nullptr, false));
    EXPECT_EQ(piped.dropped, 0);
    EXPECT_TRUE(all_free(piped));
}

// The contract, call by call: a step ahead runs for the sequences that ask for it (all or some),
// and anything else drops it.
TEST(Pipelined, StepAheadIsTakenOrDropped) {
    FormulaEngine e(64, 0);
    FormulaEngine ref(64, 0);   // the same calls, step by step
    const SamplingParams s;
    std::vector<int> seqs, rseqs;
    for (int k = 0; k < 3; k++) {
        seqs.push_back(e.new_sequence());
        rseqs.push_back(ref.new_sequence());
        e.prefill(seqs[k], {1 + k, 2, 3});
        ref.prefill(rseqs[k], {1 + k, 2, 3});
    }
    std::vector<int> ids{7, 8, 9};
    std::vector<uint64_t> steps{1, 1, 1};
    auto both = [&](const std::vector<int>& pick, bool ahead) {   // decode the sequences at `pick`
        std::vector<int> q, rq, in;
        std::vector<uint64_t> st;
        for (int b : pick) q.push_back(seqs[b]), rq.push_back(rseqs[b]), in.push_back(ids[b]), st.push_back(steps[b]);
        const std::vector<SamplingParams> sp(pick.size(), s);
        const std::vector<int> got = e.decode_sample(q, in, sp, st, nullptr, ahead);
        EXPECT_EQ(got, ref.decode_sample(rq, in, sp, st));
        for (size_t j = 0; j < pick.size(); j++) ids[pick[j]] = got[j], steps[pick[j]]++;
        for (int b : pick) EXPECT_EQ(e.seq_len(seqs[b]), ref.seq_len(rseqs[b]));
    };
    both({0, 1, 2}, true);                 // this step and the next start
    EXPECT_EQ(e.started, 2);
    both({0, 1, 2}, true);                 // runs; the next is fed on the device
    EXPECT_EQ(e.started, 3);
    both({0, 2}, true);                    // some of it: taken; the next starts from the host's ids
    EXPECT_EQ(e.started, 4);
    EXPECT_EQ(e.dropped, 0);
    ids[0] = (ids[0] + 1) % 97;            // another id than the one drawn: dropped, run anew
    both({0, 2}, true);
    EXPECT_EQ(e.dropped, 1);
    EXPECT_EQ(e.started, 6);
    const int len = e.seq_len(seqs[1]);    // a prefill drops it too, and sees no uncommitted token
    e.prefill(seqs[1], {4});
    ref.prefill(rseqs[1], {4});
    EXPECT_EQ(e.dropped, 2);
    EXPECT_EQ(e.seq_len(seqs[1]), len + 1);
    both({0, 2}, false);                   // nothing ahead: step by step
    EXPECT_EQ(e.started, 6);

    // A sequence freed while the step ahead serves it, and its number given to a new sequence:
    // asked for with the very id and step the old one had, that is not the step ahead's.
    both({0, 2}, true);
    e.free_sequence(seqs[0]);
    ref.free_sequence(rseqs[0]);
    EXPECT_EQ(e.new_sequence(), seqs[0]);
    rseqs[0] = ref.new_sequence();
    both({0}, false);                      // position 0 of the new sequence
    EXPECT_EQ(e.dropped, 3);
}

// The default sequence's loop (forward_sample, as the chat runs it), pipelined: the same ids.
std::vector<int> forward_loop(Engine& e, const SamplingParams& s, bool ahead) {
    e.reset();
    std::vector<int> out{e.forward_sample({3, 1, 4, 1, 5}, s, 0)};
    for (int k = 1; k < 20; k++) out.push_back(e.forward_sample({out.back()}, s, k, ahead && k + 1 < 20));
    return out;
}

TEST(Pipelined, ForwardSampleLoopEqualsStepByStep) {
    FormulaEngine e(64, 0);
    const std::vector<int> want = forward_loop(e, {}, false);
    EXPECT_EQ(e.started, 0);
    EXPECT_EQ(forward_loop(e, {}, true), want);
    EXPECT_EQ(e.started, 19);   // the first decode step and 18 started ahead
    EXPECT_EQ(e.dropped, 0);
}

// The engine never starts a step past the context or the pool.
TEST(Pipelined, NoStepAheadWithoutRoom) {
    FormulaEngine e(8, 0);
    const int q = e.new_sequence();
    int id = e.prefill_sample(q, {1, 2, 3, 4, 5, 6}, {}, 0);   // 6 of 8 positions
    id = e.decode_sample({q}, {id}, {SamplingParams{}}, {1}, nullptr, true)[0];    // position 6; 7 is ahead
    EXPECT_EQ(e.started, 2);
    id = e.decode_sample({q}, {id}, {SamplingParams{}}, {2}, nullptr, true)[0];    // position 7: the last
    EXPECT_EQ(e.started, 2);
    EXPECT_EQ(e.seq_len(q), 8);
    EXPECT_EQ(e.dropped, 0);
}

// Non-finite logits in a step with one started after it: a clear error, the step ahead dropped,
// the engine usable afterwards.
TEST(Pipelined, NonFiniteLogitsDropTheStepAhead) {
    FormulaEngine e(64, 0);
    e.f.poison = 9;   // the step at position 9 gives -1
    expect_error([&] { generate(e, {{{1, 2, 3}, {}, 20}}, {}); }, {"not finite"});
    EXPECT_EQ(e.dropped, 1);
    e.reset();
    e.f.poison = -1;
    EXPECT_EQ(generate(e, {{{1, 2, 3}, {}, 20}}, {})[0].size(), 20u);
    EXPECT_TRUE(all_free(e));
}

// The CUDA engine: pipelined ids equal step-by-step ids, greedy and sampled, with eos ids taken
// from the step-by-step run so that requests end at different steps; fp32 and bf16.
TEST(Pipelined, GpuEqualsStepByStep) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU pipelined-decode test skipped";
    for (const char* name : {"olmo2_gqa", "olmo3_swa_yarn"}) {
        Fixture f(name);
        for (DeviceDType dt : {DeviceDType::F32, DeviceDType::BF16}) {
            auto eng = make_cuda_engine(f.cfg, &f.ckpt, 128, dt, 0, 8);
            std::vector<Request> reqs = mixed_requests(f.cfg.vocab);
            reqs[1].sampling = reqs[3].sampling = SamplingParams{};   // greedy
            const auto free_run = generate(*eng, reqs, {}, nullptr, false);
            const std::vector<int> eos{free_run[0][6], free_run[2][17]};
            const auto want = generate(*eng, reqs, eos, nullptr, false);
            EXPECT_EQ(generate(*eng, reqs, eos, nullptr, true), want) << name;
            EXPECT_EQ(generate(*eng, {reqs[0]}, {}, nullptr, true)[0], free_run[0]) << name;
            EXPECT_TRUE(all_free(*eng));
            EXPECT_EQ(forward_loop(*eng, reqs[0].sampling, true), forward_loop(*eng, reqs[0].sampling, false)) << name;
        }
    }
}

}  // namespace
