// test_tensor_parallel.cpp: the Megatron-style split of a model over ranks (tensor_parallel.h)
// and the CPU engine's simulation of it (make_cpu_engine(..., tp_ranks)), and of ring attention
// for prompts (cp_ranks, context_parallel.h). The partition: each
// rank's rows and columns of every engine tensor, shards that tile the full tensor exactly once,
// the reasons a model cannot be split. The simulation: on tiny random checkpoints (OLMo-2 MHA and
// GQA, OLMo-3 with sliding-window and YaRN layers, OLMo-1 with clip_qkv), 2 and 4 ranks must
// reproduce the unsplit engine's logits (prefill, decode, a batch with a forked sequence) and
// every tensor the golden hook sees, to rel-L2 1e-5; on the golden fixtures, transformers'
// activations at the unsplit engine's bar.
#include "golden.h"
#include "tensor_parallel.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

constexpr Param kAllParams[] = {Param::Embed, Param::Wqkv, Param::Wo, Param::QNorm, Param::KNorm, Param::AttnNorm,
                                Param::FfNorm, Param::Wgu, Param::Wdown, Param::FinalNorm, Param::LmHead};

bool is_split(Param p) {
    return p == Param::Wqkv || p == Param::Wo || p == Param::QNorm || p == Param::KNorm || p == Param::Wgu ||
           p == Param::Wdown || p == Param::LmHead;
}

// H 64, 8 query heads and 4 KV heads of 8 (Q 64, KV 32), I 96, V 300: divisible by 1, 2 and 4.
ModelConfig split_config() {
    json j = tiny_olmo2_config();
    j.update({{"hidden_size", 64}, {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"intermediate_size", 96},
              {"vocab_size", 300}});
    return parse_config(j.dump(), "config.json");
}

std::vector<TpRange> ranges(std::initializer_list<TpRange> r) { return r; }

void expect_slice(const TpSlice& s, const std::vector<TpRange>& rows, TpRange cols, const char* what) {
    ASSERT_EQ(s.rows.size(), rows.size()) << what;
    for (size_t i = 0; i < rows.size(); i++) {
        EXPECT_EQ(s.rows[i].first, rows[i].first) << what << " row range " << i;
        EXPECT_EQ(s.rows[i].count, rows[i].count) << what << " row range " << i;
    }
    EXPECT_EQ(s.cols.first, cols.first) << what;
    EXPECT_EQ(s.cols.count, cols.count) << what;
}

// Rank 1 of 2 and rank 3 of 4 of split_config, written out: Q 64, KV 32, I 96.
TEST(TpSlice, RowsAndColumnsOfEachTensor) {
    const ModelConfig c = split_config();
    expect_slice(tp_slice(c, Param::Wqkv, 1, 2), ranges({{32, 32}, {80, 16}, {112, 16}}), {0, 64}, "wqkv 1/2");
    expect_slice(tp_slice(c, Param::Wo, 1, 2), ranges({{0, 64}}), {32, 32}, "wo 1/2");
    expect_slice(tp_slice(c, Param::QNorm, 1, 2), ranges({{32, 32}}), {0, 1}, "q_norm 1/2");
    expect_slice(tp_slice(c, Param::KNorm, 1, 2), ranges({{16, 16}}), {0, 1}, "k_norm 1/2");
    expect_slice(tp_slice(c, Param::Wgu, 1, 2), ranges({{48, 48}, {144, 48}}), {0, 64}, "wgu 1/2");
    expect_slice(tp_slice(c, Param::Wdown, 1, 2), ranges({{0, 64}}), {48, 48}, "wdown 1/2");
    expect_slice(tp_slice(c, Param::Wqkv, 3, 4), ranges({{48, 16}, {88, 8}, {120, 8}}), {0, 64}, "wqkv 3/4");
    expect_slice(tp_slice(c, Param::Wo, 3, 4), ranges({{0, 64}}), {48, 16}, "wo 3/4");
    expect_slice(tp_slice(c, Param::KNorm, 3, 4), ranges({{24, 8}}), {0, 1}, "k_norm 3/4");
    expect_slice(tp_slice(c, Param::Wgu, 3, 4), ranges({{72, 24}, {168, 24}}), {0, 64}, "wgu 3/4");
    expect_slice(tp_slice(c, Param::Wdown, 3, 4), ranges({{0, 64}}), {72, 24}, "wdown 3/4");
    expect_slice(tp_slice(c, Param::LmHead, 1, 2), ranges({{150, 150}}), {0, 64}, "lm_head 1/2");
    expect_slice(tp_slice(c, Param::LmHead, 3, 4), ranges({{225, 75}}), {0, 64}, "lm_head 3/4");
    for (Param p : {Param::Embed, Param::AttnNorm, Param::FfNorm, Param::FinalNorm}) {
        const ParamShape full = param_shape(c, p);
        expect_slice(tp_slice(c, p, 1, 2), ranges({{0, full.rows}}), {0, full.cols}, "a tensor not split");
    }
}

