// test_batching.cpp: the paged KV cache (issue 6): block bookkeeping, forks and copy on write,
// sliding-window release, pool exhaustion, no leaks over 1000 sequences; batched generation
// equal to one-at-a-time generation; a prompt longer than a prefill chunk; beam search equal to transformers' on every fixture and
// the default model. CPU engine always; the CUDA engine (fp32 and bf16) when a GPU is present.
#include <numeric>

#include "decoding.h"
#include "golden.h"
#include "test_util.h"
#include "tokenizer.h"

using namespace olmo;
using namespace olmo::test;

namespace {

TEST(KvCache, BlocksForksCopyOnWriteAndRelease) {
    KvCache kv({8, 0}, 4, 0);
    int a = kv.new_sequence();
    EXPECT_TRUE(kv.reserve(a, 6).empty());   // 2 blocks
    kv.commit(a, 6);
    EXPECT_EQ(kv.free_blocks(0), 6);
    EXPECT_EQ(kv.row(a, 0, 5), kv.table(a, 0)[1] * 4 + 1);
    int b = kv.fork(a);                       // shares both blocks
    EXPECT_EQ(kv.free_blocks(0), 6);
    auto copies = kv.reserve(b, 1);           // writes position 6: block 1 is shared -> copied
    ASSERT_EQ(copies.size(), 1u);
    EXPECT_EQ(copies[0].src, kv.table(a, 0)[1]);
    EXPECT_EQ(copies[0].dst, kv.table(b, 0)[1]);
    EXPECT_EQ(kv.table(a, 0)[0], kv.table(b, 0)[0]);   // block 0 still shared
    kv.commit(b, 1);
    EXPECT_TRUE(kv.reserve(a, 2).empty());     // a's block 1 is no longer shared; +0 blocks
    kv.free(a);
    kv.free(b);
    EXPECT_EQ(kv.free_blocks(0), 8);
}

// blocks_to_reserve counts what reserve takes: new blocks, plus one for a shared block that the
// first write copies; 0 for a kind the pool does not have.
TEST(KvCache, BlocksToReserveCountsWhatReserveTakes) {
    KvCache kv({16, 0}, 4, 0);
    const int a = kv.new_sequence();
    EXPECT_EQ(kv.blocks_to_reserve(a, 6, 0), 2);
    EXPECT_EQ(kv.blocks_to_reserve(a, 6, 1), 0);
    kv.reserve(a, 6);
    kv.commit(a, 6);
    EXPECT_EQ(kv.blocks_to_reserve(a, 2, 0), 0);   // positions 6, 7: block 1 has room
    EXPECT_EQ(kv.blocks_to_reserve(a, 3, 0), 1);   // position 8 opens block 2
    const int b = kv.fork(a);
    EXPECT_EQ(kv.blocks_to_reserve(b, 1, 0), 1);   // block 1 is shared: copied on write
    const int before = kv.free_blocks(0);
    kv.reserve(b, 3);
    EXPECT_EQ(before - kv.free_blocks(0), 2);
}

// A fresh pool, and a pool whose sequences were freed, deal a new sequence consecutive blocks in
// counting order (the Hopper prefill then copies whole tiles of pages at once).
TEST(KvCache, NewSequencesGetBlocksInCountingOrder) {
    KvCache kv({32, 0}, 4, 0);
    auto counts_up = [&](int seq) {
        const std::vector<int>& t = kv.table(seq, 0);
        for (size_t j = 1; j < t.size(); j++)
            if (t[j] != t[j - 1] + 1) return false;
        return true;
    };
    int a = kv.new_sequence();
    kv.reserve(a, 40);  // 10 blocks
    kv.commit(a, 40);
    EXPECT_TRUE(counts_up(a));
    int b = kv.new_sequence();
    kv.reserve(b, 20);
    kv.commit(b, 20);
    EXPECT_TRUE(counts_up(b));
    kv.free(a);
    kv.free(b);
    int c = kv.new_sequence();
    kv.reserve(c, 60);  // 15 blocks: b's 5 (freed last), then a's 10, each run in counting order
    kv.commit(c, 60);
    const std::vector<int> t = kv.table(c, 0);
    const std::vector<int> expected = {10, 11, 12, 13, 14, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    EXPECT_EQ(t, expected);
    kv.free(c);
    int d = kv.new_sequence();
    kv.reserve(d, 60);
    kv.commit(d, 60);
    EXPECT_EQ(kv.table(d, 0), t);  // the same blocks, in the same order
}

TEST(KvCache, ExhaustionIsAnErrorAndChangesNothing) {
    KvCache kv({3, 0}, 4, 0);
    int a = kv.new_sequence();
    kv.reserve(a, 8);
    kv.commit(a, 8);
    int b = kv.new_sequence();
    expect_error([&] { kv.reserve(b, 8); }, {"KV cache pool exhausted", "2 more blocks", "1 free of 3"});
    EXPECT_EQ(kv.free_blocks(0), 1);
    EXPECT_TRUE(kv.table(b, 0).empty());
}

TEST(KvCache, SlidingBlocksReturnToThePool) {
    KvCache kv({16, 16}, 4, 6);                // window 6
    int a = kv.new_sequence();
    for (int pos = 0; pos < 40; pos++) {
        kv.reserve(a, 1);
        kv.commit(a, 1);
        // The next query (position pos + 1) sees keys pos - 4 .. pos + 1: those rows stay.
        for (int p = std::max(0, pos - 4); p <= pos; p++) EXPECT_GE(kv.row(a, KvCache::kSliding, p), 0);
    }
    EXPECT_EQ(kv.total_blocks(1) - kv.free_blocks(1), 2);   // only the window's blocks (32..39) are held
    EXPECT_EQ(kv.free_blocks(0), 6);                          // full layers keep all 10
    expect_error([&] { kv.row(a, KvCache::kSliding, 0); }, {"released"});
}

// A tiny random model for the engine-level tests.
struct Tiny {
    std::string dir = temp_dir();
    ModelConfig cfg = [&] { write_random_checkpoint(dir, tiny_olmo2_config()); return load_config(dir); }();
    Checkpoint ckpt{dir};
};

TEST(Engine, ThousandShortSequencesLeakNothing) {
    Tiny t;
    auto eng = make_cpu_engine(t.cfg, t.ckpt, 64, 40);
    const int total = eng->kv_cache().total_blocks(0);
    std::vector<Request> reqs;
    for (int i = 0; i < 1000; i++) reqs.push_back({{1 + i % 50, 2, 3 + i % 7}, {}, 1 + i % 5});
    auto out = generate(*eng, reqs, {});
    for (int i = 0; i < 1000; i++) ASSERT_EQ((int)out[i].size(), 1 + i % 5);
    EXPECT_EQ(eng->kv_cache().free_blocks(0), total);
}

TEST(Engine, RequestTooLargeForThePoolIsRefused) {
    Tiny t;
    auto eng = make_cpu_engine(t.cfg, t.ckpt, 64, 2);
    expect_error([&] { generate(*eng, {{{1, 2, 3}, {}, 40}}, {}); }, {"does not fit the KV pool"});
}

// Batched greedy generation of several prompts equals generating each alone; with a pool too
// small for all at once, requests queue and the results are still the same.
void check_batched_equals_single(const std::function<std::unique_ptr<Engine>(int kv_blocks)>& make, int vocab) {
    std::vector<Request> reqs;
    std::mt19937 rng(7);
    for (int len : {1, 5, 17, 33, 2, 64}) {
        Request r;
        for (int i = 0; i < len; i++) r.prompt.push_back(rng() % vocab);
        r.max_new_tokens = 12 + len % 5;
        reqs.push_back(r);
    }
    std::vector<std::vector<int>> alone;
    auto eng = make(0);
    for (const Request& r : reqs) alone.push_back(generate(*eng, {r}, {})[0]);
    auto batched = make(64 * 6 / 16 + 12);
    EXPECT_EQ(generate(*batched, reqs, {}), alone);
    auto queued = make(12);   // room for about two requests at a time
    EXPECT_EQ(generate(*queued, reqs, {}), alone);
    EXPECT_EQ(queued->kv_cache().free_blocks(0), queued->kv_cache().total_blocks(0));
}

TEST(Engine, BatchedGreedyEqualsSingleCpu) {
    Fixture f("olmo2_gqa");
    check_batched_equals_single([&](int kv) { return make_cpu_engine(f.cfg, f.ckpt, 128, kv); }, f.cfg.vocab);
}

TEST(Engine, BatchedGreedyEqualsSingleGpu) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU batching test skipped";
    for (const char* name : {"olmo2_gqa", "olmo3_swa_yarn"}) {
        Fixture f(name);
        check_batched_equals_single([&](int kv) { return make_cuda_engine(f.cfg, &f.ckpt, 128, DeviceDType::F32, kv, 8); },
                                    f.cfg.vocab);
    }
}

// Engine::warm_up runs a request like the first one on scratch sequences (and, for a prompt
// longer than the rehearsal, the products of its chunks' row counts on scratch buffers: 100
// tokens in chunks of 64 here): afterwards every block is free again and generation (greedy,
// sampled, batched, beams) is what it is without.
TEST(Engine, WarmUpChangesNothingGpu) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU warm-up test skipped";
    Fixture f("olmo3_swa_yarn");
    std::vector<Request> reqs;
    for (int k = 0; k < 3; k++) reqs.push_back({{5, 9, 2, 7, 1 + k}, {0.9f, 20, 0.9f, 11u + k}, 10});
    for (DeviceDType dt : {DeviceDType::F32, DeviceDType::BF16}) {
        auto cold = make_cuda_engine(f.cfg, &f.ckpt, 64, dt, 64, 4);
        const auto want = generate(*cold, reqs, {});
        const BeamResult want_beams = beam_search(*cold, reqs[0].prompt, 3, 8, 1.0f, {});
        auto warm = make_cuda_engine(f.cfg, &f.ckpt, 64, dt, 64, 4);
        warm->warm_up({5, 3, {reqs[0].sampling, reqs[1].sampling, reqs[2].sampling}});
        warm->warm_up({5, 3, {}});
        warm->warm_up({100, 1, {}});
        const KvCache& kv = warm->kv_cache();
        EXPECT_EQ(kv.free_blocks(0) + kv.free_blocks(1), kv.total_blocks(0) + kv.total_blocks(1));
        EXPECT_EQ(generate(*warm, reqs, {}), want);
        EXPECT_EQ(beam_search(*warm, reqs[0].prompt, 3, 8, 1.0f, {}).tokens, want_beams.tokens);
    }
}

