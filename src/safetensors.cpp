// safetensors.cpp: see safetensors.h. Every way a file can be wrong ends in olmo::Error
// naming the file and the problem.
#include "safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <set>
#include <nlohmann/json.hpp>

#include "common.h"
#include "fp8.h"

namespace olmo {

using json = nlohmann::json;

size_t dtype_size(DType t) {
    switch (t) {
        case DType::F32: case DType::I32: return 4;
        case DType::F16: case DType::BF16: return 2;
        case DType::F8_E4M3: return 1;
        case DType::I64: return 8;
    }
    return 0;
}

const char* dtype_name(DType t) {
    switch (t) {
        case DType::F32: return "F32";
        case DType::F16: return "F16";
        case DType::BF16: return "BF16";
        case DType::F8_E4M3: return "F8_E4M3";
        case DType::I32: return "I32";
        case DType::I64: return "I64";
    }
    return "?";
}

int64_t TensorView::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string TensorView::shape_str() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

// Bytes of a tensor of this shape and dtype, or an error when the product overflows 64 bits:
// a wrapped product ([2^32, 2^32] F32 -> 0) would pass the size check against data_offsets.
static uint64_t tensor_bytes(const TensorView& t, const std::string& where) {
    uint64_t bytes = dtype_size(t.dtype);
    for (int64_t d : t.shape)   // each d >= 0, checked when the shape was read
        if (__builtin_mul_overflow(bytes, (uint64_t)d, &bytes))
            fail(where + ": shape " + t.shape_str() + " is too large (its byte count overflows 64 bits)");
    return bytes;
}

static DType parse_dtype(const std::string& s, const std::string& where) {
    if (s == "F32") return DType::F32;
    if (s == "F16") return DType::F16;
    if (s == "BF16") return DType::BF16;
    if (s == "I32") return DType::I32;
    if (s == "I64") return DType::I64;
    if (s == "F8_E4M3") return DType::F8_E4M3;
    if (s.rfind("F8_", 0) == 0 || s.rfind("F6_", 0) == 0 || s == "F4")
        fail(where + ": dtype \"" + s + "\" is not supported (of the float formats of 8 bits and fewer only " +
             "F8_E4M3 loads: FP8 E4M3 weights with a weight_scale)");
    fail(where + ": unsupported dtype \"" + s + "\" (supported: F32, F16, BF16, F8_E4M3, I32, I64)");
}

// The largest JSON header we parse (the safetensors format's own limit): a real header lists a
// few thousand tensors in a few MB, and parsing costs several times the text in memory.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

SafeTensorsFile::SafeTensorsFile(const std::string& path) : path_(path) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait forever for a writer; the
    // fstat below then refuses anything but a regular file (for which the flag changes nothing).
    int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail(path + ": cannot open (" + std::strerror(errno) + ")");
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); fail(path + ": not a regular file"); }
    size_ = st.st_size;
    if (size_ < 8) { close(fd); fail(path + ": truncated safetensors file (" + std::to_string(size_) + " bytes, need at least 8)"); }
    map_ = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map_ == MAP_FAILED) { map_ = nullptr; fail(path + ": mmap failed"); }
    try {
        read_header();
    } catch (...) {   // the destructor does not run for a constructor that throws
        munmap(map_, size_);
        throw;
    }
}

