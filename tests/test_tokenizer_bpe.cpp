// test_tokenizer_bpe.cpp: the byte-level BPE tokenizer (src/tokenizer_bpe.*) against Hugging Face
// `tokenizers`, for the three OLMo tokenizer files in tests/tokenizers/.
//
// The references, tests/tokenizer_refs/<file>.json, come from tests/make_tokenizer_refs.py: the
// ids and the decodes (with and without special tokens) of >= 300 strings of every kind (English,
// code, numbers, whitespace runs, contractions, scripts, emoji, combining marks, special tokens,
// very long words, fuzz), and decode-only id lists. Independent of them: BPE merge order on a
// tiny hand-made vocabulary, decoding prefixes of an encoding, and clear errors for bad files.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common.h"
#include "test_util.h"
#include "tokenizer_bpe.h"

using json = nlohmann::json;

namespace {

const char* kFiles[] = {"allenai_dolma2", "allenai_gpt-neox-olmo-dolma-v1_5",
                        "allenai_eleuther-ai-gpt-neox-20b-pii-special"};

// Printable form of a test string for failure messages.
std::string escaped(const std::string& s, size_t max = 120) {
    std::string out;
    for (unsigned char ch : s.substr(0, max)) {
        char buf[8];
        if (ch >= 0x20 && ch < 0x7F) out += (char)ch;
        else snprintf(buf, sizeof buf, "\\x%02X", ch), out += buf;
    }
    return out + (s.size() > max ? "..." : "");
}

std::string joined(const std::vector<int>& ids) {
    std::string out;
    for (size_t i = 0; i < ids.size() && i < 40; i++) out += (i ? "," : "") + std::to_string(ids[i]);
    return out + (ids.size() > 40 ? ",..." : "");
}

// One tokenizer file with its references, loaded once for all tests.
struct Fixture {
    std::unique_ptr<olmo::Tokenizer> tok;
    json refs;
};

const Fixture& fixture(const std::string& name) {
    static std::map<std::string, Fixture> loaded;
    auto it = loaded.find(name);
    if (it != loaded.end()) return it->second;
    Fixture f;
    f.tok = olmo::load_bpe_tokenizer("tests/tokenizers/" + name + ".json");
    std::ifstream in("tests/tokenizer_refs/" + name + ".json");
    if (in) f.refs = json::parse(in);
    return loaded.emplace(name, std::move(f)).first->second;
}

class BpeRefs : public ::testing::TestWithParam<const char*> {
protected:
    void SetUp() override {
        f_ = &fixture(GetParam());
        ASSERT_TRUE(f_->refs.contains("cases"))
            << "tests/tokenizer_refs/" << GetParam() << ".json is missing: run tests/make_tokenizer_refs.py";
        ASSERT_GE(f_->refs["cases"].size(), 300u);
    }
    const Fixture* f_ = nullptr;
};

TEST_P(BpeRefs, EncodeMatchesTokenizers) {
    int bad = 0;
    for (const json& c : f_->refs["cases"]) {
        const std::string text = c["text"];
        const std::vector<int> want = c["ids"], got = f_->tok->encode(text);
        if (got != want && ++bad <= 10)
            ADD_FAILURE() << c["kind"] << " \"" << escaped(text) << "\"\n  tokenizers: " << joined(want)
                          << "\n  ours:       " << joined(got);
    }
    EXPECT_EQ(bad, 0) << "of " << f_->refs["cases"].size() << " strings";
}

TEST_P(BpeRefs, DecodeMatchesTokenizers) {
    int checked = 0;
    for (const char* section : {"cases", "decode_cases"})
        for (const json& c : f_->refs[section]) {
            const std::vector<int> ids = c["ids"];
            ASSERT_FALSE(c.contains("error")) << "tokenizers failed to decode " << joined(ids) << ": " << c["error"];
            EXPECT_EQ(escaped(f_->tok->decode(ids, false), 1 << 20), escaped(c["decode"], 1 << 20)) << joined(ids);
            EXPECT_EQ(escaped(f_->tok->decode(ids, true), 1 << 20), escaped(c["decode_skip"], 1 << 20)) << joined(ids);
            checked++;
        }
    EXPECT_GE(checked, 340);
}

std::string nfc(const std::string& s) {
    utf8proc_uint8_t* out = nullptr;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t*)s.data(), (utf8proc_ssize_t)s.size(), &out,
                                      (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    std::string r = n >= 0 ? std::string((const char*)out, n) : "(invalid)";
    std::free(out);
    return r;
}

// decode(encode(s)) gives s back (dolma2), or NFC(s) for the OLMo-1 files, whose normalizer is
// NFC; tokenizers agrees in both cases.
TEST_P(BpeRefs, RoundTrip) {
    const bool normalizes = std::string(GetParam()) != "allenai_dolma2";
    int changed = 0;
    for (const json& c : f_->refs["cases"]) {
        const std::string text = c["text"], back = f_->tok->decode(f_->tok->encode(text), false);
        EXPECT_EQ(escaped(back, 1 << 20), escaped(normalizes ? nfc(text) : text, 1 << 20));
        EXPECT_EQ(escaped(back, 1 << 20), escaped(c["decode"], 1 << 20));
        changed += back != text;
    }
    if (normalizes) {
        EXPECT_GT(changed, 10) << "too few strings that NFC changes";
    }
}

// The ids of a prefix decode to a byte prefix of the whole decode: a byte-level token may end
// inside a UTF-8 character, and decode returns those bytes as they are (no U+FFFD).
TEST_P(BpeRefs, PrefixDecodesArePrefixes) {
    int partial = 0;
    for (const json& c : f_->refs["cases"]) {
        if (c["kind"] != "emoji" && c["kind"] != "scripts" && c["kind"] != "combining") continue;
        const std::vector<int> ids = c["ids"];
        const std::string whole = f_->tok->decode(ids, false);
        for (size_t k = 0; k <= ids.size(); k++) {
            const std::string part = f_->tok->decode(std::vector<int>(ids.begin(), ids.begin() + k), false);
            ASSERT_EQ(whole.compare(0, part.size(), part), 0) << escaped(whole) << " prefix " << k;
            partial += olmo::utf8_complete_prefix(part) != part.size();
        }
    }
    EXPECT_GT(partial, 0) << "no prefix ended inside a character";
}

// A long stream of random ids (tokens that end inside a character, special tokens, ids past the
// vocabulary) equals the one-shot decode.
TEST_P(BpeRefs, LongRandomStreamEqualsOneShot) {
    const olmo::Tokenizer& tok = *f_->tok;
    for (const std::vector<int>& prefix : {std::vector<int>{}, tok.encode("Hello \xE4\xB8\x96")})
        olmo::test::expect_stream_equals_decode(tok, prefix, olmo::test::random_ids(tok, 2500, 7));
}

INSTANTIATE_TEST_SUITE_P(OlmoTokenizers, BpeRefs, ::testing::ValuesIn(kFiles));

TEST(BpeTokenizer, VocabSizes) {
    EXPECT_EQ(fixture("allenai_dolma2").tok->vocab_size(), 100278);
    EXPECT_EQ(fixture("allenai_gpt-neox-olmo-dolma-v1_5").tok->vocab_size(), 50280);
    EXPECT_EQ(fixture("allenai_eleuther-ai-gpt-neox-20b-pii-special").tok->vocab_size(), 50280);
}

TEST(BpeTokenizer, SpecialTokensAndSkip) {
    const olmo::Tokenizer& tok = *fixture("allenai_dolma2").tok;
    const std::vector<int> ids = tok.encode("Hi<|endoftext|>|||EMAIL_ADDRESS|||");
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(ids[1], 100257);  // special
    EXPECT_EQ(ids[2], 100262);  // added, not special: kept by skip_special
    EXPECT_EQ(tok.decode(ids, false), "Hi<|endoftext|>|||EMAIL_ADDRESS|||");
    EXPECT_EQ(tok.decode(ids, true), "Hi|||EMAIL_ADDRESS|||");
}

TEST(BpeTokenizer, InvalidUtf8IsAnError) {
    const olmo::Tokenizer& tok = *fixture("allenai_dolma2").tok;
    EXPECT_THROW(tok.encode("ok \xC3\x28 bad"), olmo::Error);
    EXPECT_THROW(fixture("allenai_gpt-neox-olmo-dolma-v1_5").tok->encode("caf\xC3"), olmo::Error);
}

// A tiny valid tokenizer.json: byte-level GPT-2 pre-tokenizer, the 256 byte symbols, and merges.
json tiny_tokenizer(const std::vector<std::string>& merges) {
    json vocab = json::object();
    int shifted = 0;
    for (int b = 0; b < 256; b++) {  // byte b is id b; non-printable bytes shift to U+0100..
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        int c = printable ? b : 256 + shifted++;
        std::string s;
        if (c < 0x80) s = std::string(1, (char)c);
        else s = {(char)(0xC0 | (c >> 6)), (char)(0x80 | (c & 0x3F))};
        vocab[s] = b;
    }
    int next = 256;
    for (const std::string& m : merges) vocab[m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1)] = next++;
    return {{"version", "1.0"},
            {"added_tokens", json::array({{{"id", next}, {"content", "<|end|>"}, {"special", true},
                                           {"normalized", false}, {"lstrip", false}, {"rstrip", false},
                                           {"single_word", false}}})},
            {"normalizer", nullptr},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
            {"post_processor", nullptr},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

std::string write_temp(const std::string& name, const std::string& content) {
    std::string path = ::testing::TempDir() + "olmo_bpe_" + name + ".json";
    std::ofstream(path) << content;
    return path;
}

std::unique_ptr<olmo::Tokenizer> load_tiny(const json& j, const std::string& name) {
    const std::string path = write_temp(name, j.dump());
    auto tok = olmo::load_bpe_tokenizer(path);
    std::remove(path.c_str());
    return tok;
}

TEST(BpeTokenizer, MergeOrder) {
    // Lowest rank first; among equal ranks the leftmost pair.
    auto tok = load_tiny(tiny_tokenizer({"a a", "b c", "a b"}), "order");
    EXPECT_EQ(tok->encode("aaa"), (std::vector<int>{256, 'a'}));
    EXPECT_EQ(tok->encode("aaaa"), (std::vector<int>{256, 256}));
    EXPECT_EQ(tok->encode("abc"), (std::vector<int>{'a', 257}));     // "b c" (rank 1) before "a b" (rank 2)
    EXPECT_EQ(tok->encode("abd"), (std::vector<int>{258, 'd'}));
    EXPECT_EQ(tok->encode("ab<|end|>c"), (std::vector<int>{258, 259, 'c'}));
    EXPECT_EQ(tok->decode({258, 259, 'c', 1000}, false), "ab<|end|>c");  // unknown id 1000 is dropped
    // The same merges written as [left, right] pairs (newer tokenizer.json files).
    json pairs = tiny_tokenizer({"a a", "b c", "a b"});
    pairs["model"]["merges"] = json::array({{"a", "a"}, {"b", "c"}, {"a", "b"}});
    EXPECT_EQ(load_tiny(pairs, "pairs")->encode("aaa abc"), (std::vector<int>{256, 'a', ' ', 'a', 257}));
}

// Each bad file gives an olmo::Error whose message names the file and the problem.
TEST(BpeTokenizer, BadFilesGiveClearErrors) {
    const json good = tiny_tokenizer({"a b"});
    ASSERT_NO_THROW(load_tiny(good, "good"));
    auto expect_error = [&](const std::string& name, const std::string& content, const std::string& problem) {
        const std::string path = write_temp(name, content);
        try {
            olmo::load_bpe_tokenizer(path);
            ADD_FAILURE() << name << ": no error";
        } catch (const olmo::Error& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(path), std::string::npos) << name << ": " << msg;
            EXPECT_NE(msg.find(problem), std::string::npos) << name << ": " << msg;
        }
        std::remove(path.c_str());
    };
    auto with = [&](const std::string& ptr, const json& value) {
        json j = good;
        j[json::json_pointer(ptr)] = value;
        return j.dump();
    };
    auto without = [&](const std::string& parent, const std::string& key) {
        json j = good;
        j[json::json_pointer(parent)].erase(key);
        return j.dump();
    };
    expect_error("not_json", "{\"model\": {\"type\": \"BPE\", ", "malformed JSON");
    // A value nested 100000 deep is quoted as a short excerpt (json::dump() would overflow the stack).
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    std::string text = without("", "normalizer");
    expect_error("deep", text.substr(0, text.size() - 1) + ",\"normalizer\":" + deep + "}", "normalizer [[[[...]]]] is not supported");
    expect_error("wordpiece", with("/model/type", "WordPiece"), "model type \"WordPiece\" is not supported");
    expect_error("no_model", without("", "model"), "missing \"model\"");
    expect_error("no_vocab", without("/model", "vocab"), "missing \"vocab\"");
    expect_error("no_merges", without("/model", "merges"), "missing \"merges\"");
    expect_error("bad_merge", with("/model/merges/0", "a zz"), "uses a token missing from model.vocab");
    expect_error("merge_format", with("/model/merges/0", "ab"), "is not \"left right\"");
    expect_error("dropout", with("/model/dropout", 0.1), "BPE option \"dropout\"");
    expect_error("whitespace_pre", with("/pre_tokenizer", {{"type", "Whitespace"}}), "pre_tokenizer");
    expect_error("unknown_regex", with("/pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {
        {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"use_regex", false}}}}}), "pre_tokenizer");
    expect_error("prefix_space", with("/pre_tokenizer/add_prefix_space", true), "add_prefix_space");
    expect_error("lowercase", with("/normalizer", {{"type", "Lowercase"}}), "normalizer");
    expect_error("decoder", with("/decoder", {{"type", "WordPiece"}}), "decoder");
    expect_error("template", with("/post_processor", {{"type", "TemplateProcessing"}, {"single", {
        {{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}),
        "post_processor");
    expect_error("lstrip", with("/added_tokens/0/lstrip", true), "\"lstrip\": true is not supported");
    std::string seq;   // post_processor Sequences nested 100000 deep
    for (int i = 0; i < 100000; i++) seq += "{\"type\":\"Sequence\",\"processors\":[";
    seq += "null";
    for (int i = 0; i < 100000; i++) seq += "]}";
    text = without("", "post_processor");
    expect_error("deep_post", text.substr(0, text.size() - 1) + ",\"post_processor\":" + seq + "}", "post_processor");
    // Ids are range-checked integers: 2^32 + 5 must not wrap to 5, nor 1.5 truncate to 1.
    expect_error("id_wraps", with("/model/vocab/a", 4294967301LL), "id of token \"a\" must be an integer in [0, 16777215]");
    expect_error("id_fraction", with("/model/vocab/a", 1.5), "id of token \"a\" must be an integer");
    expect_error("added_id", with("/added_tokens/0/id", -1), "id of an added token must be an integer");
    expect_error("vocab_type", with("/model/vocab", json::array()), "model.vocab");
    try {
        olmo::load_bpe_tokenizer("tests/tokenizers/no_such_file.json");
        ADD_FAILURE() << "no error for a missing file";
    } catch (const olmo::Error& e) {
        EXPECT_NE(std::string(e.what()).find("no_such_file.json"), std::string::npos) << e.what();
    }
}

}  // namespace
