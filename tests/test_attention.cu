// test_attention.cu: the attention kernels (kernels/attention.cuh) against olmo::cpu::attention.
//
// Every case reads K/V through a random block table: each sequence's blocks are drawn from a
// shuffled pool half again larger than needed, so they are scattered and out of order. Pool
// rows that hold no live position are NaN: unused blocks, the tail of a sequence's last block,
// and the blocks a sliding window released (never allocated; the table marks them -1). So are
// guard rows before and after the pool (where a -1 entry used as a block number would land),
// and table entries past a sequence's last block point at unused (NaN) blocks. The output is
// NaN-poisoned before each run. Each case draws fresh normal inputs rounded to the storage
// type (the CPU reference gets the same rounded values) and checks every output element:
// finite, rel-L2 and max-abs under the type's tolerance.
// Prefill cases (one sequence): n_q = 1, odd n_q, n_q not a tile multiple, GQA 1/2/4/5/8,
// hd 64/128, windows shorter than n_q, chunks appended at pos0 > 0, block sizes 8 .. 128.
// Decode cases: single long sequences (3000+ keys) and batches of mixed lengths (1, 17, 300 and
// 2049 keys; 37 and 40 random lengths), n_q 1-3, GQA 1/2/4/5/8, hd 64/128, windows; more than
// 16 query rows per KV head (GQA 20, MQA with 32 heads, 3 tokens x 8 heads). For each
// dtype (float, __half, __nv_bfloat16). Cross-checks: decode == prefill run per sequence,
// naive == flash prefill; a CUDA graph of a batched decode replayed with new positions and
// new tables.
// Every other head size the kernels take is represented by 8, 16, 32 (tile width 64), 80, 96
// (128), 192 and 256 (256): a subset of the cases above at each (prefill: n_q 1, odd n_q, a chunk
// at pos0 > 0, GQA 2/5/8, windows; decode: single and batched, GQA 1-8, windows, n_q 2), through
// naive and flash prefill and through decode.
// An FP8 KV cache (E4M3 codes and a scale per row and KV head, fp8.h; fp16 and bf16): every
// decode case through decode and prefill, the prefill cases through prefill, and every head size,
// against the CPU over the values the cache gives back; and values over many decades with
// queries far from 1 (past fp16's range in bf16), checked row by row.
// Portable mode (src/device_caps.h): the tiles that GPUs with less shared memory per block get
// (sm_80's 163 KB: HD 256 on key tiles of 32 and 2 decode stages; sm_86/sm_89's 99 KB: HD 128
// decode in 2 stages, head sizes over 128 refused), without programmatic dependent launch, on
// the every-head-size cases and (99 KB) the prefill, decode and graph cases. A head size whose
// tiles do not fit the GPU is left out of the every-head-size cases with a note (so the whole
// suite runs with OLMO_PORTABLE=1 set).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "attention.cuh"
#include "cpu_ops.h"
#include "device_caps.h"
#include "fp8.h"

using namespace olmo;

