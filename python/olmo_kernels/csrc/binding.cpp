// binding.cpp: the torch side of olmo_kernels._C. Every op checks its arguments here, before it
// reads any size past a tensor's dim() or touches its data (device, dtype, dims, shapes agreeing,
// head size, lengths against shapes, scalars finite), and raises a Python ValueError or
// TypeError naming the op and the argument; then it brings the tensors into the layout the
// kernels read, sets up the kernels' position and block-table arrays, and calls ops.h on the
// current CUDA stream. Defaults and docstrings live in olmo_kernels/__init__.py.
//
// Errors. A failed check throws ArgError, which this module's own exception translator (local
// to the module, tried before any other) turns into the Python exception it names; the
// engine's olmo::Error (a kernel's or config.json's refusal) becomes RuntimeError the same way.
// So an argument error never depends on how torch's translator handles c10's error types.
//
// Layouts. Attention takes SDPA's shape [B, H, S, D]. The kernels read each sequence's rows as
// [S, H*D] (head h of token s at s*H*D + h*D), so a tensor is used in place when its memory is
// ordered [B, S, H, D] (x.view(B, S, H, D).transpose(1, 2), as a model's q/k/v projections
// give it); any batch stride is fine. Otherwise it is copied once. Outputs are allocated
// [B, S, H, D] and returned as the [B, H, S, D] view.
//
// Positions and block tables. The kernels read the KV cache through a block table: position p
// of sequence b is pool row table[b][p / bs] * bs + p % bs. For plain (unpaged) K/V this file
// makes the table itself: one sequence's keys are one block of bs = the next power of two
// >= its length (table [0]), or, for a batched decode over a [B, S_cap, H, D] cache, blocks
// that tile the batch (table[b][i] = b * S_cap / bs + i). These small int arrays and the
// sequences' first positions are computed on the host from host lengths and uploaded with one
// pinned, non-blocking copy per call.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "common.h"
#include "config.h"
#include "ops.h"

