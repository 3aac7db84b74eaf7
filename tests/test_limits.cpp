// test_limits.cpp: what the engines refuse before they start. A model too large for memory
// fails in well under a second with one line that says how much it needs and how much there is
// (CPU: MemAvailable; GPU: cudaMemGetInfo), before any large allocation or tensor read; a
// shape the CUDA engine cannot run is named by cuda_unsupported_reason(), and ./generate
// --device auto then runs on the CPU.
#include <algorithm>
#include <chrono>

#include "device_caps.h"
#include "engine.h"
#include "memory_check.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

constexpr size_t kGiB = size_t(1) << 30;

json shape(int layers, int hidden, int heads, int kv_heads, int intermediate, int vocab, bool tied) {
    json c = tiny_olmo2_config();
    c["num_hidden_layers"] = layers;
    c["hidden_size"] = hidden;
    c["num_attention_heads"] = heads;
    c["num_key_value_heads"] = kv_heads;
    c["intermediate_size"] = intermediate;
    c["vocab_size"] = vocab;
    c["max_position_embeddings"] = 4096;
    c["tie_word_embeddings"] = tied;
    return c;
}

// 80 layers, hidden 8192, 64 heads (MHA): about 80 B parameters, more than any one GPU holds.
json huge_config() { return shape(80, 8192, 64, 64, 28672, 100352, false); }

ModelConfig config_of(const json& j) { return parse_config(j.dump(), "config.json"); }

// The huge model in fp32 on the CPU: about 340 GB, more than the host has (or the test skips).
bool huge_fits_host() { return cpu_memory_need(config_of(huge_config()), 4096, 0).total() <= host_available_bytes(); }

TEST(MemoryCheck, OneLineWithEveryPart) {
    MemoryNeed need{(size_t)(149.0 * kGiB), (size_t)(1.2 * kGiB), (size_t)(1.0 * kGiB)};
    expect_error([&] { check_fits(need, (size_t)(139.1 * kGiB), "free on the GPU"); },
                 {"needs 151.2 GiB, 139.1 GiB free on the GPU (weights 149.0, KV cache 1.2, buffers 1.0)"});
    check_fits(need, need.total(), "free on the GPU");   // exactly enough fits
    EXPECT_GT(host_available_bytes(), 0u);
}

// OLMo-2-0425-1B in fp32: 1,484,916,736 parameters (lm_head not tied); 257 KV blocks of 16
// tokens for 4096 tokens (+1 spare), K and V of 2048 floats in each of 16 layers.
TEST(MemoryCheck, CpuNeedOfOlmo2_1B) {
    MemoryNeed m = cpu_memory_need(config_of(shape(16, 2048, 16, 16, 8192, 100352, false)), 4096, 0);
    EXPECT_EQ(m.weights, 1484916736ull * 4);
    EXPECT_EQ(m.kv_cache, 257ull * 16 * 2048 * 16 * 2 * 4);
    EXPECT_GT(m.buffers, 4096ull * 8192 * 3 * 4);   // at least the MLP activations of a 4096-token prefill
    MemoryNeed tied = cpu_memory_need(config_of(shape(16, 2048, 16, 16, 8192, 100352, true)), 4096, 0);
    EXPECT_EQ(m.weights - tied.weights, 100352ull * 2048 * 4);
    EXPECT_EQ(cpu_memory_need(config_of(shape(16, 2048, 16, 16, 8192, 100352, false)), 4096, 10).kv_cache,
              10ull * 16 * 2048 * 16 * 2 * 4);
}

TEST(MemoryCheck, CpuRefusesTooLargeModel) {
    if (huge_fits_host()) GTEST_SKIP() << "this host has room for the huge model";
    auto t = std::chrono::steady_clock::now();
    expect_error([] { check_fits_cpu(config_of(huge_config()), 4096, 0); }, {"needs ", "GiB available in host memory (weights "});
    EXPECT_LT(seconds_since(t), 1.0);
}

