// tokenizer.cpp: the sentencepiece tokenizer, load_tokenizer() and the streaming decoder.
//
// Sentencepiece does the encoding. Decoding is done here from the pieces, so that it returns
// raw bytes: "▁" becomes a space, byte-fallback pieces <0xNN> become that byte, control
// tokens vanish, and the dummy-prefix space of the first piece is dropped, which is what
// sentencepiece's own decoder does, minus its U+FFFD repair of incomplete characters.
#include <sentencepiece_processor.h>

#include <cctype>

#include "common.h"
#include "tokenizer.h"
#include "tokenizer_bpe.h"

namespace olmo {

namespace {

class SentencePieceTokenizer : public Tokenizer {
public:
    explicit SentencePieceTokenizer(const std::string& path) {
        auto st = sp_.Load(path);
        if (!st.ok()) fail(path + ": not a sentencepiece model or tokenizer.json (" + st.ToString() + ")");
        pieces_.resize(sp_.GetPieceSize());
        for (int i = 0; i < (int)pieces_.size(); i++) {
            std::string p = sp_.IdToPiece(i);
            if (sp_.IsByte(i)) p = std::string(1, (char)std::stoi(p.substr(3, 2), nullptr, 16));  // "<0xNN>"
            else if (sp_.IsUnknown(i)) p = " \xE2\x81\x87 ";                                  // " ⁇ "
            else p = replace_all(p, "\xE2\x96\x81", " ");                                     // "▁" -> " "
            pieces_[i] = p;
        }
        std::vector<std::string> probe;
        sp_.Encode("a", &probe);
        dummy_prefix_ = !probe.empty() && probe[0].rfind("\xE2\x96\x81", 0) == 0;
    }

    std::vector<int> encode(const std::string& text) const override {
        std::vector<int> ids;
        auto st = sp_.Encode(text, &ids);
        if (!st.ok()) fail("sentencepiece encode failed: " + st.ToString());
        return ids;
    }

    std::string decode(const std::vector<int>& ids, bool skip_special) const override {
        std::string out;
        bool first = true;
        for (int id : ids) {
            if (id < 0 || id >= (int)pieces_.size()) continue;        // ids past the tokenizer's vocab
            if (sp_.IsControl(id)) {
                if (!skip_special) out += sp_.IdToPiece(id);
                continue;
            }
            const std::string& p = pieces_[id];
            if (first && dummy_prefix_ && !sp_.IsByte(id) && !p.empty() && p[0] == ' ') out += p.substr(1);
            else out += p;
            first = false;
        }
        return out;
    }

    int vocab_size() const override { return (int)pieces_.size(); }

private:
    static std::string replace_all(std::string s, const std::string& from, const std::string& to) {
        for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
        return s;
    }
    sentencepiece::SentencePieceProcessor sp_;
    std::vector<std::string> pieces_;   // decoded bytes of each id
    bool dummy_prefix_ = false;
};

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
    const std::string bytes = read_file(path);
    size_t i = 0;
    while (i < bytes.size() && std::isspace((unsigned char)bytes[i])) i++;
    if (i < bytes.size() && bytes[i] == '{') return load_bpe_tokenizer(path);
    return std::make_unique<SentencePieceTokenizer>(path);
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