// Parses and checks the header of the mapped file: every entry, then the overlaps.
void SafeTensorsFile::read_header() {
    const std::string& path = path_;
    const uint8_t* bytes = static_cast<const uint8_t*>(map_);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | bytes[i];   // little-endian header length
    if (n > kMaxHeaderBytes)
        fail(path + ": header length " + std::to_string(n) + " is above the limit of " + std::to_string(kMaxHeaderBytes) +
             " bytes: not a safetensors file");
    if (n > size_ - 8)
        fail(path + ": header length " + std::to_string(n) + " runs past the end of the file (" +
             std::to_string(size_) + " bytes): truncated or not a safetensors file");
    // nlohmann keeps the last of two equal keys; a tensor listed twice is a broken header, so
    // the parser's callback sees every top-level key and refuses a repeat.
    std::set<std::string> names;
    auto no_repeats = [&](int depth, json::parse_event_t event, json& parsed) {
        if (depth == 1 && event == json::parse_event_t::key && !names.insert(parsed.get<std::string>()).second)
            fail(path + ": tensor \"" + parsed.get<std::string>() + "\" appears twice in the header");
        return true;
    };
    json header;
    try {
        header = json::parse(bytes + 8, bytes + 8 + n, no_repeats);
    } catch (const json::exception& e) {
        fail(path + ": malformed JSON header: " + e.what());
    }
    if (!header.is_object()) fail(path + ": header is not a JSON object");

    const uint8_t* data = bytes + 8 + n;
    const uint64_t data_size = size_ - 8 - n;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (auto& [name, entry] : header.items()) {
        if (name == "__metadata__") {
            if (entry.is_object())
                for (auto& [k, v] : entry.items()) metadata_[k] = v.is_string() ? v.get<std::string>() : json_excerpt(v);
            continue;
        }
        const std::string where = path + ": tensor \"" + name + "\"";
        if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
            fail(where + ": entry needs dtype, shape and data_offsets");
        TensorView t;
        t.name = name;
        t.file = path;
        if (!entry["dtype"].is_string()) fail(where + ": dtype is not a string");
        t.dtype = parse_dtype(entry["dtype"].get<std::string>(), where);
        const json& shape = entry["shape"];
        const json& offs = entry["data_offsets"];
        if (!shape.is_array()) fail(where + ": shape is not an array");
        for (auto& d : shape) {
            if (!d.is_number_integer() || d.get<int64_t>() < 0) fail(where + ": bad shape " + json_excerpt(shape));
            t.shape.push_back(d.get<int64_t>());
        }
        if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
            fail(where + ": data_offsets must be two non-negative integers, got " + json_excerpt(offs));
        uint64_t b = offs[0].get<uint64_t>(), e = offs[1].get<uint64_t>();
        if (b > e || e > data_size)
            fail(where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                 "] out of range (data section is " + std::to_string(data_size) + " bytes: truncated file?)");
        const uint64_t need = tensor_bytes(t, where);
        if (e - b != need)
            fail(where + ": data_offsets span " + std::to_string(e - b) + " bytes but " + dtype_name(t.dtype) +
                 " x " + t.shape_str() + " needs " + std::to_string(need));
        t.data = data + b;
        t.offset = 8 + n + b;
        ranges.push_back({b, e});
        tensors_.emplace(name, std::move(t));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); i++)
        if (ranges[i].first < ranges[i - 1].second)
            fail(path + ": tensors overlap (data_offsets " + std::to_string(ranges[i].first) + " < " +
                 std::to_string(ranges[i - 1].second) + ")");
}

SafeTensorsFile::~SafeTensorsFile() {
    if (map_) munmap(map_, size_);
}

const TensorView* SafeTensorsFile::find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

// A shard named by an index must be a plain relative path inside the model folder: no
// absolute path and no ".." component, so an index cannot make us read files elsewhere.
static void check_shard_name(const std::string& index, const std::string& tensor, const std::string& file) {
    bool inside = !file.empty() && file[0] != '/';
    for (size_t begin = 0; inside && begin <= file.size();) {
        size_t end = std::min(file.find('/', begin), file.size());
        inside = file.compare(begin, end - begin, "..") != 0;
        begin = end + 1;
    }
    if (!inside)
        fail(index + ": weight_map[\"" + tensor + "\"] = \"" + file + "\" is not a file name inside the model folder");
}

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
    const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
    std::vector<std::string> shards;
    if (file_exists(index)) {
        json j;
        try {
            j = json::parse(read_file(index));
        } catch (const json::exception& e) {
            fail(index + ": malformed JSON: " + e.what());
        }
        if (!j.contains("weight_map") || !j["weight_map"].is_object()) fail(index + ": no \"weight_map\" object");
        for (auto& [name, file] : j["weight_map"].items()) {
            if (!file.is_string()) fail(index + ": weight_map[\"" + name + "\"] is not a file name");
            std::string f = file.get<std::string>();
            check_shard_name(index, name, f);
            if (std::find(shards.begin(), shards.end(), f) == shards.end()) shards.push_back(f);
        }
        for (const auto& f : shards) files_.push_back(std::make_unique<SafeTensorsFile>(dir + "/" + f));
        // Each tensor comes from the shard the index names, even when another shard holds a
        // tensor of the same name too: the index is the checkpoint's table of contents.
        for (auto& [name, file] : j["weight_map"].items()) {
            const std::string path = dir + "/" + file.get<std::string>();
            for (auto& sf : files_)
                if (sf->path() == path) {
                    const TensorView* t = sf->find(name);
                    if (!t) fail(path + ": tensor \"" + name + "\" listed in " + index + " is not in the file");
                    index_[name] = t;
                }
        }
    } else if (file_exists(single)) {
        files_.push_back(std::make_unique<SafeTensorsFile>(single));
        for (auto& [name, t] : files_[0]->tensors()) index_[name] = &t;
    } else {
        fail(dir + ": no model.safetensors or model.safetensors.index.json in the model folder");
    }
}

