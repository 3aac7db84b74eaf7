// tokenizer_bpe.h: byte-level BPE read from a Hugging Face tokenizer.json, encoding exactly as
// the `tokenizers` library does for the OLMo-1, OLMo-2 and OLMo-3 tokenizers.
//
// encode(text):
//   1. added tokens with "normalized": false are cut out of the raw text (leftmost-longest);
//   2. every other piece is normalized (NFC for OLMo-1, nothing for dolma2) and the added tokens
//      with "normalized": true (OLMo-1's runs of 2-24 spaces) are cut out of it the same way;
//   3. what is left is split into pre-tokens by a hand-written matcher of the GPT-2 or the
//      cl100k regex (no regex engine; steps 1-3 are in pretokenizer.h);
//   4. each pre-token's bytes are merged by BPE rank into ids (cached per distinct pre-token).
// decode(ids): concatenates each id's bytes (the byte-level alphabet mapped back to bytes);
// special added tokens are dropped when skip_special is set.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer.h"

namespace olmo {

class BpeTokenizer : public Tokenizer {
public:
    // Reads and checks the whole file; throws olmo::Error naming `path` and the problem.
    explicit BpeTokenizer(const std::string& path);

    // Throws olmo::Error when `text` is not valid UTF-8.
    std::vector<int> encode(const std::string& text) const override;
    std::string decode(const std::vector<int>& ids, bool skip_special = true) const override;
    int vocab_size() const override { return (int)id_bytes_.size(); }

private:
    // Added tokens, matched leftmost-longest with a byte trie. The root has a table of all 256
    // children (every text position starts there); deeper nodes list theirs (first child, next
    // sibling), so a node costs 16 bytes however long the token (a 256-entry table per node
    // made a 1 MB added token cost 1 GB).
    struct AddedTrie {
        struct Node {
            int token = -1;                  // id ending here, or -1
            int first_child = 0, next_sibling = 0;   // 0 = none
            unsigned char byte = 0;          // the byte that leads here from the parent
        };
        std::array<int, 256> root{};         // the root's child per byte, 0 = none
        std::vector<Node> nodes{Node{}};     // node 0 is the root
        int child(int node, unsigned char b) const;
        void add(const std::string& s, int id);
        // Length of the longest added token starting at s[pos] (0 if none); its id in *id.
        size_t longest(std::string_view s, size_t pos, int* id) const;
    };
    struct Merge { int rank, id; };  // priority of a pair of ids and the id it merges into
    struct Scratch;                  // per-call buffers and the cache of pre-token -> ids
    struct Reader;                   // the parsed tokenizer.json (tokenizer_bpe.cpp)

    // The constructor's steps.
    void read_pipeline(const Reader& r);
    std::unordered_map<std::string, int> read_vocab(const Reader& r);
    void read_merges(const Reader& r, const std::unordered_map<std::string, int>& bytes_to_id);
    void read_added(const Reader& r);
    void set_decoding(int id, const std::string& token);

    void encode_piece(std::string_view raw, std::vector<int>& ids, Scratch& s) const;
    void encode_pretokens(std::string_view text, std::vector<int>& ids, Scratch& s) const;
    void bpe(std::string_view word, std::vector<int>& ids, Scratch& s) const;
    const Merge* find_merge(int left, int right) const;

    bool nfc_ = false;                               // normalizer: NFC, or none
    bool cl100k_ = false;                            // split regex: cl100k, or GPT-2
    std::unordered_map<uint64_t, Merge> merges_;     // (left id << 32 | right id) -> merge
    std::array<int, 256> byte_id_;                   // id of each single byte, -1 if none
    std::vector<std::string> id_bytes_;              // id -> the bytes it decodes to
    std::vector<char> special_;                      // id -> is a special added token
    AddedTrie raw_added_, normalized_added_;         // matched before / after normalization
};

}  // namespace olmo
