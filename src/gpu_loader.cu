// gpu_loader.cu: checkpoint tensors -> device memory (see gpu_loader.h for the interface).
//
// The work is cut into chunks of at most one staging buffer (16 MiB) of file bytes, in table
// order, and N worker threads (8 by default) take the next chunk from a shared counter. Each
// worker owns a stream, 2 pinned staging buffers and (only when some tensor needs converting) a
// device scratch chunk of the same size. For each chunk it
//   1. waits for the event of the buffer it is about to reuse (that buffer's last copy is done),
//   2. preads the chunk's bytes from the file into the pinned buffer,
//   3. same dtype as the engine: cudaMemcpyAsync pinned -> destination;
//      another dtype:           cudaMemcpyAsync pinned -> scratch, then convert<T, S> scratch
//                               -> destination on the same stream (stream order keeps the
//                               scratch from being overwritten before the kernel read it);
//                               FP8 codes (F8_E4M3) are dequantized there instead, each times
//                               its row's scale (fp8_checkpoint.h; the scales of every such
//                               tensor are uploaded once, before the workers start),
//   4. records the buffer's event, and goes on with its other buffer while the DMA runs.
// So the host reads, the PCIe copies and the conversions of 8 workers all overlap. The fused
// wqkv / wgu need nothing special: a slot's destination is already base + row_offset * cols.
//
// pread, not memcpy from the checkpoint's mmap: pread copies page-cache pages into the pinned
// buffer inside the kernel, with no page faults on our side. Touching a fresh mapping instead
// costs a fault per 4 KiB-64 KiB (hundreds of thousands for a 7B model), taken under the
// mm lock that all threads share. One fd per file is shared by all workers: pread takes its own
// offset, so it needs no lock. The header check already proved every tensor lies inside its
// file; a short read now (the file shrank since) is an error, never a read past the end.
//
// Expected speed, 7B bf16 (14.6 GB) from the page cache on an H200 host: a pinned H2D copy
// runs at ~50 GB/s on PCIe 5 x16; pread out of the page cache at ~5-10 GB/s per thread, so 8
// threads keep the link busy; host memory sees ~3 passes (page cache read, pinned write, DMA
// read), far below its bandwidth. About 0.3-0.6 s of copying, plus ~0.1 s to pin 256 MiB once.
// Conversion on the device is free next to that: the kernel runs at HBM speed.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <exception>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include <cuda_fp8.h>

#include "common.h"
#include "cuda_common.cuh"
#include "elementwise.cuh"
#include "fp8_checkpoint.h"
#include "gpu_loader.h"

namespace olmo {

namespace {

size_t device_size(DeviceDType dt) { return dt == DeviceDType::F32 ? 4 : dt == DeviceDType::FP8 ? 1 : 2; }

bool same_dtype(DType s, DeviceDType d) {
    return (s == DType::F32 && d == DeviceDType::F32) || (s == DType::F16 && d == DeviceDType::F16) ||
           (s == DType::BF16 && d == DeviceDType::BF16) || (s == DType::F8_E4M3 && d == DeviceDType::FP8);
}

// An FP8 E4M3 code as stored (fp8.h), with its value for the kernels below (exact in fp32).
struct E4M3 {
    uint8_t bits;
};
__host__ __device__ inline float to_float(E4M3 x) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.bits, __NV_E4M3))); }
using olmo::to_float;   // (the overload above would hide those of cuda_common.cuh here)

// dst[i] = O(scale[(first + i) / cols] · E4M3(src[i])) for i < n: elements [first, first + n) of
// an FP8 [rows, cols] tensor dequantized, the product rounded to fp32 (as the CPU loader does),
// then once to O. Each thread takes kPer consecutive elements, so one division finds their row.
template <typename O>
__global__ void dequantize_e4m3_kernel(O* dst, const uint8_t* src, const float* scale, int64_t first, int64_t cols,
                                       int64_t n) {
    constexpr int kPer = 8;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x * kPer;
    for (int64_t i0 = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * kPer; i0 < n; i0 += stride) {
        int64_t row = (first + i0) / cols, row_end = (row + 1) * cols - first;   // row_end: index in the chunk
        for (int64_t i = i0; i < i0 + kPer && i < n; i++) {
            if (i == row_end) row++, row_end += cols;
            dst[i] = from_float<O>(__fmul_rn(scale[row], to_float(E4M3{src[i]})));
        }
    }
}

