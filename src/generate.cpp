// generate.cpp: the ./generate program. Reads flags (generate_flags.h), loads a checkpoint folder
// and its tokenizer, prefills the prompt in one forward call, then decodes token by token with
// the KV cache, streaming text (or ids) to stdout as it goes. Errors: one line on stderr, exit 1.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "bench_mode.h"
#include "chat.h"
#include "common.h"
#include "engine.h"
#include "fp8_checkpoint.h"
#include "decoding.h"
#include "generate_flags.h"
#include "program_setup.h"
#include "tensor_parallel.h"
#include "threads.h"
#include "output.h"
#include "memory_check.h"
#include "tokenizer.h"

using namespace olmo;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// --prompt-ids: "12,7,99" as token ids.
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

// The prompts as token ids: --prompt-ids, --prompt-len (benchmarks), each --prompt, the lines
// of --prompts-file, else one prompt from --prompt-file, stdin or the default text.
std::vector<std::vector<int>> read_prompts(const Options& o, const Tokenizer* tok, int vocab, int max_seq) {
    std::vector<std::vector<int>> prompts;
    auto encode = [&](const std::string& text) {
        std::vector<int> ids = tok->encode(text);
        if (ids.empty()) fail("a prompt is empty");
        return ids;
    };
    if (!o.prompt_ids.empty()) {
        prompts.push_back(parse_id_list(o.prompt_ids));
    } else if (o.prompt_len > 0) {
        prompts = bench_prompts(o.prompt_len, o.batch, vocab, max_seq);
    } else if (!o.prompts.empty()) {
        for (const std::string& text : o.prompts) prompts.push_back(encode(text));
    } else if (!o.prompts_file.empty()) {
        std::stringstream lines(read_file(o.prompts_file, /*allow_pipe=*/true, kMaxPromptBytes));
        for (std::string line; std::getline(lines, line);)
            if (!line.empty()) prompts.push_back(encode(line));
        if (prompts.empty()) fail(o.prompts_file + ": no prompts (one per line)");
    } else {
        std::string text;
        if (!o.prompt_file.empty()) text = read_file(o.prompt_file, /*allow_pipe=*/true, kMaxPromptBytes);
        else if (!isatty(0)) text = read_stream(std::cin, kMaxPromptBytes, "stdin");
        if (text.empty() && o.prompt_file.empty()) text = "Once upon a time";   // no prompt given anywhere
        prompts.push_back(encode(text));
    }
    return prompts;
}

// KV blocks of the run, checked against the memory they will live in before anything is
// allocated. --kv-pool-gb: that size, refused at once when the memory does not hold it. By
// default: every prompt (each beam) at full length, but only as many prompts as half the
// memory left after the weights holds (at least the longest one): generate() admits the
// others as blocks free, so a long --prompts-file runs in waves.
int kv_pool_for(const Options& o, const ModelConfig& cfg, const std::vector<std::vector<int>>& prompts, int n_new,
                bool use_cuda) {
    const size_t elt = !use_cuda || o.dtype == "fp32" ? 4 : 2;
    const KvDType kv = use_cuda ? kv_dtype(o.kv_dtype) : KvDType::Same;   // the CPU's pools are fp32 either way
    const int bs = kKvBlockSize;
    const int tp = use_cuda ? o.tp : 1;   // --tp: each GPU holds 1/tp of the weights and of each block
    const double block_bytes = (double)kv_block_bytes(cfg, kv, elt) * cfg.n_layers / tp;
    const double available = use_cuda ? gpu_free_bytes() : host_available_bytes();
    const std::string where = use_cuda ? "free on the GPU" : "available in host memory";
    constexpr double kMaxBlocks = 1 << 24;   // 2^28 tokens: more than any run holds
    if (o.kv_pool_gb > 0) {
        if (o.kv_pool_gb * 1e9 > available)
            fail("--kv-pool-gb " + num_str(o.kv_pool_gb) + ": only " + num_str(available / 1e9) + " GB " + where);
        return (int)std::max(1.0, std::min(kMaxBlocks, o.kv_pool_gb * 1e9 / block_bytes));
    }
    std::vector<int64_t> need;   // blocks of each prompt, longest first
    for (const auto& p : prompts) need.push_back((((int64_t)p.size() + n_new + bs - 1) / bs + 2) * o.beams);
    std::sort(need.rbegin(), need.rend());
    double weights = 0;   // FP8 stores the linear layers in one byte per weight (an overestimate is safe)
    const double weight_elt = use_cuda && o.dtype == "fp8" ? 1.0 : elt;
    for (const WeightSlot& w : weight_table(cfg, !cfg.tie_embeddings))
        weights += (double)w.numel() * (w.param == Param::Embed ? elt : weight_elt);
    const double budget = (available - weights / tp) / 2;
    int64_t blocks = need[0];
    for (size_t k = 1; k < need.size() && k < (size_t)kMaxBatch && (blocks + need[k]) * block_bytes <= budget; k++)
        blocks += need[k];
    return (int)std::min<int64_t>(blocks, kMaxBlocks);
}

