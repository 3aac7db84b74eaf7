// program_setup.h: what the programs that run a model (./generate, ./perplexity) share between
// their command line and a loaded engine: the parse of the flags, the default model next to the program, the tokenizer lookup,
// the choice of device and storage dtype, the load's progress line.
#pragma once
#include <memory>
#include <string>

#include "config.h"
#include "engine.h"
#include "tokenizer.h"
#include "weights.h"

namespace CLI {
class App;
}

namespace olmo {

// Parses the command line into `app`'s options: false when --help or --version was asked for
// (and printed); a bad flag is one olmo::Error line ending "(see --help)".
bool parse_command_line(CLI::App& app, int argc, char** argv);

// The folder that holds the running executable: the default model is found relative to it.
std::string exe_dir();

// --model as given: "" is the default model (weights/ next to the program), else the folder
// itself or, for a Hugging Face cache folder, its snapshot (model_folder.h).
std::string model_folder(const std::string& flag);

// The tokenizer a model folder comes with: DIR/tokenizer.json, else DIR/tokenizer.model, else
// (the default model) tokenizer/tokenizer.model next to the program; "" when there is none.
std::string default_tokenizer_file(const std::string& model, bool default_model);

// Loads the tokenizer at `path`; one with more ids than the model's vocab_size is an error
// naming both files.
std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& path, const ModelConfig& cfg, const std::string& model);

// --device cuda (or gpu) without a CUDA device is an error: checked before anything is read.
void check_device(const std::string& device);

// --device: "cuda" (or "gpu"), "cpu", or "auto": the GPU when there is one and it can run this
// model's shape (else a note on stderr and the CPU). cuda with a shape it cannot run is an error.
bool choose_cuda(const std::string& device, const ModelConfig& cfg);

// --dtype's names: "bf16", "fp16", "fp32", "fp8".
DeviceDType device_dtype(const std::string& name);

// --kv-dtype's names: "auto" (KvDType::Same), "fp8"; and its help text, which both programs show.
KvDType kv_dtype(const std::string& name);
extern const char* const kKvDtypeHelp;

// --kv-dtype against the engine chosen: on the GPU an FP8 KV cache needs --dtype bf16, fp16 or
// fp8 (`dtype`: device_dtype's names); the CPU takes it whatever --dtype says.
void check_kv_dtype(KvDType kv, bool use_cuda, const std::string& dtype);

// The load's progress line on stderr, rewritten in place, once a load has run for a second;
// nothing at all when `show` is false (--quiet, or stderr is not a terminal).
LoadProgress::Report progress_line(bool show);

// The engine: CUDA with storage `dtype` (device_dtype's names), else the fp32 CPU reference.
// ckpt null: random weights (CUDA only, benchmarks). kv_blocks 0: one sequence of max_seq
// tokens; max_batch: sequences per decode step (CUDA); tp: GPUs to split the model over, cp: GPUs
// to share a long prompt's prefill (CUDA); kv: the KV cache's storage.
std::unique_ptr<Engine> load_engine(bool use_cuda, const std::string& dtype, const ModelConfig& cfg,
                                    const Checkpoint* ckpt, int max_seq, int kv_blocks, int max_batch,
                                    LoadProgress* progress, int tp = 1, int cp = 1, KvDType kv = KvDType::Same);

// A program's main(): OpenMP's passive waits set up (threads.h), then run(argc, argv), with any
// error printed as one line "error: ..." on stderr and exit status 1. *doing, when given, names
// the step under way for the out-of-memory line ("out of memory while loading the weights").
int program_main(int argc, char** argv, int (*run)(int, char**), const char* const* doing = nullptr);

}  // namespace olmo
