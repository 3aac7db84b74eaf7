// bench_mode.cpp: benchmark mode's model and prompts (bench_mode.h).
#include "bench_mode.h"

#include "common.h"
#include "memory_check.h"

namespace olmo {

ModelConfig bench_config(const std::string& config_path, const std::string& model) {
    if (!model.empty()) fail("--random-weights and --model exclude each other");
    return parse_config(read_file(config_path), config_path);
}

std::vector<std::vector<int>> bench_prompts(int prompt_len, int batch, int vocab, int max_seq) {
    if (prompt_len > max_seq)   // before building anything: --prompt-len 2^30 --batch 8 is 32 GB
        fail("--prompt-len " + std::to_string(prompt_len) + " is longer than the context of " + std::to_string(max_seq) +
             " tokens (--max-seq-len)");
    const double bytes = 3.0 * batch * prompt_len * sizeof(int);   // the prompts, the requests, the outputs
    if (bytes > host_available_bytes())
        fail("--prompt-len " + std::to_string(prompt_len) + " x --batch " + std::to_string(batch) + " needs " +
             num_str(bytes / 1e9) + " GB of host memory for the prompts alone");
    std::vector<int> p;
    for (int i = 0; i < prompt_len; i++) p.push_back((int)((i * 2654435761u + 12345u) % (unsigned)vocab));
    return std::vector<std::vector<int>>(batch, p);
}

}  // namespace olmo