// A pool too small for the warm-up's batch: the batch shrinks, nothing fails.
TEST(Engine, WarmUpFitsAnySmallPoolGpu) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU warm-up test skipped";
    Fixture f("olmo2_gqa");
    auto eng = make_cuda_engine(f.cfg, &f.ckpt, 64, DeviceDType::BF16, 2, 8);
    eng->warm_up({40, 8, {}});
    EXPECT_EQ(eng->kv_cache().free_blocks(0), eng->kv_cache().total_blocks(0));
    EXPECT_EQ(generate(*eng, {{{1, 2, 3}, {}, 5}}, {})[0].size(), 5u);
}

// A prompt longer than a prefill chunk (4096 rows here, the smallest the engine picks): the
// first chunk leaves only its K/V, and the last layer of the second carries on with the
// prompt's last row alone (its attention by the decode kernel). fp32: the prompt's logits and the next step's equal the CPU engine's.
// bf16: they equal those of the same engine with a tensor hook set, which keeps every row.
TEST(Engine, PrefillLongerThanAChunkGpu) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU prefill test skipped";
    const TinyCheckpoint m({{"hidden_size", 128}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},  // hd 64, GQA 2
                            {"vocab_size", 4099}, {"max_position_embeddings", 8192}});
    const ModelConfig& cfg = m.cfg;
    const Checkpoint& ckpt = m.ckpt;
    const std::vector<int> prompt = random_ids(4096 + 77, cfg.vocab, 5);
    const int max_seq = (int)prompt.size() + 1;
    auto logits = [&](Engine& e) {   // the prompt's last logits, then the next step's
        e.reset();
        std::vector<float> z = e.forward(prompt), next = e.forward({17});
        z.insert(z.end(), next.begin(), next.end());
        return z;
    };
    auto cpu = make_cpu_engine(cfg, ckpt, max_seq);
    const std::vector<float> want = logits(*cpu);
    auto f32 = make_cuda_engine(cfg, &ckpt, max_seq, DeviceDType::F32, 0, 1, nullptr, 4096);
    const std::vector<float> got = logits(*f32);
    ASSERT_EQ(got.size(), want.size());
    const Diff d = compare(got.data(), want.data(), got.size());
    std::printf("gpu fp32 vs cpu, prompt of %zu: rel-L2 %.2e, max-abs %.2e\n", prompt.size(), d.rel_l2, d.max_abs);
    EXPECT_LE(d.rel_l2, 1e-4);

    auto bf16 = make_cuda_engine(cfg, &ckpt, max_seq, DeviceDType::BF16, 0, 1, nullptr, 4096);
    const std::vector<float> pruned = logits(*bf16);
    bf16->hook = [](const std::string&, const float*, int, int) {};
    const std::vector<float> every_row = logits(*bf16);
    const Diff b = compare(pruned.data(), every_row.data(), pruned.size());
    std::printf("gpu bf16, last row alone vs every row: rel-L2 %.2e, max-abs %.2e\n", b.rel_l2, b.max_abs);
    EXPECT_LE(b.rel_l2, 1e-2);
}

