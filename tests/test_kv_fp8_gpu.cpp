// test_kv_fp8_gpu.cpp: the CUDA engine with an FP8 KV cache (--kv-dtype fp8, src/fp8.h) against
// the CPU reference with the same cache (which stores the values the FP8 pools give back), and
// copy on write of FP8 blocks (their codes and their scales) when a beam writes into a block it
// shares. Skipped without a GPU. The kernels themselves are tested in test_attention.cu and
// test_kernels.cu; the golden figures are in test_golden.cpp.
#include <cstdio>
#include <vector>

#include "golden.h"

using namespace olmo;
using namespace olmo::test;

namespace {

#define SKIP_WITHOUT_CUDA() \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU FP8 KV cache test skipped"

// The prompt's logits and 8 greedy decode steps' (fed the CPU's tokens), rel-L2 against the CPU
// engine with the same FP8 cache. Both engines quantize the same rows; the GPU computes in bf16,
// so its keys may land on a neighbouring E4M3 code where a value sits on a rounding boundary.
// Bar 5e-2: bf16 against the fp32 reference is held to 2e-2 per tensor (test_golden.cpp).
TEST(Fp8KvCache, GpuBf16CloseToCpuWithTheSameCache) {
    SKIP_WITHOUT_CUDA();
    for (const char* name : {"olmo2_gqa", "olmo3_swa_yarn", "olmo1_clip_tied"}) {
        Fixture f(name);
        const std::vector<int> prompt = to_i32(*f.golden.find("prompt_ids"));
        auto cpu = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 0, nullptr, 1, 1, KvDType::FP8);
        auto gpu = make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), DeviceDType::BF16, 0, 8, nullptr, 0, 1, 1, KvDType::FP8);
        std::vector<float> want = cpu->forward(prompt), got = gpu->forward(prompt);
        double worst = 0;
        for (int step = 0; step <= 8; step++) {
            const double e = compare(got.data(), want.data(), want.size()).rel_l2;
            worst = std::max(worst, e);
            EXPECT_LE(e, 5e-2) << name << (step ? " decode step " + std::to_string(step) : std::string(" prefill"));
            const int next = (int)(std::max_element(want.begin(), want.end()) - want.begin());
            want = cpu->forward({next}), got = gpu->forward({next});
        }
        std::printf("%s gpu bf16 fp8-kv vs cpu fp8-kv logits: worst rel-L2 %.2e (prefill and 8 steps)\n", name, worst);
    }
}

// Sequence b forks from a after a 20-token prompt (the second block, of 16 tokens, half full and
// shared); one decode step then writes a's and b's new rows, b's into a copy of the shared block
// (Engine's copy on write: CudaEngine::copy_block moves the block's codes and its run of scales).
// b's logits must equal those of a sequence that never shared anything, fed the same tokens.
TEST(Fp8KvCache, ForkedSequenceCopiesCodesAndScalesGpu) {
    SKIP_WITHOUT_CUDA();
    Fixture f("olmo2_gqa");
    const std::vector<int> prompt = to_i32(*f.golden.find("prompt_ids"));
    std::vector<int> p20;
    for (int i = 0; i < 20; i++) p20.push_back(prompt[i % prompt.size()]);
    auto eng = make_cuda_engine(f.cfg, &f.ckpt, 64, DeviceDType::BF16, 16, 8, nullptr, 0, 1, 1, KvDType::FP8);
    const int a = eng->new_sequence();
    eng->prefill(a, p20);
    const int b = eng->fork_sequence(a);
    const std::vector<float> both = eng->decode({a, b}, {3, 5});
    const int c = eng->new_sequence();
    eng->prefill(c, p20);
    const std::vector<float> alone = eng->decode({c}, {5});
    const size_t V = f.cfg.vocab;
    const double e = compare(both.data() + V, alone.data(), V).rel_l2;
    std::printf("forked sequence's logits against an unshared one's: rel-L2 %.2e\n", e);
    EXPECT_LE(e, 1e-2);
    const double differ = compare(both.data(), alone.data(), V).rel_l2;   // a (fed 3) is another sequence
    EXPECT_GT(differ, 1e-2) << "the two forks' logits should differ";
}

}  // namespace
