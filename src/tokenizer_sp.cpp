// tokenizer_sp.cpp: the sentencepiece tokenizer (the default model's).
//
// Sentencepiece does the encoding. Decoding is done here from the pieces, so that it returns
// raw bytes: "▁" becomes a space, byte-fallback pieces <0xNN> become that byte, control
// tokens vanish, and the dummy-prefix space of the first piece is dropped, which is what
// sentencepiece's own decoder does, minus its U+FFFD repair of incomplete characters.
#include <sentencepiece_processor.h>

#include "common.h"
#include "tokenizer.h"

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

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& path) {
    return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace olmo