// The row scales of an FP8 tensor being dequantized, and where the chunk lies in it.
struct RowScales {
    const float* scale = nullptr;   // [rows] on the device (null: not FP8)
    int64_t first = 0, cols = 1;    // the chunk's first element; the tensor's columns
};

// dst [n] (O) = src [n] (the checkpoint's dtype s) on the device, rounding once (RNE); FP8
// codes dequantized with their row scales.
template <typename O>
void convert_from(O* dst, const void* src, DType s, int64_t n, const RowScales& rs, cudaStream_t stream) {
    switch (s) {
        case DType::F8_E4M3:
            dequantize_e4m3_kernel<<<grid_blocks(n / 8 + 1, 256), 256, 0, stream>>>(
                dst, static_cast<const uint8_t*>(src), rs.scale, rs.first, rs.cols, n);
            return cudaCheckLaunch();
        case DType::F32: return convert(dst, static_cast<const float*>(src), n, stream);
        case DType::F16: return convert(dst, static_cast<const __half*>(src), n, stream);
        case DType::BF16: return convert(dst, static_cast<const __nv_bfloat16*>(src), n, stream);
        default: fail(std::string("gpu loader: cannot convert from ") + dtype_name(s));
    }
}

void convert_chunk(void* dst, DeviceDType d, const void* src, DType s, int64_t n, const RowScales& rs,
                   cudaStream_t stream) {
    switch (d) {
        case DeviceDType::F32: return convert_from(static_cast<float*>(dst), src, s, n, rs, stream);
        case DeviceDType::F16: return convert_from(static_cast<__half*>(dst), src, s, n, rs, stream);
        case DeviceDType::BF16: return convert_from(static_cast<__nv_bfloat16*>(dst), src, s, n, rs, stream);
        case DeviceDType::FP8: break;   // only F8_E4M3 loads as FP8, copied as it is (load_to_device)
    }
}

// One fd per checkpoint file, closed at the end.
class Files {
public:
    int fd(const std::string& path) {
        auto it = fds_.find(path);
        if (it != fds_.end()) return it->second;
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail(path + ": cannot open (" + std::error_code(errno, std::generic_category()).message() + ")");
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);   // a hint for a cold cache: read ahead further
        return fds_[path] = fd;
    }
    ~Files() {
        for (auto& [path, fd] : fds_) close(fd);
    }

private:
    std::map<std::string, int> fds_;
};

