// bench_mode.h: ./generate's benchmark mode, kept out of the CLI's main path. --random-weights
// CONFIG.json builds that model shape with random weights on the GPU (no checkpoint, no
// tokenizer); --prompt-len N --batch B decodes B copies of a prompt of N pseudo-random ids to
// -n tokens each, eos ignored, and prints ids (with --stats: the speeds).
#pragma once
#include <string>
#include <vector>

#include "config.h"

namespace olmo {

// The model of --random-weights CONFIG.json; `model` (--model) must be empty.
ModelConfig bench_config(const std::string& config_path, const std::string& model);

// `batch` copies of a prompt of `prompt_len` ids below `vocab` (a fixed pseudo-random sequence).
// The length is checked against the context and the host memory before anything is built.
std::vector<std::vector<int>> bench_prompts(int prompt_len, int batch, int vocab, int max_seq);

}  // namespace olmo