// More query heads per KV head than a decode tile's 16 rows (MQA: 32 heads on one KV head,
// head size 64): the bf16 engine's logits for a prompt and 3 decode steps against the CPU
// engine's, within the golden tests' bf16 bar.
TEST(Engine, MultiQueryAttentionGpu) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU MQA test skipped";
    const TinyCheckpoint m({{"hidden_size", 128}, {"num_attention_heads", 32}, {"num_key_value_heads", 1}, {"head_dim", 64}});
    const ModelConfig& cfg = m.cfg;
    const Checkpoint& ckpt = m.ckpt;
    auto logits = [&](Engine& e) {
        std::vector<float> z = e.forward({3, 14, 15, 9, 26, 5, 35});
        for (int id : {8, 9, 7}) {
            const std::vector<float> step = e.forward({id});
            z.insert(z.end(), step.begin(), step.end());
        }
        return z;
    };
    auto cpu = make_cpu_engine(cfg, ckpt, 16);
    auto gpu = make_cuda_engine(cfg, &ckpt, 16, DeviceDType::BF16, 0, 1);
    const std::vector<float> want = logits(*cpu), got = logits(*gpu);
    ASSERT_EQ(got.size(), want.size());
    const Diff d = compare(got.data(), want.data(), got.size());
    std::printf("gpu bf16 vs cpu, 32 query heads on 1 KV head: rel-L2 %.2e, max-abs %.2e\n", d.rel_l2, d.max_abs);
    EXPECT_LE(d.rel_l2, 2e-2);
}

