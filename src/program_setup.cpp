// program_setup.cpp: from flags to a loaded engine, for ./generate and ./perplexity
// (program_setup.h).
#include "program_setup.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <new>

#include "common.h"
#include "model_folder.h"
#include "threads.h"

namespace olmo {

bool parse_command_line(CLI::App& app, int argc, char** argv) {
    try {
        app.parse(argc, argv);
    } catch (const CLI::Success& e) {
        app.exit(e);   // prints the help or the version
        return false;
    } catch (const CLI::ParseError& e) {
        fail(std::string(e.what()) + " (see --help)");
    }
    return true;
}

std::string exe_dir() {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0) return ".";
    std::string p(buf, n);
    return p.substr(0, p.find_last_of('/'));
}

std::string model_folder(const std::string& flag) {
    return flag.empty() ? exe_dir() + "/weights" : resolve_model_folder(flag);
}

std::string default_tokenizer_file(const std::string& model, bool default_model) {
    for (const std::string& cand : {model + "/tokenizer.json", model + "/tokenizer.model",
                                    default_model ? exe_dir() + "/tokenizer/tokenizer.model" : std::string()})
        if (!cand.empty() && file_exists(cand)) return cand;
    return "";
}

std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& path, const ModelConfig& cfg, const std::string& model) {
    std::unique_ptr<Tokenizer> tok = load_tokenizer(path);
    if (tok->vocab_size() > cfg.vocab)
        fail(path + ": the tokenizer has " + std::to_string(tok->vocab_size()) + " ids but the model's vocab_size "
             "is " + std::to_string(cfg.vocab) + " (" + model + "/config.json): not this model's tokenizer");
    return tok;
}

void check_device(const std::string& device) {
    if ((device == "cuda" || device == "gpu") && !cuda_available())
        fail("--device " + device + ": no CUDA device available in this build/machine");
}

bool choose_cuda(const std::string& device, const ModelConfig& cfg) {
    if (device == "cpu") return false;
    const std::string why_not = cuda_unsupported_reason(cfg);
    if (device == "cuda" || device == "gpu") {
        check_device(device);
        if (!why_not.empty()) fail("--device " + device + ": " + why_not);
        return true;
    }
    if (!cuda_available()) return false;
    if (why_not.empty()) return true;
    std::fprintf(stderr, "note: %s; running on the CPU\n", why_not.c_str());
    return false;
}

DeviceDType device_dtype(const std::string& name) {
    return name == "fp32"   ? DeviceDType::F32
           : name == "fp16" ? DeviceDType::F16
           : name == "fp8"  ? DeviceDType::FP8
                            : DeviceDType::BF16;
}

KvDType kv_dtype(const std::string& name) { return name == "fp8" ? KvDType::FP8 : KvDType::Same; }

const char* const kKvDtypeHelp =
    "KV cache storage: auto = the --dtype's (fp32 on the CPU), fp8 = E4M3 with a scale per token and KV head: about "
    "half the bytes of bf16 (about twice the context in the same pool) and less to read per decode step at long "
    "context, at a small cost in quality (measure with ./perplexity); on the GPU it needs --dtype bf16, fp16 or fp8 "
    "(default auto)";

void check_kv_dtype(KvDType kv, bool use_cuda, const std::string& dtype) {
    if (kv == KvDType::FP8 && use_cuda && device_dtype(dtype) == DeviceDType::F32)
        fail("--kv-dtype fp8 on the GPU needs --dtype bf16, fp16 or fp8, not fp32");
}

LoadProgress::Report progress_line(bool show) {
    if (!show) return {};
    return [](size_t done, size_t total, double s, bool last) {
        if (s < 1.0) return;
        std::fprintf(stderr, "\rloading weights: %.2f / %.2f GB, %.1f GB/s   %s", done / 1e9, total / 1e9,
                     done / 1e9 / s, last ? "\n" : "");
    };
}

std::unique_ptr<Engine> load_engine(bool use_cuda, const std::string& dtype, const ModelConfig& cfg,
                                    const Checkpoint* ckpt, int max_seq, int kv_blocks, int max_batch,
                                    LoadProgress* progress, int tp, int cp, KvDType kv) {
    if (use_cuda)
        return make_cuda_engine(cfg, ckpt, max_seq, device_dtype(dtype), kv_blocks, max_batch, progress, 0, tp, cp, kv);
    if (!ckpt) fail("random weights need the CUDA engine (--device cuda)");
    if (tp > 1) fail("--tp needs the CUDA engine (--device cuda)");
    if (cp > 1) fail("--cp needs the CUDA engine (--device cuda)");
    return make_cpu_engine(cfg, *ckpt, max_seq, kv_blocks, progress, 1, 1, kv);
}

int program_main(int argc, char** argv, int (*run)(int, char**), const char* const* doing) {
    exec_with_passive_omp_wait(argv);
    try {
        return run(argc, argv);
    } catch (const std::bad_alloc&) {
        std::fflush(stdout);
        std::fprintf(stderr, "error: out of memory%s%s\n", doing ? " while " : "", doing ? *doing : "");
        return 1;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

}  // namespace olmo