namespace {

bool gpu_available() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define SKIP_WITHOUT_GPU() \
    if (!gpu_available()) GTEST_SKIP() << "no CUDA GPU present: attention kernel tests skipped"

struct Case {
    std::vector<int> pos0;  // per sequence: position of its first query (batch = its size)
    int n_q, nH, nKV, hd, window, s_cap, block_size;
    // The pool's blocks dealt in order (block j of the first sequence is pool block j, as for a
    // fresh cache) but for one pair swapped mid-sequence, instead of shuffled.
    bool in_order = false;
    std::string str() const {
        std::string p;
        for (size_t b = 0; b < pos0.size() && b < 4; b++) p += (b ? "," : "") + std::to_string(pos0[b]);
        if (pos0.size() > 4) p += ",... (" + std::to_string(pos0.size()) + ")";
        char s[160];
        snprintf(s, sizeof s, "pos0=%s n_q=%d nH=%d nKV=%d hd=%d win=%d s_cap=%d bs=%d%s", p.c_str(), n_q, nH, nKV, hd,
                 window, s_cap, block_size, in_order ? " in order" : "");
        return s;
    }
};

// Prefill-like cases (one sequence; also run through the naive kernels).
const std::vector<Case> kPrefillCases = {
    // pos0  n_q nH nKV  hd  win s_cap  bs
    {{0}, 1, 4, 4, 64, 0, 16, 16},             // one token, empty cache before it
    {{0}, 77, 8, 8, 64, 0, 96, 8},             // odd n_q, MHA
    {{0}, 200, 8, 2, 128, 0, 256, 16},         // GQA 4, n_q not a multiple of the tile
    {{37}, 130, 8, 4, 128, 0, 200, 32},        // GQA 2, chunk appended at pos0 = 37
    {{100}, 150, 16, 2, 64, 50, 300, 16},      // GQA 8, window 50 < n_q: blocks before key 51 released
    {{5}, 61, 10, 2, 128, 33, 70, 8},          // GQA 5 (as 40 q / 8 kv heads), window
    {{300}, 257, 4, 4, 128, 100, 600, 16},     // window over a long offset: leading tiles skipped
    {{0}, 515, 4, 4, 128, 0, 515, 128},        // many full tiles, s_cap == n_q, blocks > a tile
    {{3}, 129, 2, 1, 64, 0, 140, 64},          // GQA 2 with a single KV head, block == tile
    {{1000}, 300, 16, 2, 128, 256, 1400, 16},  // chunk at pos0 1000, window 256 (OLMo-3-like)
    {{9}, 200, 12, 2, 64, 0, 220, 16},         // GQA 6 over 128 tokens: blocks of 2 heads (prefill_heads)
    {{0}, 50, 256, 1, 64, 0, 64, 16},          // 256 query heads on one KV head: blocks of 128 heads, 1 token
};

// `batch` random lengths in 1 .. max_len (positions of the one query: length - 1).
std::vector<int> random_pos0(int batch, int max_len, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int> p(batch);
    for (int& x : p) x = std::uniform_int_distribution<int>(0, max_len - 1)(rng);
    return p;
}

// Decode-like cases: few query rows per KV head; long caches; batches of mixed lengths.
const std::vector<Case> kDecodeCases = {
    {{2999}, 1, 8, 8, 128, 0, 3000, 16},                 // MHA, 3000 keys
    {{2999}, 1, 8, 4, 64, 0, 3072, 8},                   // GQA 2
    {{2999}, 1, 8, 2, 128, 1000, 4000, 16},              // GQA 4, window: blocks before key 2000 released
    {{2999}, 1, 8, 1, 128, 0, 3000, 128},                // GQA 8
    {{2999}, 1, 10, 2, 64, 0, 3100, 32},                 // GQA 5
    {{0}, 1, 4, 4, 128, 0, 64, 16},                      // first token
    {{100}, 1, 8, 2, 128, 0, 40000, 16},                 // short live length in a big cache: idle slots exit
    {{8191}, 1, 32, 32, 128, 0, 8192, 16},               // 32 KV heads: 8 slots per head, 8 of 264 idle
    {{500}, 2, 16, 2, 128, 0, 600, 16},                  // n_q 2 x group 8 = 16 rows
    {{700}, 3, 4, 1, 64, 300, 800, 8},                   // n_q 3, window
    {{0, 16, 299, 2048}, 1, 8, 8, 128, 0, 2049, 16},     // batch of 1, 17, 300, 2049 keys: MHA
    {{2048, 0, 299, 16}, 1, 8, 4, 64, 0, 2100, 16},      // GQA 2, hd 64
    {{16, 2048, 0, 299}, 1, 16, 4, 128, 0, 2049, 8},     // GQA 4
    {{299, 16, 2048, 0}, 1, 16, 2, 128, 0, 2049, 64},    // GQA 8
    {{0, 16, 299, 2048}, 1, 8, 1, 64, 100, 2049, 16},    // GQA 8, window 100: released blocks
    {{0, 16, 299, 2048}, 2, 8, 2, 128, 64, 2050, 32},    // n_q 2, window 64
    {random_pos0(37, 1500, 1), 1, 8, 2, 64, 0, 1500, 16},      // 37 sequences: the slot plan spans 2 warps' worth
    {random_pos0(300, 200, 3), 1, 8, 8, 64, 0, 200, 16},       // 300 short sequences: 600 slots, 10 warps' worth
    {random_pos0(40, 3000, 2), 1, 40, 8, 128, 256, 3000, 16},  // 40 sequences, OLMo-3-like 40/8 heads, window
    // More than 16 rows per KV head: row blocks of 16, each reading the keys
    {{2999}, 1, 32, 1, 128, 0, 3000, 16},                // MQA: 32 heads on one KV head, 2 row blocks
    {{0, 16, 299, 2048}, 1, 40, 2, 64, 100, 2049, 16},   // GQA 20: blocks of 16 and 4 rows, batch, window
    {{700}, 3, 8, 1, 128, 0, 800, 8},                    // n_q 3 x group 8 = 24 rows: a row block splits a token
};

// Head sizes besides 64 and 128 (which the lists above use), and their representative cases
// (hd 0 there: check_head_sizes fills it in).
const int kHeadSizes[] = {8, 16, 32, 80, 96, 192, 256};
const std::vector<Case> kPrefillCasesAnyHd = {
    // pos0  n_q nH nKV hd win s_cap bs
    {{0}, 1, 4, 4, 0, 0, 16, 16},          // one token
    {{37}, 130, 8, 4, 0, 0, 200, 32},      // GQA 2, chunk appended at pos0 = 37, 3 query blocks
    {{100}, 150, 16, 2, 0, 50, 300, 16},   // GQA 8, window 50 < n_q
    {{5}, 61, 10, 2, 0, 33, 70, 8},        // GQA 5, odd n_q, window
    {{3}, 129, 2, 1, 0, 0, 140, 64},       // GQA 2 with a single KV head
};
const std::vector<Case> kDecodeCasesAnyHd = {
    {{0}, 1, 4, 4, 0, 0, 64, 16},                          // first token, MHA
    {{2999}, 1, 8, 2, 0, 1000, 4000, 16},                  // GQA 4, 3000 keys, window
    {{500}, 2, 16, 2, 0, 0, 600, 16},                      // n_q 2 x group 8 = 16 rows
    {{0, 16, 299, 2048}, 1, 8, 1, 0, 100, 2049, 16},       // batch of mixed lengths, GQA 8, window
    {{2048, 0, 299, 16}, 1, 8, 4, 0, 0, 2100, 8},          // batch, GQA 2
    {random_pos0(37, 1500, 1), 1, 10, 2, 0, 0, 1500, 16},  // 37 sequences, GQA 5
};
template <typename T> struct Tol;
template <> struct Tol<float> { static constexpr double rel = 1e-5, abs = 1e-4; static constexpr const char* name = "f32"; };
template <> struct Tol<__half> { static constexpr double rel = 5e-3, abs = 2e-2; static constexpr const char* name = "f16"; };
template <> struct Tol<__nv_bfloat16> { static constexpr double rel = 1e-2, abs = 5e-2; static constexpr const char* name = "bf16"; };

float to_f(float x) { return x; }
float to_f(__half x) { return __half2float(x); }
float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> T from_f(float x) {
    if constexpr (std::is_same_v<T, float>) return x;
    else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
    else return __float2bfloat16_rn(x);
}
const float kNaN = std::numeric_limits<float>::quiet_NaN();

template <typename T>
struct DeviceBuffer {
    T* ptr = nullptr;
    size_t n = 0;
    explicit DeviceBuffer(size_t count) : n(count) { cudaCheck(cudaMalloc(&ptr, std::max<size_t>(1, n) * sizeof(T))); }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void poison() { cudaCheck(cudaMemset(ptr, 0xFF, n * sizeof(T))); }  // all-ones bits: NaN in every dtype
    void upload(const std::vector<T>& h) {
        ASSERT_LE(h.size(), n);
        cudaCheck(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
};

// Blocks of sequence b: positions 0 .. pos0+n_q-1; those wholly before the first query's
// window are released (as KvCache::commit does before this step).
int blocks_of(const Case& c, int b) { return (c.pos0[b] + c.n_q + c.block_size - 1) / c.block_size; }
bool released(const Case& c, int b, int block) {
    return c.window > 0 && (block + 1) * c.block_size <= c.pos0[b] - c.window + 1;
}
int live_blocks(const Case& c) {
    int n = 0;
    for (size_t b = 0; b < c.pos0.size(); b++)
        for (int j = 0; j < blocks_of(c, b); j++) n += !released(c, b, j);
    return n;
}

// One batched attention problem on the host (rounded to T, as float) and the device.
template <typename T>
struct Problem {
    static constexpr int kGuard = 128;  // NaN rows around the pool (>= any block size)
    Case c;
    int batch, stride, pool_blocks;
    int64_t ld;
    DeviceBuffer<T> dq, dk, dv, dout;  // dk, dv: kGuard rows, the pool, kGuard rows
    DeviceBuffer<int> dpos, dtable;
    std::vector<int> table;      // [batch, stride]
    std::vector<float> q, k, v;  // q [batch*n_q, nH*hd]; k, v the pool [pool_blocks*bs, nKV*hd]

    Problem(const Case& cs, uint32_t seed)
        : c(cs), batch((int)cs.pos0.size()), stride((cs.s_cap + cs.block_size - 1) / cs.block_size + 3),
          pool_blocks(live_blocks(cs) * 3 / 2 + 4), ld((int64_t)cs.nKV * cs.hd),
          dq((size_t)batch * cs.n_q * cs.nH * cs.hd), dk((2 * kGuard + (size_t)pool_blocks * cs.block_size) * ld),
          dv(dk.n), dout(dq.n), dpos(batch), dtable((size_t)batch * stride) {
        deal(cs.pos0, seed);
    }

    // New positions (same batch, fitting the pool), a new random table, new inputs.
    void deal(const std::vector<int>& pos0, uint32_t seed) {
        ASSERT_EQ((int)pos0.size(), batch);
        c.pos0 = pos0;
        ASSERT_LE(live_blocks(c) + 1, pool_blocks);
        std::mt19937 rng(seed);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<int> perm(pool_blocks);
        std::iota(perm.begin(), perm.end(), 0);
        const int bs = c.block_size;
        if (!c.in_order) std::shuffle(perm.begin(), perm.end(), rng);
        else if (blocks_of(c, 0) > 2) std::swap(perm[blocks_of(c, 0) / 2], perm[blocks_of(c, 0) / 2 + 1]);
        int used = 0;
        table.assign((size_t)batch * stride, 0);
        for (int b = 0; b < batch; b++)
            for (int j = 0; j < blocks_of(c, b); j++) table[b * stride + j] = released(c, b, j) ? -1 : perm[used++];
        for (int b = 0; b < batch; b++)  // entries past the last block: unused (NaN) blocks
            for (int j = blocks_of(c, b); j < stride; j++)
                table[b * stride + j] = perm[used + (int)(rng() % (pool_blocks - used))];

        const size_t pool_rows = (size_t)pool_blocks * bs;
        std::vector<T> hk((2 * kGuard + pool_rows) * ld, from_f<T>(kNaN)), hv(hk.size(), from_f<T>(kNaN));
        k.assign(pool_rows * ld, kNaN);
        v.assign(pool_rows * ld, kNaN);
        for (int b = 0; b < batch; b++)
            for (int pos = 0; pos < c.pos0[b] + c.n_q; pos++) {
                const int block = table[b * stride + pos / bs];
                if (block < 0) continue;
                const int64_t row = (int64_t)block * bs + pos % bs;
                for (int64_t i = row * ld; i < (row + 1) * ld; i++) {
                    k[i] = to_f(hk[kGuard * ld + i] = from_f<T>(normal(rng)));
                    v[i] = to_f(hv[kGuard * ld + i] = from_f<T>(normal(rng)));
                }
            }
        std::vector<T> hq(dq.n);
        q.resize(dq.n);
        for (size_t i = 0; i < hq.size(); i++) q[i] = to_f(hq[i] = from_f<T>(normal(rng)));
        dq.upload(hq);
        dk.upload(hk);
        dv.upload(hv);
        dpos.upload(c.pos0);
        dtable.upload(table);
    }

    float scale() const { return 1.0f / std::sqrt((float)c.hd); }
    AttnParams<T> params() const {
        return {dq.ptr,  dk.ptr + kGuard * ld, dv.ptr + kGuard * ld, dout.ptr,     c.n_q,
                dpos.ptr, c.nH, c.nKV, c.hd, c.window, scale(), c.s_cap, dtable.ptr, stride, c.block_size, batch};
    }
    // The CPU result, sequence by sequence through the same table (over the pools kp, vp: k, v
    // unless given).
    std::vector<float> reference() const { return reference(k, v); }
    std::vector<float> reference(const std::vector<float>& kp, const std::vector<float>& vp) const {
        std::vector<float> out(dout.n);
        const size_t per_seq = (size_t)c.n_q * c.nH * c.hd;
        for (int b = 0; b < batch; b++)
            cpu::attention(out.data() + b * per_seq, q.data() + b * per_seq, kp.data(), vp.data(), c.n_q, c.pos0[b], c.nH,
                           c.nKV, c.hd, c.window, scale(), table.data() + (size_t)b * stride, c.block_size);
        return out;
    }
    // Poisons the output, runs `kernel`, returns the output as float.
    template <typename F>
    std::vector<float> run(F kernel) {
        dout.poison();
        kernel(params());
        cudaCheck(cudaDeviceSynchronize());
        return output();
    }
    std::vector<float> output() const {
        std::vector<T> h(dout.n);
        cudaCheck(cudaMemcpy(h.data(), dout.ptr, h.size() * sizeof(T), cudaMemcpyDeviceToHost));
        std::vector<float> f(h.size());
        for (size_t i = 0; i < h.size(); i++) f[i] = to_f(h[i]);
        return f;
    }
};

// Every element finite, rel-L2 and max-abs under the tolerances.
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double rel_tol, double abs_tol,
                  const std::string& what) {
    ASSERT_EQ(got.size(), ref.size());
    double err2 = 0, ref2 = 0, max_abs = 0;
    size_t bad = 0, first_bad = got.size();
    for (size_t i = 0; i < got.size(); i++) {
        if (!std::isfinite(got[i])) {
            if (bad++ == 0) first_bad = i;
            continue;
        }
        const double d = (double)got[i] - ref[i];
        err2 += d * d, ref2 += (double)ref[i] * ref[i];
        max_abs = std::max(max_abs, std::fabs(d));
    }
    const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " non-finite outputs, first at " << first_bad;
    EXPECT_LE(rel, rel_tol) << what << ": rel-L2 " << rel;
    EXPECT_LE(max_abs, abs_tol) << what << ": max-abs " << max_abs;
    printf("  %-90s rel-L2 %.2e  max-abs %.2e\n", what.c_str(), rel, max_abs);
}

template <typename T>
void run_naive(const AttnParams<T>& p) {
    DeviceBuffer<float> ws(attention_naive_workspace_bytes(p.batch, p.n_q, p.nH, p.s_cap) / sizeof(float));
    attention_naive(p, ws.ptr, 0);
    cudaCheck(cudaDeviceSynchronize());
}
template <typename T, typename C = T>
void run_decode(const AttnParams<T, C>& p) {
    DeviceBuffer<char> ws(attention_decode_workspace_bytes(p.nH, p.hd, p.s_cap, p.batch, p.n_q));
    ws.poison();  // the combine must read only what the split kernel wrote
    attention_decode(p, ws.ptr, 0);
    cudaCheck(cudaDeviceSynchronize());
}
// The same with every K/V copy after the split kernel's wait (the path of a prefill chunk's
// last row: AttnParams::prefill_keys).
template <typename T>
void run_decode_prefill_keys(const AttnParams<T>& p) {
    AttnParams<T> q = p;
    q.prefill_keys = true;
    run_decode(q);
}
// Prefill takes one sequence per call: sequence b's rows of q and out, its pos0 and table row.
// An FP8 cache gets the workspace for the Hopper kernel's copy of the keys, poisoned, so that
// the kernel may read only rows the copy wrote.
template <typename T, PrefillKernel K = PrefillKernel::Best, typename C = T>
void run_prefill(const AttnParams<T, C>& p) {
    DeviceBuffer<char> ws(kFp8Cache<C> ? attention_prefill_fp8_workspace_bytes<T>(p.nKV, p.hd, p.s_cap, p.block_size) : 0);
    if (kFp8Cache<C>) ws.poison();
    const int64_t per_seq = (int64_t)p.n_q * p.nH * p.hd;
    for (int b = 0; b < p.batch; b++) {
        AttnParams<T, C> s = p;
        s.q += b * per_seq, s.out += b * per_seq, s.pos0 += b, s.block_table += (int64_t)b * p.table_stride;
        if (s.out16) s.out16 += b * per_seq;
        s.batch = 1;
        attention_prefill(s, 0, K, kFp8Cache<C> ? ws.ptr : nullptr);
    }
}

template <typename T>
class Attention : public ::testing::Test {};
using DTypes = ::testing::Types<float, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(Attention, DTypes);

// A kernel under test, by name.
template <typename T>
struct Named {
    const char* what;
    void (*run)(const AttnParams<T>&);
};

// Runs each kernel on each case (fresh inputs, seeds from seed0; one CPU reference per case)
// and checks it against the CPU.
template <typename T>
void check_cases(const std::vector<Case>& cases, uint32_t seed0, std::initializer_list<Named<T>> kernels) {
    uint32_t seed = seed0;
    for (const Case& c : cases) {
        Problem<T> pr(c, seed++);
        const std::vector<float> ref = pr.reference();
        for (const Named<T>& k : kernels)
            expect_close(pr.run(k.run), ref, Tol<T>::rel, Tol<T>::abs,
                         std::string(k.what) + " " + Tol<T>::name + " " + c.str());
    }
}

TYPED_TEST(Attention, NaiveMatchesCpu) {
    SKIP_WITHOUT_GPU();
    check_cases<TypeParam>(kPrefillCases, 1, {{"naive", run_naive<TypeParam>}});
    check_cases<TypeParam>(kDecodeCases, 50, {{"naive", run_naive<TypeParam>}});
}

TYPED_TEST(Attention, PrefillMatchesCpu) {
    SKIP_WITHOUT_GPU();
    check_cases<TypeParam>(kPrefillCases, 100, {{"prefill", run_prefill<TypeParam>}});
}

TYPED_TEST(Attention, PrefillOnDecodeCasesMatchesCpu) {
    SKIP_WITHOUT_GPU();
    check_cases<TypeParam>(kDecodeCases, 200, {{"prefill", run_prefill<TypeParam>}});
}

TYPED_TEST(Attention, DecodeMatchesCpu) {
    SKIP_WITHOUT_GPU();
    check_cases<TypeParam>(kDecodeCases, 300,
                           {{"decode", run_decode<TypeParam>}, {"decode, prefill keys", run_decode_prefill_keys<TypeParam>}});
}

// check_cases at each head size of kHeadSizes: each runs on the kernels of its tile width with
// the dims past hd padded.
template <typename T>
void check_head_sizes(std::vector<Case> cases, uint32_t seed, std::initializer_list<Named<T>> kernels) {
    for (int hd : kHeadSizes) {
        if (std::string why = attention_device_problem(hd); !std::is_same_v<T, float> && !why.empty()) {
            printf("  hd %d left out: %s\n", hd, why.c_str());
            continue;
        }
        for (Case& c : cases) c.hd = hd;
        check_cases<T>(cases, seed += 10, kernels);
    }
}

TYPED_TEST(Attention, PrefillEveryHeadSizeMatchesCpu) {
    SKIP_WITHOUT_GPU();
    check_head_sizes<TypeParam>(kPrefillCasesAnyHd, 600,
                                {{"naive", run_naive<TypeParam>}, {"prefill", run_prefill<TypeParam>}});
}

TYPED_TEST(Attention, DecodeEveryHeadSizeMatchesCpu) {
    SKIP_WITHOUT_GPU();
    check_head_sizes<TypeParam>(kDecodeCasesAnyHd, 700,
                                {{"decode", run_decode<TypeParam>}, {"prefill", run_prefill<TypeParam>}});
}

// Same inputs through two GPU paths: batched decode == prefill per sequence, naive == flash prefill.
TYPED_TEST(Attention, DecodeEqualsPrefill) {
    SKIP_WITHOUT_GPU();
    uint32_t seed = 400;
    for (const Case& c : kDecodeCases) {
        Problem<TypeParam> pr(c, seed++);
        const std::vector<float> a = pr.run(run_prefill<TypeParam>), b = pr.run(run_decode<TypeParam>);
        expect_close(b, a, Tol<TypeParam>::rel, Tol<TypeParam>::abs,
                     std::string("decode vs prefill ") + Tol<TypeParam>::name + " " + c.str());
    }
}

TYPED_TEST(Attention, NaiveEqualsFlash) {
    SKIP_WITHOUT_GPU();
    uint32_t seed = 500;
    for (const Case& c : kPrefillCases) {
        Problem<TypeParam> pr(c, seed++);
        const std::vector<float> a = pr.run(run_naive<TypeParam>), b = pr.run(run_prefill<TypeParam>);
        expect_close(b, a, Tol<TypeParam>::rel, Tol<TypeParam>::abs,
                     std::string("flash vs naive ") + Tol<TypeParam>::name + " " + c.str());
    }
}

// ---- an FP8 KV cache (C = uint8_t) ----

// A problem's pools in FP8 as the engine's RoPE stores them (fp8.h): each live (row, KV head)
// quantized to codes and a scale in kv_scale_index order. The kernels dequantize every tile as
// it lands, so the CPU reference attends over scale · code, and the tolerances are the 16-bit
// ones: the only rounding left is of scale · code into T. Rows without a live position, and the
// guard rows, hold NaN codes (0x7F) and NaN scales, which no kernel may read.
template <typename T>
struct Fp8Pools {
    static constexpr int kGuard = Problem<T>::kGuard;
    DeviceBuffer<uint8_t> dk, dv;
    DeviceBuffer<float> ks, vs;
    std::vector<float> k, v;   // the values the cache gives back [pool rows, nKV*hd]; NaN where no live position

