// fuzz_sentencepiece: the sentencepiece path. The first input byte picks what the rest is:
// even, text encoded and decoded with the default model's tokenizer/tokenizer.model (loaded
// once; byte fallback, so any text gives ids of the vocabulary, and streaming equals the
// one-shot decode); odd, a .model file given to load_tokenizer() (refused with olmo::Error, or
// a tokenizer that encodes and decodes a few fixed texts).
#include "common.h"
#include "fuzz_util.h"
#include "tokenizer.h"

using namespace olmo;

namespace {

void round_trip(const Tokenizer& tok, const std::string& text) {
    std::vector<int> ids;
    try {
        ids = tok.encode(text);
    } catch (const Error&) {
        return;
    }
    for (int id : ids)
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    StreamDecoder stream(tok, {});
    std::string streamed;
    for (int id : ids) streamed += stream.push(id);
    if (streamed + stream.flush() != tok.decode(ids)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::unique_ptr<Tokenizer> default_tok = load_tokenizer(fuzz::repo_path("tokenizer/tokenizer.model"));
    if (size < 1) return 0;
    if (data[0] % 2 == 0) {
        round_trip(*default_tok, std::string(reinterpret_cast<const char*>(data + 1), size - 1));
        return 0;
    }
    std::unique_ptr<Tokenizer> tok;
    try {
        tok = load_tokenizer(fuzz::put_file("tokenizer.model", data + 1, size - 1));
    } catch (const Error&) {
        return 0;
    }
    for (const char* text : {"Hello world", "  two  spaces\n", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x99\x82", ""})
        round_trip(*tok, text);
    tok->decode({0, 1, 2, tok->vocab_size(), -1});
    return 0;
}
