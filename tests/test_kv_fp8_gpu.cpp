// test_kv_fp8_gpu.cpp: the CUDA engine with an FP8 KV cache (--kv-dtype fp8, src/fp8.h): decode
// steps against one prefill over the same cache, and copy on write of FP8 blocks (their codes and
// their scales) when a beam writes into a block it shares. Skipped without a GPU. The kernels themselves are tested in test_attention.cu and
// test_kernels.cu; the golden figures are in test_golden.cpp.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "golden.h"

using namespace olmo;
using namespace olmo::test;

namespace {

#define SKIP_WITHOUT_CUDA() \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU FP8 KV cache test skipped"

// The same sequence two ways over the FP8 cache: the prompt, then 8 greedy decode steps (the
// decode kernel reads the cache; RoPE writes one row per step) against one prefill of the prompt
// and those 8 tokens (the prefill kernel; RoPE writes every row at once). Every row is quantized
// alone, so both caches hold the same codes and scales, and the last position's logits differ
// only by the two kernels' rounding: the decode kernel multiplies the codes exactly (fp16) and
// scales outside the products, the prefill kernel rounds each scale · code to bf16. That moves
// the logits by up to 2.2e-2 on olmo3_swa_yarn (initializer range 0.15 and YaRN's attention
// factor: sharp attention), 0.7-1.0e-2 on the others: bar 3e-2, where a code or scale written
// or read wrong moves them by the FP8 error itself (4-9e-2 on these fixtures).
TEST(Fp8KvCache, DecodeStepsEqualOnePrefillGpu) {
    SKIP_WITHOUT_CUDA();
    for (const char* name : {"olmo2_gqa", "olmo3_swa_yarn", "olmo1_clip_tied", "olmo2_hd32"}) {
        Fixture f(name);
        for (KvDType kv : {KvDType::FP8, KvDType::Same}) {   // (the bf16 cache's figure printed next to it)
            std::vector<int> seq = to_i32(*f.golden.find("prompt_ids"));
            auto stepped = make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), DeviceDType::BF16, 0, 8, nullptr, 0, 1, 1, kv);
            auto at_once = make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), DeviceDType::BF16, 0, 8, nullptr, 0, 1, 1, kv);
            std::vector<float> logits = stepped->forward(seq);
            for (int step = 0; step < 8; step++) {
                seq.push_back((int)(std::max_element(logits.begin(), logits.end()) - logits.begin()));
                logits = stepped->forward({seq.back()});
            }
            const std::vector<float> want = at_once->forward(seq);
            const double e = compare(logits.data(), want.data(), want.size()).rel_l2;
            std::printf("%s: logits after 8 decode steps against one prefill, %s cache: rel-L2 %.2e\n", name,
                        kv == KvDType::FP8 ? "FP8" : "bf16", e);
            EXPECT_LE(e, 3e-2) << name;
        }
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
