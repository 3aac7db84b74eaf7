// test_util.h: small helpers shared by the tests: temp folders, writing safetensors files
// (single or sharded, any float dtype), random tensor bytes, expecting an olmo::Error with given
// words, a random tiny checkpoint (and one of a shape of the test's own), running ./generate.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common.h"
#include "config.h"
#include "safetensors.h"
#include "tokenizer.h"
#include "weights.h"

namespace olmo::test {

using json = nlohmann::json;

inline std::string temp_dir() {
    char tmpl[] = "/tmp/olmo_test_XXXXXX";
    return mkdtemp(tmpl);
}

inline void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A safetensors file from header text and a data blob.
inline std::string safetensors_bytes_raw(const std::string& header, const std::string& data) {
    uint64_t n = header.size();
    std::string out(8, '\0');
    for (int i = 0; i < 8; i++) out[i] = (char)((n >> (8 * i)) & 0xff);
    return out + header + data;
}

// A safetensors file from a header object and a data blob.
inline std::string safetensors_bytes(const json& header, const std::string& data) {
    return safetensors_bytes_raw(header.dump(), data);
}

// Expects `f` to throw olmo::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F f, std::vector<std::string> parts) {
    try {
        f();
        ADD_FAILURE() << "no error thrown";
    } catch (const Error& e) {
        for (auto& p : parts)
            EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message: " << e.what() << "\nmissing: " << p;
    }
}

// One tensor of a test checkpoint: its bytes as stored in `dtype` ("F32", "BF16", "F16").
struct RawTensor {
    std::string name;
    std::vector<int64_t> shape;
    std::string dtype;
    std::string bytes;
};

inline std::string shard_name(int k, int shards) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", k + 1, shards);
    return buf;
}

// Writes the tensors to DIR/model.safetensors, or, with shards > 1, dealt in turn over
// `shards` files plus model.safetensors.index.json (as transformers saves big checkpoints).
inline void write_tensors(const std::string& dir, const std::vector<RawTensor>& tensors, int shards = 1) {
    std::vector<json> headers(shards, json::object());
    std::vector<std::string> data(shards);
    json weight_map = json::object();
    for (size_t i = 0; i < tensors.size(); i++) {
        const RawTensor& t = tensors[i];
        const int k = (int)(i % shards);
        headers[k][t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data[k].size(), data[k].size() + t.bytes.size()}}};
        data[k] += t.bytes;
        weight_map[t.name] = shard_name(k, shards);
    }
    if (shards == 1) return write(dir + "/model.safetensors", safetensors_bytes(headers[0], data[0]));
    for (int k = 0; k < shards; k++) write(dir + "/" + shard_name(k, shards), safetensors_bytes(headers[k], data[k]));
    write(dir + "/model.safetensors.index.json", json{{"weight_map", weight_map}}.dump());
}

// n random values of a float dtype as raw bytes: finite, of many magnitudes, with zeros,
// subnormals and rounding ties (for the narrower types) mixed in.
inline std::string random_bytes(const std::string& dtype, int64_t n, std::mt19937& rng) {
    std::uniform_int_distribution<uint32_t> bits;
    std::string out;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t r = bits(rng), sign = r >> 31;
        if (dtype == "F32") {
            uint32_t u = sign << 31 | (100 + r % 41) << 23 | (bits(rng) & 0x7fffff);   // 2^-27 .. 2^13
            if (i % 7 == 3) u = (u & ~0xffffu) | 0x8000;   // exactly halfway between two bf16
            if (i % 11 == 5) u = (u & ~0x1fffu) | 0x1000;  // halfway between two fp16 (when normal)
            if (i % 13 == 6) u = sign << 31 | (bits(rng) & 0x7fffff);   // subnormal
            if (i % 17 == 8) u = sign << 31;                             // +-0
            out.append((const char*)&u, 4);
        } else {
            uint16_t h = dtype == "BF16" ? (uint16_t)(sign << 15 | (100 + r % 41) << 7 | (r >> 8 & 0x7f))
                                         : (uint16_t)(sign << 15 | (r % 31) << 10 | (r >> 8 & 0x3ff));   // F16
            if (i % 13 == 6) h &= dtype == "BF16" ? 0x807f : 0x83ff;   // subnormal or zero
            out.append((const char*)&h, 2);
        }
    }
    return out;
}

