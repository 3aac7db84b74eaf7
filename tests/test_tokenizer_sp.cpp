// test_tokenizer_sp.cpp: the default model's sentencepiece tokenizer. decode(encode(s)) == s on
// the corpus' validation split (the last 1% of documents, as scripts/train_tokenizer.sh splits
// it) and on text far from the corpus (byte fallback); streaming decode equals one-shot decode;
// load_tokenizer() tells the two file kinds apart and rejects anything else clearly.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "common.h"
#include "test_util.h"
#include "tokenizer.h"

using namespace olmo;
using namespace olmo::test;

namespace {

const char* kModel = "tokenizer/tokenizer.model";

// The validation documents of ../shared/corpus (empty when the corpus is not there).
std::vector<std::string> validation_docs() {
    std::vector<std::string> docs(1);
    FILE* f = popen("xz -dc ../shared/corpus/corpus.txt.xz 2>/dev/null", "r");
    if (!f) return {};
    char buf[1 << 16];
    std::string line;
    while (fgets(buf, sizeof buf, f)) {
        line += buf;
        if (line.back() != '\n') continue;
        if (line == "<|endoftext|>\n") docs.emplace_back();
        else docs.back() += line;
        line.clear();
    }
    pclose(f);
    if (docs.size() < 100) return {};
    const size_t n_val = (docs.size() + 99) / 100;
    return std::vector<std::string>(docs.end() - n_val, docs.end());
}

TEST(SentencePiece, RoundTripOnValidationSplit) {
    auto tok = load_tokenizer(kModel);
    std::vector<std::string> docs = validation_docs();
    if (docs.empty()) GTEST_SKIP() << "../shared/corpus/corpus.txt.xz not found: validation round trip skipped";
    size_t bytes = 0, tokens = 0;
    for (const auto& d : docs) {
        std::vector<int> ids = tok->encode(d);
        ASSERT_EQ(tok->decode(ids), d);
        bytes += d.size();
        tokens += ids.size();
    }
    std::printf("validation split: %zu documents, %zu bytes, %zu tokens (%.2f bytes/token)\n", docs.size(), bytes, tokens,
                (double)bytes / tokens);
    EXPECT_GT((double)bytes / tokens, 3.0);   // a real tokenizer, not bytes
}

TEST(SentencePiece, RoundTripOffCorpusText) {
    auto tok = load_tokenizer(kModel);
    for (std::string s : {"Once upon a time", "  leading spaces and trailing  ", "line\nbreaks\n\nand\ttabs",
                          "naïve café 世界 👩‍💻 🇫🇷", "x", "", "\n", "1234567890 + 3.14159"}) {
        EXPECT_EQ(tok->decode(tok->encode(s)), s) << s;
    }
    EXPECT_EQ(tok->vocab_size(), 8192);
}

TEST(SentencePiece, StreamingEqualsOneShot) {
    auto tok = load_tokenizer(kModel);
    const std::string prompt = "Once upon a time", rest = " there was a 世界 👩‍💻 dragon.\nThe end.";
    std::vector<int> p = tok->encode(prompt), all = tok->encode(prompt + rest);
    ASSERT_EQ(std::vector<int>(all.begin(), all.begin() + p.size()), p);
    StreamDecoder sd(*tok, p);
    std::string out;
    for (size_t i = p.size(); i < all.size(); i++) out += sd.push(all[i]);
    out += sd.flush();
    EXPECT_EQ(prompt + out, tok->decode(all));
}

// A long stream of random ids (byte-fallback pieces cutting characters, control ids, ids past
// the vocabulary) equals the one-shot decode, after every kind of start: no prefix, control
// ids only, a lone "▁" (8099: it decodes to nothing as the first piece, to " " after one), text.
TEST(SentencePiece, LongRandomStreamEqualsOneShot) {
    auto tok = load_tokenizer(kModel);
    ASSERT_EQ(tok->decode({8099}), "");
    ASSERT_EQ(tok->decode({8099, 8099}), " ");
    const std::vector<std::vector<int>> prefixes = {{}, {1, 2}, {8099}, {1, 8099, 2}, tok->encode("Once upon a time")};
    for (size_t k = 0; k < prefixes.size(); k++) {
        expect_stream_equals_decode(*tok, prefixes[k], random_ids(*tok, 2500, 10 + k));
        expect_stream_equals_decode(*tok, prefixes[k], {2, 8099, 8099, 0, 8099, 300});
    }
}

TEST(LoadTokenizer, RejectsWhatItCannotRead) {
    std::string d = temp_dir();
    write(d + "/junk.model", "this is not a tokenizer");
    expect_error([&] { load_tokenizer(d + "/junk.model"); }, {d + "/junk.model", "not a sentencepiece model or tokenizer.json"});
    expect_error([&] { load_tokenizer(d + "/missing.model"); }, {"missing.model", "cannot open"});
    write(d + "/tokenizer.json", "{\"model\": {\"type\": \"WordPiece\"}}");
    EXPECT_THROW(load_tokenizer(d + "/tokenizer.json"), Error);   // JSON goes to the BPE loader, which refuses it
}

}  // namespace
