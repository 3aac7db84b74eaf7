// common.cpp: file helpers shared by the loaders.
#include "common.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

namespace olmo {

static std::string too_large(size_t max_bytes) {
    return "larger than the limit of " + std::to_string(max_bytes >> 20) + " MiB";
}

std::string read_file(const std::string& path, bool allow_pipe, size_t max_bytes) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) fail(path + ": cannot open (" + std::strerror(errno) + ")");
    if (S_ISDIR(st.st_mode)) fail(path + ": is a directory, expected a file");
    // Reading a FIFO or a device could wait forever; model files are always plain files.
    if (!S_ISREG(st.st_mode) && !allow_pipe) fail(path + ": not a regular file");
    if (S_ISREG(st.st_mode) && (size_t)st.st_size > max_bytes) fail(path + ": " + too_large(max_bytes));
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(path + ": cannot open for reading");
    return read_stream(f, max_bytes, path);
}

std::string read_stream(std::istream& in, size_t max_bytes, const std::string& what) {
    std::string out;
    std::vector<char> buf(1 << 16);
    while (in.read(buf.data(), buf.size()) || in.gcount() > 0) {
        if (out.size() + in.gcount() > max_bytes) fail(what + ": " + too_large(max_bytes));
        out.append(buf.data(), in.gcount());
    }
    return out;
}

std::string num_str(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
}

bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Appends v to out, descending at most `depth` more levels and stopping once out is longer
// than `max`, so the work is bounded whatever the value holds.
static void append_excerpt(const nlohmann::json& v, int depth, size_t max, std::string& out) {
    using json = nlohmann::json;
    const auto replace = json::error_handler_t::replace;  // invalid UTF-8 must not throw here
    if (v.is_string()) {
        const std::string& s = v.get_ref<const std::string&>();
        out += json(s.substr(0, max + 1)).dump(-1, ' ', false, replace);
        return;
    }
    if (!v.is_structured()) { out += v.dump(); return; }   // number, bool, null: flat
    const char open = v.is_array() ? '[' : '{', close = v.is_array() ? ']' : '}';
    if (v.empty() || depth == 0) {
        out += v.empty() ? std::string{open, close} : std::string{open} + "..." + close;
        return;
    }
    out += open;
    for (auto it = v.begin(); it != v.end(); ++it) {
        if (it != v.begin()) out += ", ";
        if (out.size() > max) { out += "..."; break; }
        if (v.is_object()) out += json(it.key().substr(0, max + 1)).dump(-1, ' ', false, replace) + ": ";
        append_excerpt(*it, depth - 1, max, out);
    }
    out += close;
}

// The number is range-checked before narrowing: get<int>() would wrap 2^32 + 256 to 256
// without a word, and would truncate 1.5 to 1.
int json_int(const nlohmann::json& v, int64_t lo, int64_t hi, const std::string& what) {
    const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (!v.is_number_integer()) fail(what + " must be an integer in " + range + ", got " + json_excerpt(v));
    // (nlohmann stores a non-negative literal as uint64, which may not fit int64.)
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= (uint64_t)hi && (int64_t)v.get<uint64_t>() >= lo
                                             : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
    if (!fits) fail(what + " must be an integer in " + range + ", got " + json_excerpt(v));
    return (int)v.get<int64_t>();
}

std::string json_excerpt(const nlohmann::json& v, size_t max_chars) {
    std::string out;
    append_excerpt(v, 3, max_chars, out);
    if (out.size() > max_chars) out = out.substr(0, max_chars) + "...";
    return out;
}

}  // namespace olmo
