// perplexity.cpp: the ./perplexity program. Tokenizes a text file, runs it through the model in
// windows of a fixed length (scoring.h says which tokens each window scores) and prints the
// mean negative log-likelihood per token and the perplexity exp(mean NLL): how quantization
// and storage dtypes are judged, and what llama.cpp users know from llama-perplexity.
// Errors: one line on stderr, exit 1.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.h"
#include "engine.h"
#include "program_setup.h"
#include "scoring.h"
#include "threads.h"

using namespace olmo;

namespace {

struct Options {
    std::string model, tokenizer, file, device = "auto", dtype = "bf16", kv_dtype = "auto";
    int ctx = 0, stride = 0, threads = 0;   // ctx, stride: the defaults unless given (see --help)
    bool ctx_given = false, stride_given = false;
    bool json = false, quiet = false;
};

constexpr int kDefaultMaxCtx = 2048;

const char* kWindowRule =
    "Windows of --ctx tokens start at multiples of --stride S: window k feeds tokens [k*S, "
    "min(k*S + ctx, n)) from an empty context and scores those from the previous window's end "
    "(token 1 for the first window) to its own end, so every token after the first is scored "
    "exactly once, with at least ctx - S tokens of context after the first window (Hugging "
    "Face's perplexity of fixed-length models). The text is tokenized whole, without BOS, as "
    "./generate tokenizes a prompt.";

// Every flag, with its help text; false when --help was asked for (and printed).
bool parse_flags(int argc, char** argv, Options& o) {
    CLI::App app{std::string("perplexity: mean negative log-likelihood per token and perplexity exp(mean NLL) of a "
                             "text under an OLMo checkpoint (CPU reference or CUDA engine).\n") + kWindowRule};
    app.add_option("-m,--model", o.model, "Hugging Face checkpoint folder (config.json + *.safetensors), or a Hugging "
                   "Face cache folder models--org--name; default: the small model in weights/ next to this program");
    app.add_option("--tokenizer", o.tokenizer, "tokenizer file, a sentencepiece .model or a tokenizer.json (default: "
                   "MODEL/tokenizer.json, else MODEL/tokenizer.model, else tokenizer/tokenizer.model)");
    app.add_option("-f,--file", o.file, "the text to score (UTF-8, at most " + std::to_string(kMaxFileBytes >> 20) +
                   " MiB)")->required();
    app.add_option("-c,--ctx", o.ctx, "window length in tokens, at least 2 (default: max_position_embeddings or " +
                   std::to_string(kDefaultMaxCtx) + ", whichever is smaller)");
    app.add_option("--stride", o.stride, "distance between window starts, in [1, ctx - 1] (default ctx / 2)");
    app.add_option("--device", o.device, "auto (CUDA when a GPU is present and runs the model's shape), cpu, or "
                   "cuda (alias gpu) (default auto)")->check(CLI::IsMember({"auto", "cpu", "cuda", "gpu"}));
    app.add_option("--dtype", o.dtype, "GPU storage dtype of weights and activations: bf16, fp16, fp32 or fp8 (bf16 "
                   "with FP8 E4M3 linear-layer weights and fp16 inputs, to judge what they cost) (default bf16; the CPU always "
                   "computes in fp32). Logits and their log-softmax are fp32 in every case")
        ->check(CLI::IsMember({"bf16", "fp16", "fp32", "fp8"}));
    app.add_option("--kv-dtype", o.kv_dtype, kKvDtypeHelp)->check(CLI::IsMember({"auto", "fp8"}));
    app.add_option("-t,--threads", o.threads, "CPU threads of the CPU engine and loader (default 0: one per physical "
                   "core)")->check(CLI::Range(0, 1024));
    app.add_flag("--json", o.json, "print the result as one JSON object (keys as in README.md) instead of text");
    app.add_flag("-q,--quiet", o.quiet, "no progress lines on stderr");
    if (!parse_command_line(app, argc, argv)) return false;
    for (const auto& [flag, value] : {std::pair{"--model", &o.model}, {"--tokenizer", &o.tokenizer}, {"--file", &o.file}})
        if (app.count(flag) && value->empty()) fail(std::string(flag) + ": the value is empty");
    o.ctx_given = app.count("--ctx") > 0;
    o.stride_given = app.count("--stride") > 0;
    return true;
}

// --ctx and --stride against the model; fills in their defaults.
void check_window_flags(Options& o, const ModelConfig& cfg) {
    if (!o.ctx_given) o.ctx = std::min(cfg.max_pos, kDefaultMaxCtx);
    if (o.ctx < 2) fail("--ctx " + std::to_string(o.ctx) + ": a window needs at least 2 tokens (one to condition on, one to score)");
    if (o.ctx > cfg.max_pos)
        fail("--ctx " + std::to_string(o.ctx) + " exceeds the model's max_position_embeddings (" + std::to_string(cfg.max_pos) + ")");
    if (!o.stride_given) o.stride = o.ctx / 2;
    if (o.stride < 1 || o.stride >= o.ctx)
        fail("--stride " + std::to_string(o.stride) + " is outside [1, " + std::to_string(o.ctx - 1) +
             "] (--ctx " + std::to_string(o.ctx) + "): a stride of ctx or more would leave tokens unscored");
}

// The text's ids: the whole file, tokenized as ./generate tokenizes a prompt (no BOS).
std::vector<int> read_ids(const Options& o, const Tokenizer& tok) {
    const std::string text = read_file(o.file, /*allow_pipe=*/true);
    if (text.empty()) fail(o.file + ": the file is empty");
    std::vector<int> ids = tok.encode(text);
    if (ids.size() < 2)
        fail(o.file + ": the text is " + std::to_string(ids.size()) + " token long: at least 2 are needed to score one");
    return ids;
}

// Progress on stderr: on a terminal one line rewritten after each window, else a line at each
// tenth of the windows.
PerplexityProgress progress_lines(bool quiet) {
    if (quiet) return nullptr;
    const bool tty = isatty(2);
    return [tty](int64_t total, const PerplexityResult& r) {
        const bool last = r.windows == total;
        if (!tty && !last && r.windows * 10 / total == (r.windows - 1) * 10 / total) return;
        std::fprintf(stderr, "%swindow %lld/%lld: %lld tokens scored, perplexity so far %.4f%s", tty ? "\r" : "",
                     (long long)r.windows, (long long)total, (long long)r.scored, r.perplexity(),
                     tty && !last ? "" : "\n");
    };
}

struct Run {
    const Options& o;
    bool cuda;
    size_t tokens;
    PerplexityResult r;
    double seconds;
};

void print_result(const Run& run) {
    const Options& o = run.o;
    const PerplexityResult& r = run.r;
    const std::string dtype = run.cuda ? o.dtype : "fp32";
    if (o.json) {
        nlohmann::json j = {{"file", o.file}, {"model", o.model}, {"device", run.cuda ? "cuda" : "cpu"},
                            {"dtype", dtype}, {"kv_dtype", o.kv_dtype}, {"tokens", run.tokens}, {"ctx", o.ctx},
                            {"stride", o.stride}, {"windows", r.windows}, {"scored", r.scored}, {"evaluated", r.evaluated},
                            {"mean_nll", r.mean_nll()}, {"mean_nll_stderr", r.mean_nll_stderr()},
                            {"perplexity", r.perplexity()}, {"seconds", run.seconds},
                            {"tokens_per_s", r.evaluated / run.seconds}};
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return;
    }
    std::printf("text          %s: %zu tokens, %lld window%s of %d tokens, stride %d\n", o.file.c_str(), run.tokens,
                (long long)r.windows, r.windows > 1 ? "s" : "", o.ctx, o.stride);
    std::printf("model         %s (%s %s%s)\n", o.model.c_str(), run.cuda ? "cuda" : "cpu", dtype.c_str(),
                o.kv_dtype == "fp8" ? ", FP8 KV cache" : "");
    std::printf("tokens scored %lld\n", (long long)r.scored);
    std::printf("mean NLL      %.6f +/- %.6f (standard error)\n", r.mean_nll(), r.mean_nll_stderr());
    std::printf("perplexity    %.4f\n", r.perplexity());
    std::printf("speed         %.1f tokens/s (%lld tokens evaluated in %.2f s)\n", r.evaluated / run.seconds,
                (long long)r.evaluated, run.seconds);
}

int run(int argc, char** argv) {
    Options o;
    if (!parse_flags(argc, argv, o)) return 0;
    set_cpu_threads(o.threads);
    check_device(o.device);
    const bool default_model = o.model.empty();
    o.model = model_folder(o.model);
    const ModelConfig cfg = load_config(o.model);
    check_window_flags(o, cfg);
    if (o.tokenizer.empty()) o.tokenizer = default_tokenizer_file(o.model, default_model);
    if (o.tokenizer.empty()) fail(o.model + ": no tokenizer found (tokenizer.json or tokenizer.model); pass --tokenizer FILE");
    const std::unique_ptr<Tokenizer> tok = load_model_tokenizer(o.tokenizer, cfg, o.model);
    const std::vector<int> ids = read_ids(o, *tok);

    const bool cuda = choose_cuda(o.device, cfg);
    const KvDType kv = kv_dtype(o.kv_dtype);
    check_kv_dtype(kv, cuda, o.dtype);
    const Checkpoint ckpt(o.model);
    LoadProgress load(progress_line(!o.quiet && isatty(2)));
    const std::unique_ptr<Engine> eng = load_engine(cuda, o.dtype, cfg, &ckpt, o.ctx, 0, 1, &load, 1, 1, kv);
    const auto t0 = std::chrono::steady_clock::now();
    const PerplexityResult r = perplexity(*eng, ids, o.ctx, o.stride, progress_lines(o.quiet));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    print_result({o, cuda, ids.size(), r, seconds});
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return olmo::program_main(argc, argv, run); }
