// generate.cpp: the ./generate program. Reads flags, loads a checkpoint folder and its
// tokenizer, prefills the prompt in one forward call, then decodes token by token with the
// KV cache, streaming text (or ids) to stdout as it goes. Errors: one line on stderr, exit 1.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "common.h"
#include "engine.h"
#include "tokenizer.h"

using namespace olmo;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The folder that holds this executable: the default model is found relative to it.
std::string exe_dir() {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0) return ".";
    std::string p(buf, n);
    return p.substr(0, p.find_last_of('/'));
}

std::vector<int> parse_id_list(const std::string& s) {
    std::vector<int> ids;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        size_t used = 0;
        long v = -1;
        try {
            v = std::stol(item, &used);
        } catch (...) {
        }
        if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX)
            fail("--prompt-ids: \"" + item + "\" is not a token id (expected comma-separated non-negative integers)");
        ids.push_back((int)v);
    }
    if (ids.empty()) fail("--prompt-ids: empty list");
    return ids;
}

struct Options {
    std::string model, tokenizer, prompt, prompt_file, prompt_ids, device = "auto", dtype = "bf16", random_weights;
    int max_new_tokens = 128, top_k = 0, max_seq_len = 0, prompt_len = 0;
    float temperature = 0.8f, top_p = 0.95f;
    uint64_t seed = 0;
    bool stats = false, output_ids = false;
};

