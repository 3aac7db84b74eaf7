// common.h: the one error type of the engine, and small helpers every file uses.
//
// Every user-facing problem (missing file, corrupt checkpoint, bad flag) is thrown as
// olmo::Error with a message that names the file and the problem; main() prints it on one
// line and exits non-zero. Nothing in the engine calls exit() or abort() on bad input.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <stdexcept>
#include <string>

namespace olmo {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string& msg) { throw Error(msg); }

// The most bytes read_file() reads by default: far above any config.json or tokenizer file,
// low enough that parsing what it read cannot take all memory.
constexpr size_t kMaxFileBytes = size_t(256) << 20;

// Reads a whole file into a string; fails with a clear message when it cannot, or when it holds
// more than max_bytes. Only a regular file unless allow_pipe (prompt files may be pipes:
// -f <(cmd), /dev/stdin, or even /dev/zero, which the limit stops).
std::string read_file(const std::string& path, bool allow_pipe = false, size_t max_bytes = kMaxFileBytes);
// The rest of `in`, up to max_bytes; `what` names it in the error when there is more.
std::string read_stream(std::istream& in, size_t max_bytes, const std::string& what);
bool file_exists(const std::string& path);

// A short excerpt of a JSON value for an error message: at most about `max_chars` characters,
// nested values shown only a few levels deep. Every error that quotes a value from a file
// uses this, never json::dump(): dump() recurses once per nesting level, so a value nested
// 100000 deep would overflow the stack while we report it.
std::string json_excerpt(const nlohmann::json& v, size_t max_chars = 60);

// v as an integer in [lo, hi], or an error "<what> must be an integer in [lo, hi], got ...".
int json_int(const nlohmann::json& v, int64_t lo, int64_t hi, const std::string& what);

// x as printf's %g writes it (1e-06, 100, 0.95): for numbers in messages.
std::string num_str(double x);

// The largest vocabulary a config or tokenizer may state (token ids are below it).
constexpr int64_t kMaxVocabSize = 1 << 24;

}  // namespace olmo