// Through ./generate: a checkpoint whose config claims the huge shape but holds one small
// tensor fails at the check, before any tensor is read.
TEST(MemoryCheck, CpuEngineRefusesBeforeReadingTensors) {
    if (huge_fits_host()) GTEST_SKIP() << "this host has room for the huge model";
    const std::string dir = temp_dir();
    write(dir + "/config.json", huge_config().dump());
    json header = {{"model.norm.weight", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}}};
    write(dir + "/model.safetensors", safetensors_bytes(header, std::string(16, '\0')));
    auto t = std::chrono::steady_clock::now();
    RunResult r = run_cmd("./generate --device cpu --model " + dir + " --prompt-ids 1 --output-ids");
    EXPECT_LT(seconds_since(t), kRefusalSeconds);
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.err.rfind("error: needs ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("available in host memory (weights "), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(MemoryCheck, GpuRefusesTooLargeModel) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU memory check skipped";
    make_cuda_engine(config_of(shape(2, 256, 4, 4, 512, 1024, false)), nullptr, 64, DeviceDType::BF16);  // CUDA warm
    auto t = std::chrono::steady_clock::now();
    expect_error([] { make_cuda_engine(config_of(huge_config()), nullptr, 4096, DeviceDType::BF16); },
                 {"needs ", "GiB free on the GPU (weights ", ", KV cache ", ", buffers "});
    EXPECT_LT(seconds_since(t), 1.0);
}

ModelConfig with_head_dim(int hd) {
    json c = tiny_olmo2_config();
    c["head_dim"] = hd;
    return config_of(c);
}

TEST(CudaSupport, HeadSizes) {
#ifdef OLMO_CUDA
    for (int hd : {8, 16, 32, 64, 72, 80, 96, 128}) EXPECT_EQ(cuda_unsupported_reason(with_head_dim(hd)), "") << hd;
    // over 128: where a block may have the shared memory (CudaSupport.HeadSizesByGpu)
    const std::string why = cuda_unsupported_reason(with_head_dim(256));
    EXPECT_TRUE(why.empty() || why.find("shared memory per block") != std::string::npos) << why;
    for (int hd : {12, 100, 264, 512}) {
        const std::string why = cuda_unsupported_reason(with_head_dim(hd));
        EXPECT_NE(why.find("head_dim " + std::to_string(hd) + " is not supported"), std::string::npos) << why;
    }
#else
    EXPECT_NE(cuda_unsupported_reason(with_head_dim(64)), "");   // no CUDA in this build at all
#endif
}

// Head sizes over 128 need 137.5 KiB of shared memory per block: refused on GPUs with 99 KiB
// (sm_86, sm_89; portable mode here), in one line.
TEST(CudaSupport, HeadSizesByGpu) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: the GPU's limits are unknown here";
    PortableScope sm86(Portable::Sm86);
    EXPECT_EQ(cuda_unsupported_reason(with_head_dim(128)), "");
    EXPECT_EQ(cuda_unsupported_reason(with_head_dim(256)),
              "head_dim 256 needs 137.5 KiB of shared memory per block, this GPU allows 99.0 KiB (portable mode)");
}

// --device auto on a GPU machine runs a shape the GPU cannot (head_dim 12) on the CPU, with a
// note; --device cuda refuses it in one line. (Without a GPU, auto is the CPU anyway.)
TEST(CudaSupport, AutoFallsBackToCpu) {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: --device auto is the CPU here";
    const std::string dir = temp_dir();
    json cfg = tiny_olmo2_config();
    cfg["head_dim"] = 12;   // not a multiple of 8
    write_random_checkpoint(dir, cfg);
    const std::string args = " --model " + dir + " --prompt-ids 1,2 --output-ids -n 3";
    RunResult r = run_cmd("./generate --device auto" + args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("note: head_dim 12 is not supported by the CUDA engine"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("; running on the CPU\n"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, run_cmd("./generate --device cpu" + args).out);
    RunResult cuda = run_cmd("./generate --device cuda" + args);
    EXPECT_NE(cuda.code, 0);
    EXPECT_EQ(cuda.err, "error: --device cuda: " + cuda_unsupported_reason(load_config(dir)) + "\n");
}

}  // namespace