    explicit Fp8Pools(const Problem<T>& pr)
        : dk(pr.dk.n), dv(pr.dv.n), ks(pr.dk.n / pr.c.hd), vs(ks.n), k(pr.k.size()), v(pr.v.size()) {
        const Case& c = pr.c;
        const int64_t ld = pr.ld, rows = (int64_t)pr.k.size() / ld;
        std::vector<uint8_t> hk(dk.n, 0x7F), hv(dv.n, 0x7F);
        std::vector<float> hks(ks.n, kNaN), hvs(vs.n, kNaN);
        for (int64_t row = 0; row < rows; row++)
            for (int h = 0; h < c.nKV; h++) {
                const int64_t at = row * ld + h * c.hd, s = kGuard * c.nKV + kv_scale_index(row, h, c.nKV, c.block_size);
                if (std::isnan(pr.k[at])) {
                    std::fill_n(k.begin() + at, c.hd, kNaN), std::fill_n(v.begin() + at, c.hd, kNaN);
                    continue;
                }
                quantize_row_fp8(hk.data() + kGuard * ld + at, &hks[s], pr.k.data() + at, c.hd, c.hd);
                quantize_row_fp8(hv.data() + kGuard * ld + at, &hvs[s], pr.v.data() + at, c.hd, c.hd);
                for (int d = 0; d < c.hd; d++) {
                    k[at + d] = hks[s] * e4m3_to_float(hk[kGuard * ld + at + d]);
                    v[at + d] = hvs[s] * e4m3_to_float(hv[kGuard * ld + at + d]);
                }
            }
        dk.upload(hk), dv.upload(hv), ks.upload(hks), vs.upload(hvs);
    }
    AttnParams<T, uint8_t> params(const Problem<T>& pr) const {
        const AttnParams<T> p = pr.params();
        const int64_t guard = kGuard * pr.ld;
        AttnParams<T, uint8_t> f{p.q, dk.ptr + guard, dv.ptr + guard, p.out, p.n_q, p.pos0, p.nH, p.nKV, p.hd, p.window,
                                 p.scale, p.s_cap, p.block_table, p.table_stride, p.block_size, p.batch};
        f.k_scale = ks.ptr + kGuard * pr.c.nKV, f.v_scale = vs.ptr + kGuard * pr.c.nKV;
        return f;
    }
    // Poisons pr's output, runs `kernel` over this cache, returns the output as float.
    std::vector<float> run(Problem<T>& pr, void (*kernel)(const AttnParams<T, uint8_t>&)) const {
        pr.dout.poison();
        kernel(params(pr));
        cudaCheck(cudaDeviceSynchronize());
        return pr.output();
    }
};

// Each case through decode and/or prefill over an FP8 cache, against the CPU over its values.
template <typename T>
void check_fp8_cases(const std::vector<Case>& cases, uint32_t seed, bool decode, bool prefill) {
    for (const Case& c : cases) {
        Problem<T> pr(c, seed++);
        const Fp8Pools<T> f8(pr);
        const std::vector<float> ref = pr.reference(f8.k, f8.v);
        const std::string what = std::string(Tol<T>::name) + " FP8 cache " + c.str();
        if (decode) expect_close(f8.run(pr, run_decode<T, uint8_t>), ref, Tol<T>::rel, Tol<T>::abs, "decode " + what);
        if (prefill) {   // the Hopper kernel over a copy where it runs, and the mma.sync kernel
            expect_close(f8.run(pr, run_prefill<T, PrefillKernel::Best, uint8_t>), ref, Tol<T>::rel, Tol<T>::abs, "prefill " + what);
            if (attention_prefill_hopper_runs(c.hd))
                expect_close(f8.run(pr, run_prefill<T, PrefillKernel::MmaSync, uint8_t>), ref, Tol<T>::rel, Tol<T>::abs,
                             "prefill (mma.sync) " + what);
        }
    }
}

template <typename T>
class AttentionFp8Cache : public ::testing::Test {};
using Dtypes16 = ::testing::Types<__half, __nv_bfloat16>;
TYPED_TEST_SUITE(AttentionFp8Cache, Dtypes16);

TYPED_TEST(AttentionFp8Cache, DecodeAndPrefillMatchCpu) {
    SKIP_WITHOUT_GPU();
    check_fp8_cases<TypeParam>(kDecodeCases, 800, true, true);
    check_fp8_cases<TypeParam>(kPrefillCases, 850, false, true);
}

TYPED_TEST(AttentionFp8Cache, EveryHeadSizeMatchesCpu) {
    SKIP_WITHOUT_GPU();
    uint32_t seed = 900;
    for (int hd : kHeadSizes) {
        if (std::string why = attention_device_problem<uint8_t>(hd); !why.empty()) {
            printf("  hd %d left out: %s\n", hd, why.c_str());
            continue;
        }
        std::vector<Case> decode = kDecodeCasesAnyHd, prefill = kPrefillCasesAnyHd;
        for (Case& c : decode) c.hd = hd;
        for (Case& c : prefill) c.hd = hd;
        check_fp8_cases<TypeParam>(decode, seed += 10, true, true);
        check_fp8_cases<TypeParam>(prefill, seed += 10, false, true);
    }
}

// The worst relative L2 error over the output's (token, head) rows of hd values: a row of tiny
// values is held to the same relative bar as a row of large ones.
double worst_row_error(const std::vector<float>& got, const std::vector<float>& ref, int hd) {
    double worst = 0.0;
    for (size_t r = 0; r + hd <= ref.size(); r += hd) {
        double e2 = 0.0, r2 = 0.0;
        for (int d = 0; d < hd; d++) {
            const double diff = (double)got[r + d] - ref[r + d];
            e2 += std::isfinite(got[r + d]) ? diff * diff : INFINITY;
            r2 += (double)ref[r + d] * ref[r + d];
        }
        worst = std::max(worst, r2 > 0.0 ? std::sqrt(e2 / r2) : std::sqrt(e2));
    }
    return worst;
}

// Ranges a 16-bit cache never meets in one product: queries times q_scale and keys times
// 1/q_scale, each key row a further 10^(-0.25 .. 0.25) (the scores stay as moderate as the other
// cases', where the prefill kernel's rounding of scale · code to T is within the bar); each KV head's values
// times 10^(-D .. D) (heads spread over the range) and each row a further 10^(-D/2 .. D/2).
// bf16 takes D = 4 and queries past fp16's range; fp16 values that a model in fp16 could have
// made (the cache quantizes rows of T) and the prefill's tiles in fp16 hold, D = 1.5. The decode kernel multiplies the codes in fp16 with the scales kept outside
// (attention_decode_fp8.cuh): queries are rescaled by a power of two into fp16's range, and
// the probabilities by the warp's largest value scale, so neither overflows nor sinks into
// fp16's subnormals. Checked row by row against the CPU over the cache's values, through decode
// (the 16-bit bar) and prefill (twice it: each value rounded to T in its tiles, the worst row of
// a spread 10^±2 within a head is at 0.6-1.0e-2 in bf16).
template <typename T>
void check_fp8_ranges(float q_scale, float decades, uint32_t seed) {
    for (Case c : {kDecodeCases[0], kDecodeCases[3], kDecodeCases[12], kDecodeCasesAnyHd[3]}) {
        if (c.hd == 0) c.hd = 256;
        if (!attention_device_problem<uint8_t>(c.hd).empty()) continue;
        Problem<T> pr(c, seed++);
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> spread(-1.0f, 1.0f);
        const int64_t rows = (int64_t)pr.k.size() / pr.ld;
        for (int64_t row = 0; row < rows; row++)
            for (int h = 0; h < c.nKV; h++) {
                const float head = c.nKV > 1 ? -1.0f + 2.0f * h / (c.nKV - 1) : -1.0f;   // -1 .. 1
                const float fk = std::pow(10.0f, 0.25f * spread(rng)) / q_scale;
                const float fv = std::pow(10.0f, decades * (head + 0.5f * spread(rng)));
                for (int d = 0; d < c.hd; d++) pr.k[row * pr.ld + h * c.hd + d] *= fk, pr.v[row * pr.ld + h * c.hd + d] *= fv;
            }
        std::vector<T> hq(pr.q.size());
        for (size_t i = 0; i < hq.size(); i++) pr.q[i] = to_f(hq[i] = from_f<T>(pr.q[i] * q_scale));
        pr.dq.upload(hq);
        const Fp8Pools<T> f8(pr);
        const std::vector<float> ref = pr.reference(f8.k, f8.v);
        const std::string what = std::string(Tol<T>::name) + " q x " + std::to_string(q_scale) + " " + c.str();
        const double dec = worst_row_error(f8.run(pr, run_decode<T, uint8_t>), ref, c.hd);
        const double pre = worst_row_error(f8.run(pr, run_prefill<T, PrefillKernel::Best, uint8_t>), ref, c.hd);
        printf("  FP8 cache, ranges: worst row rel-L2 decode %.2e prefill %.2e (%s)\n", dec, pre, what.c_str());
        EXPECT_LE(dec, Tol<T>::rel) << "decode " << what;
        EXPECT_LE(pre, 2 * Tol<T>::rel) << "prefill " << what;   // its tiles hold scale · code rounded to T
    }
}

TYPED_TEST(AttentionFp8Cache, ExtremeRangesMatchCpuRowByRow) {
    SKIP_WITHOUT_GPU();
    if constexpr (std::is_same_v<TypeParam, __half>) {
        check_fp8_ranges<TypeParam>(1e-2f, 1.5f, 950);
        check_fp8_ranges<TypeParam>(1e2f, 1.5f, 960);
    } else {
        check_fp8_ranges<TypeParam>(1e-6f, 4.0f, 950);
        check_fp8_ranges<TypeParam>(1e6f, 4.0f, 960);
    }
}

// The Hopper prefill kernel reads its tiles with TMA straight into wgmma's operands, so over an
// FP8 cache it reads a copy in T, which needs a workspace: asked for by name without one, it
// refuses. A cache without its scales is refused.
TEST(AttentionFp8CacheArgs, HopperKernelNeedsAWorkspaceForAnFp8Cache) {
    SKIP_WITHOUT_GPU();
    Problem<__nv_bfloat16> pr(kPrefillCases[1], 1);
    const Fp8Pools<__nv_bfloat16> f8(pr);
    EXPECT_THROW(attention_prefill(f8.params(pr), 0, PrefillKernel::Hopper), Error);
    AttnParams<__nv_bfloat16, uint8_t> no_scales = f8.params(pr);
    no_scales.v_scale = nullptr;
    EXPECT_THROW(attention_decode(no_scales, nullptr, 0), Error);
}

// The Hopper prefill kernel (attention_prefill_hopper.cuh), where it runs, on the shapes that
// stress its TMA pages and wgmma tiles, next to the mma.sync kernel on the same inputs: S = 1,
// 63, 65, 127, 1000, 4097; chunks at an offset; windows shorter than a tile; GQA 1/2/4/5/8;
// head sizes 64, 128, 256; blocks of 8 to 256 tokens (pages smaller and larger than a tile);
// tables in order, where whole tiles come in one copy, with one pair of pages out of order.
const std::vector<Case> kHopperCases = {
    // pos0  n_q nH nKV  hd  win s_cap  bs
    {{0}, 1, 4, 4, 128, 0, 16, 16},             // S = 1
    {{0}, 63, 8, 8, 64, 0, 64, 16},             // S = 63, MHA, hd 64
    {{0}, 65, 8, 2, 128, 0, 80, 8},             // S = 65, GQA 4, pages of 8
    {{0}, 127, 10, 2, 256, 0, 128, 16},         // S = 127, GQA 5, hd 256
    {{0}, 1000, 8, 1, 128, 0, 1000, 32},        // S = 1000, GQA 8
    {{0}, 4097, 2, 1, 128, 0, 4097, 16},        // S = 4097, GQA 2
    {{500}, 300, 8, 4, 64, 0, 900, 16},         // chunk at pos0 500, GQA 2, hd 64
    {{200}, 257, 8, 8, 128, 40, 600, 16},       // window 40, shorter than a tile
    {{1000}, 300, 16, 2, 256, 100, 1400, 256},  // hd 256, GQA 8, window, pages larger than a tile
    {{37}, 130, 10, 2, 64, 0, 200, 128},        // GQA 5 at an offset, page = tile
    {{0}, 1100, 8, 4, 128, 0, 1100, 16, true},  // pages in order (whole tiles in one copy), one pair swapped
    {{60}, 700, 4, 4, 64, 0, 800, 8, true},     // the same at an offset, hd 64, pages of 8
    {{0}, 600, 10, 2, 256, 0, 600, 16, true},   // hd 256 (tiles of 64 keys), GQA 5
    {{100}, 900, 8, 8, 128, 300, 1000, 16, true},  // a window: the released pages are copied apart
    {{0}, 700, 10, 2, 128, 0, 700, 16, true},   // GQA 5 over 128 tokens: blocks of one head (prefill_heads)
    {{40}, 300, 12, 2, 128, 90, 400, 16},       // GQA 6: blocks of 2 heads, 3 per KV head; window
    {{0}, 333, 6, 2, 64, 0, 333, 32},           // GQA 3, hd 64
    {{5}, 260, 7, 1, 128, 0, 300, 16},          // GQA 7 with a single KV head
    {{3}, 40, 192, 1, 64, 0, 64, 16},           // 192 query heads on one KV head: blocks of 64 heads, 2 tokens
};

// How many heads of a KV head share a prefill block's 128 rows: all of them for a chunk of
// fewer than 128 tokens when they fit; otherwise the most that divide 128 (and the group), so
// that no row is empty.
TEST(AttentionArgs, PrefillHeadsFillTheRows) {
    for (int g : {1, 2, 4, 8}) EXPECT_EQ(attn::prefill_heads(g, 4096, 128), g);
    EXPECT_EQ(attn::prefill_heads(5, 4096, 128), 1);
    EXPECT_EQ(attn::prefill_heads(6, 128, 128), 2);
    EXPECT_EQ(attn::prefill_heads(12, 300, 128), 4);
    EXPECT_EQ(attn::prefill_heads(5, 127, 128), 5);
    EXPECT_EQ(attn::prefill_heads(256, 50, 128), 128);  // more heads than rows: at most 128 at a time
    EXPECT_EQ(attn::prefill_heads(192, 50, 128), 64);
    for (int g = 1; g <= 300; g++) {  // long chunks, or more heads than rows: the group splits into whole sets
        const int h = attn::prefill_heads(g, g <= 128 ? 1000 : 50, 128);
        EXPECT_EQ(128 % h, 0);
        EXPECT_EQ(g % h, 0);
    }
}

template <typename T>
class AttentionHopper : public ::testing::Test {};
using HalfTypes = ::testing::Types<__half, __nv_bfloat16>;   // the 16-bit storage types
TYPED_TEST_SUITE(AttentionHopper, HalfTypes);

TYPED_TEST(AttentionHopper, MatchesCpuAndMmaSync) {
    SKIP_WITHOUT_GPU();
    if (!attention_prefill_hopper_runs(128)) GTEST_SKIP() << "no sm_90a code for this GPU: Hopper prefill tests skipped";
    using T = TypeParam;
    check_cases<T>(kHopperCases, 1500,
                   {{"prefill mma.sync", run_prefill<T, PrefillKernel::MmaSync>},
                    {"prefill hopper", run_prefill<T, PrefillKernel::Hopper>}});
    uint32_t seed = 1600;
    for (const Case& c : kHopperCases) {
        Problem<T> pr(c, seed++);
        const std::vector<float> a = pr.run(run_prefill<T, PrefillKernel::MmaSync>), b = pr.run(run_prefill<T, PrefillKernel::Hopper>);
        expect_close(b, a, Tol<T>::rel, Tol<T>::abs, std::string("hopper vs mma.sync ") + Tol<T>::name + " " + c.str());
    }
}

// The FP8 engine has the attention write its output in fp16 (AttnParams::out16) from bf16
// queries and cache, for its o product: decode, and prefill on each kernel, against the CPU
// and against the same kernel's bf16 output; out itself is left alone.
TEST(AttentionFp16Out, FromBf16QueriesMatchesCpu) {
    SKIP_WITHOUT_GPU();
    using T = __nv_bfloat16;
    std::vector<std::pair<std::string, void (*)(const AttnParams<T>&)>> kernels = {
        {"decode", run_decode<T>}, {"prefill mma.sync", run_prefill<T, PrefillKernel::MmaSync>}};
    if (attention_prefill_hopper_runs(128)) kernels.push_back({"prefill hopper", run_prefill<T, PrefillKernel::Hopper>});
    uint32_t seed = 1700;
    for (const std::vector<Case>* cases : {&kDecodeCases, &kPrefillCases})
        for (const Case& c : *cases) {
            Problem<T> pr(c, seed++);
            const std::vector<float> ref = pr.reference();
            DeviceBuffer<__half> out16(pr.dout.n);
            for (const auto& [what, run] : kernels) {
                if (what != "decode" && cases == &kDecodeCases) continue;   // prefill: kPrefillCases
                if (what == "decode" && cases == &kPrefillCases) continue;
                const std::vector<float> bf16_out = pr.run(run);
                pr.dout.poison(), out16.poison();
                AttnParams<T> p = pr.params();
                p.out16 = out16.ptr;
                run(p);
                cudaCheck(cudaDeviceSynchronize());
                std::vector<__half> h(out16.n);
                cudaCheck(cudaMemcpy(h.data(), out16.ptr, h.size() * sizeof(__half), cudaMemcpyDeviceToHost));
                std::vector<float> got(h.size());
                for (size_t i = 0; i < h.size(); i++) got[i] = __half2float(h[i]);
                const std::string name = what + " fp16 out " + c.str();
                expect_close(got, ref, Tol<T>::rel, Tol<T>::abs, name + " vs CPU");   // P is bf16 inside
                expect_close(got, bf16_out, 3e-3, 2e-2, name + " vs bf16 out");   // the same sums, rounded apart
                const std::vector<float> untouched = pr.output();
                EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](float x) { return std::isnan(x); }))
                    << name << ": out was written";
            }
        }
}

