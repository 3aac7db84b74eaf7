// tokenizer.h: the small interface every tokenizer implements, and the streaming decoder.
//
// Two implementations: SentencePieceTokenizer (a sentencepiece .model, used by the default
// model) and BpeTokenizer (a Hugging Face tokenizer.json with byte-level BPE, used by real
// OLMo checkpoints). load_tokenizer() picks one by looking at the file's content.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace olmo {

struct Tokenizer {
    virtual ~Tokenizer() = default;
    // Text -> ids. Adds no BOS/EOS (OLMo adds none).
    virtual std::vector<int> encode(const std::string& text) const = 0;
    // Ids -> raw bytes. The result may end in (or, for byte-level BPE, contain) an incomplete
    // UTF-8 sequence; it is never "repaired" with U+FFFD, so decode(a ++ b) starts with
    // decode(a) and StreamDecoder can hold back a partial character.
    virtual std::string decode(const std::vector<int>& ids, bool skip_special = true) const = 0;
    virtual int vocab_size() const = 0;
};

// Loads a tokenizer by content: a JSON file is a tokenizer.json (BPE), anything else is tried
// as a sentencepiece model. Throws olmo::Error naming the file on failure.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);
// The two loaders it chooses between (tokenizer_sp.cpp, tokenizer_bpe.cpp).
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& path);
std::unique_ptr<Tokenizer> load_bpe_tokenizer(const std::string& path);

// Streams text as ids arrive without ever printing a broken UTF-8 character: each push()
// returns the newly completed text. Seed it with the prompt ids so that spacing at the
// boundary is the same as decoding the whole sequence at once. Each push decodes only a few
// ids (constant time per token), yet the pushes and flush() together return exactly what
// decode() of all the ids after the prefix adds to decode(prefix).
class StreamDecoder {
public:
    StreamDecoder(const Tokenizer& tok, std::vector<int> prefix_ids);
    std::string push(int id);   // text completed by this id (may be empty)
    std::string flush();        // whatever is left, even an incomplete sequence
private:
    const Tokenizer& tok_;
    std::vector<int> context_;  // the last ids, enough for decode() to treat the next id right
    size_t context_bytes_ = 0;  // decode(context_).size()
    std::string pending_;       // decoded bytes not returned yet: an incomplete UTF-8 sequence
};

// Length of the longest prefix of s that does not end inside a UTF-8 sequence.
size_t utf8_complete_prefix(const std::string& s);

}  // namespace olmo
