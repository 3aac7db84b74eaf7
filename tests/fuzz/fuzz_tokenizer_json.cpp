// fuzz_tokenizer_json: tokenizer.json files -> the BPE loader, then encode and decode with what
// it built. A file is either refused with olmo::Error or gives a tokenizer that encodes a few
// fixed texts (ASCII, spaces, accents, CJK, emoji, special-token look-alikes) to ids inside
// its vocabulary, decodes any ids (also past the vocabulary) without failing, and streams the
// same text as the one-shot decode.
#include "common.h"
#include "fuzz_util.h"
#include "tokenizer.h"

using namespace olmo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::unique_ptr<Tokenizer> tok;
    try {
        tok = load_bpe_tokenizer(fuzz::put_file("tokenizer.json", data, size));
    } catch (const Error&) {
        return 0;
    }
    const int V = tok->vocab_size();
    std::vector<int> all;
    for (const char* text : {"Hello world", "  two  spaces\n\ttab\r\n", "caf\xC3\xA9 na\xC3\xAFve", "\xE6\x97\xA5\xE6\x9C\xAC",
                             "\xF0\x9F\x99\x82!", "<|endoftext|> 12345 don't", ""}) {
        std::vector<int> ids;
        try {
            ids = tok->encode(text);
        } catch (const Error&) {   // e.g. a byte with no id in a vocabulary without it
            continue;
        }
        for (int id : ids)
            if (id < 0 || id >= V) __builtin_trap();
        all.insert(all.end(), ids.begin(), ids.end());
    }
    for (int id : {0, V - 1, V, V + 5, -1}) all.push_back(id);
    const std::string whole = tok->decode(all, false);
    StreamDecoder stream(*tok, {});
    std::string streamed;
    for (int id : all) streamed += stream.push(id);
    streamed += stream.flush();
    if (streamed != tok->decode(all)) __builtin_trap();
    (void)whole;
    return 0;
}