// For every tensor and 1, 2, 4 ranks: tp_shard holds what tp_slice names, in its order, with the
// shape of the tensor in tp_shard_config's model (the output layer: its tp_vocab rows); the
// shards of a split tensor cover each full element exactly once, the others are whole on every
// rank.
TEST(TpSlice, ShardsTileTheFullTensor) {
    const ModelConfig c = split_config();
    for (int ranks : {1, 2, 4})
        for (Param p : kAllParams) {
            const ParamShape full = param_shape(c, p), part = param_shape(tp_shard_config(c, ranks), p);
            std::vector<float> tensor(full.numel());
            for (size_t i = 0; i < tensor.size(); i++) tensor[i] = (float)i;   // each element names its place
            std::vector<int> hits(full.numel(), 0);
            for (int r = 0; r < ranks; r++) {
                const TpSlice s = tp_slice(c, p, r, ranks);
                const std::vector<float> shard = tp_shard(tensor.data(), c, p, r, ranks);
                const int64_t rows = p == Param::LmHead ? tp_vocab(c, r, ranks).count : part.rows;
                ASSERT_EQ((int64_t)shard.size(), rows * part.cols)
                    << "param " << (int)p << ", rank " << r << " of " << ranks;
                EXPECT_EQ(s.cols.count, part.cols);
                size_t k = 0;
                for (const TpRange& rows : s.rows)
                    for (int64_t row = rows.first; row < rows.first + rows.count; row++)
                        for (int64_t col = s.cols.first; col < s.cols.first + s.cols.count; col++, k++) {
                            const int64_t at = row * full.cols + col;
                            EXPECT_EQ(shard[k], (float)at);
                            hits[at]++;
                        }
            }
            const int want = is_split(p) ? 1 : ranks;
            EXPECT_EQ(std::count(hits.begin(), hits.end(), want), full.numel())
                << "param " << (int)p << " over " << ranks << " ranks";
        }
}

// The output layer's vocabulary split when the ranks do not divide V: consecutive ranges that
// cover [0, V) once, the last rank's the shortest.
TEST(TpSlice, VocabularyRangesCoverEveryRowOnce) {
    ModelConfig c = split_config();
    for (int64_t V : {300, 301, 100278, 7})
        for (int ranks : {1, 2, 3, 4, 7}) {
            c.vocab = V;
            int64_t next = 0;
            for (int r = 0; r < ranks; r++) {
                const TpRange v = tp_vocab(c, r, ranks);
                EXPECT_EQ(v.first, next) << "V " << V << ", rank " << r << " of " << ranks;
                EXPECT_EQ(v.count, std::min<int64_t>((V + ranks - 1) / ranks, V - next));
                next += v.count;
            }
            EXPECT_EQ(next, V) << "V " << V << " over " << ranks;
        }
}

// The --tp hint for a model too large for one GPU: the fewest GPUs present that split it.
TEST(TpSlice, SuggestionIsTheFewestGpusThatSplit) {
    ModelConfig c = split_config();   // 8 heads, 4 KV heads, I 96
    EXPECT_EQ(tp_suggestion(c, 1), 0) << "one GPU: nothing to suggest";
    EXPECT_EQ(tp_suggestion(c, 2), 2);
    EXPECT_EQ(tp_suggestion(c, 8), 2);
    c.n_kv_heads = 1;
    EXPECT_EQ(tp_suggestion(c, 8), 0) << "one KV head splits over no GPUs";
    c.n_heads = 6, c.n_kv_heads = 3;   // I 96: 3 divides all three, 2 does not divide 3 KV heads
    EXPECT_EQ(tp_suggestion(c, 2), 0);
    EXPECT_EQ(tp_suggestion(c, 4), 3);
}