// The prefill chunk is the largest of 16384, 8192 and 4096 rows that memory allows, within the
// context: a tiny model gets the buffers of 16384 rows, more than with 4096 set by hand, and a
// context of 3000 tokens caps both at 3000.
TEST(Engine, PrefillChunkByMemoryGpu) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU prefill test skipped";
    const TinyCheckpoint m(json{{"max_position_embeddings", 32768}});
    auto buffers = [&](int max_seq, int max_chunk) {
        return make_cuda_engine(m.cfg, &m.ckpt, max_seq, DeviceDType::BF16, 0, 1, nullptr, max_chunk)->memory().other;
    };
    EXPECT_GT(buffers(20000, 0), buffers(20000, 4096));
    EXPECT_EQ(buffers(20000, 0), buffers(20000, 16384));
    EXPECT_EQ(buffers(3000, 0), buffers(3000, 4096));
}

// Beam search ids equal transformers' generate(num_beams=N, do_sample=False).
std::vector<int> until_eos(std::vector<int> ids, const std::vector<int>& eos) {
    for (size_t i = 0; i < ids.size(); i++)
        if (std::find(eos.begin(), eos.end(), ids[i]) != eos.end()) return std::vector<int>(ids.begin(), ids.begin() + i + 1);
    return ids;
}