// Asked for by name where it cannot run, the Hopper kernel is refused in one line.
TEST(AttentionArgs, HopperRefusedWhereItCannotRun) {
    SKIP_WITHOUT_GPU();
    Problem<__nv_bfloat16> pr({{0}, 1, 4, 4, 96, 0, 16, 16}, 8);
    EXPECT_THROW(attention_prefill(pr.params(), 0, PrefillKernel::Hopper), Error);
    PortableScope portable(Portable::Sm86);
    Problem<__nv_bfloat16> pr128({{0}, 1, 4, 4, 128, 0, 16, 16}, 9);
    EXPECT_THROW(attention_prefill(pr128.params(), 0, PrefillKernel::Hopper), Error);
}

// A batched decode captured once in a CUDA graph (as the engine does, possibly the first call:
// one-time setup inside), replayed after new positions, a new table and new K/V were written
// to the same buffers: the launch shape must not depend on them.
void expect_graph_replays() {
    using T = __nv_bfloat16;
    const Case cases[] = {
        {{1999, 1500, 1000, 2047}, 1, 8, 2, 128, 0, 2048, 16},   // pos0 sets the pool's capacity
        {{1999, 1500, 1000, 2047}, 1, 40, 8, 128, 256, 2048, 16},  // window: -1 entries move too
    };
    const std::vector<int> replays[] = {{5, 700, 1999, 64}, {2047, 0, 1, 300}, {100, 100, 100, 100}, {1999, 1500, 1000, 2047}};
    uint32_t seed = 11;
    for (const Case& c : cases) {
        Problem<T> pr(c, seed++);
        DeviceBuffer<char> ws(attention_decode_workspace_bytes(c.nH, c.hd, c.s_cap, pr.batch));
        cudaStream_t stream;
        cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        attention_decode(pr.params(), ws.ptr, stream);
        cudaCheck(cudaStreamEndCapture(stream, &graph));
        cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
        for (const std::vector<int>& pos0 : replays) {
            pr.deal(pos0, seed++);
            pr.dout.poison();
            cudaCheck(cudaGraphLaunch(exec, stream));
            cudaCheck(cudaStreamSynchronize(stream));
            Case now = c;
            now.pos0 = pos0;
            expect_close(pr.output(), pr.reference(), Tol<T>::rel, Tol<T>::abs, "graph replay decode bf16 " + now.str());
        }
        cudaCheck(cudaGraphExecDestroy(exec));
        cudaCheck(cudaGraphDestroy(graph));
        cudaCheck(cudaStreamDestroy(stream));
    }
}