// GQA: query head h reads KV head h / (nH/nKV); a rank's query heads read only its own KV heads.
TEST(TpSlice, RanksHoldTheKvHeadsTheirQueriesRead) {
    const ModelConfig c = split_config();
    const int hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
    for (int ranks : {2, 4})
        for (int r = 0; r < ranks; r++) {
            const TpSlice s = tp_slice(c, Param::Wqkv, r, ranks);
            const int64_t kv0 = (s.rows[1].first - c.q_dim()) / hd, kv_n = s.rows[1].count / hd;
            for (int64_t h = s.rows[0].first / hd; h < (s.rows[0].first + s.rows[0].count) / hd; h++) {
                EXPECT_GE(h / group, kv0);
                EXPECT_LT(h / group, kv0 + kv_n);
            }
        }
}

TEST(TpUnsupported, NamesTheQuantityThatDoesNotDivide) {
    const ModelConfig c = split_config();   // 8 query heads, 4 KV heads, I 96
    for (int ranks : {1, 2, 4}) EXPECT_EQ(tp_unsupported_reason(c, ranks), "") << ranks;
    auto expect_reason = [](const ModelConfig& m, int ranks, const std::string& what) {
        const std::string why = tp_unsupported_reason(m, ranks);
        EXPECT_NE(why.find(what), std::string::npos) << "--tp " << ranks << ": " << why;
        EXPECT_NE(why.find(std::to_string(ranks)), std::string::npos) << why;
    };
    expect_reason(c, 3, "query heads");
    expect_reason(c, 8, "KV heads");   // 8 query heads divide, 4 KV heads do not
    ModelConfig odd_i = c;
    odd_i.intermediate = 98;   // divides by 2, not by 4
    expect_reason(odd_i, 4, "intermediate size");
    EXPECT_NE(tp_unsupported_reason(c, 0).find("at least 1"), std::string::npos);
}

TEST(TpUnsupported, CpuEngineRefusesASplitThatDoesNotDivide) {
    TinyCheckpoint t(json::object());   // 4 query heads, 2 KV heads
    expect_error([&] { make_cpu_engine(t.cfg, t.ckpt, 32, 0, nullptr, 4); }, {"does not divide the KV heads (2)"});
    expect_error([&] { make_cpu_engine(t.cfg, t.ckpt, 32, 0, nullptr, 3); }, {"does not divide the query heads (4)"});
}

// --- the split engine against the unsplit one ---

struct Case {
    std::string name;
    json changes;   // over tiny_olmo2_config
};

const Case kCases[] = {
    {"olmo2_mha", {{"hidden_size", 64}, {"num_attention_heads", 4}, {"num_key_value_heads", 4},
                   {"intermediate_size", 128}, {"vocab_size", 300}}},
    {"olmo2_gqa_4q_2kv", {{"hidden_size", 64}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                          {"intermediate_size", 96}, {"vocab_size", 300}}},
    {"olmo2_gqa_8q_4kv", {{"hidden_size", 128}, {"num_attention_heads", 8}, {"num_key_value_heads", 4},
                          {"intermediate_size", 192}, {"vocab_size", 300}, {"tie_word_embeddings", true}}},
    {"olmo3_swa_yarn", {{"model_type", "olmo3"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                        {"num_key_value_heads", 2}, {"intermediate_size", 128}, {"vocab_size", 300},
                        {"max_position_embeddings", 128}, {"sliding_window", 5},
                        {"layer_types", {"sliding_attention", "full_attention"}},
                        {"rope_parameters",
                         {{"full_attention", {{"rope_type", "yarn"}, {"rope_theta", 500000.0}, {"factor", 4.0},
                                              {"original_max_position_embeddings", 32}, {"attention_factor", 1.2}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 500000.0}}}}}}},
    {"olmo1_clip", {{"model_type", "olmo"}, {"hidden_size", 64}, {"num_attention_heads", 4}, {"num_key_value_heads", 4},
                    {"intermediate_size", 128}, {"vocab_size", 300}, {"clip_qkv", 0.5}, {"tie_word_embeddings", true}}},
};