int run(int argc, char** argv) {
    Options o;
    CLI::App app{"generate: text generation with OLMo-1/2/3 checkpoints (CPU reference or CUDA engine)"};
    app.add_option("--model", o.model, "Hugging Face checkpoint folder (config.json + *.safetensors); default: the "
                   "small model in weights/ next to this program");
    app.add_option("--tokenizer", o.tokenizer, "tokenizer file, a sentencepiece .model or a tokenizer.json "
                   "(default: MODEL/tokenizer.json, else MODEL/tokenizer.model, else tokenizer/tokenizer.model)");
    app.add_option("-p,--prompt", o.prompt, "prompt text (default: --prompt-file, else stdin when it is not a "
                   "terminal and not empty, else \"Once upon a time\")");
    app.add_option("-f,--prompt-file", o.prompt_file, "read the prompt from this file");
    app.add_option("--prompt-ids", o.prompt_ids, "prompt as comma-separated token ids, e.g. 12,7,99 (no tokenizer needed)");
    app.add_option("-n,--max-new-tokens", o.max_new_tokens, "stop after this many new tokens (default 128)")
        ->check(CLI::Range(1, 1 << 30));
    app.add_option("-t,--temperature", o.temperature, "sampling temperature; 0 = greedy argmax (default 0.8)")
        ->check(CLI::Range(0.0f, 100.0f));
    app.add_option("--top-k", o.top_k, "sample only among the k most likely tokens; 0 = off (default 0)")
        ->check(CLI::Range(0, 1 << 30));
    app.add_option("--top-p", o.top_p, "nucleus sampling: smallest set of tokens with this total probability, "
                   "in (0, 1]; 1 = off (default 0.95)")->check(CLI::Range(1e-6f, 1.0f));
    app.add_option("-s,--seed", o.seed, "random seed; the same seed gives the same text (default 0)");
    app.add_option("--device", o.device, "auto (CUDA when a GPU is present), cpu or cuda (default auto)")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    app.add_option("--dtype", o.dtype, "GPU storage dtype of weights and activations: bf16, fp16 or fp32 "
                   "(default bf16; the CPU always computes in fp32)")->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
    app.add_option("--max-seq-len", o.max_seq_len, "KV cache length in tokens, prompt + generation "
                   "(default: max_position_embeddings, capped at 4096)")->check(CLI::Range(1, 1 << 30));
    app.add_option("--random-weights", o.random_weights, "benchmark mode: build the model of this config.json with "
                   "random weights on the GPU (no checkpoint, no tokenizer; implies --output-ids)");
    app.add_option("--prompt-len", o.prompt_len, "benchmark mode: a prompt of this many random token ids")
        ->check(CLI::Range(1, 1 << 30));
    app.add_flag("--stats", o.stats, "print time to first token, prefill and decode tokens/s and peak memory to stderr");
    app.add_flag("--output-ids", o.output_ids, "print the generated token ids comma-separated on one line instead of text");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        fail(std::string(e.what()) + " (see --help)");
    }

    if (o.device == "cuda" && !cuda_available()) fail("--device cuda: no CUDA device available in this build/machine");

    // --- model ---
    const bool bench = !o.random_weights.empty();
    const bool default_model = o.model.empty() && !bench;
    if (default_model) o.model = exe_dir() + "/weights";
    if (bench && !o.model.empty()) fail("--random-weights and --model exclude each other");
    ModelConfig cfg = bench ? parse_config(read_file(o.random_weights), o.random_weights) : load_config(o.model);
    std::unique_ptr<Checkpoint> ckpt = bench ? nullptr : std::make_unique<Checkpoint>(o.model);
    if (bench) o.output_ids = true;
    int max_seq = o.max_seq_len ? o.max_seq_len : std::min(cfg.max_pos, 4096);
    if (max_seq > cfg.max_pos)
        fail("--max-seq-len " + std::to_string(max_seq) + " exceeds the model's max_position_embeddings (" +
             std::to_string(cfg.max_pos) + ")");

    // --- tokenizer ---
    std::unique_ptr<Tokenizer> tok;
    if (o.tokenizer.empty() && !bench) {
        for (const std::string& cand : {o.model + "/tokenizer.json", o.model + "/tokenizer.model",
                                        default_model ? exe_dir() + "/tokenizer/tokenizer.model" : std::string()})
            if (!cand.empty() && file_exists(cand)) { o.tokenizer = cand; break; }
    }
    if (!o.tokenizer.empty()) tok = load_tokenizer(o.tokenizer);
    else if ((o.prompt_ids.empty() && !o.prompt_len) || !o.output_ids)
        fail(o.model + ": no tokenizer found (tokenizer.json or tokenizer.model); pass --tokenizer FILE, "
             "or --prompt-ids with --output-ids");

    // --- prompt ---
    std::vector<int> prompt;
    if (!o.prompt_ids.empty()) {
        prompt = parse_id_list(o.prompt_ids);
    } else if (o.prompt_len > 0) {
        for (int i = 0; i < o.prompt_len; i++) prompt.push_back((int)((i * 2654435761u + 12345u) % (unsigned)cfg.vocab));
    } else {
        std::string text = o.prompt;
        if (text.empty() && !o.prompt_file.empty()) text = read_file(o.prompt_file);
        else if (text.empty() && !isatty(0)) text = std::string(std::istreambuf_iterator<char>(std::cin), {});
        if (text.empty() && o.prompt_file.empty()) text = "Once upon a time";   // no prompt given anywhere
        prompt = tok->encode(text);
        if (prompt.empty()) fail("the prompt is empty");
    }
    for (int id : prompt)
        if (id >= cfg.vocab)
            fail("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(cfg.vocab) + ")");
    if ((int)prompt.size() > max_seq)
        fail("the prompt has " + std::to_string(prompt.size()) + " tokens but the context is " + std::to_string(max_seq) +
             " tokens (--max-seq-len, at most max_position_embeddings = " + std::to_string(cfg.max_pos) + ")");
    int n_new = o.max_new_tokens;
    if ((int)prompt.size() + n_new > max_seq) {
        n_new = max_seq - (int)prompt.size();
        std::fprintf(stderr, "note: generation capped at %d tokens by the context of %d\n", n_new, max_seq);
    }

    // --- engine ---
    bool use_cuda = o.device == "cuda" || (o.device == "auto" && cuda_available());
    auto t_load = Clock::now();
    std::unique_ptr<Engine> eng;
    if (use_cuda) {
        DeviceDType dt = o.dtype == "fp32" ? DeviceDType::F32 : o.dtype == "fp16" ? DeviceDType::F16 : DeviceDType::BF16;
        eng = make_cuda_engine(cfg, ckpt.get(), max_seq, dt);
    } else {
        if (bench) fail("--random-weights needs the CUDA engine (--device cuda)");
        eng = make_cpu_engine(cfg, *ckpt, max_seq);
    }
    const double load_s = seconds_since(t_load);

    // --- generation loop: one prefill call, then one decode call per token ---
    SamplingParams sp{o.temperature, o.top_k, o.top_p, o.seed};
    std::unique_ptr<StreamDecoder> stream;
    if (!o.output_ids) {
        stream = std::make_unique<StreamDecoder>(*tok, prompt);
        std::fputs(tok->decode(prompt).c_str(), stdout);
        std::fflush(stdout);
    }
    if (bench) {   // warm-up: first cuBLAS calls and the decode graph capture stay out of the figures
        eng->forward_sample(prompt, sp, 0);
        eng->forward_sample({0}, sp, 1);
        eng->reset();
    }
    std::vector<int> out;
    auto t0 = Clock::now();
    double ttft = 0;
    std::vector<int> feed = prompt;
    for (int i = 0; i < n_new; i++) {
        int next = eng->forward_sample(feed, sp, i);
        if (i == 0) ttft = seconds_since(t0);
        out.push_back(next);
        bool eos = std::find(cfg.eos_ids.begin(), cfg.eos_ids.end(), next) != cfg.eos_ids.end();
        if (stream && !eos) std::fputs(stream->push(next).c_str(), stdout);
        if (o.output_ids) std::printf("%s%d", i ? "," : "", next);
        std::fflush(stdout);
        if (eos && !bench) break;
        feed = {next};
    }
    if (stream) std::fputs(stream->flush().c_str(), stdout);
    std::printf("\n");
    const double total = seconds_since(t0);

    if (o.stats) {
        const int decoded = (int)out.size() - 1;
        std::fprintf(stderr, "\n--- stats (%s%s) ---\n", use_cuda ? "cuda " : "cpu fp32", use_cuda ? o.dtype.c_str() : "");
        std::fprintf(stderr, "load             %.3f s\n", load_s);
        std::fprintf(stderr, "prompt tokens    %zu\n", prompt.size());
        std::fprintf(stderr, "time to 1st tok  %.2f ms\n", ttft * 1e3);
        std::fprintf(stderr, "prefill          %.1f tokens/s\n", prompt.size() / ttft);
        if (decoded > 0) std::fprintf(stderr, "decode           %.1f tokens/s (%d tokens)\n", decoded / (total - ttft), decoded);
        std::fprintf(stderr, "%s memory %.1f MiB\n", use_cuda ? "peak GPU" : "engine  ", eng->memory_bytes() / 1048576.0);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
