// test_golden.cpp: every fixture in tests/fixtures against transformers' activations, on the
// CPU reference (fp32, rel-L2 <= 1e-5 per tensor) and, when a GPU is present, on the CUDA
// engine (fp32 mode rel-L2 <= 1e-4; bf16 mode within 2e-2 of the fp32 reference, also in
// portable mode: the kernel paths of GPUs without Hopper's features, src/device_caps.h).
// Greedy ids must equal transformers' generate() exactly (fp32 paths).
#include "device_caps.h"
#include "golden.h"

using namespace olmo;
using namespace olmo::test;

namespace {

void print_worst(const std::string& what, const FamilyWorst& w) {
    std::string line = what + " worst rel-L2:";
    char buf[64];
    for (auto& [fam, v] : w) { std::snprintf(buf, sizeof buf, " %s=%.2e", fam.c_str(), v); line += buf; }
    std::printf("%s\n", line.c_str());
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, CpuPrefillMatchesTransformers) {
    Fixture f(GetParam());
    auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len());
    print_worst(GetParam() + " cpu", check_prefill(*eng, f.golden, 1e-5));
}

TEST_P(Golden, CpuDecodeStepsMatchTransformers) {
    Fixture f(GetParam());
    auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len());
    DecodeErr e = check_decode(*eng, f.golden, 1e-5, 1e-5);
    std::printf("%s cpu decode worst step rel-L2 %.2e\n", GetParam().c_str(), e.worst_step);
}

TEST_P(Golden, CpuGreedyIdsEqualTransformers) {
    Fixture f(GetParam());
    auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len());
    std::vector<int> want = to_i32(*f.golden.find("greedy_ids"));
    EXPECT_EQ(greedy(*eng, to_i32(*f.golden.find("prompt_ids")), (int)want.size()), want);
}

TEST_P(Golden, GpuFp32MatchesTransformers) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU golden test skipped";
    Fixture f(GetParam());
    auto eng = make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), DeviceDType::F32);
    print_worst(GetParam() + " gpu fp32", check_prefill(*eng, f.golden, 1e-4));
    check_decode(*eng, f.golden, 1e-4, 1e-4);
    std::vector<int> want = to_i32(*f.golden.find("greedy_ids"));
    EXPECT_EQ(greedy(*eng, to_i32(*f.golden.find("prompt_ids")), (int)want.size()), want);
}

// bf16 storage against the fp32 reference: rel-L2 <= 2e-2 per tensor, decode_logits [8, V]
// included; each single decode step within 2.5e-2. The hardest fixture is olmo1_clip_tied
// (weights of std 0.15 on a 128-wide model, a quarter of q/k/v on the clip bound): its
// layers.1.mlp measured 1.88e-2, its worst decode step 2.27e-2 (H200) with every GEMM output in
// fp32; which products are written in bf16 is chosen against this bar (docs/architecture.md,
// "Precision on the GPU": q|k|v and gate|up in bf16 give 1.97e-2). tests/hf_bf16_error.py
// puts HF transformers' own bf16 run at 2.30e-2 on that step, and fp32 math on the
// bf16-rounded weights alone at 1.42e-2.
void expect_bf16_close(const std::string& name, const std::string& what) {
    Fixture f(name);
    auto eng = make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), DeviceDType::BF16);
    print_worst(name + " " + what, check_prefill(*eng, f.golden, 2e-2));
    DecodeErr e = check_decode(*eng, f.golden, 2e-2, 2.5e-2);
    std::printf("%s %s decode_logits rel-L2 %.2e, worst step %.2e\n", name.c_str(), what.c_str(), e.tensor, e.worst_step);
}

TEST_P(Golden, GpuBf16CloseToReference) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU golden test skipped";
    expect_bf16_close(GetParam(), "gpu bf16");
}

// As on an sm_86 or sm_89: no dependent launches, the attention tiles of 99 KB per block.
TEST_P(Golden, GpuBf16PortableCloseToReference) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU golden test skipped";
    PortableScope portable(Portable::Sm86);
    expect_bf16_close(GetParam(), "gpu bf16 portable");
}