constexpr double kBar = 1e-5;

// Every logits vector of a fixed script: a prompt of 13 tokens and 4 decode steps of that
// sequence; then a second sequence's prompt, a fork of the first (copy on write of its shared
// last block) and 20 decode steps of the three at once (past a block boundary; the sliding
// layers' window moves past whole blocks).
struct Script {
    std::vector<float> prefill;
    std::vector<std::vector<float>> decode, batch;
};

Script run_script(Engine& e, int vocab) {
    Script out;
    const int a = e.new_sequence();
    out.prefill = e.prefill(a, random_ids(13, vocab, 1));
    const std::vector<int> steps = random_ids(4, vocab, 2);
    for (int id : steps) out.decode.push_back(e.decode({a}, {id}));
    const int b = e.new_sequence();
    e.prefill(b, random_ids(7, vocab, 3));
    const int beam = e.fork_sequence(a);
    const std::vector<int> ids = random_ids(3 * 20, vocab, 4);
    for (int s = 0; s < 20; s++)
        out.batch.push_back(e.decode({a, b, beam}, {ids[3 * s], ids[3 * s + 1], ids[3 * s + 2]}));
    return out;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
    EXPECT_EQ(got.size(), want.size());
    return compare(got.data(), want.data(), std::min(got.size(), want.size())).rel_l2;
}

double worst(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
    double w = 0;
    for (size_t i = 0; i < want.size() && i < got.size(); i++) w = std::max(w, rel_l2(got[i], want[i]));
    return w;
}

// The ranks a case's model can be split over, of 2 and 4.
std::vector<int> split_ranks(const ModelConfig& c) {
    std::vector<int> out;
    for (int ranks : {2, 4})
        if (tp_unsupported_reason(c, ranks).empty()) out.push_back(ranks);
    return out;
}

class TpEngine : public ::testing::TestWithParam<Case> {};

TEST_P(TpEngine, LogitsEqualTheUnsplitEngine) {
    TinyCheckpoint t(GetParam().changes);
    auto ref = make_cpu_engine(t.cfg, t.ckpt, 64, 8);
    const Script want = run_script(*ref, t.cfg.vocab);
    for (int ranks : split_ranks(t.cfg)) {
        auto tp = make_cpu_engine(t.cfg, t.ckpt, 64, 8, nullptr, ranks);
        EXPECT_EQ(tp->memory().weights, ref->memory().weights);   // the shards add up to the model
        EXPECT_EQ(tp->memory().kv_pool, ref->memory().kv_pool);
        const Script got = run_script(*tp, t.cfg.vocab);
        const double pre = rel_l2(got.prefill, want.prefill), dec = worst(got.decode, want.decode),
                     bat = worst(got.batch, want.batch);
        std::printf("%s tp %d vs unsplit logits rel-L2: prefill %.2e, decode worst %.2e, batch+fork worst %.2e\n",
                    GetParam().name.c_str(), ranks, pre, dec, bat);
        EXPECT_LE(pre, kBar);
        EXPECT_LE(dec, kBar);
        EXPECT_LE(bat, kBar);
    }
}

// Every (name, tensor) the hook sees in a prefill of 13 tokens.
struct Emitted {
    std::string name;
    int rows, cols;
    std::vector<float> data;
};

std::vector<Emitted> hooked_prefill(Engine& e, int vocab) {
    std::vector<Emitted> out;
    e.hook = [&](const std::string& name, const float* d, int rows, int cols) {
        out.push_back({name, rows, cols, std::vector<float>(d, d + (size_t)rows * cols)});
    };
    e.prefill(e.new_sequence(), random_ids(13, vocab, 1));
    e.hook = nullptr;
    return out;
}

