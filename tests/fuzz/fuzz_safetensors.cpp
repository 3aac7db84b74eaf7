// fuzz_safetensors: checkpoint files -> SafeTensorsFile, Checkpoint and the CPU loader.
// The first input byte picks the layout: even, the rest is model.safetensors; odd, the rest is
// model.safetensors.index.json up to the first NUL byte and, after it, a shard saved as
// shard.safetensors (the index may name it, or anything else). Every tensor a file lists is
// converted (all its bytes are read: offsets must stay inside the mapping, misaligned data
// must be read safely), then the checkpoint is loaded for a fixed tiny OLMo-2 config (shapes,
// dtypes, the tie rule and the NaN/Inf check of load_f32). Only olmo::Error may come out.
#include <unistd.h>

#include <cstring>

#include "common.h"
#include "config.h"
#include "fuzz_util.h"
#include "safetensors.h"
#include "weights.h"

using namespace olmo;

namespace {

const ModelConfig& tiny_config() {
    static const ModelConfig c = parse_config(
        R"({"model_type": "olmo2", "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 16, "max_position_embeddings": 64,
            "tie_word_embeddings": true})",
        "tiny");
    return c;
}

void read_every_tensor(const SafeTensorsFile& f) {
    for (const auto& [name, t] : f.tensors()) {
        if (t.dtype == DType::I32 || t.dtype == DType::I64) to_i32(t);
        else to_f32(t);
    }
}

void load(const std::string& dir) {
    Checkpoint ck(dir);
    const std::vector<WeightSlot> table = weight_table(tiny_config(), &ck);
    std::vector<std::vector<float>> bufs;
    std::vector<float*> dst;
    for (const WeightSlot& s : table) bufs.emplace_back(s.numel()), dst.push_back(bufs.back().data());
    load_f32(ck, table, dst, nullptr);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const std::string dir = fuzz::scratch_dir();
    for (const char* f : {"model.safetensors", "model.safetensors.index.json", "shard.safetensors"})
        unlink((dir + "/" + f).c_str());
    try {
        if (data[0] % 2 == 0) {
            read_every_tensor(SafeTensorsFile(fuzz::put_file("model.safetensors", data + 1, size - 1)));
        } else {
            const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data + 1, 0, size - 1));
            const size_t index_size = (nul ? nul : data + size) - (data + 1);
            fuzz::put_file("model.safetensors.index.json", data + 1, index_size);
            if (nul) read_every_tensor(SafeTensorsFile(fuzz::put_file("shard.safetensors", nul + 1, data + size - nul - 1)));
        }
    } catch (const Error&) {
    }
    try {
        load(dir);
    } catch (const Error&) {
    }
    return 0;
}