// bytes of t's file at `at` -> buf; a short read (the file shrank since it was checked) fails.
void read_exactly(int fd, char* buf, size_t bytes, uint64_t at, const TensorView& t) {
    while (bytes > 0) {
        const ssize_t r = pread(fd, buf, bytes, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            fail(t.file + ": read error in tensor \"" + t.name + "\" (" +
                 std::error_code(errno, std::generic_category()).message() + ")");
        if (r == 0) fail(t.file + ": the file ends inside tensor \"" + t.name + "\" (truncated while loading?)");
        buf += r, bytes -= r, at += r;
    }
}

// One piece of work: n elements of one tensor, at most one staging buffer of file bytes.
struct Chunk {
    const TensorView* view;
    int fd;
    uint64_t at;      // file offset
    size_t bytes;     // file bytes: n * dtype_size(view->dtype)
    void* dst;        // device destination of element 0 of the chunk
    int64_t n;
    bool convert;     // the file's dtype is not the engine's
    RowScales rs;     // FP8 codes to dequantize: their scales
};

// scale[i]: slot i's row scales on the device when it is FP8 being dequantized, else null.
std::vector<Chunk> make_chunks(const std::vector<const TensorView*>& views, const std::vector<void*>& dst,
                               DeviceDType dt, size_t staging, Files& files, const std::vector<const float*>& scale) {
    std::vector<Chunk> chunks;
    for (size_t i = 0; i < views.size(); i++) {
        const TensorView& v = *views[i];
        const size_t src = dtype_size(v.dtype);
        const int64_t per = staging / src, cols = v.shape.size() == 2 ? v.shape[1] : 1;
        for (int64_t e = 0; e < v.numel(); e += per) {
            const int64_t n = std::min(per, v.numel() - e);
            chunks.push_back({&v, files.fd(v.file), v.offset + e * src, n * src,
                              static_cast<char*>(dst[i]) + e * device_size(dt), n, !same_dtype(v.dtype, dt),
                              RowScales{scale[i], e, cols}});
        }
    }
    return chunks;
}

// Host memory the GPU can DMA from (pinned), or device memory; freed at the end.
struct DeviceScratch {
    char* p = nullptr;
    explicit DeviceScratch(size_t bytes) { if (bytes) cudaCheck(cudaMalloc(&p, bytes)); }
    ~DeviceScratch() { if (p) cudaFree(p); }
};

// What the workers share: the chunks, the next one to take, the first error.
struct Shared {
    Shared(const std::vector<Chunk>& c, DeviceDType d, LoadProgress* p) : chunks(c), dt(d), progress(p) {}
    const std::vector<Chunk>& chunks;
    DeviceDType dt;
    LoadProgress* progress;
    int device = 0;
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::exception_ptr error;
};

// A worker's stream and one event per staging buffer ("its last copy is done"). The
// destructor waits for the stream, so no DMA still reads a buffer once the worker has left,
// even when it leaves by an exception.
struct WorkerStream {
    cudaStream_t stream = nullptr;
    std::vector<cudaEvent_t> free;
    explicit WorkerStream(int buffers) : free(buffers, nullptr) {
        cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        for (cudaEvent_t& e : free) cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync));
    }
    ~WorkerStream() {
        cudaStreamSynchronize(stream);
        for (cudaEvent_t e : free)
            if (e) cudaEventDestroy(e);
        cudaStreamDestroy(stream);
    }
};

// One worker: takes chunks until none is left (or another worker failed). staging: its
// `buffers` pinned buffers of `size` bytes back to back; scratch: its device chunk (or null).
void work(Shared& sh, char* staging, int buffers, size_t size, char* scratch) {
    cudaCheck(cudaSetDevice(sh.device));
    WorkerStream ws(buffers);
    for (size_t k = 0;; k++) {
        const size_t i = sh.next++;
        if (i >= sh.chunks.size() || sh.failed) break;
        const Chunk& c = sh.chunks[i];
        char* buf = staging + (k % buffers) * size;
        cudaCheck(cudaEventSynchronize(ws.free[k % buffers]));   // returns at once if never recorded
        read_exactly(c.fd, buf, c.bytes, c.at, *c.view);
        if (c.convert) {
            cudaCheck(cudaMemcpyAsync(scratch, buf, c.bytes, cudaMemcpyHostToDevice, ws.stream));
            convert_chunk(c.dst, sh.dt, scratch, c.view->dtype, c.n, c.rs, ws.stream);
        } else {
            cudaCheck(cudaMemcpyAsync(c.dst, buf, c.bytes, cudaMemcpyHostToDevice, ws.stream));
        }
        cudaCheck(cudaEventRecord(ws.free[k % buffers], ws.stream));
        if (sh.progress) sh.progress->add(c.bytes);
    }
    cudaCheck(cudaStreamSynchronize(ws.stream));
}

// ---- NaN/Inf check after the upload ----
// The weights are checked where they end up, in the engine's dtype, so a value that only
// overflows in the conversion (an fp32 70000 stored as fp16) is caught too. The cost: one more
// read of every weight byte at HBM speed, 14.6 GB for a 7B model in bf16 at ~3 TB/s, about 5 ms
// (the load itself takes over a second). The CPU loader checks in its conversion pass.

using u64 = unsigned long long;

