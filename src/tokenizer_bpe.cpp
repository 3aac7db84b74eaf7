// tokenizer_bpe.cpp: byte-level BPE from a tokenizer.json, as Hugging Face `tokenizers` runs it
// (pipeline in tokenizer_bpe.h): reading the file, the merges, encode and decode. What happens to
// the text before the merges (the byte-level alphabet, NFC, added tokens, the pre-tokenizer
// regexes) is in pretokenizer.h.
//
// BPE merges (the order `tokenizers` uses): start from one symbol per byte; every adjacent pair
// that has a merge goes into a min-heap keyed by (rank, position); pop the best pair, skip it if
// an earlier merge changed either side, merge it and push the pairs it forms with its
// neighbours. Results are cached per distinct pre-token for the duration of one encode() call.
#include "tokenizer_bpe.h"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "common.h"
#include "pretokenizer.h"

namespace olmo {

// ---------------------------------------------------------------------------------------------
// Added tokens: the trie that pretok::split_added matches them with

int BpeTokenizer::AddedTrie::child(int node, unsigned char b) const {
    if (node == 0) return root[b];
    for (int c = nodes[node].first_child; c; c = nodes[c].next_sibling)
        if (nodes[c].byte == b) return c;
    return 0;
}

void BpeTokenizer::AddedTrie::add(const std::string& s, int id) {
    int node = 0;
    for (unsigned char b : s) {
        int c = child(node, b);
        if (!c) {
            c = (int)nodes.size();
            nodes.push_back({-1, 0, node ? nodes[node].first_child : 0, b});
            (node ? nodes[node].first_child : root[b]) = c;
        }
        node = c;
    }
    nodes[node].token = id;
}

size_t BpeTokenizer::AddedTrie::longest(std::string_view s, size_t pos, int* id) const {
    size_t best = 0;
    int node = 0;
    for (size_t i = pos; i < s.size() && (node = child(node, (unsigned char)s[i])); i++)
        if (nodes[node].token >= 0) {
            best = i + 1 - pos;
            *id = nodes[node].token;
        }
    return best;
}

// ---------------------------------------------------------------------------------------------
// Loading

namespace {

using json = nlohmann::json;

std::string type_of(const json& p) { return p.is_object() ? p.value("type", "") : ""; }

// A post-processor that adds nothing to the ids (encode() never adds special tokens).
// Sequences nest; past a few levels we stop looking (and refuse) rather than recurse as deep
// as the file says, which could overflow the stack.
bool post_processor_adds_nothing(const json& p, int depth = 0) {
    if (depth > 8) return false;
    const std::string type = type_of(p);
    if (p.is_null() || type == "ByteLevel") return true;  // ByteLevel only trims offsets
    if (type == "TemplateProcessing") return p.at("single").size() == 1 && p.at("single")[0].contains("Sequence");
    if (type == "Sequence")
        return std::all_of(p.at("processors").begin(), p.at("processors").end(),
                           [&](const json& q) { return post_processor_adds_nothing(q, depth + 1); });
    return false;
}

}  // namespace

// tokenizer.json as read by the constructor: the parsed file and its path, for errors.
struct BpeTokenizer::Reader {
    const json& j;
    const std::string& path;
    [[noreturn]] void bad(const std::string& problem) const { fail(path + ": " + problem); }
    const json& member(const json& obj, const char* key, const char* where) const {
        if (!obj.is_object() || !obj.contains(key)) bad(std::string("missing \"") + key + "\" in " + where);
        return obj[key];
    }
    const json& optional(const char* key) const {
        static const json null;
        return j.contains(key) ? j[key] : null;
    }
};

BpeTokenizer::BpeTokenizer(const std::string& path) {
    json j;
    try {
        j = json::parse(read_file(path));
    } catch (const json::exception& e) {
        fail(path + ": malformed JSON (" + e.what() + ")");
    }
    const Reader r{j, path};
    try {
        read_pipeline(r);
        read_merges(r, read_vocab(r));
        read_added(r);
    } catch (const json::exception& e) {
        r.bad(std::string("unexpected tokenizer.json structure (") + e.what() + ")");
    }
}

// The model (BPE without dropout, affixes or byte fallback), normalizer, pre-tokenizer, decoder
// and post-processor: only what this tokenizer implements is accepted.
void BpeTokenizer::read_pipeline(const Reader& r) {
    const json& j = r.j;
    auto bad = [&](const std::string& problem) { r.bad(problem); };
    const json null;
    const json& model = r.member(j, "model", "the top level");
    if (type_of(model) != "BPE") bad("model type \"" + type_of(model) + "\" is not supported (only BPE)");
    for (const char* opt : {"dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback", "ignore_merges"}) {
        auto it = model.find(opt);
        if (it != model.end() && !it->is_null() && *it != false && *it != "")
            bad(std::string("BPE option \"") + opt + "\": " + json_excerpt(*it) + " is not supported");
    }
    for (const char* opt : {"truncation", "padding"})
        if (!r.optional(opt).is_null()) bad(std::string("\"") + opt + "\" is not supported");

    // Normalizer: NFC or none.
    const json& norm = r.optional("normalizer");
    nfc_ = type_of(norm) == "NFC";
    if (!norm.is_null() && !nfc_) bad("normalizer " + json_excerpt(norm) + " is not supported (only NFC or none)");

    // Pre-tokenizer: ByteLevel with its GPT-2 regex, or Split(regex) then ByteLevel without.
    // A Split that keeps the matches (Removed + invert, or Isolated) is the same as the
    // regex pass of ByteLevel: both patterns match every character, so nothing is dropped.
    const json& pre = r.member(j, "pre_tokenizer", "the top level");
    auto byte_level = [&](const json& p, bool use_regex) {
        if (type_of(p) != "ByteLevel" || p.value("use_regex", true) != use_regex) return false;
        if (p.value("add_prefix_space", false)) bad("pre_tokenizer ByteLevel with add_prefix_space is not supported");
        return true;
    };
    auto split = [&](const json& p) {
        if (type_of(p) != "Split" || !p.contains("pattern") || !p["pattern"].is_object()) return false;
        const std::string regex = p["pattern"].value("Regex", ""), behavior = p.value("behavior", "");
        bool keeps_matches = (behavior == "Removed" && p.value("invert", false)) ||
                             (behavior == "Isolated" && !p.value("invert", false));
        cl100k_ = regex == pretok::kCl100kRegex;
        return keeps_matches && (cl100k_ || regex == pretok::kGpt2Regex);
    };
    const json& seq = type_of(pre) == "Sequence" ? r.member(pre, "pretokenizers", "pre_tokenizer") : null;
    if (!byte_level(pre, true) && !(seq.size() == 2 && split(seq[0]) && byte_level(seq[1], false)))
        bad("pre_tokenizer " + json_excerpt(pre) +
            " is not supported (only ByteLevel, or Split with the GPT-2 or cl100k regex then ByteLevel)");

    const json& dec = r.member(j, "decoder", "the top level");
    if (type_of(dec) != "ByteLevel") bad("decoder " + json_excerpt(dec) + " is not supported (only ByteLevel)");
    if (!post_processor_adds_nothing(r.optional("post_processor")))
        bad("post_processor " + json_excerpt(r.optional("post_processor")) + " adds tokens; not supported");
}

// What id decodes to, as the ByteLevel decoder does.
void BpeTokenizer::set_decoding(int id, const std::string& token) {
    if (id >= (int)id_bytes_.size()) {
        id_bytes_.resize(id + 1);
        special_.resize(id + 1, 0);
    }
    std::string bytes;
    id_bytes_[id] = pretok::byte_level_to_bytes(token, &bytes) ? bytes : token;
}

// model.vocab: what each id decodes to, the id of each single byte; returns bytes -> id.
std::unordered_map<std::string, int> BpeTokenizer::read_vocab(const Reader& r) {
    const json& model = r.member(r.j, "model", "the top level");
    const json& vocab = r.member(model, "vocab", "model");
    if (!vocab.is_object() || vocab.empty()) r.bad("model.vocab is not a non-empty object");
    std::unordered_map<std::string, int> bytes_to_id;
    std::string bytes;
    for (const auto& [token, id] : vocab.items()) {
        const int checked = json_int(id, 0, kMaxVocabSize - 1, r.path + ": id of token \"" + token + "\"");
        set_decoding(checked, token);
        if (pretok::byte_level_to_bytes(token, &bytes)) bytes_to_id.emplace(bytes, checked);
    }
    for (int b = 0; b < 256; b++) {  // (the bytes missing from OLMo-1's vocab never occur in UTF-8)
        auto it = bytes_to_id.find(std::string(1, (char)b));
        byte_id_[b] = it == bytes_to_id.end() ? -1 : it->second;
    }
    return bytes_to_id;
}

// Merges, "left right" strings or [left, right] pairs; the list order is the rank. A
// repeated pair keeps its last rank, as in `tokenizers`.
void BpeTokenizer::read_merges(const Reader& r, const std::unordered_map<std::string, int>& bytes_to_id) {
    const json& model = r.member(r.j, "model", "the top level");
    const json& merges = r.member(model, "merges", "model");
    if (!merges.is_array()) r.bad("model.merges is not an array");
    for (size_t rank = 0; rank < merges.size(); rank++) {
        const json& m = merges[rank];
        std::string left, right, lb, rb;
        if (m.is_string()) {
            const std::string& s = m.get_ref<const std::string&>();
            size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                r.bad("merge " + std::to_string(rank) + " " + json_excerpt(m) + " is not \"left right\"");
            left = s.substr(0, sp);
            right = s.substr(sp + 1);
        } else if (m.is_array() && m.size() == 2) {
            left = m[0].get<std::string>();
            right = m[1].get<std::string>();
        } else {
            r.bad("merge " + std::to_string(rank) + " " + json_excerpt(m) + " is not \"left right\" or [left, right]");
        }
        auto lid = bytes_to_id.end(), rid = lid, merged = lid;
        if (pretok::byte_level_to_bytes(left, &lb) && pretok::byte_level_to_bytes(right, &rb)) {
            lid = bytes_to_id.find(lb);
            rid = bytes_to_id.find(rb);
            merged = bytes_to_id.find(lb + rb);
        }
        if (lid == bytes_to_id.end() || rid == bytes_to_id.end() || merged == bytes_to_id.end())
            r.bad("merge " + std::to_string(rank) + " " + json_excerpt(m) + " uses a token missing from model.vocab");
        merges_[(uint64_t)lid->second << 32 | (uint32_t)rid->second] = {(int)rank, merged->second};
    }
}

// Added tokens: ids that override the vocabulary, cut out of the text before BPE.
void BpeTokenizer::read_added(const Reader& r) {
    const json& added = r.optional("added_tokens");
    for (const json& t : added.is_null() ? json::array() : added) {
        const int id = json_int(r.member(t, "id", "an added token"), 0, kMaxVocabSize - 1, r.path + ": id of an added token");
        const std::string content = r.member(t, "content", "an added token").get<std::string>();
        for (const char* flag : {"single_word", "lstrip", "rstrip"})
            if (t.value(flag, false)) r.bad("added token " + json_excerpt(content) + ": \"" + flag + "\": true is not supported");
        if (content.empty()) continue;  // ignored by `tokenizers` too
        const bool special = t.value("special", false), normalized = t.value("normalized", !special);
        set_decoding(id, content);
        special_[id] = special;
        std::string buf;
        if (normalized) normalized_added_.add(std::string(nfc_ ? pretok::nfc(content, buf) : content), id);
        else raw_added_.add(content, id);
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding and decoding

struct BpeTokenizer::Scratch {
    std::string normalized;                       // NFC of the current piece
    pretok::Chars chars;                          // the current text, cut into characters
    struct Symbol { int id, prev, next; };        // id -1: merged into its left neighbour
    std::vector<Symbol> sym;
    std::vector<std::pair<int, int>> heap;        // (rank, position of the left symbol)
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>> cache;  // pre-token -> range
    std::vector<int> cached;                      // the ids of all cached pre-tokens
};

std::vector<int> BpeTokenizer::encode(const std::string& text) const {
    std::vector<int> ids;
    Scratch s;
    pretok::split_added(raw_added_, text, ids, [&](std::string_view piece) { encode_piece(piece, ids, s); });
    return ids;
}

// A piece of the raw text between added tokens: normalize it, then cut out the added tokens
// that match the normalized text.
void BpeTokenizer::encode_piece(std::string_view raw, std::vector<int>& ids, Scratch& s) const {
    std::string_view text = nfc_ ? pretok::nfc(raw, s.normalized) : raw;
    pretok::split_added(normalized_added_, text, ids,
                        [&](std::string_view piece) { encode_pretokens(piece, ids, s); });
}

void BpeTokenizer::encode_pretokens(std::string_view text, std::vector<int>& ids, Scratch& s) const {
    pretok::Chars& c = s.chars;
    c.assign(text);
    for (size_t i = 0; i < c.n;) {
        size_t end = cl100k_ ? pretok::match_cl100k(c, i) : pretok::match_gpt2(c, i);
        bpe(text.substr(c.off[i], c.off[end] - c.off[i]), ids, s);
        i = end;
    }
}

const BpeTokenizer::Merge* BpeTokenizer::find_merge(int left, int right) const {
    auto it = merges_.find((uint64_t)left << 32 | (uint32_t)right);
    return it == merges_.end() ? nullptr : &it->second;
}

void BpeTokenizer::bpe(std::string_view word, std::vector<int>& ids, Scratch& s) const {
    std::string key(word);
    auto hit = s.cache.find(key);
    if (hit == s.cache.end()) {
        auto& sym = s.sym;
        auto& heap = s.heap;
        sym.clear();
        heap.clear();
        for (unsigned char b : word)
            if (byte_id_[b] >= 0) sym.push_back({byte_id_[b], (int)sym.size() - 1, (int)sym.size() + 1});
        if (!sym.empty()) sym.back().next = -1;
        auto push_pair = [&](int pos) {  // the pair that starts at symbol pos, if it merges
            if (sym[pos].next < 0) return;
            if (const Merge* m = find_merge(sym[pos].id, sym[sym[pos].next].id)) {
                heap.push_back({m->rank, pos});
                std::push_heap(heap.begin(), heap.end(), std::greater<>());
            }
        };
        for (int i = 0; i < (int)sym.size(); i++) push_pair(i);
        while (!heap.empty()) {
            std::pop_heap(heap.begin(), heap.end(), std::greater<>());
            auto [rank, pos] = heap.back();
            heap.pop_back();
            Scratch::Symbol& a = sym[pos];
            if (a.id < 0 || a.next < 0) continue;                // merged away, or now the last
            const Merge* m = find_merge(a.id, sym[a.next].id);
            if (!m || m->rank != rank) continue;                 // this pair changed since
            Scratch::Symbol& b = sym[a.next];
            a.id = m->id;
            b.id = -1;
            a.next = b.next;
            if (b.next >= 0) sym[b.next].prev = pos;
            if (a.prev >= 0) push_pair(a.prev);
            push_pair(pos);
        }
        const uint32_t begin = (uint32_t)s.cached.size();
        for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) s.cached.push_back(sym[i].id);
        hit = s.cache.emplace(std::move(key), std::make_pair(begin, (uint32_t)s.cached.size())).first;
    }
    ids.insert(ids.end(), s.cached.begin() + hit->second.first, s.cached.begin() + hit->second.second);
}

std::string BpeTokenizer::decode(const std::vector<int>& ids, bool skip_special) const {
    std::string out;
    for (int id : ids) {
        if (id < 0 || id >= (int)id_bytes_.size()) continue;  // unknown ids are dropped, as in `tokenizers`
        if (skip_special && special_[id]) continue;
        out += id_bytes_[id];
    }
    return out;
}

std::unique_ptr<Tokenizer> load_bpe_tokenizer(const std::string& path) {
    return std::make_unique<BpeTokenizer>(path);
}

}  // namespace olmo
