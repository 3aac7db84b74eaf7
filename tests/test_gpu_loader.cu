// test_gpu_loader.cu: the GPU loader (src/gpu_loader.cu) against the host path it replaced.
//
// For F32, BF16 and F16 checkpoints, in one file and sharded, into each engine dtype (fp32,
// fp16, bf16), every element on the device must equal, bit for bit, from_float<T>(to_f32(x))
// computed on the host: a plain copy when the dtypes match, the device `convert` kernel (round
// to nearest even) otherwise. The tensors hold random bit patterns with zeros, subnormals and
// rounding ties; the staging buffer is cut to 4 KiB so every matrix goes up in many chunks with
// a partial last one; destinations are misaligned on purpose and poisoned (0xFF) beforehand.
// Then: the default options on a tensor larger than one 16 MiB staging buffer, clean errors
// (a file truncated after it was opened is never read past its end), and the CUDA engine
// following the tie rule of weights.h exactly as the CPU engine does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "cuda_common.cuh"
#include "engine.h"
#include "gpu_loader.h"
#include "test_util.h"

using namespace olmo;
using namespace olmo::test;

namespace {

#define SKIP_WITHOUT_GPU() \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU found: GPU loader test skipped"

// An OLMo-2 shape with odd sizes: embed [97, 40] is 3880 elements, several 4 KiB chunks.
json odd_config() {
    json j = tiny_olmo2_config();
    j["hidden_size"] = 40;          // head_dim 10
    j["intermediate_size"] = 70;
    j["vocab_size"] = 97;
    return j;
}

// Writes random tensors of every slot of c (lm_head included) in `dtype` over `shards` files.
void write_random_raw(const std::string& dir, const ModelConfig& c, const char* dtype, int shards, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<RawTensor> ts;
    for (const WeightSlot& s : weight_table(c, true)) ts.push_back({s.name, s.shape, dtype, random_bytes(dtype, s.numel(), rng)});
    write_tensors(dir, ts, shards);
}

// Loads the checkpoint in `dir` with the GPU loader into T and compares every element with the
// host conversion. Destinations: one allocation, each slot 1 element past the previous one's end.
template <typename T> void expect_bitwise(const std::string& dir, const ModelConfig& c, const GpuLoadOptions& opt) {
    Checkpoint ck(dir);
    const std::vector<WeightSlot> table = weight_table(c, &ck);
    std::vector<size_t> at;
    size_t total = 1;
    for (const WeightSlot& s : table) at.push_back(total), total += s.numel() + 1;
    T* dev = nullptr;
    cudaCheck(cudaMalloc(&dev, total * sizeof(T)));
    cudaCheck(cudaMemset(dev, 0xFF, total * sizeof(T)));
    std::vector<void*> dst;
    for (size_t a : at) dst.push_back(dev + a);
    LoadProgress progress;
    load_to_device(ck, table, dst, device_dtype<T>(), &progress, opt);
    std::vector<T> got(total);
    cudaCheck(cudaMemcpy(got.data(), dev, total * sizeof(T), cudaMemcpyDeviceToHost));
    cudaCheck(cudaFree(dev));
    size_t bytes = 0;
    for (size_t i = 0; i < table.size(); i++) {
        const TensorView& v = ck.get(table[i].name, table[i].shape);
        bytes += v.nbytes();
        const std::vector<float> f = to_f32(v);
        int64_t bad = 0;
        for (size_t e = 0; e < f.size(); e++) {
            const T want = from_float<T>(f[e]);
            bad += std::memcmp(&want, &got[at[i] + e], sizeof(T)) != 0;
        }
        EXPECT_EQ(bad, 0) << table[i].name << ": " << bad << " of " << f.size() << " elements differ";
    }
    EXPECT_EQ(progress.done(), bytes);
    EXPECT_EQ(progress.total(), bytes);
}

TEST(GpuLoader, BitwiseEqualsHostConversionSmallChunks) {
    SKIP_WITHOUT_GPU();
    const ModelConfig c = parse_config(odd_config().dump(), "c");
    GpuLoadOptions opt;
    opt.threads = 3;
    opt.staging_bytes = 4096;
    for (const char* dtype : {"F32", "BF16", "F16"})
        for (int shards : {1, 3}) {
            SCOPED_TRACE(std::string(dtype) + ", " + std::to_string(shards) + " shard(s)");
            const std::string d = temp_dir();
            write_random_raw(d, c, dtype, shards, 7 + shards);
            {
                SCOPED_TRACE("into fp32");
                expect_bitwise<float>(d, c, opt);
            }
            {
                SCOPED_TRACE("into fp16");
                expect_bitwise<__half>(d, c, opt);
            }
            {
                SCOPED_TRACE("into bf16");
                expect_bitwise<__nv_bfloat16>(d, c, opt);
            }
        }
}

// Default options (8 threads, 16 MiB staging): an embedding of 20 MiB in bf16 is two chunks.
TEST(GpuLoader, DefaultOptionsTensorLargerThanStaging) {
    SKIP_WITHOUT_GPU();
    json j = odd_config();
    j["hidden_size"] = 256;
    j["vocab_size"] = 40960;   // embed and lm_head: 40960 x 256 x 2 bytes = 20 MiB each
    j["num_hidden_layers"] = 1;
    const ModelConfig c = parse_config(j.dump(), "c");
    const std::string d = temp_dir();
    write_random_raw(d, c, "BF16", 1, 1);
    expect_bitwise<__nv_bfloat16>(d, c, {});
    expect_bitwise<float>(d, c, {});
}

TEST(GpuLoader, CleanErrors) {
    SKIP_WITHOUT_GPU();
    const ModelConfig c = parse_config(odd_config().dump(), "c");
    const std::string d = temp_dir();
    write_random_raw(d, c, "F32", 1, 1);
    Checkpoint ck(d);
    const std::vector<WeightSlot> table = weight_table(c, &ck);
    expect_error([&] { load_to_device(ck, table, {}, DeviceDType::F32); }, {"one destination per weight slot"});
    // The file shrinks after it was opened and checked: the last tensor now ends past the end.
    size_t total = 0;
    for (const WeightSlot& s : table) total += s.numel();
    float* dev = nullptr;
    cudaCheck(cudaMalloc(&dev, total * sizeof(float)));
    std::vector<void*> dst;
    size_t at = 0;
    for (const WeightSlot& s : table) dst.push_back(dev + at), at += s.numel();
    const std::string file = d + "/model.safetensors";
    ASSERT_EQ(truncate(file.c_str(), (off_t)(std::ifstream(file, std::ios::ate | std::ios::binary).tellg()) - 100), 0);
    GpuLoadOptions opt;
    opt.staging_bytes = 4096;
    expect_error([&] { load_to_device(ck, table, dst, DeviceDType::F32, nullptr, opt); },
                 {file, "ends inside tensor \"lm_head.weight\""});
    cudaCheck(cudaFree(dev));
}

// A NaN or Inf in any tensor, as stored on the device, is an error naming the tensor and the
// element: also a finite fp32 value that overflows in the conversion (70000 in fp16).
TEST(GpuLoader, NonFiniteWeightIsAnError) {
    SKIP_WITHOUT_GPU();
    const json cfg = odd_config();
    const ModelConfig c = parse_config(cfg.dump(), "c");
    struct Case {
        float value;
        DeviceDType dt;
        const char* tensor;
        const char* what;
    };
    for (const Case& k : {Case{NAN, DeviceDType::BF16, "model.layers.1.mlp.up_proj.weight", "NaN"},
                          Case{INFINITY, DeviceDType::F32, "model.embed_tokens.weight", "Inf"},
                          Case{70000.0f, DeviceDType::F16, "lm_head.weight", "Inf"}}) {
        const std::string d = temp_dir();
        write_random_checkpoint(d, cfg, 1, [&](const WeightSlot& s, std::vector<float>& v) {
            if (s.name == k.tensor) v[v.size() - 3] = k.value;
        });
        Checkpoint ck(d);
        const std::vector<WeightSlot> table = weight_table(c, &ck);
        size_t total = 0;
        for (const WeightSlot& s : table) total += s.numel();
        char* dev = nullptr;
        cudaCheck(cudaMalloc(&dev, total * 4));
        std::vector<void*> dst;
        size_t at = 0;
        for (const WeightSlot& s : table) dst.push_back(dev + at * (k.dt == DeviceDType::F32 ? 4 : 2)), at += s.numel();
        int64_t element = 0;
        for (const WeightSlot& s : table)
            if (s.name == k.tensor) element = s.numel() - 3;
        expect_error([&] { load_to_device(ck, table, dst, k.dt); },
                     {d + "/model.safetensors", k.tensor, k.what, "element " + std::to_string(element)});
        cudaCheck(cudaFree(dev));
    }
}

// The tie rule on the GPU: tie_word_embeddings true with lm_head.weight stored uses lm_head
// (transformers 5), as the CPU engine does; before the weight table the GPU used the embedding.
TEST(GpuEngineLoad, TieRuleMatchesCpu) {
    SKIP_WITHOUT_GPU();
    json cfg = tiny_olmo2_config();
    const std::string d = temp_dir();
    write_random_checkpoint(d, cfg);   // untied: lm_head.weight stored
    cfg["tie_word_embeddings"] = true;
    write(d + "/config.json", cfg.dump());
    const ModelConfig c = load_config(d);
    Checkpoint ck(d);
    const std::vector<int> ids = {3, 1, 4, 1, 5};
    const std::vector<float> cpu = make_cpu_engine(c, ck, 16)->forward(ids);
    const std::vector<float> gpu = make_cuda_engine(c, &ck, 16, DeviceDType::F32)->forward(ids);
    ASSERT_EQ(cpu.size(), gpu.size());
    float max_ref = 0, max_err = 0;
    for (size_t i = 0; i < cpu.size(); i++) {
        max_ref = std::max(max_ref, std::fabs(cpu[i]));
        max_err = std::max(max_err, std::fabs(cpu[i] - gpu[i]));
    }
    EXPECT_LT(max_err, 1e-4f * max_ref) << "the CUDA engine's output layer is not the CPU engine's";
}

}  // namespace