// FP8 weights (bf16 activations) against the fp32 reference, printed next to bf16's above:
// rel-L2 <= 0.25 per tensor, 0.3 per decode step. E4M3 keeps 3 mantissa bits to bf16's 7, so
// its rounding error is 16x larger, and the fixtures' random weights use every bit: measured
// on the H200, the worst tensor 0.20 (olmo1_clip_tied attn; its bf16 figure 0.015), the worst
// decode step 0.20, most tensors 0.08-0.15. What FP8 costs a trained model is measured with
// ./perplexity instead (docs/fp8.md).
TEST_P(Golden, GpuFp8CloseToReference) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU golden test skipped";
    Fixture f(GetParam());
    auto eng = make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), DeviceDType::FP8);
    print_worst(GetParam() + " gpu fp8", check_prefill(*eng, f.golden, 2.5e-1));
    DecodeErr e = check_decode(*eng, f.golden, 2.5e-1, 3e-1);
    std::printf("%s gpu fp8 decode_logits rel-L2 %.2e, worst step %.2e\n", GetParam().c_str(), e.tensor,
                e.worst_step);
}

// An FP8 KV cache (--kv-dtype fp8: each key and value row of a head in E4M3 with its own scale,
// src/fp8.h) against the fp32 reference, printed next to the figures above: on the CPU, which
// stores the values an FP8 cache gives back (so this runs without a GPU), and on the GPU in bf16
// and in FP8, whose attention kernels dequantize the cache's codes. The bars come from the CPU's
// figures: worst tensor 7.4e-2 (olmo3_swa_yarn mlp), worst decode step 8.9e-2 (the same
// fixture), most tensors 4-6e-2: E4M3's 3 mantissa bits on every key and value of the fixtures'
// random weights. The GPU adds its own dtype's bar (bf16 2e-2, FP8 weights 0.25).
constexpr double kFp8KvBar = 1e-1, kFp8KvStepBar = 1.2e-1;
void expect_fp8_kv_close(const Fixture& f, Engine& eng, const std::string& what, double extra) {
    print_worst(what, check_prefill(eng, f.golden, kFp8KvBar + extra));
    DecodeErr e = check_decode(eng, f.golden, kFp8KvBar + extra, kFp8KvStepBar + extra);
    std::printf("%s decode_logits rel-L2 %.2e, worst step %.2e\n", what.c_str(), e.tensor, e.worst_step);
}

TEST_P(Golden, CpuFp8KvCacheCloseToReference) {
    Fixture f(GetParam());
    auto eng = make_cpu_engine(f.cfg, f.ckpt, f.seq_len(), 0, nullptr, 1, 1, KvDType::FP8);
    expect_fp8_kv_close(f, *eng, GetParam() + " cpu fp8-kv", 0.0);
}

TEST_P(Golden, GpuFp8KvCacheCloseToReference) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU golden test skipped";
    Fixture f(GetParam());
    auto bf16 = make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), DeviceDType::BF16, 0, 64, nullptr, 0, 1, 1, KvDType::FP8);
    expect_fp8_kv_close(f, *bf16, GetParam() + " gpu bf16 fp8-kv", 2e-2);   // (plus bf16's own bar)
    auto fp8 = make_cuda_engine(f.cfg, &f.ckpt, f.seq_len(), DeviceDType::FP8, 0, 64, nullptr, 0, 1, 1, KvDType::FP8);
    expect_fp8_kv_close(f, *fp8, GetParam() + " gpu fp8 fp8-kv", 2.5e-1);  // (plus FP8 weights' bar)
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden, ::testing::ValuesIn(list_fixtures()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Golden);

TEST(Golden, FixturesArePresent) { EXPECT_GE(list_fixtures().size(), 5u) << "tests/fixtures is missing goldens"; }

}  // namespace