// *first = min(*first, i) over the i < n with x[i] NaN or Inf; x read in Packs of N.
template <typename T, int N> __global__ void find_non_finite_kernel(const T* x, int64_t n, u64* first) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, packs = n / N;
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < packs; p += stride) {
        const Pack<T, N> v = reinterpret_cast<const Pack<T, N>*>(x)[p];
        for (int k = 0; k < N; k++)
            if (!isfinite(to_float(v.v[k]))) atomicMin(first, (u64)(p * N + k));
    }
    for (int64_t i = packs * N + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
        if (!isfinite(to_float(x[i]))) atomicMin(first, (u64)i);
}

template <typename T> void find_non_finite(const void* p, int64_t n, u64* first, cudaStream_t stream) {
    const T* x = static_cast<const T*>(p);
    constexpr int N = kVec<T>;
    if (aligned16(x)) find_non_finite_kernel<T, N><<<grid_blocks(n / N + 1, 256), 256, 0, stream>>>(x, n, first);
    else find_non_finite_kernel<T, 1><<<grid_blocks(n, 256), 256, 0, stream>>>(x, n, first);
    cudaCheckLaunch();
}

// Element i of a device tensor of dtype dt, as float (for the error message).
template <typename T> float element_at(const void* p, int64_t i) {
    T h;
    cudaCheck(cudaMemcpy(&h, static_cast<const T*>(p) + i, sizeof(T), cudaMemcpyDeviceToHost));
    return to_float(h);
}

