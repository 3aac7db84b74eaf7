// test_default_model.cpp: the shipped default model (weights/ + tokenizer/) against
// transformers: per-layer activations on a real text prompt, and greedy generation of 48
// tokens on 3 prompts, on the CPU reference and (when a GPU is present) the CUDA engine in
// fp32. The goldens in tests/default_model/ come from tests/make_goldens.py --model weights.
#include "golden.h"
#include "tokenizer.h"

using namespace olmo;
using namespace olmo::test;

namespace {

const std::string kGolden = "tests/default_model/golden.safetensors";

struct DefaultModel : ::testing::Test {
    void SetUp() override {
        if (!file_exists(kGolden)) GTEST_SKIP() << kGolden << " missing";
        golden = std::make_unique<SafeTensorsFile>(kGolden);
    }
    ModelConfig cfg = load_config("weights");
    Checkpoint ckpt{"weights"};
    std::unique_ptr<Tokenizer> tok = load_tokenizer("tokenizer/tokenizer.model");
    std::unique_ptr<SafeTensorsFile> golden;

    // Our tokenizer must give the ids sentencepiece gave in Python, and greedy ids must match.
    void check_greedy(Engine& eng) {
        int checked = 0;
        for (int k = 0; golden->find("prompt48_" + std::to_string(k)); k++, checked++) {
            std::vector<int> prompt = to_i32(*golden->find("prompt48_" + std::to_string(k)));
            std::vector<int> want = to_i32(*golden->find("greedy48_" + std::to_string(k)));
            EXPECT_EQ(tok->encode(tok->decode(prompt)), prompt) << "prompt " << k;
            EXPECT_EQ(greedy(eng, prompt, 48), want) << "prompt " << k << ": " << tok->decode(prompt);
        }
        EXPECT_EQ(checked, 3);
    }
};

TEST_F(DefaultModel, CpuActivationsMatchTransformers) {
    auto eng = make_cpu_engine(cfg, ckpt, 512);
    FamilyWorst w = check_prefill(*eng, *golden, 1e-5);
    for (auto& [fam, v] : w) std::printf("default model cpu %s worst rel-L2 %.2e\n", fam.c_str(), v);
    check_decode(*eng, *golden, 1e-5, 1e-5);
}

TEST_F(DefaultModel, CpuGreedyEqualsTransformers) {
    auto eng = make_cpu_engine(cfg, ckpt, 512);
    check_greedy(*eng);
}

TEST_F(DefaultModel, GpuFp32GreedyEqualsTransformers) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU default-model test skipped";
    auto eng = make_cuda_engine(cfg, &ckpt, 512, DeviceDType::F32);
    check_prefill(*eng, *golden, 1e-4);
    check_greedy(*eng);
}

}  // namespace