TEST(AttentionGraph, BatchedDecodeReplaysWithNewPositionsAndTables) {
    SKIP_WITHOUT_GPU();
    expect_graph_replays();
}

template <typename T>
class AttentionPortable : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionPortable, HalfTypes);

TYPED_TEST(AttentionPortable, MatchesCpu) {
    SKIP_WITHOUT_GPU();
    using T = TypeParam;
    for (Portable mode : {Portable::Sm80, Portable::Sm86}) {
        PortableScope portable(mode);
        printf("portable mode: %d KiB of shared memory per block\n", device_caps().smem_per_block / 1024);
        check_head_sizes<T>(kPrefillCasesAnyHd, 1300, {{"prefill", run_prefill<T>}});
        check_head_sizes<T>(kDecodeCasesAnyHd, 1400, {{"decode", run_decode<T>}, {"prefill", run_prefill<T>}});
        if (mode == Portable::Sm80) continue;  // at hd 64 and 128 its tiles are those of sm_90
        check_cases<T>(kPrefillCases, 1100, {{"prefill", run_prefill<T>}});
        check_cases<T>(kDecodeCases, 1200, {{"decode", run_decode<T>}});
        if constexpr (std::is_same_v<T, __nv_bfloat16>) expect_graph_replays();
    }
}