// Sequence k of a batch samples with seed + k.
SamplingParams seeded(SamplingParams s, size_t k) {
    s.seed += k;
    return s;
}

// The shape of the run about to start, for Engine::warm_up: beam search steps N beams and
// reads logits; otherwise every prompt decodes at once, each with its own seed.
WarmUp warm_up_for(const Options& o, const std::vector<std::vector<int>>& prompts, const SamplingParams& sp) {
    WarmUp w;
    if (prompts.empty()) return {64, 1, {sp}};   // --chat: no message typed yet
    w.prompt_len = (int)prompts[0].size();
    if (o.beams > 1) {
        w.batch = o.beams;
        return w;
    }
    w.batch = (int)prompts.size();
    if (sp.repetition_penalty != 1.0f) return w;   // the steps return logits (decoding.h)
    for (size_t k = 0; k < prompts.size(); k++) w.sampling.push_back(seeded(sp, k));
    return w;
}

// --stats: where the time and the memory went, on stderr.
struct Timing {
    double load_s, warm_s, ttft, t_decode, total;   // t_decode: when decoding alone began (-1: at ttft)
    size_t generated;                        // tokens generated, summed over sequences
    const LoadProgress& load;                // bytes of checkpoint tensors read, and the copy's time
};
void print_stats(const Options& o, bool use_cuda, const std::vector<std::vector<int>>& prompts, const Engine& eng,
                 const Timing& tm) {
    size_t prompt_tokens = 0;
    for (const auto& p : prompts) prompt_tokens += p.size();
    const MemoryUse m = eng.memory();
    std::fprintf(stderr, "\n--- stats (%s%s, %zu sequence%s) ---\n", use_cuda ? "cuda " : "cpu fp32",
                 use_cuda ? o.dtype.c_str() : "", prompts.size() * o.beams, prompts.size() * o.beams > 1 ? "s" : "");
    std::fprintf(stderr, "load             %.3f s", tm.load_s);
    if (tm.load.done() > 0)
        std::fprintf(stderr, ": %.2f GB of weights, %.1f GB/s (the copy alone %.3f s, %.1f GB/s)", tm.load.done() / 1e9,
                     tm.load.done() / 1e9 / tm.load_s, tm.load.seconds(), tm.load.done() / 1e9 / tm.load.seconds());
    std::fprintf(stderr, "; warm-up %.1f ms\n", tm.warm_s * 1e3);
    std::fprintf(stderr, "prompt tokens    %zu\n", prompt_tokens);
    std::fprintf(stderr, "time to 1st tok  %.2f ms\n", tm.ttft * 1e3);
    std::fprintf(stderr, "prefill          %.1f tokens/s\n", prompts[0].size() / tm.ttft);
    const size_t decoded = tm.generated > prompts.size() ? tm.generated - prompts.size() : 0;
    const double t_decode = tm.t_decode < 0 ? tm.ttft : tm.t_decode;
    if (decoded > 0 && o.beams == 1)
        std::fprintf(stderr, "decode           %.1f tokens/s (%zu tokens, summed over sequences)\n",
                     decoded / (tm.total - t_decode), decoded);
    std::fprintf(stderr, "weights          %.2f GB: %s\n", m.weights / 1e9, m.weight_format.c_str());
    if (!m.kv_format.empty()) std::fprintf(stderr, "KV cache         %s\n", m.kv_format.c_str());
    std::fprintf(stderr, "%s memory %.1f MiB (weights %.1f, KV pool %.1f, buffers %.1f)\n",
                 use_cuda ? "GPU" : "engine", (m.weights + m.kv_pool + m.other) / 1048576.0, m.weights / 1048576.0,
                 m.kv_pool / 1048576.0, m.other / 1048576.0);
    std::fprintf(stderr, "KV pool          %d blocks of %d tokens, peak %d in use (%.0f%%), %d free now\n",
                 m.blocks_total, m.block_size, m.blocks_peak_used, 100.0 * m.blocks_peak_used / std::max(1, m.blocks_total),
                 m.blocks_free);
}