bool Checkpoint::has(const std::string& name) const { return index_.count(name) > 0; }

const TensorView* Checkpoint::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::get(const std::string& name, const std::vector<int64_t>& shape) const {
    auto it = index_.find(name);
    if (it == index_.end()) fail(dir_ + ": missing tensor \"" + name + "\" in the checkpoint");
    const TensorView& t = *it->second;
    if (t.shape != shape) {
        TensorView want;
        want.shape = shape;
        fail(t.file + ": tensor \"" + name + "\" has shape " + t.shape_str() + " but the config needs " + want.shape_str());
    }
    if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16 && t.dtype != DType::F8_E4M3)
        fail(t.file + ": tensor \"" + name + "\" has dtype " + dtype_name(t.dtype) + ", expected F32, F16, BF16 or F8_E4M3");
    return t;
}

float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t u;
    if (exp == 0x1f) u = sign | 0x7f800000 | (man << 13);                  // inf / nan
    else if (exp != 0) u = sign | ((exp + 112) << 23) | (man << 13);       // normal
    else if (man == 0) u = sign;                                           // zero
    else {                                                                 // subnormal: normalize
        int e = -1;
        uint32_t m = man;
        do { m <<= 1; e++; } while (!(m & 0x400));
        u = sign | ((uint32_t)(112 - e) << 23) | ((m & 0x3ff) << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

std::vector<float> to_f32(const TensorView& t) {
    std::vector<float> out(t.numel());
    to_f32(t, 0, t.numel(), out.data());
    return out;
}

// Element i of a tensor as stored, read through memcpy: tensor data is only as aligned as the
// file makes it (a header of odd length puts BF16/F16/I64 data at odd addresses), and a
// misaligned pointer dereference is undefined behaviour. The compiler turns each memcpy into
// one plain load.
template <typename U> static U load(const void* data, int64_t i) {
    U u;
    std::memcpy(&u, static_cast<const char*>(data) + i * sizeof(U), sizeof(U));
    return u;
}

void to_f32(const TensorView& t, int64_t begin, int64_t n, float* out) {
    if (n <= 0) return;   // (an empty tensor: out may be null, and memcpy(nullptr, ..., 0) is undefined)
    switch (t.dtype) {
        case DType::F32: std::memcpy(out, static_cast<const char*>(t.data) + begin * 4, n * sizeof(float)); break;
        case DType::BF16: for (int64_t i = 0; i < n; i++) out[i] = bf16_to_f32(load<uint16_t>(t.data, begin + i)); break;
        case DType::F16: for (int64_t i = 0; i < n; i++) out[i] = f16_to_f32(load<uint16_t>(t.data, begin + i)); break;
        case DType::F8_E4M3: for (int64_t i = 0; i < n; i++) out[i] = e4m3_to_float(load<uint8_t>(t.data, begin + i)); break;
        default: fail(t.file + ": tensor \"" + t.name + "\" is " + dtype_name(t.dtype) + ", not a float type");
    }
}

std::vector<int> to_i32(const TensorView& t) {
    std::vector<int> out(t.numel());
    if (t.dtype != DType::I32 && t.dtype != DType::I64)
        fail(t.file + ": tensor \"" + t.name + "\" is " + dtype_name(t.dtype) + ", not an integer type");
    for (size_t i = 0; i < out.size(); i++) {
        const int64_t v = t.dtype == DType::I32 ? load<int32_t>(t.data, i) : load<int64_t>(t.data, i);
        if (v < INT32_MIN || v > INT32_MAX)
            fail(t.file + ": tensor \"" + t.name + "\" holds " + std::to_string(v) + ", outside the 32-bit range");
        out[i] = (int)v;
    }
    return out;
}

}  // namespace olmo