// The head sizes whose tiles fit: all of them where a block may have 163 KB or more (sm_80,
// sm_90), up to 128 with 99 KB (sm_86, sm_89); the others are refused in one line.
TEST(AttentionArgs, HeadSizesByGpu) {
    SKIP_WITHOUT_GPU();
    const int native = [] { PortableScope off(Portable::Off); return device_caps().smem_per_block; }();
    for (Portable mode : {Portable::Off, Portable::Sm80, Portable::Sm86}) {
        PortableScope portable(mode);
        const int smem = std::min(native, mode == Portable::Off ? native : kSmemBytes[(int)mode]);
        for (int hd = 8; hd <= 256; hd += 8) {
            const std::string why = attention_device_problem(hd);
            if (hd <= 128 || smem >= kSmemBytes[(int)Portable::Sm80]) {
                EXPECT_EQ(why, "") << hd;
            } else {
                EXPECT_NE(why.find("head_dim " + std::to_string(hd) + " needs 137.5 KiB of shared memory per block"),
                          std::string::npos) << why;
                Problem<__nv_bfloat16> pr({{0}, 1, 4, 4, hd, 0, 16, 16}, 7);
                EXPECT_THROW(attention_prefill(pr.params(), 0), Error) << hd;
            }
        }
    }
}

