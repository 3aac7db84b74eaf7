// pretokenizer.h: what byte-level BPE (tokenizer_bpe.h) does to a text before the merges: the
// byte-level alphabet, NFC, cutting out added tokens and splitting into pre-tokens with the
// GPT-2 or the cl100k regex, matched by hand (pretokenizer.cpp says how).
//
// Splitting a text into pre-tokens:
//     pretok::Chars c;
//     c.assign(text);                              // one class per character (throws on bad UTF-8)
//     for (size_t i = 0; i < c.n;) {
//         size_t end = pretok::match_gpt2(c, i);   // or match_cl100k: the pre-token is [i, end)
//         ... text.substr(c.off[i], c.off[end] - c.off[i]) ...
//         i = end;
//     }
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace olmo::pretok {

// The two split regexes as tokenizer.json spells them (its pre_tokenizer must name one).
extern const char* const kGpt2Regex;
extern const char* const kCl100kRegex;

// The bytes a vocabulary string stands for; false when one of its characters is outside the
// byte-level alphabet (then `tokenizers` decodes the string as its own UTF-8).
bool byte_level_to_bytes(const std::string& s, std::string* out);

// NFC of `text`, in `buf` unless the text is ASCII (which NFC leaves unchanged).
std::string_view nfc(std::string_view text, std::string& buf);

// Every character has exactly one of the first four bits; \r and \n also have kNewline.
enum : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4, kOther = 8, kNewline = 16 };

// A text cut into characters: the class and first byte offset of each (off[n] = text size).
struct Chars {
    std::string_view text;
    std::vector<uint8_t> cls;
    std::vector<uint32_t> off;
    size_t n = 0;

    // Throws olmo::Error when `t` is not valid UTF-8.
    void assign(std::string_view t);
    bool is(size_t i, char ascii) const { return i < n && text[off[i]] == ascii; }
    bool is_long_s(size_t i) const { return i < n && text.substr(off[i], off[i + 1] - off[i]) == "\xC5\xBF"; }
    // End of the run of characters from i that have a bit of `mask`.
    size_t run(size_t i, uint8_t mask) const {
        while (i < n && (cls[i] & mask)) i++;
        return i;
    }
};

// The end of the pre-token that starts at character i (i < c.n), by each regex.
size_t match_gpt2(const Chars& c, size_t i);
size_t match_cl100k(const Chars& c, size_t i);

// Cuts the added tokens of `trie` out of `text`, leftmost-longest: their ids go to `ids`, and
// the text between them (when not empty) to on_text, in order. `trie.longest(text, pos, &id)`
// is the length of the longest added token at text[pos] (0 if none).
template <class Trie, class OnText>
void split_added(const Trie& trie, std::string_view text, std::vector<int>& ids, OnText on_text) {
    size_t start = 0;
    for (size_t pos = 0; pos < text.size();) {
        int id;
        size_t len = trie.longest(text, pos, &id);
        if (len == 0) {
            pos++;
            continue;
        }
        if (pos > start) on_text(text.substr(start, pos - start));
        ids.push_back(id);
        start = pos += len;
    }
    if (start < text.size()) on_text(text.substr(start));
}

}  // namespace olmo::pretok