// Fails naming the first slot (in table order) whose device copy holds a NaN or Inf.
void check_finite(const std::vector<WeightSlot>& table, const std::vector<const TensorView*>& views,
                  const std::vector<void*>& dst, DeviceDType dt) {
    const size_t n = table.size();
    DeviceScratch first(n * sizeof(u64));                      // [slots] first bad element, ~0 = none
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaCheck(cudaMemsetAsync(first.p, 0xff, n * sizeof(u64), stream));
    u64* f = reinterpret_cast<u64*>(first.p);
    for (size_t i = 0; i < n; i++) {
        const int64_t count = table[i].numel();
        if (dt == DeviceDType::F32) find_non_finite<float>(dst[i], count, f + i, stream);
        else if (dt == DeviceDType::F16) find_non_finite<__half>(dst[i], count, f + i, stream);
        else if (dt == DeviceDType::FP8) find_non_finite<E4M3>(dst[i], count, f + i, stream);
        else find_non_finite<__nv_bfloat16>(dst[i], count, f + i, stream);
    }
    std::vector<u64> host(n);
    cudaCheck(cudaMemcpyAsync(host.data(), f, n * sizeof(u64), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    cudaCheck(cudaStreamDestroy(stream));
    for (size_t i = 0; i < n; i++) {
        if (host[i] == ~0ull) continue;
        const int64_t at = (int64_t)host[i];
        const float v = dt == DeviceDType::F32   ? element_at<float>(dst[i], at)
                        : dt == DeviceDType::F16 ? element_at<__half>(dst[i], at)
                        : dt == DeviceDType::FP8 ? element_at<E4M3>(dst[i], at)
                                                 : element_at<__nv_bfloat16>(dst[i], at);
        fail(non_finite_weight_message(table[i], views[i]->file, at, v));
    }
}

// The row scales of every FP8 slot that is dequantized (dt is not FP8), back to back in one host
// array; at[i]: where slot i's begin, or -1.
std::vector<float> fp8_scales(const Checkpoint& ck, const std::vector<WeightSlot>& table,
                              const std::vector<const TensorView*>& views, DeviceDType dt, std::vector<int64_t>& at) {
    std::vector<float> all;
    at.assign(table.size(), -1);
    for (size_t i = 0; i < table.size(); i++) {
        if (views[i]->dtype != DType::F8_E4M3) continue;
        if (dt == DeviceDType::FP8) continue;   // the codes as stored; the caller places the scales
        const std::vector<float> s = fp8_row_scales(ck, table[i]);
        at[i] = (int64_t)all.size();
        all.insert(all.end(), s.begin(), s.end());
    }
    return all;
}

// Joins every started thread on the way out, also when starting another one threw.
struct JoinAll {
    std::vector<std::thread> threads;
    ~JoinAll() {
        for (std::thread& t : threads)
            if (t.joinable()) t.join();
    }
};

}  // namespace

LoadBuffers::~LoadBuffers() {
    if (host_) cudaFreeHost(host_);
    if (device_) cudaFree(device_);
}
char* LoadBuffers::host(size_t bytes) {
    if (bytes > host_bytes_) {
        if (host_) cudaCheck(cudaFreeHost(std::exchange(host_, nullptr)));
        cudaCheck(cudaMallocHost(&host_, bytes));
        host_bytes_ = bytes;
    }
    return host_;
}
char* LoadBuffers::device(size_t bytes) {
    if (bytes > device_bytes_) {
        if (device_) cudaCheck(cudaFree(std::exchange(device_, nullptr)));
        cudaCheck(cudaMalloc(&device_, bytes));
        device_bytes_ = bytes;
    }
    return device_;
}

void load_to_device(const Checkpoint& ck, const std::vector<WeightSlot>& table, const std::vector<void*>& dst,
                    DeviceDType dt, LoadProgress* progress, const GpuLoadOptions& opt) {
    if (dst.size() != table.size()) fail("load_to_device: one destination per weight slot");
    const std::vector<const TensorView*> views = checkpoint_views(ck, table);   // every check first
    for (size_t i = 0; i < views.size() && dt == DeviceDType::FP8; i++)
        if (views[i]->dtype != DType::F8_E4M3)
            fail("load_to_device: \"" + table[i].name + "\" is " + dtype_name(views[i]->dtype) +
                 ", and only F8_E4M3 tensors load as FP8 codes (the engine quantizes the others)");
    std::vector<int64_t> scale_at;
    const std::vector<float> host_scales = fp8_scales(ck, table, views, dt, scale_at);
    DeviceScratch scales(host_scales.size() * sizeof(float));     // [rows of every dequantized FP8 slot]
    if (!host_scales.empty())
        cudaCheck(cudaMemcpy(scales.p, host_scales.data(), host_scales.size() * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<const float*> scale(table.size(), nullptr);
    for (size_t i = 0; i < table.size(); i++)
        if (scale_at[i] >= 0) scale[i] = reinterpret_cast<const float*>(scales.p) + scale_at[i];
    const size_t size = std::max<size_t>(opt.staging_bytes / 16 * 16, 16);
    const int buffers = std::max(opt.buffers_per_thread, 1);
    Files files;
    const std::vector<Chunk> chunks = make_chunks(views, dst, dt, size, files, scale);
    size_t total = 0;
    for (const TensorView* v : views) total += v->nbytes();
    if (progress && !opt.part_of_load) progress->start(total);

    const int cores = (int)std::max(1u, std::thread::hardware_concurrency());
    const int threads = (int)std::max<size_t>(1, std::min<size_t>(opt.threads > 0 ? opt.threads : std::min(8, cores),
                                                                  chunks.size()));
    const bool any_convert = std::any_of(chunks.begin(), chunks.end(), [](const Chunk& c) { return c.convert; });
    LoadBuffers own;
    LoadBuffers& bufs = opt.buffers ? *opt.buffers : own;
    char* staging = bufs.host(threads * buffers * size);                          // [threads][buffers][size]
    char* scratch = any_convert ? bufs.device(threads * size) : nullptr;          // [threads][size]
    Shared sh(chunks, dt, progress);
    cudaCheck(cudaGetDevice(&sh.device));
    // The workers' streams do not wait for the legacy default stream, so work the caller queued
    // on any stream (a cudaMemset of the destinations, say) must be done before the first copy.
    cudaCheck(cudaDeviceSynchronize());
    {
        JoinAll pool;
        for (int w = 0; w < threads; w++)
            pool.threads.emplace_back([&, w] {
                try {
                    work(sh, staging + (size_t)w * buffers * size, buffers, size,
                         scratch ? scratch + (size_t)w * size : nullptr);
                } catch (...) {
                    std::lock_guard<std::mutex> lock(sh.mu);
                    if (!sh.error) sh.error = std::current_exception();
                    sh.failed = true;
                }
            });
    }
    if (sh.error) std::rethrow_exception(sh.error);
    check_finite(table, views, dst, dt);
    if (progress && !opt.part_of_load) progress->finish();
}

}  // namespace olmo
