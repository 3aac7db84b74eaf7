// pretokenizer.cpp: the steps of byte-level BPE before the merges (interface in pretokenizer.h).
//
// Byte-level alphabet: GPT-2 writes every byte as one visible character (printable bytes stand
// for themselves, the 68 others are shifted to U+0100..U+0143), so vocabulary strings and merges
// are read back into raw bytes once at load and BPE runs on the bytes of the text directly.
//
// Pre-tokenizer regexes (Oniguruma in `tokenizers`), matched here by hand on characters
// classified with utf8proc (\p{L}: categories L*, \p{N}: N*, \s: the Unicode White_Space set):
//   GPT-2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   cl100k: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Like the regex engine, a matcher tries the alternatives in order at the current character
// and takes the first that matches; every character starts some alternative, so the matches
// tile the text.
#include "pretokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdlib>

#include "common.h"

namespace olmo::pretok {

const char* const kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kCl100kRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// ---------------------------------------------------------------------------------------------
// Byte-level alphabet

// The byte that byte-level character `c` stands for, or -1 when `c` is not in the alphabet.
static int byte_of_char(int32_t c) {
    static const std::array<int, 324> table = [] {
        std::array<int, 324> t;
        t.fill(-1);
        int shifted = 0;
        for (int b = 0; b < 256; b++) {
            bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            t[printable ? b : 256 + shifted++] = b;
        }
        return t;
    }();
    return c >= 0 && c < (int32_t)table.size() ? table[c] : -1;
}

bool byte_level_to_bytes(const std::string& s, std::string* out) {
    out->clear();
    for (size_t i = 0; i < s.size();) {
        int32_t c;
        utf8proc_ssize_t len = utf8proc_iterate((const utf8proc_uint8_t*)s.data() + i, s.size() - i, &c);
        if (len < 0 || byte_of_char(c) < 0) return false;
        out->push_back((char)byte_of_char(c));
        i += len;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Character classes and the two pre-tokenizer matchers

static uint8_t char_class(int32_t c) {
    if (c < 128) {
        if ((c | 32) >= 'a' && (c | 32) <= 'z') return kLetter;
        if (c >= '0' && c <= '9') return kNumber;
        if (c == '\n' || c == '\r') return kSpace | kNewline;
        return c == ' ' || (c >= '\t' && c <= '\r') ? kSpace : kOther;
    }
    switch (utf8proc_category(c)) {
        case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: return kLetter;
        case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: return kNumber;
        default: break;
    }
    bool white = c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
                 c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
    return white ? kSpace : kOther;
}

void Chars::assign(std::string_view t) {
    text = t;
    cls.clear();
    off.clear();
    for (size_t i = 0; i < t.size();) {
        int32_t c = (unsigned char)t[i];
        utf8proc_ssize_t len = 1;
        if (c >= 0x80) {
            len = utf8proc_iterate((const utf8proc_uint8_t*)t.data() + i, t.size() - i, &c);
            if (len < 0) fail("tokenizer: the text to encode is not valid UTF-8");
        }
        cls.push_back(char_class(c));
        off.push_back((uint32_t)i);
        i += len;
    }
    n = cls.size();
    off.push_back((uint32_t)t.size());
}

// Length of a contraction 's 't 're 've 'm 'll 'd at character i, or 0. With `ignore_case`
// (cl100k's (?i:...)) upper case matches too, and so does U+017F 'ſ', whose case fold is 's'
// (no dolma2 token contains 'ſ', so the ids come out the same either way).
static size_t contraction(const Chars& c, size_t i, bool ignore_case) {
    if (!c.is(i, '\'')) return 0;
    auto letter = [&](size_t k, char l) {
        return c.is(k, l) || (ignore_case && (c.is(k, (char)(l - 32)) || (l == 's' && c.is_long_s(k))));
    };
    if (letter(i + 1, 's') || letter(i + 1, 't') || letter(i + 1, 'm') || letter(i + 1, 'd')) return 2;
    if ((letter(i + 1, 'r') || letter(i + 1, 'v')) && letter(i + 2, 'e')) return 3;
    if (letter(i + 1, 'l') && letter(i + 2, 'l')) return 3;
    return 0;
}

// \s+(?!\S)|\s+ at a whitespace character: a run followed by a non-space gives its last
// character to the next pre-token, unless the run is that one character.
static size_t match_spaces(const Chars& c, size_t i) {
    size_t end = c.run(i, kSpace);
    return end < c.n && end - i > 1 ? end - 1 : end;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const Chars& c, size_t i) {
    if (size_t len = contraction(c, i, false)) return i + len;
    size_t j = c.is(i, ' ') && i + 1 < c.n ? i + 1 : i;  // after the optional leading space
    for (uint8_t cls : {kLetter, kNumber, kOther})
        if (c.cls[j] & cls) return c.run(j, cls);
    return match_spaces(c, i);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
// |\s*[\r\n]+|\s+(?!\S)|\s+
size_t match_cl100k(const Chars& c, size_t i) {
    if (size_t len = contraction(c, i, true)) return i + len;
    uint8_t ci = c.cls[i];
    if (ci & kLetter) return c.run(i, kLetter);
    if (!(ci & (kNewline | kNumber)) && i + 1 < c.n && (c.cls[i + 1] & kLetter)) return c.run(i + 1, kLetter);
    if (ci & kNumber) return std::min(c.run(i, kNumber), i + 3);
    size_t j = c.is(i, ' ') && i + 1 < c.n ? i + 1 : i;
    if (c.cls[j] & kOther) return c.run(c.run(j, kOther), kNewline);
    // \s*[\r\n]+: the whitespace run up to and including its last \r or \n
    for (size_t end = c.run(i, kSpace); end > i; end--)
        if (c.cls[end - 1] & kNewline) return end;
    return match_spaces(c, i);
}

// ---------------------------------------------------------------------------------------------
// Normalization

std::string_view nfc(std::string_view text, std::string& buf) {
    if (std::all_of(text.begin(), text.end(), [](char ch) { return (unsigned char)ch < 0x80; })) return text;
    utf8proc_uint8_t* out = nullptr;
    utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t*)text.data(), (utf8proc_ssize_t)text.size(), &out,
                                        (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (len < 0) fail(std::string("tokenizer: NFC of the text to encode failed: ") + utf8proc_errmsg(len));
    buf.assign((const char*)out, len);
    std::free(out);
    return buf;
}

}  // namespace olmo::pretok
