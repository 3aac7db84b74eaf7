// safetensors.h: memory-mapped safetensors files and checkpoint folders.
//
// A safetensors file is: 8-byte little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}), then raw data;
// offsets are relative to the end of the header. We mmap the file, validate every entry
// (known dtype, offsets inside the file, end-begin == numel*dtype size, no overlaps) and hand
// out TensorViews that point straight into the mapping. Nothing is copied until a caller
// converts a view to the dtype it wants, or (the GPU loader) preads its bytes at `offset`.
// F8_E4M3 holds FP8 codes (fp8.h), which mean weights only with their scales
// (fp8_checkpoint.h); the other FP8 formats (F8_E5M2, ...) are refused by name.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace olmo {

enum class DType { F32, F16, BF16, F8_E4M3, I32, I64 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

struct TensorView {
    std::string name, file;        // file: for error messages
    DType dtype;
    std::vector<int64_t> shape;
    const void* data = nullptr;    // points into the mmapped file
    uint64_t offset = 0;           // where data starts in the file, in bytes (for pread)
    int64_t numel() const;
    size_t nbytes() const { return numel() * dtype_size(dtype); }
    std::string shape_str() const; // "[4, 64]"
};

// One mmapped .safetensors file.
class SafeTensorsFile {
public:
    explicit SafeTensorsFile(const std::string& path);   // throws olmo::Error on any problem
    ~SafeTensorsFile();
    SafeTensorsFile(const SafeTensorsFile&) = delete;
    SafeTensorsFile& operator=(const SafeTensorsFile&) = delete;
    const std::map<std::string, TensorView>& tensors() const { return tensors_; }
    const TensorView* find(const std::string& name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    const std::string& path() const { return path_; }
private:
    void read_header();
    std::string path_;
    void* map_ = nullptr;
    size_t size_ = 0;
    std::map<std::string, TensorView> tensors_;
    std::map<std::string, std::string> metadata_;
};

// A checkpoint folder: model.safetensors, or model.safetensors.index.json plus its shards.
class Checkpoint {
public:
    explicit Checkpoint(const std::string& dir);
    bool has(const std::string& name) const;
    const TensorView* find(const std::string& name) const;   // null when absent (no checks)
    // The tensor `name`, checked against the expected shape and for a weight's dtype (F32,
    // F16, BF16, or F8_E4M3 codes); throws naming file and tensor.
    const TensorView& get(const std::string& name, const std::vector<int64_t>& shape) const;
    const std::string& dir() const { return dir_; }
private:
    std::string dir_;
    std::vector<std::unique_ptr<SafeTensorsFile>> files_;
    std::map<std::string, const TensorView*> index_;
};

// Converts any floating tensor to fp32 (BF16/F16 widened exactly; F8_E4M3: the codes' values,
// without any scale).
std::vector<float> to_f32(const TensorView& t);
// The same for elements [begin, begin + n) of t, written to out[0, n).
void to_f32(const TensorView& t, int64_t begin, int64_t n, float* out);
std::vector<int> to_i32(const TensorView& t);   // I32/I64 (golden files store ids this way)
float bf16_to_f32(uint16_t h);
float f16_to_f32(uint16_t h);

}  // namespace olmo
