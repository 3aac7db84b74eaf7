// tokenize.cpp: the ./tokenize program, text -> ids or ids -> text with the tokenizer the engine
// uses (a tokenizer.json, or a sentencepiece .model):
//   ./tokenize --tokenizer FILE "text"          prints the ids, comma-separated
//   ./tokenize --tokenizer FILE < file.txt      encodes stdin when no text is given
//   ./tokenize --tokenizer FILE --decode 1,2,3  prints the text the ids stand for
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "common.h"
#include "tokenizer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int> parse_ids(const std::string& list) {
    std::vector<int> ids;
    std::stringstream ss(list);
    for (std::string item; std::getline(ss, item, ',');) {
        char* end = nullptr;
        long id = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || id < 0 || id > INT32_MAX)
            olmo::fail("--decode: \"" + item + "\" is not a token id (expected e.g. 1,2,3)");
        ids.push_back((int)id);
    }
    return ids;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Encodes text into token ids (comma-separated), or decodes ids into text, exactly as\n"
                 "Hugging Face `tokenizers` does with the same tokenizer.json."};
    std::string tokenizer_path, text, decode_list;
    bool skip_special = false, timing = false;
    app.add_option("--tokenizer", tokenizer_path, "tokenizer.json (byte-level BPE) or sentencepiece .model")
        ->required();
    CLI::Option* text_opt = app.add_option("text", text, "text to encode; stdin is read when it is not given");
    app.add_option("--decode", decode_list, "comma-separated ids to decode into text (printed as raw bytes)");
    app.add_flag("--skip-special", skip_special, "with --decode: leave out special tokens such as <|endoftext|>");
    app.add_flag("--time", timing, "print the load time and the encode/decode throughput to stderr");
    CLI11_PARSE(app, argc, argv);

    try {
        auto t0 = std::chrono::steady_clock::now();
        auto tok = olmo::load_tokenizer(tokenizer_path);
        const double load_s = seconds_since(t0);
        if (!decode_list.empty()) {
            const std::vector<int> ids = parse_ids(decode_list);
            t0 = std::chrono::steady_clock::now();
            const std::string out = tok->decode(ids, skip_special);
            const double s = seconds_since(t0);
            std::fwrite(out.data(), 1, out.size(), stdout);
            if (isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
            if (timing) std::fprintf(stderr, "load %.3f s, decode %zu ids -> %zu bytes in %.4f s\n", load_s, ids.size(), out.size(), s);
            return 0;
        }
        if (!text_opt->count()) {
            std::ostringstream ss;
            ss << std::cin.rdbuf();
            text = ss.str();
        }
        t0 = std::chrono::steady_clock::now();
        const std::vector<int> ids = tok->encode(text);
        const double s = seconds_since(t0);
        std::string out;
        for (size_t i = 0; i < ids.size(); i++) out += (i ? "," : "") + std::to_string(ids[i]);
        out += '\n';
        std::fwrite(out.data(), 1, out.size(), stdout);
        if (timing)
            std::fprintf(stderr, "load %.3f s, encode %zu bytes -> %zu ids in %.4f s (%.2f MB/s)\n", load_s, text.size(),
                         ids.size(), s, text.size() / 1e6 / s);
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {   // olmo::Error, or a library's exception: one line either way
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
