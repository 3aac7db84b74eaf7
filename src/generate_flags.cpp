// generate_flags.cpp: ./generate's command line (generate_flags.h). The flags are declared in
// groups, in the order --help lists them. CLI11 checks each value's type and range; then
// check_flags() and check_flag_combinations() check what it leaves open. Errors: olmo::Error.
#include "generate_flags.h"

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "common.h"
#include "program_setup.h"

namespace olmo {

namespace {

// llama.cpp's spellings that CLI11 cannot declare (a single dash before several letters), as
// their long names here.
std::vector<std::string> llama_cpp_aliases(int argc, char** argv) {
    std::vector<std::string> args(argv, argv + argc);
    for (std::string& a : args) {
        if (a == "-ngl") a = "--n-gpu-layers";
        else if (a == "-cnv") a = "--chat";
    }
    return args;
}

std::string version_text() {
#ifdef OLMO_CUDA
    return "generate (olmo.cu) 0.17.0, built with CUDA";
#else
    return "generate (olmo.cu) 0.17.0, CPU-only build";
#endif
}

// --model, --tokenizer and where the prompts come from.
void add_model_and_prompt_flags(CLI::App& app, Options& o) {
    app.add_option("-m,--model", o.model, "Hugging Face checkpoint folder (config.json + *.safetensors), or a Hugging "
                   "Face cache folder models--org--name (refs/main's snapshot); default: the small model in weights/ "
                   "next to this program");
    app.add_option("--tokenizer", o.tokenizer, "tokenizer file, a sentencepiece .model or a tokenizer.json "
                   "(default: MODEL/tokenizer.json, else MODEL/tokenizer.model, else tokenizer/tokenizer.model)");
    app.add_option("-p,--prompt", o.prompts, "prompt text; repeat the flag to generate for several prompts in one "
                   "batch (default: --prompt-file, else stdin when it is not a terminal and not empty, else "
                   "\"Once upon a time\")");
    app.add_option("-f,--prompt-file", o.prompt_file, "read one prompt from this file (at most " +
                   std::to_string(kMaxPromptBytes >> 20) + " MiB, as stdin)");
    app.add_option("--prompts-file", o.prompts_file, "batched generation: one prompt per line of this file (at most " +
                   std::to_string(kMaxPromptBytes >> 20) + " MiB); at most " + std::to_string(kMaxBatch) +
                   " decode together, the others start as those finish");
    app.add_option("--prompt-ids", o.prompt_ids, "prompt as comma-separated token ids, e.g. 12,7,99 (no tokenizer needed)");
}

// -n and the sampling settings: --temperature, --top-k, --top-p, --seed.
void add_sampling_flags(CLI::App& app, Options& o) {
    app.add_option("-n,--max-new-tokens", o.max_new_tokens, "stop after this many new tokens (default: "
                   "generation_config.json's max_new_tokens, else 128)")->check(CLI::Range(1, 1 << 30));
    app.add_option("--temperature,--temp", o.temperature, "sampling temperature; 0 = greedy argmax. Defaults come from "
                   "generation_config.json as transformers takes them: do_sample false (or absent) is greedy; sampling "
                   "uses its temperature, top_k, top_p (else 1.0, 50, 1.0). Any of --temp > 0, --top-k, --top-p "
                   "turns sampling on")->check(CLI::Range(0.0f, 100.0f));
    app.add_option("--top-k", o.top_k, "sample only among the k most likely tokens; 0 = off (default: "
                   "generation_config.json's top_k, else 50)")->check(CLI::Range(0, 1 << 30));
    app.add_option("--top-p", o.top_p, "nucleus sampling: smallest set of tokens with this total probability, "
                   "in (0, 1]; 1 = off (default: generation_config.json's top_p, else 1). Order as transformers: "
                   "temperature, top-k, top-p")->check(CLI::Range(1e-6f, 1.0f));
    app.add_option("-s,--seed", o.seed_text, "random seed, an integer in [0, 2^64-1]; the same seed gives the same "
                   "text (default 0)");
}

// --device, --dtype, the context, beam search and the KV pool.
void add_engine_and_beam_flags(CLI::App& app, Options& o) {
    app.add_option("--device", o.device, "auto (CUDA when a GPU is present and runs the model's shape), cpu or cuda "
                   "(default auto)")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    app.add_option("--dtype", o.dtype, "GPU storage dtype of weights and activations: bf16, fp16, fp32, or fp8 "
                   "(bf16 with the linear layers' weights in FP8 E4M3 and their inputs in fp16: half the bytes, faster "
                   "decode, a little quality, see ./perplexity; sm_89+) (default bf16, or fp8 for a checkpoint stored in FP8; the CPU always "
                   "computes in fp32, and other dtypes dequantize an FP8 checkpoint at load)")
        ->check(CLI::IsMember({"bf16", "fp16", "fp32", "fp8"}));
    app.add_option("--kv-dtype", o.kv_dtype, kKvDtypeHelp)->check(CLI::IsMember({"auto", "fp8"}));
    app.add_option("--tp", o.tp, "tensor parallel: split the model over this many GPUs (0 .. N-1) with NCCL, "
                   "heads and MLP channels per GPU; they must divide the head, KV-head and intermediate counts "
                   "(default 1)")->check(CLI::Range(1, 64));
    app.add_option("--cp", o.cp, "context parallel: a long prompt's prefill shared by this many GPUs (0 .. N-1), "
                   "each holding the whole model and, after the prompt, the whole KV cache; decode runs on GPU 0 "
                   "(default 1)")->check(CLI::Range(1, 64));
    app.add_option("-c,--ctx-size,--max-seq-len", o.max_seq_len, "context: KV cache length in tokens, prompt + "
                   "generation (default: max_position_embeddings, capped at 4096)")->check(CLI::Range(1, 1 << 30));
    app.add_option("--beams", o.beams, "beam search with this many beams (1 = off, default); greedy scoring as "
                   "transformers' generate(num_beams=N, do_sample=False)")->check(CLI::Range(1, 64));
    app.add_option("--length-penalty", o.length_penalty, "beam search: hypotheses are scored sum(logprob) / "
                   "length^this, in [-100, 100] (default 1.0, as transformers)");
    app.add_flag("--no-pipeline", o.no_pipeline, "GPU: launch each decode step only after the step before's tokens "
                 "reached the host (by default the next step runs while the host reads and prints them; the "
                 "output is the same)");
    app.add_option("--kv-pool-gb", o.kv_pool_gb, "size of the paged KV-cache pool in GB (default: what the prompts "
                   "and -n need); a batch that does not fit waits, one that never fits is an error")
        ->check(CLI::Range(0.0f, 4096.0f));
}

// Benchmark mode (bench_mode.h), --stats, --output-ids, --quiet.
void add_benchmark_and_report_flags(CLI::App& app, Options& o) {
    app.add_option("--batch", o.batch, "benchmark mode: decode this many copies of the --prompt-len prompt at once")
        ->check(CLI::Range(1, 1024));
    app.add_option("--random-weights", o.random_weights, "benchmark mode: build the model of this config.json with "
                   "random weights on the GPU (no checkpoint, no tokenizer; implies --output-ids)");
    app.add_option("--prompt-len", o.prompt_len, "benchmark mode: a prompt of this many random token ids")
        ->check(CLI::Range(1, 1 << 30));
    app.add_flag("--stats", o.stats, "print time to first token, prefill and decode tokens/s and peak memory to stderr");
    app.add_flag("--output-ids", o.output_ids, "print the generated token ids comma-separated on one line instead of text");
    app.add_flag("-q,--quiet", o.quiet, "no progress line while the weights load (it shows only on a terminal, "
                 "for loads that take over a second)");
}

// --min-p, --repeat-penalty, --stop, --json, --logprobs (README.md, "Output").
void add_sampler_and_output_flags(CLI::App& app, Options& o) {
    app.add_option("--min-p", o.min_p, "keep only tokens whose probability is at least this fraction of the most "
                   "likely one's, after top-k and top-p (transformers' min_p); 0 = off (default 0)")
        ->check(CLI::Range(0.0f, 1.0f));
    app.add_option("--repeat-penalty", o.repeat_penalty, "transformers' repetition_penalty: the logit of every token "
                   "already in the prompt or the output is divided by this when positive, multiplied when negative; "
                   "1 = off (default 1); applies to greedy decoding and beam search too")
        ->check(CLI::Range(1e-3f, 1e3f));
    app.add_option("--stop", o.out.stops, "stop when the generated text contains this string, and cut the text before "
                   "it; repeat the flag for several (text held back while it could begin one)");
    app.add_flag("--json", o.out.json, "print one JSON object per sequence, one per line (prompt, text, ids, tokens, "
                 "per-token log-probabilities, finish_reason, timings) instead of text");
    app.add_option("--logprobs", o.out.top_logprobs, "with --json (implied): also the N most likely tokens at each "
                   "step, with their ids, text and log-probabilities (default 0)")
        ->check(CLI::Range(0, 100));
}

// The flags of --chat, --threads and -ngl.
void add_chat_and_llama_cpp_flags(CLI::App& app, Options& o) {
    app.add_flag("--chat", o.chat, "chat with an Instruct checkpoint (alias -cnv): its chat template (tokenizer_config.json "
                 "or chat_template.jinja; the OLMo-2 and OLMo-3 Instruct templates) wraps each message. With -p: one "
                 "reply per -p, as successive turns. Without: an interactive conversation on stdin, one message per line; "
                 "empty lines are skipped, /reset starts over, /exit or Ctrl-D (end of input) ends it. A reply ends at "
                 "eos, the template's end of turn, or -n tokens");
    app.add_option("--system", o.system, "--chat: the system message (default: none, or the template's own)");
    app.add_flag("--verbose-prompt", o.verbose_prompt, "print each prompt as rendered (with --chat: the template "
                 "applied) and its token ids to stderr before generating");
    app.add_option("-t,--threads", o.threads, "CPU threads of the CPU engine and loader (default 0: one per physical "
                   "core). Idle threads sleep (OMP_WAIT_POLICY=PASSIVE unless it is set), so a busy machine slows "
                   "generation only in proportion")->check(CLI::Range(0, 1024));
    app.add_option("--n-gpu-layers", o.n_gpu_layers, "llama.cpp's -ngl, accepted for its users: the whole model runs "
                   "on the GPU when there is one, so N > 0 changes nothing and 0 means --device cpu")
        ->check(CLI::Range(0, 1 << 20));
    app.set_version_flag("--version", version_text());
}

// What CLI11's parsing and its Range checks leave open: NaN passes every Range (comparisons
// with NaN are false), an empty path would silently mean the default, and an unsigned option
// takes "-1" as 2^64-1. (Temperatures below 1e-5 are greedy: SamplingParams::greedy.)
void check_flags(const CLI::App& app, Options& o) {
    auto in_range = [](const char* flag, float v, float lo, float hi) {
        if (!(v >= lo && v <= hi))
            fail(std::string(flag) + ": " + num_str(v) + " is not a number in [" + num_str(lo) + ", " + num_str(hi) +
                 "] (see --help)");
    };
    if (app.count("--temperature")) in_range("--temperature", o.temperature, 0.0f, 100.0f);
    if (app.count("--top-p")) in_range("--top-p", o.top_p, 1e-6f, 1.0f);
    in_range("--length-penalty", o.length_penalty, -100.0f, 100.0f);
    in_range("--kv-pool-gb", o.kv_pool_gb, 0.0f, 4096.0f);
    const std::vector<std::pair<const char*, const std::string*>> paths = {
        {"--model", &o.model}, {"--tokenizer", &o.tokenizer}, {"--prompt-file", &o.prompt_file},
        {"--prompts-file", &o.prompts_file}, {"--prompt-ids", &o.prompt_ids}, {"--random-weights", &o.random_weights}};
    for (const auto& [flag, value] : paths)
        if (app.count(flag) && value->empty()) fail(std::string(flag) + ": the value is empty");
    const std::string& t = o.seed_text;
    errno = 0;
    char* end = nullptr;
    o.seed = std::strtoull(t.c_str(), &end, 10);
    if (t.empty() || !std::isdigit((unsigned char)t[0]) || *end != '\0' || errno == ERANGE)
        fail("--seed: \"" + t + "\" is not an integer in [0, 2^64-1] (see --help)");
}

// Flags that do not go together, and -ngl's meaning here.
void check_flag_combinations(Options& o) {
    if (o.chat && (!o.prompt_ids.empty() || !o.prompts_file.empty() || !o.prompt_file.empty() || o.beams > 1 ||
                   o.output_ids || !o.random_weights.empty()))
        fail("--chat takes its messages from -p or stdin and prints text: it excludes --prompt-ids, --prompts-file, "
             "--prompt-file, --beams, --output-ids and --random-weights");
    if (!o.system.empty() && !o.chat) fail("--system needs --chat");
    if (o.tp > 1 && o.cp > 1) fail("--tp and --cp cannot be combined yet");
    if (o.tp > 1 && o.device == "cpu") fail("--tp splits the model over GPUs: it needs the CUDA engine, not --device cpu");
    if (o.cp > 1 && o.device == "cpu") fail("--cp shares a prompt between GPUs: it needs the CUDA engine, not --device cpu");
    if (o.n_gpu_layers < 0) return;
    std::fprintf(stderr, "note: -ngl/--n-gpu-layers: %s\n", o.n_gpu_layers > 0 ? "ignored: the whole model runs on the GPU "
                 "when there is one (--device cpu runs it on the CPU)" : "0 = no layer on the GPU: running on the CPU");
    if (o.n_gpu_layers == 0) o.device = "cpu";
}

// argv (llama.cpp's spellings renamed) into the flags; false when --help or --version was asked
// for (and printed).
bool parse_args(CLI::App& app, int argc, char** argv) {
    std::vector<std::string> args = llama_cpp_aliases(argc, argv);
    std::vector<char*> arg_ptrs;
    for (std::string& a : args) arg_ptrs.push_back(a.data());
    return parse_command_line(app, (int)arg_ptrs.size(), arg_ptrs.data());
}

}  // namespace

bool parse_flags(int argc, char** argv, Options& o) {
    CLI::App app{"generate: text generation with OLMo-1/2/3 checkpoints (CPU reference or CUDA engine)"};
    add_model_and_prompt_flags(app, o);
    add_sampling_flags(app, o);
    add_engine_and_beam_flags(app, o);
    add_benchmark_and_report_flags(app, o);
    add_sampler_and_output_flags(app, o);
    add_chat_and_llama_cpp_flags(app, o);
    if (!parse_args(app, argc, argv)) return false;
    check_flags(app, o);
    check_flag_combinations(o);
    return true;
}

void check_output_flags(Options& o, const Tokenizer* tok) {
    if (o.out.top_logprobs > 0) o.out.json = true;
    if (o.out.json && o.output_ids) fail("--json and --output-ids exclude each other (the JSON has the ids)");
    if (!o.out.stops.empty() && !tok) fail("--stop needs a tokenizer (the stop strings are matched in the text)");
    if (o.out.top_logprobs > 0 && o.beams > 1)
        fail("--logprobs: beam search does not track alternatives (--json alone gives each token's log-probability)");
    o.out.ids = o.output_ids;
    StopMatcher check(o.out.stops);   // an empty stop string is an error
}

SamplingParams sampling_for(const Options& o, const GenerationDefaults& g) {
    const bool flags = o.temperature >= 0 || o.top_k >= 0 || o.top_p >= 0;
    const bool sample = o.temperature >= 0 ? o.temperature > 0 : flags || g.do_sample;
    if (!sample) return {0.0f, 0, 1.0f, o.seed, o.min_p, o.repeat_penalty};
    return {o.temperature >= 0 ? o.temperature : g.temperature, o.top_k >= 0 ? o.top_k : g.top_k,
            o.top_p >= 0 ? o.top_p : g.top_p, o.seed, o.min_p, o.repeat_penalty};
}

int max_new_tokens_for(const Options& o, const GenerationDefaults& g) {
    return o.max_new_tokens > 0 ? o.max_new_tokens : g.max_new_tokens > 0 ? g.max_new_tokens : 128;
}

}  // namespace olmo