// What a generation mode needs: the run's settings, model, tokenizer (null with ids only),
// engine and prompts.
struct Job {
    const Options& o;
    const ModelConfig& cfg;
    const Tokenizer* tok;
    Engine& eng;
    const std::vector<std::vector<int>>& prompts;
    int n_new;
    SamplingParams sp;
    bool bench;
};

// Tokens as they come, for --stats: the first one's time, and when decoding alone began.
struct Progress {
    Clock::time_point t0 = Clock::now();
    double ttft = 0, t_decode = -1;   // t_decode -1: at ttft (one prompt)
    size_t generated = 0;             // summed over sequences
    void token() {
        if (generated++ == 0) ttft = seconds_since(t0);
    }
};

// Text to stdout as bytes: a NUL in a prompt or a token must not end the output (fputs would).
void put(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

// Beam search, prompt after prompt; the best hypothesis of each, cut at a stop string after the
// search (the search itself does not look for stop strings).
void beam_searches(const Job& j, Progress& pr) {
    SequencePrinter printer(j.o.out, j.tok, j.cfg.vocab, j.prompts, /*labels=*/j.prompts.size() > 1);
    for (size_t k = 0; k < j.prompts.size(); k++) {
        BeamResult r = beam_search(j.eng, j.prompts[k], j.o.beams, j.n_new, j.o.length_penalty, j.cfg.eos_ids,
                                   j.sp.repetition_penalty);
        if (k == 0) pr.ttft = seconds_since(pr.t0);
        pr.generated += r.tokens.size();
        printer.print_beam(k, r, j.cfg.eos_ids);
    }
}

// One prompt: the text (or ids) streamed as it is produced; text that could begin a stop string
// is held back until the next tokens decide.
void stream_one(const Job& j, Progress& pr) {
    const std::vector<int>& prompt = j.prompts[0];
    std::unique_ptr<TextStream> text;
    if (j.tok && (!j.o.output_ids || !j.o.out.stops.empty()))
        text = std::make_unique<TextStream>(*j.tok, prompt, j.o.out.stops);
    if (!j.o.output_ids) {
        put(j.tok->decode(prompt));
        std::fflush(stdout);
    }
    auto show = [&](const NewToken& t) {
        pr.token();
        const std::string piece = text ? text->push(t.id) : "";
        if (j.o.output_ids) std::printf("%s%d", pr.generated > 1 ? "," : "", t.id);
        else put(piece);
        std::fflush(stdout);
        return text && text->stopped();
    };
    generate(j.eng, {Request{prompt, j.sp, j.n_new}}, j.cfg.eos_ids, show, !j.o.no_pipeline);
    if (text && !j.o.output_ids) put(text->finish());
    std::printf("\n");
}

// A batch (or --json): every prompt decodes in the same steps, each with its own seed
// (seed + k); each sequence is printed the moment it ends (output.h: "[k] text" or JSON).
void generate_batch(const Job& j, Progress& pr) {
    std::vector<Request> reqs;
    for (size_t k = 0; k < j.prompts.size(); k++) reqs.push_back({j.prompts[k], seeded(j.sp, k), j.n_new, j.o.out.json});
    SequencePrinter printer(j.o.out, j.tok, j.cfg.vocab, j.prompts, /*labels=*/true);
    auto show = [&](const NewToken& t) {
        pr.token();
        if (pr.generated == j.prompts.size()) pr.t_decode = seconds_since(pr.t0);   // every prompt prefilled
        return printer.on_token(t);
    };
    generate(j.eng, reqs, j.bench ? std::vector<int>{} : j.cfg.eos_ids, show, !j.o.no_pipeline);
}

// --chat: the checkpoint's chat template around each message; the -p messages in turn, else an
// interactive conversation on stdin.
void run_chat(const Options& o, const ChatTemplate& t, const ModelConfig& cfg, const Tokenizer& tok, Engine& eng,
              const SamplingParams& sp, int n_new) {
    ChatSession chat(eng, tok, t, {o.system, sp, n_new, o.verbose_prompt, chat_stop_ids(t, tok, cfg.eos_ids), !o.no_pipeline});
    for (const std::string& p : o.prompts) chat.reply(p, stdout);
    if (!o.prompts.empty()) return;
    const bool terminal = isatty(0) && isatty(1);
    if (terminal)
        std::fprintf(stderr, "chat (%s): type a message and Enter; /reset starts over, /exit or Ctrl-D ends\n",
                     t.name.c_str());
    chat_loop(chat, std::cin, terminal);
}

// --tokenizer, else MODEL/tokenizer.json, MODEL/tokenizer.model, or (default model) the one next to
// this program; null when there is none and ids in and out suffice. Its ids must be the model's.
std::unique_ptr<Tokenizer> find_tokenizer(Options& o, const ModelConfig& cfg, bool default_model, bool bench) {
    if (o.tokenizer.empty() && !bench) o.tokenizer = default_tokenizer_file(o.model, default_model);
    if (o.tokenizer.empty()) {
        if ((o.prompt_ids.empty() && !o.prompt_len) || !(o.output_ids || o.out.json || o.out.top_logprobs))
            fail(o.model + ": no tokenizer found (tokenizer.json or tokenizer.model); pass --tokenizer FILE, "
                 "or --prompt-ids with --output-ids or --json");
        return nullptr;
    }
    return load_model_tokenizer(o.tokenizer, cfg, o.model);
}

// What run() is doing, for the message when memory runs out.
const char* stage = "starting";

// The model: --model's folder (or the default model next to this program), or benchmark mode's
// --random-weights config; and the context length.
struct Model {
    ModelConfig cfg;
    std::unique_ptr<Checkpoint> ckpt;   // null in benchmark mode
    int max_seq;
};
Model open_model(Options& o, bool bench, bool default_model) {
    Model m;
    if (bench) {
        m.cfg = bench_config(o.random_weights, o.model);
        o.output_ids = true;
    } else {
        o.model = model_folder(default_model ? "" : o.model);
        m.cfg = load_config(o.model);
        m.ckpt = std::make_unique<Checkpoint>(o.model);
    }
    m.max_seq = o.max_seq_len ? o.max_seq_len : std::min(m.cfg.max_pos, 4096);
    if (m.max_seq > m.cfg.max_pos)
        fail("--max-seq-len " + std::to_string(m.max_seq) + " exceeds the model's max_position_embeddings (" +
             std::to_string(m.cfg.max_pos) + ")");
    return m;
}

// Checks every prompt against the vocabulary and the context (--verbose-prompt prints each);
// returns the tokens to generate, capped (with a note) where the context ends first.
int check_prompts(const Options& o, const Tokenizer* tok, const Model& m, const std::vector<std::vector<int>>& prompts) {
    int n_new = max_new_tokens_for(o, m.cfg.generation);
    for (const std::vector<int>& prompt : prompts) {
        if (o.verbose_prompt) print_verbose_prompt(tok ? tok->decode(prompt, /*skip_special=*/false) : "", prompt);
        for (int id : prompt)
            if (id >= m.cfg.vocab)
                fail("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(m.cfg.vocab) + ")");
        if ((int)prompt.size() > m.max_seq)
            fail("the prompt has " + std::to_string(prompt.size()) + " tokens but the context is " +
                 std::to_string(m.max_seq) + " tokens (--max-seq-len, at most max_position_embeddings = " +
                 std::to_string(m.cfg.max_pos) + ")");
        if ((int)prompt.size() + n_new > m.max_seq) {
            n_new = m.max_seq - (int)prompt.size();
            std::fprintf(stderr, "note: generation capped at %d tokens by the context of %d\n", n_new, m.max_seq);
        }
    }
    if (n_new < 1) fail("no room to generate: a prompt fills the whole context of " + std::to_string(m.max_seq) + " tokens");
    return n_new;
}

// The CPU or CUDA engine with the model's weights, its KV pool sized for the run.
std::unique_ptr<Engine> build_engine(const Options& o, const Model& m, bool use_cuda, int kv_blocks,
                                     const std::vector<std::vector<int>>& prompts, LoadProgress& progress) {
    const int max_batch = std::max<int>(o.beams, std::min<int>(prompts.size(), std::max(kMaxBatch, o.batch)));
    if (!use_cuda && o.tp > 1) fail("--tp " + std::to_string(o.tp) + ": there is no GPU to split the model over");
    if (!use_cuda && o.cp > 1) fail("--cp " + std::to_string(o.cp) + ": there is no GPU to share the prompt with");
    const KvDType kv = kv_dtype(o.kv_dtype);
    if (!use_cuda) return make_cpu_engine(m.cfg, *m.ckpt, m.max_seq, kv_blocks, &progress, 1, 1, kv);
    try {
        return load_engine(true, o.dtype, m.cfg, m.ckpt.get(), m.max_seq, kv_blocks, max_batch, &progress, o.tp, o.cp,
                           kv);
    } catch (const Error& e) {   // too large for one GPU where there are several: say how to split it
        const int n = o.tp == 1 && o.cp == 1 && std::string(e.what()).rfind("needs ", 0) == 0 ? tp_suggestion(m.cfg, cuda_device_count()) : 0;
        if (!n) throw;
        fail(std::string(e.what()) + "; --tp " + std::to_string(n) + " splits the model over " + std::to_string(n) + " of the " +
             std::to_string(cuda_device_count()) + " GPUs here");
    }
}

int run(int argc, char** argv) {
    Options o;
    if (!parse_flags(argc, argv, o)) return 0;
    set_cpu_threads(o.threads);
    stage = "reading the model files";
    check_device(o.device);
    const bool bench = !o.random_weights.empty();
    const bool default_model = o.model.empty() && !bench;
    const Model m = open_model(o, bench, default_model);

    std::unique_ptr<Tokenizer> tok = find_tokenizer(o, m.cfg, default_model, bench);
    const ChatTemplate chat_template = o.chat ? load_chat_template(o.model) : ChatTemplate{};
    check_output_flags(o, tok.get());

    stage = "reading the prompts";
    std::vector<std::vector<int>> prompts;
    if (!o.chat) prompts = read_prompts(o, tok.get(), m.cfg.vocab, m.max_seq);
    const int n_new = check_prompts(o, tok.get(), m, prompts);

    const bool use_cuda = choose_cuda(o.device, m.cfg);
    if (bench && !use_cuda) fail("--random-weights needs the CUDA engine (--device cuda)");
    if (o.dtype.empty())   // a checkpoint stored in FP8 runs as stored (fp8_checkpoint.h)
        o.dtype = use_cuda && m.ckpt && has_fp8_weights(*m.ckpt, weight_table(m.cfg, m.ckpt.get())) ? "fp8" : "bf16";
    check_kv_dtype(kv_dtype(o.kv_dtype), use_cuda, o.dtype);
    stage = "loading the weights";
    const int kv_blocks = o.chat ? 0 : kv_pool_for(o, m.cfg, prompts, n_new, use_cuda);   // chat: one sequence
    auto t_load = Clock::now();
    LoadProgress progress(progress_line(!o.quiet && isatty(2)));
    std::unique_ptr<Engine> eng = build_engine(o, m, use_cuda, kv_blocks, prompts, progress);
    const SamplingParams sp = sampling_for(o, m.cfg.generation);
    auto t_warm = Clock::now();
    eng->warm_up(warm_up_for(o, prompts, sp));   // one-time work of the first request, done here
    const double warm_s = seconds_since(t_warm), load_s = seconds_since(t_load);

    stage = "generating";
    if (o.chat) {
        run_chat(o, chat_template, m.cfg, *tok, *eng, sp, n_new);
        return 0;
    }
    const Job job{o, m.cfg, tok.get(), *eng, prompts, n_new, sp, bench};
    Progress pr;
    if (o.beams > 1) beam_searches(job, pr);
    else if (prompts.size() == 1 && !bench && !o.out.json) stream_one(job, pr);
    else generate_batch(job, pr);
    const double total = seconds_since(pr.t0);
    if (o.stats)
        print_stats(o, use_cuda, prompts, *eng, {load_s, warm_s, pr.ttft, pr.t_decode, total, pr.generated, progress});
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return olmo::program_main(argc, argv, run, &stage); }