TEST_P(TpEngine, HookTensorsEqualTheUnsplitEngine) {
    TinyCheckpoint t(GetParam().changes);
    auto ref = make_cpu_engine(t.cfg, t.ckpt, 64);
    const std::vector<Emitted> want = hooked_prefill(*ref, t.cfg.vocab);
    for (int ranks : split_ranks(t.cfg)) {
        auto tp = make_cpu_engine(t.cfg, t.ckpt, 64, 0, nullptr, ranks);
        const std::vector<Emitted> got = hooked_prefill(*tp, t.cfg.vocab);
        ASSERT_EQ(got.size(), want.size());
        double worst_seen = 0;
        std::string worst_name;
        for (size_t i = 0; i < want.size(); i++) {
            ASSERT_EQ(got[i].name, want[i].name);
            ASSERT_EQ(got[i].rows, want[i].rows) << want[i].name;
            ASSERT_EQ(got[i].cols, want[i].cols) << want[i].name;
            const double d = rel_l2(got[i].data, want[i].data);
            EXPECT_LE(d, kBar) << want[i].name;
            if (d >= worst_seen) worst_seen = d, worst_name = want[i].name;
        }
        std::printf("%s tp %d vs unsplit: %zu hooked tensors, worst rel-L2 %.2e (%s)\n", GetParam().name.c_str(),
                    ranks, want.size(), worst_seen, worst_name.c_str());
    }
}

// Ring attention (context_parallel.h) for the prompts, over 2 and 4 simulated GPUs, alone and
// with the weights split over 2 ranks as well: the same script's logits as the unsplit engine
// (the prompts of 13 and 7 tokens go round the ring; the decode steps read the cache it filled).
TEST_P(TpEngine, RingPrefillEqualsTheUnsplitEngine) {
    TinyCheckpoint t(GetParam().changes);
    auto ref = make_cpu_engine(t.cfg, t.ckpt, 64, 8);
    const Script want = run_script(*ref, t.cfg.vocab);
    std::vector<std::pair<int, int>> splits = {{1, 2}, {1, 4}};   // (tp, cp)
    if (tp_unsupported_reason(t.cfg, 2).empty()) splits.push_back({2, 2});
    for (auto [tp, cp] : splits) {
        auto eng = make_cpu_engine(t.cfg, t.ckpt, 64, 8, nullptr, tp, cp);
        const Script got = run_script(*eng, t.cfg.vocab);
        const double pre = rel_l2(got.prefill, want.prefill), dec = worst(got.decode, want.decode),
                     bat = worst(got.batch, want.batch);
        std::printf("%s tp %d cp %d vs unsplit logits rel-L2: prefill %.2e, decode worst %.2e, batch+fork worst %.2e\n",
                    GetParam().name.c_str(), tp, cp, pre, dec, bat);
        EXPECT_LE(pre, kBar);
        EXPECT_LE(dec, kBar);
        EXPECT_LE(bat, kBar);
    }
}

INSTANTIATE_TEST_SUITE_P(Tiny, TpEngine, ::testing::ValuesIn(kCases), [](const auto& info) { return info.param.name; });

// Every fixture's prompt round a ring of 2 and of 4 simulated GPUs, against transformers'
// activations at the CPU engine's bar.
TEST(CpGolden, RingPrefillMatchesTransformers) {
    int checked = 0;
    for (const std::string& name : list_fixtures())
        for (int cp : {2, 4}) {
            Fixture f(name);
            auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 0, nullptr, 1, cp);
            const FamilyWorst w = check_prefill(*eng, f.golden, 1e-5);
            std::printf("%s cp %d vs transformers: attn rel-L2 %.2e, logits %.2e\n", name.c_str(), cp,
                        w.count("attn") ? w.at("attn") : -1.0, w.count("logits") ? w.at("logits") : -1.0);
            checked++;
        }
    EXPECT_GE(checked, 2) << "no golden fixture";
}

// The golden machinery pointed at the split engine: each fixture that splits over 2 ranks,
// against transformers' activations at the unsplit CPU engine's bar (test_golden.cpp).
TEST(TpGolden, SplitPrefillMatchesTransformers) {
    int checked = 0;
    for (const std::string& name : list_fixtures()) {
        Fixture f(name);
        if (!tp_unsupported_reason(f.cfg, 2).empty()) continue;
        auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 0, nullptr, 2);
        const FamilyWorst w = check_prefill(*eng, f.golden, 1e-5);
        std::printf("%s tp 2 vs transformers: logits rel-L2 %.2e\n", name.c_str(),
                    w.count("logits") ? w.at("logits") : -1.0);
        checked++;
    }
    EXPECT_GE(checked, 1) << "no fixture splits over 2 ranks";
}

}  // namespace