TEST(AttentionArgs, SupportedHeadSizes) {
    for (int hd = -8; hd <= 520; hd++)
        EXPECT_EQ(attention_supports_head_dim(hd), hd >= 8 && hd <= 256 && hd % 8 == 0) << hd;
    EXPECT_EQ(attention_supported_head_dims(), "multiples of 8 up to 256");
}

TEST(AttentionArgs, RejectsBadShapes) {
    SKIP_WITHOUT_GPU();
    Problem<__nv_bfloat16> pr({{0, 4}, 4, 8, 8, 128, 0, 16, 8}, 7);
    using P = AttnParams<__nv_bfloat16>;
    auto bad = [&](void (*edit)(P&)) {
        P p = pr.params();
        edit(p);
        return p;
    };
    P one = pr.params();
    one.batch = 1;
    EXPECT_NO_THROW(attention_prefill(one, 0));
    EXPECT_THROW(attention_prefill(pr.params(), 0), Error);  // prefill takes one sequence
    for (int hd : {0, 4, 12, 18, 264, 512}) {  // the message names the sizes that work
        P p = pr.params();
        p.batch = 1, p.hd = hd;
        for (int decode = 0; decode < 2; decode++) {
            try {
                if (decode) attention_decode(p, nullptr, 0);
                else attention_prefill(p, 0);
                ADD_FAILURE() << "head_dim " << hd << " accepted";
            } catch (const Error& e) {
                EXPECT_NE(std::string(e.what()).find(attention_supported_head_dims()), std::string::npos) << e.what();
            }
        }
    }
    EXPECT_THROW(attention_prefill(bad([](P& p) { p.batch = 1, p.nKV = 3; }), 0), Error);
    EXPECT_THROW(attention_prefill(bad([](P& p) { p.batch = 1, p.block_size = 24; }), 0), Error);
    EXPECT_THROW(attention_prefill(bad([](P& p) { p.batch = 1, p.block_size = 4; }), 0), Error);
    EXPECT_THROW(attention_prefill(bad([](P& p) { p.batch = 1, p.block_table = nullptr; }), 0), Error);
    EXPECT_THROW(attention_prefill(bad([](P& p) { p.batch = 1, p.table_stride = 1; }), 0), Error);  // 8 < s_cap 16
    EXPECT_THROW(attention_decode(bad([](P& p) { p.batch = 0; }), nullptr, 0), Error);
    EXPECT_THROW(attention_decode(bad([](P& p) { p.nKV = 3; }), nullptr, 0), Error);
}

}  // namespace
