// fuzz_bpe_encode: any text -> encode and decode with the real OLMo-2/3 tokenizer (dolma2, loaded
// once). Text that is not valid UTF-8 is refused with olmo::Error; anything else must encode to
// ids of the vocabulary and decode back to exactly the same bytes (byte-level BPE with no
// normalizer loses nothing), also when streamed token by token.
#include "common.h"
#include "fuzz_util.h"
#include "tokenizer.h"

using namespace olmo;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::unique_ptr<Tokenizer> tok = load_bpe_tokenizer(fuzz::repo_path("tests/tokenizers/allenai_dolma2.json"));
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::vector<int> ids;
    try {
        ids = tok->encode(text);
    } catch (const Error&) {
        return 0;
    }
    for (int id : ids)
        if (id < 0 || id >= tok->vocab_size()) __builtin_trap();
    if (tok->decode(ids, false) != text) __builtin_trap();
    StreamDecoder stream(*tok, {});
    std::string streamed;
    for (int id : ids) streamed += stream.push(id);
    if (streamed + stream.flush() != tok->decode(ids)) __builtin_trap();
    return 0;
}
