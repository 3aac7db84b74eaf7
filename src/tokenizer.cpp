// tokenizer.cpp: load_tokenizer(), which picks the tokenizer by the file's content, and the
// streaming decoder.
#include <cctype>

#include "common.h"
#include "tokenizer.h"

namespace olmo {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
    const std::string bytes = read_file(path);
    size_t i = 0;
    while (i < bytes.size() && std::isspace((unsigned char)bytes[i])) i++;
    if (i < bytes.size() && bytes[i] == '{') return load_bpe_tokenizer(path);
    return load_sentencepiece_tokenizer(path);
}

size_t utf8_complete_prefix(const std::string& s) {
    // Walk back over at most 3 continuation bytes to the last lead byte; keep it only if its
    // sequence is complete.
    size_t n = s.size(), i = n;
    int back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) { i--; back++; }
    if (i == 0) return n;
    unsigned char lead = s[i - 1];
    int need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need == 1) return n;                          // ASCII (or a stray continuation byte)
    return back + 1 >= need ? n : i - 1;
}

// Both tokenizers decode id by id, so what an id adds to the text depends on the ids before it
// only through sentencepiece's "first piece" rule (its dummy-prefix space is dropped only when
// no earlier id decoded to a piece). A context that decodes to some text therefore contains a
// piece, just like the whole sequence, and any later id adds the same bytes to decode(context)
// as to the decode of everything. So the context shrinks to the last id whenever that id alone
// decodes to text, and an id that decodes to nothing on its own (a control token, an id past
// the vocabulary, or a first "▁") is kept only while the context itself has no text yet.
StreamDecoder::StreamDecoder(const Tokenizer& tok, std::vector<int> prefix)
    : tok_(tok), context_(std::move(prefix)), context_bytes_(tok.decode(context_).size()) {}

std::string StreamDecoder::push(int id) {
    context_.push_back(id);
    const std::string text = tok_.decode(context_);
    pending_.append(text, context_bytes_, std::string::npos);   // what `id` adds to the whole decode
    const std::string alone = tok_.decode({id});
    if (!alone.empty()) {
        context_ = {id};
        context_bytes_ = alone.size();
    } else if (context_bytes_ > 0) {
        context_.pop_back();
    } else {
        context_bytes_ = text.size();
    }
    const size_t end = utf8_complete_prefix(pending_);
    std::string out = pending_.substr(0, end);
    pending_.erase(0, end);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out;
    out.swap(pending_);
    return out;
}

}  // namespace olmo