namespace {

using olmo::ext::AttnArgs;
using olmo::ext::DType;

// ---- argument checks ----

// A bad argument: the Python exception type to raise and its message.
struct ArgError : std::runtime_error {
    PyObject* type;
    ArgError(PyObject* t, const std::string& msg) : std::runtime_error(msg), type(t) {}
};

// Message text, built without iostreams. Streaming a number into a std::ostream from this
// module (what c10::str does) crashed on the H200 machine: a native backtrace showed
// libstdc++'s own stream code (std::ostream::_M_insert<long>) inside the module, linked in by
// the compiler there (a g++ 13 wrapper), running beside the libstdc++ that Python had loaded,
// and the call went through a bad locale facet pointer. std::to_string and snprintf use no
// locale, so messages are the same whichever copy runs.
void append(std::string& s, const char* x) { s += x; }
void append(std::string& s, const std::string& x) { s += x; }
void append(std::string& s, double x) { s += olmo::num_str(x); }
void append(std::string& s, at::ScalarType t) { s += c10::toString(t); }
void append(std::string& s, const at::Device& d) { s += d.str(); }
template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
void append(std::string& s, T x) {
    s += std::to_string(x);
}
template <typename... Parts>
std::string text(const Parts&... parts) {
    std::string s;
    (append(s, parts), ...);
    return s;
}

// CHECK_VALUE(cond, parts...) raises ValueError(text(parts...)) when cond is false; the
// message is built only then. CHECK_TYPE raises TypeError.
#define CHECK_WITH(type, cond, ...)                              \
    do {                                                         \
        if (!(cond)) throw ArgError(type, text(__VA_ARGS__));    \
    } while (0)
#define CHECK_VALUE(cond, ...) CHECK_WITH(PyExc_ValueError, cond, __VA_ARGS__)
#define CHECK_TYPE(cond, ...) CHECK_WITH(PyExc_TypeError, cond, __VA_ARGS__)

void translate_errors(std::exception_ptr p) {
    try {
        if (p) std::rethrow_exception(p);
    } catch (const ArgError& e) {
        PyErr_SetString(e.type, e.what());
    } catch (const olmo::Error& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
}

// A tensor's shape as text for a message, "[2, 3, 4]".
std::string shape_of(const at::Tensor& t) {
    std::string s = "[";
    for (int64_t i = 0; i < t.dim(); i++) s += (i ? ", " : "") + std::to_string(t.size(i));
    return s + "]";
}

DType dtype_of(const at::Tensor& t, const char* who, const char* what) {
    switch (t.scalar_type()) {
        case at::kFloat: return DType::F32;
        case at::kHalf: return DType::F16;
        case at::kBFloat16: return DType::BF16;
        default: break;
    }
    CHECK_TYPE(false, who, ": ", what, " must be float32, float16 or bfloat16, got ", t.scalar_type());
    return DType::F32;
}

void check_cuda(const at::Tensor& t, const at::Tensor& ref, const char* who, const char* what) {
    CHECK_TYPE(t.is_cuda(), who, ": ", what, " must be a CUDA tensor, got one on ", t.device());
    CHECK_VALUE(t.device() == ref.device(), who, ": ", what, " is on ", t.device(), ", the first tensor on ",
                ref.device());
}

void check_same_dtype(const at::Tensor& t, const at::Tensor& ref, const char* who, const char* what) {
    CHECK_TYPE(t.scalar_type() == ref.scalar_type(), who, ": ", what, " is ", t.scalar_type(), ", q is ",
               ref.scalar_type(), " (one dtype for q, k and v)");
}

void check_int_tensor(const at::Tensor& t, const char* who, const char* what) {
    CHECK_TYPE(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, who, ": ", what,
               " must be an int32 or int64 tensor, got ", t.scalar_type());
}

int checked_int(int64_t v, const char* who, const char* what) {
    CHECK_VALUE(v >= 0 && v <= INT_MAX, who, ": ", what, " = ", v, " does not fit the kernels' int");
    return (int)v;
}

// True when dims first .. dim-1 of t are densely packed, innermost last (the strides of dims of
// size 1 do not matter).
bool dense_from(const at::Tensor& t, int first) {
    int64_t expected = 1;
    for (int d = (int)t.dim() - 1; d >= first; d--) {
        if (t.size(d) != 1 && t.stride(d) != expected) return false;
        expected *= t.size(d);
    }
    return true;
}

bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// x [B, H, S, D] as the [B, S, H, D] view the kernels read: each sequence's rows dense and
// 16-byte aligned (cp.async copies 16 bytes), and, with whole_batch, the batch dense too (one
// [B*S, H*D] matrix). A view when x already is so, else a copy.
at::Tensor bshd(const at::Tensor& x, bool whole_batch) {
    at::Tensor t = x.transpose(1, 2);
    const bool batch_ok = whole_batch ? dense_from(t, 0)
                                      : t.size(0) == 1 || (t.stride(0) * (int64_t)t.element_size()) % 16 == 0;
    return dense_from(t, 1) && batch_ok && aligned16(t) ? t : t.contiguous();
}

const char* elem_ptr(const at::Tensor& t, int64_t b) {
    return static_cast<const char*>(t.data_ptr()) + b * t.stride(0) * (int64_t)t.element_size();
}
char* elem_ptr(at::Tensor& t, int64_t b) {
    return static_cast<char*>(t.data_ptr()) + b * t.stride(0) * (int64_t)t.element_size();
}

// Host lengths -> std::vector, each in [lo, hi].
std::vector<int64_t> checked_lengths(const std::vector<int64_t>& lengths, int64_t batch, int64_t lo, int64_t hi,
                                     const char* who, const char* why) {
    CHECK_VALUE((int64_t)lengths.size() == batch, who, ": ", lengths.size(), " lengths for a batch of ", batch);
    for (size_t b = 0; b < lengths.size(); b++)
        CHECK_VALUE(lengths[b] >= lo && lengths[b] <= hi, who, ": lengths[", b, "] = ", lengths[b],
                    " is not in [", lo, ", ", hi, "] (", why, ")");
    return lengths;
}

// The block size that holds n keys in one block: the next power of two >= n, at least 8 (the
// kernels' smallest).
int pow2_at_least(int64_t n) {
    CHECK_VALUE(n <= (1 << 30), "olmo_kernels: ", n, " keys in one sequence exceed 2^30");
    int p = 8;
    while (p < n) p *= 2;
    return p;
}

int64_t largest_pow2_divisor(int64_t n) { return n == 0 ? (int64_t)1 << 30 : std::min<int64_t>(n & -n, 1 << 30); }

// Small int arrays for the kernels: a pinned host buffer copied without blocking the host.
at::Tensor upload(const std::vector<int>& v, const at::Device& device) {
    at::Tensor h = at::empty({(int64_t)v.size()}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
    if (!v.empty()) std::memcpy(h.data_ptr<int>(), v.data(), v.size() * sizeof(int));
    return h.to(device, at::kInt, /*non_blocking=*/true);
}

cudaStream_t current_stream() { return at::cuda::getCurrentCUDAStream().stream(); }

// ---- attention ----

// What every attention op shares: q (as [B, T, nH, hd] rows) and the output.
struct Queries {
    at::Tensor q, out;  // [B, T, nH, hd]
    DType dtype;
    int64_t B, T, nH, hd;
};

Queries queries(const char* who, const at::Tensor& q, bool whole_batch) {
    CHECK_VALUE(q.dim() == 4, who, ": q must be 4-D [batch, heads, seq, head_dim] (SDPA's layout), got shape ",
                shape_of(q));
    CHECK_TYPE(q.is_cuda(), who, ": q must be a CUDA tensor, got one on ", q.device());
    Queries r;
    r.dtype = dtype_of(q, who, "q");
    r.B = q.size(0), r.nH = q.size(1), r.T = q.size(2), r.hd = q.size(3);
    CHECK_VALUE(olmo::ext::attention_supports_head_dim((int)std::min<int64_t>(r.hd, INT_MAX)), who,
                ": head_dim ", r.hd, " is not supported (multiples of 8 up to 256)");
    r.q = bshd(q, whole_batch);
    r.out = at::empty({r.B, r.T, r.nH, r.hd}, q.options());
    return r;
}

// nKV from a K/V tensor's head count, checked against q's.
int64_t kv_heads(const char* who, const Queries& qs, int64_t nKV) {
    CHECK_VALUE(nKV > 0 && qs.nH % nKV == 0, who, ": q's ", qs.nH, " heads are not a multiple of k's ", nKV,
                " heads (GQA: query head h reads KV head h / (nH / nKV))");
    return nKV;
}

// k, v in SDPA's shape [B, nKV, S, hd], checked against q.
void check_kv(const char* who, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Queries& qs) {
    check_cuda(k, q, who, "k");
    check_cuda(v, q, who, "v");
    check_same_dtype(k, q, who, "k");
    check_same_dtype(v, q, who, "v");
    CHECK_VALUE(k.dim() == 4 && k.sizes() == v.sizes(), who,
                ": k and v must be 4-D [batch, kv_heads, seq, head_dim] of one shape, got ", shape_of(k), " and ",
                shape_of(v));
    CHECK_VALUE(k.size(0) == qs.B && k.size(3) == qs.hd, who, ": q ", shape_of(q), " and k ", shape_of(k),
                " differ in batch or head_dim");
    kv_heads(who, qs, k.size(1));
}

AttnArgs base_args(const Queries& qs, int64_t nKV, int64_t window, double scale) {
    AttnArgs a{};
    a.dtype = qs.dtype;
    a.nH = (int)qs.nH;
    a.nKV = (int)nKV;
    a.hd = (int)qs.hd;
    a.window = (int)window;
    a.scale = (float)scale;
    return a;
}

// The attention ops' scalars: window 0 (none) or a positive int, scale finite.
void check_scalars(const char* who, int64_t window, double scale) {
    CHECK_VALUE(window >= 0 && window <= INT_MAX, who, ": window must be None or a positive int, got ", window);
    CHECK_VALUE(std::isfinite(scale), who, ": scale must be finite, got ", scale);
}

// An op's float parameter (eps, attention factor): finite and at least lo.
void check_finite(const char* who, const char* what, double x, double lo) {
    CHECK_VALUE(std::isfinite(x) && x >= lo, who, ": ", what, " must be finite and >= ", lo, ", got ", x);
}

// The prefill kernel, one launch per sequence: sequence b's T queries are the last T of its
// keys[b] positions, its K and V pools kv(b). With a caller's block table (rows table_stride
// apart, blocks of block_size), sequence b reads row b; without (table == nullptr) its keys are
// one block of the next power of two >= keys[b], table [0].
template <typename KV>
void prefill_each(Queries& qs, AttnArgs a, const std::vector<int64_t>& keys, const int* table, int table_stride,
                  int block_size, KV kv, cudaStream_t stream) {
    std::vector<int> ints(qs.B + 1, 0);  // the first positions, then the table [0]
    for (int64_t b = 0; b < qs.B; b++) ints[b] = (int)(keys[b] - qs.T);
    const at::Tensor dev = upload(ints, qs.q.device());
    a.n_q = (int)qs.T;
    a.batch = 1;
    for (int64_t b = 0; b < qs.B; b++) {
        a.q = elem_ptr(qs.q, b);
        a.out = elem_ptr(qs.out, b);
        std::tie(a.k, a.v) = kv(b);
        a.pos0 = dev.data_ptr<int>() + b;
        a.s_cap = (int)keys[b];
        a.block_table = table ? table + b * table_stride : dev.data_ptr<int>() + qs.B;
        a.table_stride = table ? table_stride : 1;
        a.block_size = table ? block_size : pow2_at_least(keys[b]);
        olmo::ext::attention_prefill(a, stream);
    }
}

at::Tensor workspace(const Queries& qs, int s_cap, int batch, int n_q) {
    const size_t bytes = olmo::ext::attention_decode_workspace_bytes((int)qs.nH, (int)qs.hd, s_cap, batch, n_q);
    return at::empty({(int64_t)bytes}, qs.q.options().dtype(at::kByte));
}

void check_decode_rows(const char* who, const Queries& qs, int64_t nKV, int64_t n_q, const char* instead) {
    const int64_t rows = n_q * (qs.nH / nKV), max_rows = olmo::ext::attention_decode_max_rows();
    CHECK_VALUE(rows <= max_rows, who, ": ", n_q, " queries x ", qs.nH / nKV, " query heads per KV head = ", rows,
                " rows per KV head; the decode kernel takes at most ", max_rows, " (", instead, ")");
}

// Non-causal attention: every query sees every key. It runs on the decode kernel, each query
// row as a one-token sequence at position Sk - 1 over the same keys (up to kChunk queries per launch).
void noncausal(Queries& qs, AttnArgs a, const at::Tensor& k, const at::Tensor& v, int64_t Sk, cudaStream_t stream) {
    constexpr int64_t kChunk = 1024;
    const int64_t n = std::min(qs.T, kChunk);
    std::vector<int> ints(2 * n, 0);  // pos0 (n), then a table row [0] per query (n)
    std::fill(ints.begin(), ints.begin() + n, (int)(Sk - 1));
    const at::Tensor dev = upload(ints, qs.q.device());
    const at::Tensor ws = workspace(qs, (int)Sk, (int)n, 1);
    olmo::ext::stream_fence(stream);  // see decode_launch
    a.n_q = 1;
    a.s_cap = (int)Sk;
    a.block_size = pow2_at_least(Sk);
    a.table_stride = 1;
    a.pos0 = dev.data_ptr<int>();
    a.block_table = dev.data_ptr<int>() + n;
    const int64_t row = qs.nH * qs.hd * (int64_t)qs.q.element_size();
    for (int64_t b = 0; b < qs.B; b++) {
        a.k = elem_ptr(k, b);
        a.v = elem_ptr(v, b);
        for (int64_t t0 = 0; t0 < qs.T; t0 += n) {
            a.batch = (int)std::min(n, qs.T - t0);
            a.q = elem_ptr(qs.q, b) + t0 * row;
            a.out = elem_ptr(qs.out, b) + t0 * row;
            olmo::ext::attention_decode(a, ws.data_ptr(), stream);
        }
    }
}

at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, int64_t window,
                           double scale) {
    const char* who = "flash_attention";
    Queries qs = queries(who, q, false);
    check_kv(who, q, k, v, qs);
    check_scalars(who, window, scale);
    const int64_t Sk = k.size(2), nKV = k.size(1);
    CHECK_VALUE(!causal || qs.T <= Sk, who, ": causal attention of ", qs.T, " queries over ", Sk,
                " keys: the queries are the last Sq positions of the keys, so Sq <= Sk");
    CHECK_VALUE(causal || window == 0, who, ": a window needs causal=True");
    CHECK_VALUE(qs.T == 0 || Sk > 0, who, ": no keys");
    checked_int(Sk, who, "the key length");
    if (qs.out.numel() == 0) return qs.out.transpose(1, 2);  // no queries, heads or batch
    const c10::cuda::CUDAGuard guard(q.device());
    cudaStream_t stream = current_stream();
    const at::Tensor kt = bshd(k, false), vt = bshd(v, false);
    AttnArgs a = base_args(qs, nKV, window, scale);
    if (causal) {
        prefill_each(qs, a, std::vector<int64_t>(qs.B, Sk), nullptr, 0, 0,
                     [&](int64_t b) { return std::make_pair(elem_ptr(kt, b), elem_ptr(vt, b)); }, stream);
    } else {
        check_decode_rows(who, qs, nKV, 1, "causal=False runs on the decode kernel");
        noncausal(qs, a, kt, vt, Sk, stream);
    }
    return qs.out.transpose(1, 2);
}

// The decode kernel over `batch` sequences in one launch. The sequences' first positions and
// `table` (when not empty: the block table this file made) go up in one copy. A fence comes
// before the launch, since the kernel reads them (and a caller's block table, which the kernel
// just before may have written) before it waits for that kernel.
void decode_launch(Queries& qs, AttnArgs a, const std::vector<int64_t>& lengths, const std::vector<int>& table,
                   cudaStream_t stream) {
    std::vector<int> ints(qs.B);
    for (int64_t b = 0; b < qs.B; b++) ints[b] = (int)(lengths[b] - qs.T);
    ints.insert(ints.end(), table.begin(), table.end());
    const at::Tensor dev = upload(ints, qs.q.device());
    a.q = qs.q.data_ptr();
    a.out = qs.out.data_ptr();
    a.n_q = (int)qs.T;
    a.pos0 = dev.data_ptr<int>();
    if (!table.empty()) a.block_table = dev.data_ptr<int>() + qs.B;
    a.s_cap = (int)*std::max_element(lengths.begin(), lengths.end());
    a.batch = (int)qs.B;
    const at::Tensor ws = workspace(qs, a.s_cap, a.batch, a.n_q);
    olmo::ext::stream_fence(stream);
    olmo::ext::attention_decode(a, ws.data_ptr(), stream);
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const std::vector<int64_t>& lengths_in, int64_t window, double scale) {
    const char* who = "decode_attention";
    Queries qs = queries(who, q, true);
    check_kv(who, q, k_cache, v_cache, qs);
    check_scalars(who, window, scale);
    const int64_t S = k_cache.size(2), nKV = k_cache.size(1);
    checked_int(S, who, "the cache length");
    const auto lengths = checked_lengths(lengths_in, qs.B, std::max<int64_t>(qs.T, 1), S, who,
                                         "keys per sequence, the queries' own included, at most the cache length");
    check_decode_rows(who, qs, nKV, qs.T, "use flash_attention for longer chunks");
    CHECK_VALUE(qs.B <= 32767, who, ": batch ", qs.B, " is over the kernel's 32767");
    if (qs.out.numel() == 0) return qs.out.transpose(1, 2);  // no queries, heads or batch
    const c10::cuda::CUDAGuard guard(q.device());
    cudaStream_t stream = current_stream();
    const at::Tensor kt = bshd(k_cache, false), vt = bshd(v_cache, false);
    AttnArgs a = base_args(qs, nKV, window, scale);
    a.k = kt.data_ptr();
    a.v = vt.data_ptr();
    // The batch as one pool: sequence b's rows start at b * R (R rows apart); blocks of bs rows
    // tile it when bs divides R.
    const int64_t row = nKV * qs.hd, s_cap = *std::max_element(lengths.begin(), lengths.end());
    const int64_t R = qs.B == 1 ? 0 : kt.stride(0) / row;
    const bool tiles = qs.B == 1 || (kt.stride(0) == vt.stride(0) && kt.stride(0) % row == 0 &&
                                     largest_pow2_divisor(R) >= 8 && (qs.B - 1) * R + s_cap <= INT_MAX);
    if (!tiles) {  // one launch per sequence, its keys one block
        for (int64_t b = 0; b < qs.B; b++) {
            Queries one = qs;
            one.q = qs.q.narrow(0, b, 1);
            one.out = qs.out.narrow(0, b, 1);
            one.B = 1;
            a.k = elem_ptr(kt, b);
            a.v = elem_ptr(vt, b);
            a.table_stride = 1;
            a.block_size = pow2_at_least(lengths[b]);
            decode_launch(one, a, {lengths[b]}, {0}, stream);
        }
        return qs.out.transpose(1, 2);
    }
    const int64_t bs = std::min<int64_t>(largest_pow2_divisor(R), pow2_at_least(s_cap));
    const int64_t M = (s_cap + bs - 1) / bs;
    std::vector<int> table(qs.B * M);
    for (int64_t b = 0; b < qs.B; b++)
        for (int64_t i = 0; i < M; i++) table[b * M + i] = (int)(b * R / bs + i);
    a.table_stride = (int)M;
    a.block_size = (int)bs;
    decode_launch(qs, a, lengths, table, stream);
    return qs.out.transpose(1, 2);
}

// ---- paged attention: pools [N, bs, nKV, hd], block table [B, M] ----

struct Pool {
    at::Tensor k, v;
    int64_t blocks, bs, nKV;
};

Pool paged_inputs(const char* who, const at::Tensor& q, const Queries& qs, const at::Tensor& k_pool,
                  const at::Tensor& v_pool, const at::Tensor& table) {
    check_cuda(k_pool, q, who, "k_pool");
    check_cuda(v_pool, q, who, "v_pool");
    check_same_dtype(k_pool, q, who, "k_pool");
    check_same_dtype(v_pool, q, who, "v_pool");
    CHECK_VALUE(k_pool.dim() == 4 && k_pool.sizes() == v_pool.sizes(), who,
                ": k_pool and v_pool must be 4-D [num_blocks, block_size, kv_heads, head_dim] of one shape, "
                "got ",
                shape_of(k_pool), " and ", shape_of(v_pool));
    CHECK_VALUE(k_pool.size(3) == qs.hd, who, ": k_pool's head_dim ", k_pool.size(3), " is not q's ", qs.hd);
    CHECK_VALUE(k_pool.is_contiguous() && v_pool.is_contiguous() && aligned16(k_pool) && aligned16(v_pool), who,
                ": k_pool and v_pool must be contiguous (they are written in place by rope_qkv)");
    Pool p{k_pool, v_pool, k_pool.size(0), k_pool.size(1), kv_heads(who, qs, k_pool.size(2))};
    CHECK_VALUE(p.bs >= 8 && (p.bs & (p.bs - 1)) == 0, who, ": block_size ", p.bs,
                " must be a power of two >= 8");
    CHECK_VALUE(p.blocks * p.bs <= INT_MAX, who, ": the pools' ", p.blocks * p.bs, " rows exceed 2^31 - 1");
    check_cuda(table, q, who, "block_table");
    CHECK_TYPE(table.scalar_type() == at::kInt, who, ": block_table must be int32, got ", table.scalar_type());
    CHECK_VALUE(table.dim() == 2 && table.size(0) == qs.B && (table.size(1) <= 1 || table.stride(1) == 1), who,
                ": block_table must be [batch, max_blocks] with rows contiguous, got ", shape_of(table));
    checked_int(table.stride(0), who, "block_table's row stride");
    return p;
}

// Every entry a sequence reads (blocks of positions lo_b .. len_b - 1) must name a pool block.
// One small reduction and a device-to-host read (a sync); check_table=False skips it.
void check_table_entries(const char* who, const at::Tensor& table, const Pool& p, const std::vector<int64_t>& lengths,
                         int64_t n_q, int64_t window) {
    const int64_t B = table.size(0), M = table.size(1);
    std::vector<int> first(B), end(B);
    for (int64_t b = 0; b < B; b++) {
        const int64_t lo = window > 0 ? std::max<int64_t>(0, lengths[b] - n_q - window + 1) : 0;
        first[b] = (int)(lo / p.bs);
        end[b] = (int)((lengths[b] + p.bs - 1) / p.bs);
        CHECK_VALUE(end[b] <= M, who, ": sequence ", b, " has ", lengths[b], " positions, its block_table row ",
                    M, " blocks of ", p.bs);
    }
    const at::Tensor j = at::arange(M, table.options()).unsqueeze(0);
    const at::Tensor lo = upload(first, table.device()).unsqueeze(1), hi = upload(end, table.device()).unsqueeze(1);
    const at::Tensor used = (j >= lo) & (j < hi);
    const at::Tensor bad = used & ((table < 0) | (table >= p.blocks));
    CHECK_VALUE(!bad.any().item<bool>(), who, ": block_table has an entry outside [0, ", p.blocks,
                ") among the blocks the lengths use");
}

at::Tensor paged_attention(const char* who, bool decode, const at::Tensor& q, const at::Tensor& k_pool,
                           const at::Tensor& v_pool, const at::Tensor& table, const std::vector<int64_t>& lengths_in,
                           int64_t window, double scale, bool check_table) {
    Queries qs = queries(who, q, decode);
    const Pool p = paged_inputs(who, q, qs, k_pool, v_pool, table);
    check_scalars(who, window, scale);
    const auto lengths = checked_lengths(lengths_in, qs.B, std::max<int64_t>(qs.T, 1), table.size(1) * p.bs, who,
                                         "keys per sequence, the queries' own included, within the block table");
    if (decode) {
        check_decode_rows(who, qs, p.nKV, qs.T, "use paged_flash_attention for longer chunks");
        CHECK_VALUE(qs.B <= 32767, who, ": batch ", qs.B, " is over the kernel's 32767");
    }
    if (qs.out.numel() == 0) return qs.out.transpose(1, 2);  // no queries, heads or batch
    const c10::cuda::CUDAGuard guard(q.device());
    if (check_table) check_table_entries(who, table, p, lengths, qs.T, window);
    cudaStream_t stream = current_stream();
    AttnArgs a = base_args(qs, p.nKV, window, scale);
    a.k = p.k.data_ptr();
    a.v = p.v.data_ptr();
    a.block_table = table.data_ptr<int>();
    a.table_stride = (int)table.stride(0);
    a.block_size = (int)p.bs;
    if (decode) {
        decode_launch(qs, a, lengths, {}, stream);
    } else {
        prefill_each(qs, a, lengths, table.data_ptr<int>(), (int)table.stride(0), (int)p.bs,
                     [&](int64_t) { return std::make_pair(p.k.data_ptr(), p.v.data_ptr()); }, stream);
    }
    return qs.out.transpose(1, 2);
}

at::Tensor paged_flash_attention(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                                 const at::Tensor& table, const std::vector<int64_t>& lengths, int64_t window,
                                 double scale, bool check_table) {
    return paged_attention("paged_flash_attention", false, q, k_pool, v_pool, table, lengths, window, scale,
                           check_table);
}

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                                  const at::Tensor& table, const std::vector<int64_t>& lengths, int64_t window,
                                  double scale, bool check_table) {
    return paged_attention("paged_decode_attention", true, q, k_pool, v_pool, table, lengths, window, scale,
                           check_table);
}

// ---- norms ----

// x [..., H] as a [rows, H] matrix with unit column stride (a view when possible).
at::Tensor as_rows(const at::Tensor& x, int64_t H) {
    at::Tensor r = x.reshape({-1, H});
    return H <= 1 || r.stride(1) == 1 ? r : r.contiguous();
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
    const char* who = "rms_norm";
    CHECK_TYPE(x.is_cuda(), who, ": x must be a CUDA tensor, got one on ", x.device());
    const DType xt = dtype_of(x, who, "x"), wt = dtype_of(weight, who, "weight");
    check_cuda(weight, x, who, "weight");
    CHECK_VALUE(weight.dim() == 1 && weight.size(0) > 0, who, ": weight must be 1-D and not empty, got ",
                shape_of(weight));
    const int64_t H = weight.size(0);
    CHECK_VALUE(x.dim() >= 1 && x.size(-1) == H, who, ": x's last dim must be weight's ", H, ", got x ",
                shape_of(x));
    check_finite(who, "eps", eps, 0.0);
    at::Tensor out = at::empty(x.sizes(), x.options());
    if (x.numel() == 0) return out;
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor rows = as_rows(x, H), w = weight.contiguous();
    const int64_t n = rows.size(0);
    olmo::ext::rmsnorm(xt, wt, out.data_ptr(), rows.data_ptr(), w.data_ptr(), checked_int(n, who, "rows"),
                       checked_int(H, who, "H"), n > 1 ? rows.stride(0) : H, H, (float)eps, current_stream());
    return out;
}

at::Tensor layer_norm(const at::Tensor& x, double eps) {
    const char* who = "layer_norm";
    CHECK_TYPE(x.is_cuda(), who, ": x must be a CUDA tensor, got one on ", x.device());
    const DType xt = dtype_of(x, who, "x");
    CHECK_VALUE(x.dim() >= 1 && x.size(-1) > 0, who, ": x must have a non-empty last dim, got ", shape_of(x));
    check_finite(who, "eps", eps, 0.0);
    at::Tensor out = at::empty(x.sizes(), x.options());
    if (x.numel() == 0) return out;
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t H = x.size(-1);
    const at::Tensor rows = x.reshape({-1, H}).contiguous();
    olmo::ext::layernorm(xt, out.data_ptr(), rows.data_ptr(), checked_int(rows.size(0), who, "rows"),
                         checked_int(H, who, "H"), (float)eps, current_stream());
    return out;
}

// ---- RoPE ----

at::Tensor device_inv_freq(const char* who, const at::Tensor& inv_freq, int64_t hd, const at::Device& device) {
    CHECK_VALUE(hd % 2 == 0, who, ": head_dim ", hd, " is odd");
    CHECK_VALUE(inv_freq.dim() == 1 && inv_freq.size(0) == hd / 2, who, ": inv_freq must be [head_dim / 2] = [",
                hd / 2, "], got ", shape_of(inv_freq));
    CHECK_TYPE(inv_freq.is_floating_point(), who, ": inv_freq must be a float tensor, got ",
               inv_freq.scalar_type());
    return inv_freq.to(device, at::kFloat).contiguous();
}

// An int tensor (checked by check_int_tensor) as contiguous int32 on `device`.
at::Tensor device_ints(const at::Tensor& t, const at::Device& device) { return t.to(device, at::kInt).contiguous(); }

// The rope_qkv kernel with no key or value heads rotates the rows of any [rows, H*D] tensor
// into q_out: the plain RoPE op (the pool pointers are then never used; cache_row must still
// point at `rows` ints, and gets the positions).
at::Tensor rope(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& inv_freq, double attn_factor) {
    const char* who = "rope";
    CHECK_VALUE(x.dim() == 4, who, ": x must be 4-D [batch, heads, seq, head_dim] (SDPA's layout), got shape ",
                shape_of(x));
    CHECK_TYPE(x.is_cuda(), who, ": x must be a CUDA tensor, got one on ", x.device());
    const DType xt = dtype_of(x, who, "x");
    const int64_t B = x.size(0), H = x.size(1), S = x.size(2), D = x.size(3);
    const at::Tensor freq = device_inv_freq(who, inv_freq, D, x.device());
    CHECK_VALUE((positions.dim() == 1 && positions.size(0) == S) ||
                    (positions.dim() == 2 && positions.size(0) == B && positions.size(1) == S),
                who, ": positions must be [seq] or [batch, seq] = [", B, ", ", S, "], got ", shape_of(positions));
    check_int_tensor(positions, who, "positions");
    check_finite(who, "attention_factor", attn_factor, 0.0);
    at::Tensor out = at::empty({B, S, H, D}, x.options());
    if (x.numel() == 0) return out.transpose(1, 2);
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor pos = device_ints(positions, x.device()).expand({B, S}).contiguous();
    const at::Tensor rows = bshd(x, true);
    olmo::ext::RopeArgs a{};
    a.cache_type = a.qkv_type = xt;
    a.qkv = rows.data_ptr();
    a.q_out = out.data_ptr();
    a.rows = checked_int(B * S, who, "batch x seq");
    a.pos = a.cache_row = pos.data_ptr<int>();
    a.n_heads = checked_int(H, who, "heads");
    a.n_kv_heads = 0;
    a.head_dim = (int)D;
    a.inv_freq = freq.data_ptr<float>();
    a.attn_factor = (float)attn_factor;
    olmo::ext::rope_qkv(a, current_stream());
    return out.transpose(1, 2);
}

void check_in_range(const char* who, const char* what, const at::Tensor& t, int64_t hi) {
    if (t.numel() == 0) return;
    const auto mm = at::aminmax(t);
    const int64_t lo = std::get<0>(mm).item<int64_t>(), top = std::get<1>(mm).item<int64_t>();
    CHECK_VALUE(lo >= 0 && top < hi, who, ": ", what, " must lie in [0, ", hi, "), got values in [", lo, ", ",
                top, "]");
}

// The engine's op as it is: qkv [T, (nH + 2 nKV) * hd] -> q [T, nH, hd] rotated, rotated keys
// and the values written to pool row slots[t] of k_pool / v_pool [N, bs, nKV, hd].
at::Tensor rope_qkv(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& k_pool,
                    const at::Tensor& v_pool, const at::Tensor& slots, const at::Tensor& inv_freq, double attn_factor,
                    bool check_slots) {
    const char* who = "rope_qkv";
    CHECK_TYPE(qkv.is_cuda(), who, ": qkv must be a CUDA tensor, got one on ", qkv.device());
    const DType xt = dtype_of(qkv, who, "qkv"), ct = dtype_of(k_pool, who, "k_pool");
    check_cuda(k_pool, qkv, who, "k_pool");
    check_cuda(v_pool, qkv, who, "v_pool");
    CHECK_TYPE(v_pool.scalar_type() == k_pool.scalar_type(), who, ": v_pool is ", v_pool.scalar_type(),
               ", k_pool ", k_pool.scalar_type());
    CHECK_TYPE(xt == DType::F32 || xt == ct, who, ": qkv must be float32 or the pools' dtype ",
               k_pool.scalar_type(), ", got ", qkv.scalar_type());
    CHECK_VALUE(k_pool.dim() == 4 && k_pool.sizes() == v_pool.sizes() && k_pool.is_contiguous() &&
                    v_pool.is_contiguous(),
                who, ": k_pool and v_pool must be contiguous 4-D [num_blocks, block_size, kv_heads, head_dim] "
                "of one shape, got ", shape_of(k_pool), " and ", shape_of(v_pool));
    const int64_t nKV = k_pool.size(2), hd = k_pool.size(3), pool_rows = k_pool.size(0) * k_pool.size(1);
    CHECK_VALUE(qkv.dim() == 2 && nKV > 0 && hd > 0 && qkv.size(1) % hd == 0 && qkv.size(1) / hd > 2 * nKV, who,
                ": qkv must be [tokens, (n_heads + 2 * ", nKV, ") * ", hd, "] with n_heads > 0, got ",
                shape_of(qkv));
    const int64_t T = qkv.size(0), nH = qkv.size(1) / hd - 2 * nKV;
    CHECK_VALUE(positions.dim() == 1 && positions.size(0) == T && slots.dim() == 1 && slots.size(0) == T, who,
                ": positions and slots must be [tokens] = [", T, "], got ", shape_of(positions), " and ",
                shape_of(slots));
    check_int_tensor(positions, who, "positions");
    check_int_tensor(slots, who, "slots");
    check_finite(who, "attention_factor", attn_factor, 0.0);
    CHECK_VALUE(pool_rows <= INT_MAX, who, ": the pools' ", pool_rows, " rows exceed 2^31 - 1");
    const at::Tensor freq = device_inv_freq(who, inv_freq, hd, qkv.device());
    at::Tensor q = at::empty({T, nH, hd}, k_pool.options());
    if (T == 0) return q;
    const c10::cuda::CUDAGuard guard(qkv.device());
    if (check_slots) check_in_range(who, "slots", slots, pool_rows);  // before int32 could wrap them
    const at::Tensor pos = device_ints(positions, qkv.device());
    const at::Tensor rows = device_ints(slots, qkv.device());
    const at::Tensor x = qkv.contiguous();
    olmo::ext::RopeArgs a{};
    a.cache_type = ct;
    a.qkv_type = xt;
    a.qkv = x.data_ptr();
    a.q_out = q.data_ptr();
    a.k_cache = k_pool.data_ptr();
    a.v_cache = v_pool.data_ptr();
    a.rows = checked_int(T, who, "tokens");
    a.pos = pos.data_ptr<int>();
    a.cache_row = rows.data_ptr<int>();
    a.n_heads = checked_int(nH, who, "n_heads");
    a.n_kv_heads = checked_int(nKV, who, "kv_heads");
    a.head_dim = checked_int(hd, who, "head_dim");
    a.inv_freq = freq.data_ptr<float>();
    a.attn_factor = (float)attn_factor;
    olmo::ext::rope_qkv(a, current_stream());
    return q;
}

// ---- the engine's config code (src/config.cpp) ----

at::Tensor to_tensor(const std::vector<float>& v) {
    return at::from_blob(const_cast<float*>(v.data()), {(int64_t)v.size()}, at::kFloat).clone();
}

at::Tensor rope_inv_freq(int64_t head_dim, double theta, bool yarn, double factor, int64_t original_max_pos,
                         double beta_fast, double beta_slow) {
    const char* who = "rope_inv_freq";
    CHECK_VALUE(head_dim > 0 && head_dim % 2 == 0 && head_dim <= 4096, who,
                ": head_dim must be even, positive and at most 4096, got ", head_dim);
    CHECK_VALUE(std::isfinite(theta) && theta > 1, who, ": theta must be finite and > 1, got ", theta);
    if (yarn) {
        CHECK_VALUE(original_max_pos > 0, who, ": YaRN needs original_max_position_embeddings > 0");
        for (const auto& [name, x] : {std::pair<const char*, double>{"factor", factor}, {"beta_fast", beta_fast},
                                      {"beta_slow", beta_slow}})
            CHECK_VALUE(std::isfinite(x) && x > 0, who, ": YaRN's ", name, " must be finite and > 0, got ", x);
    }
    olmo::RopeConfig r;
    r.theta = (float)theta;
    r.yarn = yarn;
    r.factor = (float)factor;
    r.original_max_pos = checked_int(original_max_pos, who, "original_max_position_embeddings");
    r.beta_fast = (float)beta_fast;
    r.beta_slow = (float)beta_slow;
    const std::vector<float> f = r.inv_freq((int)head_dim);
    for (float x : f)
        CHECK_VALUE(std::isfinite(x) && x > 0, who, ": these parameters give non-finite or zero frequencies");
    return to_tensor(f);
}

// config.json (and generation_config.json) of a checkpoint folder, as the engine reads it.
pybind11::dict load_config(const std::string& dir) {
    const olmo::ModelConfig c = olmo::load_config(dir);
    pybind11::dict d;
    d["model_type"] = c.model_type;
    d["hidden_size"] = c.hidden;
    d["intermediate_size"] = c.intermediate;
    d["num_hidden_layers"] = c.n_layers;
    d["num_attention_heads"] = c.n_heads;
    d["num_key_value_heads"] = c.n_kv_heads;
    d["head_dim"] = c.head_dim;
    d["vocab_size"] = c.vocab;
    d["max_position_embeddings"] = c.max_pos;
    d["norm_eps"] = c.norm_eps;
    d["clip_qkv"] = c.clip_qkv;
    d["tie_word_embeddings"] = c.tie_embeddings;
    d["eos_token_ids"] = c.eos_ids;
    pybind11::list layers;
    for (int l = 0; l < c.n_layers; l++) {
        pybind11::dict layer;
        layer["window"] = c.window(l);
        layer["inv_freq"] = to_tensor(c.rope(l).inv_freq(c.head_dim));
        layer["attention_factor"] = c.rope(l).attention_factor;
        layers.append(layer);
    }
    d["layers"] = layers;
    return d;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "olmo.cu's CUDA kernels (kernels/*.cuh); use the wrappers in olmo_kernels, which document them";
    pybind11::register_local_exception_translator(&translate_errors);
    m.def("flash_attention", &flash_attention);
    m.def("decode_attention", &decode_attention);
    m.def("paged_flash_attention", &paged_flash_attention);
    m.def("paged_decode_attention", &paged_decode_attention);
    m.def("rms_norm", &rms_norm);
    m.def("layer_norm", &layer_norm);
    m.def("rope", &rope);
    m.def("rope_qkv", &rope_qkv);
    m.def("rope_inv_freq", &rope_inv_freq);
    m.def("load_config", &load_config);
}
