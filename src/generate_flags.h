// generate_flags.h: ./generate's command line. Every flag with its help text (CLI11), the
// llama.cpp spellings it also accepts, the checks on values and combinations that CLI11 leaves
// open, and the rules that turn the flags and generation_config.json into the run's settings.
// The run itself is generate.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config.h"
#include "output.h"
#include "sampler.h"

namespace olmo {

// The most text one prompt source (--prompt-file, --prompts-file, stdin) may hold.
constexpr size_t kMaxPromptBytes = 64 << 20;
// The most sequences one decode step carries (--prompts-file runs in waves of at most this many;
// benchmark mode's --batch may ask for more).
constexpr int kMaxBatch = 256;

struct Options {
    std::string model, tokenizer, prompt_file, prompts_file, prompt_ids, device = "auto", dtype, random_weights;
    std::string kv_dtype = "auto";   // --kv-dtype: kv_dtype()'s names
    std::string system;
    std::vector<std::string> prompts;
    // Sampling flags: negative (0 for -n) = not given, generation_config.json decides.
    int max_new_tokens = 0, top_k = -1, max_seq_len = 0, prompt_len = 0, beams = 1, batch = 1;
    float temperature = -1.0f, top_p = -1.0f, length_penalty = 1.0f, kv_pool_gb = 0.0f;
    int threads = 0, n_gpu_layers = -1;   // threads 0: one per physical core; -ngl -1: not given
    int tp = 1;                           // GPUs the model is split over (--tp)
    int cp = 1;                           // GPUs a long prompt's prefill is shared by (--cp)
    uint64_t seed = 0;
    std::string seed_text = "0";   // --seed as given; check_flags() parses it into seed
    bool stats = false, output_ids = false, quiet = false, chat = false, verbose_prompt = false;
    bool no_pipeline = false;      // --no-pipeline: each decode step waits for the one before's ids on the host
    float min_p = 0.0f, repeat_penalty = 1.0f;
    OutputOptions out;   // --json, --logprobs, --stop (and --output-ids, copied in)
};

// Every flag, with its help text, read from argv into `o` and checked (values, and flags that
// do not go together); false when --help or --version was asked for (and printed). A bad flag
// is an olmo::Error.
bool parse_flags(int argc, char** argv, Options& o);

// Checks the output flags against each other and the run (`tok`: null when there is no
// tokenizer); fills o.out.
void check_output_flags(Options& o, const Tokenizer* tok);

// The sampling settings as transformers' generate() takes them from generation_config.json
// (do_sample, temperature, top_k, top_p; its defaults where the file is silent), the flags on
// top: --temp 0 is greedy, and any of --temp T > 0, --top-k, --top-p asks for sampling.
SamplingParams sampling_for(const Options& o, const GenerationDefaults& g);

// -n, else generation_config.json's max_new_tokens, else 128.
int max_new_tokens_for(const Options& o, const GenerationDefaults& g);

}  // namespace olmo