// Writes config.json + model.safetensors (random F32 weights, every tensor of the weight table,
// lm_head too unless tied) for `cfg_json` into `dir`; `edit` may change a tensor's values first.
using EditTensor = std::function<void(const WeightSlot&, std::vector<float>&)>;
inline void write_random_checkpoint(const std::string& dir, const json& cfg_json, unsigned seed = 1,
                                    const EditTensor& edit = nullptr) {
    write(dir + "/config.json", cfg_json.dump());
    ModelConfig c = parse_config(cfg_json.dump(), "config.json");
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    std::vector<RawTensor> tensors;
    for (const WeightSlot& s : weight_table(c, !c.tie_embeddings)) {
        std::vector<float> v(s.numel());
        for (auto& x : v) x = s.shape.size() == 1 ? 1.0f + normal(rng) : normal(rng);
        if (edit) edit(s, v);
        tensors.push_back({s.name, s.shape, "F32", std::string((const char*)v.data(), 4 * v.size())});
    }
    write_tensors(dir, tensors);
}

inline json tiny_olmo2_config() {
    return {{"model_type", "olmo2"}, {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 2},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"vocab_size", 64}, {"max_position_embeddings", 64},
            {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"eos_token_id", 1000}};
}

// A random checkpoint of tiny_olmo2_config() with the keys of `changes` set over it, written to
// a fresh folder and opened: for a test that needs a shape of its own.
struct TinyCheckpoint {
    std::string dir = temp_dir();
    ModelConfig cfg;
    Checkpoint ckpt;
    explicit TinyCheckpoint(const json& changes) : cfg(written(dir, changes)), ckpt(dir) {}

private:
    static ModelConfig written(const std::string& dir, const json& changes) {
        json c = tiny_olmo2_config();
        c.update(changes);
        write_random_checkpoint(dir, c);
        return load_config(dir);
    }
};

// n token ids below `vocab`, the same for the same seed.
inline std::vector<int> random_ids(size_t n, int vocab, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<int> ids(n);
    for (int& id : ids) id = (int)(rng() % vocab);
    return ids;
}

// tiny_olmo2_config with OLMo-2's vocabulary (the dolma2 tokenizer's 100352 ids), kept small.
inline json tiny_dolma2_config() {
    json cfg = tiny_olmo2_config();
    cfg["vocab_size"] = 100352;
    cfg["hidden_size"] = 16;
    cfg["intermediate_size"] = 32;
    cfg["num_hidden_layers"] = 1;
    cfg["max_position_embeddings"] = 512;
    return cfg;
}

inline double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// How long a run of ./generate may take to refuse what it checks before building anything:
// the program's start (a GPU build also looks for a device), reading a tiny model's files and
// the check. Building what was refused would take tens of seconds or fail to allocate; a
// 1-second bound was missed by 5 ms once on a busy 2-core CI machine.
constexpr double kRefusalSeconds = 5.0;

struct RunResult {
    int code;
    std::string out, err;
};

// The path of one of our programs ("generate", "tokenize"): ./NAME, or $OLMO_BIN_DIR/NAME when
// that is set (`make test SANITIZE=1` builds sanitized programs in their own build folder).
inline std::string program(const std::string& name) {
    const char* bin = std::getenv("OLMO_BIN_DIR");
    return (bin ? std::string(bin) : std::string(".")) + "/" + name;
}