class Beams : public ::testing::TestWithParam<std::string> {};

void check_beams(Engine& eng, const SafeTensorsFile& g, const std::vector<int>& prompt, const std::string& suffix,
                 int max_new, const std::vector<int>& eos) {
    for (int n : {2, 4}) {
        const TensorView* want = g.find("beam" + std::to_string(n) + suffix);
        ASSERT_NE(want, nullptr);
        BeamResult r = beam_search(eng, prompt, n, max_new, 1.0f, eos);
        EXPECT_EQ(r.tokens, until_eos(to_i32(*want), eos)) << n << " beams";
    }
    const KvCache& kv = eng.kv_cache();   // every beam's blocks went back to the pool
    EXPECT_EQ(kv.free_blocks(0) + kv.free_blocks(1), kv.total_blocks(0) + kv.total_blocks(1));
}

TEST_P(Beams, CpuEqualsTransformers) {
    Fixture f(GetParam());
    auto eng = make_cpu_engine(f.cfg, f.ckpt, 64, 64);
    check_beams(*eng, f.golden, to_i32(*f.golden.find("prompt_ids")), "_ids", 16, f.cfg.eos_ids);
}

TEST_P(Beams, GpuFp32EqualsTransformers) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU beam test skipped";
    Fixture f(GetParam());
    auto eng = make_cuda_engine(f.cfg, &f.ckpt, 64, DeviceDType::F32, 64, 8);
    check_beams(*eng, f.golden, to_i32(*f.golden.find("prompt_ids")), "_ids", 16, f.cfg.eos_ids);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Beams, ::testing::ValuesIn(list_fixtures()), [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Beams);

// The default model, where eos does end hypotheses early.
void check_default_model_beams(Engine& eng) {
    SafeTensorsFile g("tests/default_model/golden.safetensors");
    int checked = 0;
    for (int k = 0; g.find("beamprompt_" + std::to_string(k)); k++, checked++)
        check_beams(eng, g, to_i32(*g.find("beamprompt_" + std::to_string(k))), "_" + std::to_string(k), 32,
                    eng.config().eos_ids);
    if (!checked) GTEST_SKIP() << "no beam references in tests/default_model/golden.safetensors";
}

TEST(DefaultModelBeams, CpuEqualsTransformers) {
    ModelConfig cfg = load_config("weights");
    Checkpoint ck("weights");
    auto eng = make_cpu_engine(cfg, ck, 128, 64);
    check_default_model_beams(*eng);
}

TEST(DefaultModelBeams, GpuFp32EqualsTransformers) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU beam test skipped";
    ModelConfig cfg = load_config("weights");
    Checkpoint ck("weights");
    auto eng = make_cuda_engine(cfg, &ck, 128, DeviceDType::F32, 64, 8);
    check_default_model_beams(*eng);
}

}  // namespace
