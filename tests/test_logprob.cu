// test_logprob.cu: the GPU side of scoring (perplexity).
//
//   Kernel   token_logprobs (kernels/logprob.cuh) against cpu::token_logprobs on awkward shapes:
//            V = 1, odd V, V not a multiple of the block, one row, many rows, targets at both
//            ends of the vocabulary and -1 (no target), logits of +-1e30 and of large spread
//            (no overflow), NaN and Inf rows (NaN out). Outputs are poisoned first.
//   Engine   CudaEngine::score over a text longer than a prefill chunk (set to 4096 rows: two
//            chunks, the second not a multiple of kScoreRows) equals the CPU engine's scores; the
//            scoring scratch [kScoreRows, V] is part of the memory the engine reports.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu_ops.h"
#include "engine.h"
#include "logprob.cuh"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

#define SKIP_WITHOUT_GPU() \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU found: GPU scoring test skipped"

template <typename T> T* to_device(const std::vector<T>& h) {
    T* d = nullptr;
    cudaCheck(cudaMalloc(&d, std::max<size_t>(h.size(), 1) * sizeof(T)));
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

// The kernel's output for logits [rows, V] and targets [rows], from a NaN-poisoned buffer.
std::vector<float> gpu_logprobs(const std::vector<float>& logits, const std::vector<int>& targets, int V) {
    const int rows = (int)targets.size();
    float* z = to_device(logits);
    int* t = to_device(targets);
    float* out = to_device(std::vector<float>(rows, NAN));
    token_logprobs(out, z, t, rows, V, 0);
    std::vector<float> h(rows);
    cudaCheck(cudaMemcpy(h.data(), out, rows * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaFree(z));
    cudaCheck(cudaFree(t));
    cudaCheck(cudaFree(out));
    return h;
}

struct Case {
    int rows, V;
    float sd;   // logits ~ N(0, sd)
};

TEST(LogprobKernel, MatchesCpuOnAwkwardShapes) {
    SKIP_WITHOUT_GPU();
    std::mt19937 rng(1);
    for (const Case c : {Case{1, 1, 1}, Case{1, 7, 1}, Case{3, 511, 3}, Case{5, 513, 3}, Case{64, 8192, 4},
                         Case{17, 8193, 10}, Case{2, 100352, 5}, Case{130, 1001, 1}, Case{4, 40000, 30}}) {
        std::normal_distribution<float> dist(0.0f, c.sd);
        std::vector<float> z((size_t)c.rows * c.V);
        for (float& x : z) x = dist(rng);
        std::vector<int> t(c.rows);
        for (int r = 0; r < c.rows; r++) t[r] = r == 0 ? c.V - 1 : r == 1 ? 0 : r % 5 == 4 ? -1 : (int)(rng() % c.V);
        std::vector<float> want(c.rows);
        cpu::token_logprobs(want.data(), z.data(), t.data(), c.rows, c.V);
        const std::vector<float> got = gpu_logprobs(z, t, c.V);
        for (int r = 0; r < c.rows; r++)
            ASSERT_NEAR(got[r], want[r], 1e-5 * std::max(1.0f, std::fabs(want[r])))
                << "rows " << c.rows << " V " << c.V << " row " << r;
    }
}

TEST(LogprobKernel, ExtremeLogitsDoNotOverflow) {
    SKIP_WITHOUT_GPU();
    const int V = 1027;
    std::vector<float> z(4 * (size_t)V, -1e30f);
    z[0] = z[1] = 1e30f;                          // row 0: two giants, log(1/2) each
    for (int j = 0; j < V; j++) z[V + j] = 90.0f + (j % 3) * 0.5f;   // row 1: exp(90) > FLT_MAX
    z[2 * V + 5] = 0.0f;                          // row 2: one finite peak among -1e30
    for (int j = 0; j < V; j++) z[3 * V + j] = j % 2 ? 3e38f : -3e38f;   // row 3: the float range
    const std::vector<int> t = {1, 2, 6, 1};
    std::vector<float> want(4);
    cpu::token_logprobs(want.data(), z.data(), t.data(), 4, V);
    const std::vector<float> got = gpu_logprobs(z, t, V);
    EXPECT_NEAR(got[0], -std::log(2.0f), 1e-6);
    for (int r = 0; r < 4; r++) {
        EXPECT_TRUE(std::isfinite(got[r])) << "row " << r;
        EXPECT_NEAR(got[r], want[r], 1e-5 * std::max(1.0f, std::fabs(want[r]))) << "row " << r;
    }
}

TEST(LogprobKernel, NonFiniteRowsGiveNaN) {
    SKIP_WITHOUT_GPU();
    const int V = 300;
    std::vector<float> z(3 * (size_t)V, 0.5f);
    z[17] = NAN;
    z[V + 299] = INFINITY;
    z[2 * V + 3] = -INFINITY;
    const std::vector<float> got = gpu_logprobs(z, {1, 2, 4}, V);
    for (int r = 0; r < 3; r++) EXPECT_TRUE(std::isnan(got[r])) << "row " << r;
}

// A tiny model with room for more than one prefill chunk of the CUDA engine (set to 4096 rows).
TEST(EngineScore, LongerThanAChunkEqualsCpu) {
    SKIP_WITHOUT_GPU();
    const TinyCheckpoint m({{"hidden_size", 32}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                            {"num_hidden_layers", 1}, {"vocab_size", 4099}, {"max_position_embeddings", 8192}});
    const ModelConfig& cfg = m.cfg;
    const Checkpoint& ckpt = m.ckpt;
    const std::vector<int> ids = random_ids(4096 + 77, cfg.vocab, 3);
    auto cpu = make_cpu_engine(cfg, ckpt, (int)ids.size());
    auto gpu = make_cuda_engine(cfg, &ckpt, (int)ids.size(), DeviceDType::F32, 0, 1, nullptr, 4096);
    const std::vector<float> want = cpu->score(cpu->new_sequence(), ids);
    const std::vector<float> got = gpu->score(gpu->new_sequence(), ids);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); i++) {
        worst = std::max(worst, (double)std::fabs(got[i] - want[i]));
        ASSERT_NEAR(got[i], want[i], 1e-4) << "position " << i;
    }
    std::printf("gpu fp32 vs cpu, %zu scored tokens over two chunks: worst |difference| %.2e\n", got.size(), worst);
    EXPECT_GE(gpu->memory().other, (size_t)kScoreRows * cfg.vocab * sizeof(float));
}

}  // namespace