// Runs a shell command, capturing stdout and stderr separately. A command that starts with
// ./generate, ./tokenize or ./perplexity runs program() of that name.
inline RunResult run_cmd(std::string cmd) {
    for (const std::string name : {"generate", "tokenize", "perplexity"})
        if (cmd.rfind("./" + name, 0) == 0) cmd = program(name) + cmd.substr(2 + name.size());
    std::string d = temp_dir();
    int status = std::system((cmd + " >" + d + "/out 2>" + d + "/err </dev/null").c_str());
    auto slurp = [](const std::string& p) {
        std::ifstream f(p);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(d + "/out"), slurp(d + "/err")};
}

// Expects a failed run of ./generate (or ./PROG) whose stderr is one "error: ..." line
// containing `what`.
inline void expect_cli_error(const std::string& args, const std::string& what, const std::string& prog = "generate") {
    RunResult r = run_cmd("./" + prog + " " + args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.err.find(what), std::string::npos) << args << "\nstderr: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": expected one line, got: " << r.err;
}

// A tokenizer that counts the ids it is asked to decode (StreamDecoder must ask for a bounded
// number per token).
struct CountingTokenizer : Tokenizer {
    explicit CountingTokenizer(const Tokenizer& t) : inner(t) {}
    std::vector<int> encode(const std::string& text) const override { return inner.encode(text); }
    std::string decode(const std::vector<int>& ids, bool skip_special = true) const override {
        decoded += ids.size();
        return inner.decode(ids, skip_special);
    }
    int vocab_size() const override { return inner.vocab_size(); }
    const Tokenizer& inner;
    mutable size_t decoded = 0;
};

// n random ids, as a model that went astray could produce them: mostly uniform over the
// vocabulary and a few ids past it, with runs of the ids of texts whose characters a token
// may cut (emoji, CJK, combining marks: byte-fallback or byte-level pieces).
inline std::vector<int> random_ids(const Tokenizer& tok, size_t n, unsigned seed) {
    const char* texts[] = {"\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB", "\xE4\xB8\x96\xE7\x95\x8C",
                           "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7", "nai\xCC\x88ve caf\xC3\xA9", " \xEA\xB0\x80\xEB\x82\x98"};
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> id(0, tok.vocab_size() + 3), pick(0, 9);
    std::vector<int> ids;
    while (ids.size() < n) {
        if (pick(rng) > 0) {
            ids.push_back(id(rng));
        } else {
            std::vector<int> run = tok.encode(texts[pick(rng) % 5]);
            ids.insert(ids.end(), run.begin(), run.end());
        }
    }
    return ids;
}

// Streams `ids` after `prefix`: the pieces add up to what decoding everything adds to
// decode(prefix), no piece ends inside a character that the next one completes (random bytes
// may break a character for good: then it is let go), and each token costs a few decoded ids.
inline void expect_stream_equals_decode(const Tokenizer& tok, std::vector<int> prefix, const std::vector<int>& ids) {
    CountingTokenizer counting(tok);
    const size_t n_prefix = prefix.size();
    StreamDecoder sd(counting, prefix);
    std::string streamed;
    auto add = [&](const std::string& piece) {
        if (piece.empty()) return;
        const bool continues = ((unsigned char)piece[0] & 0xC0) == 0x80;
        EXPECT_FALSE(continues && utf8_complete_prefix(streamed) < streamed.size()) << "a character was split";
        streamed += piece;
    };
    for (int id : ids) add(sd.push(id));
    add(sd.flush());
    const std::string head = tok.decode(prefix);
    prefix.insert(prefix.end(), ids.begin(), ids.end());
    const std::string whole = tok.decode(prefix);
    ASSERT_EQ(whole.compare(0, head.size(), head), 0);
    EXPECT_EQ(streamed, whole.substr(head.size()));
    EXPECT_LE(counting.decoded, 2 * n_prefix + 8 * ids.size() + 64) << "decoded ids do not grow linearly";
}

}  // namespace olmo::test
