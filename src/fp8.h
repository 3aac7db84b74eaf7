// fp8.h: the E4M3 number format and per-row quantization, in plain C++ (the CPU reference of
// kernels/fp8.cuh, which must agree with it bit for bit).
//
// E4M3 (OCP FP8, "e4m3fn"): 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits, no infinity.
//   exponent field e = 1..15: (1 + m/8) * 2^(e-7)   largest finite 1.75 * 2^8 = 448 (0x7E)
//   exponent field e = 0:     (m/8) * 2^-6           smallest 2^-9
//   0x7F / 0xFF: NaN
// Conversion from float rounds to nearest even and saturates: anything beyond ±448 becomes ±448
// (the GPU's cvt.rn.satfinite).
//
// A row w[0..K) is stored as scale * q[k], q in E4M3:
//   amax = max |w[k]|,  scale = amax / 448,  q[k] = E4M3(w[k] * (448 / amax))
// so the row's largest element lands on 448 and each element keeps 3 significant bits (relative
// error at most 2^-4 for normal values). A row with amax below kFp8TinyRow is stored as zeros
// with scale 0 (448 / amax would overflow).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

// Functions both the CPU and the kernels call.
#ifdef __CUDACC__
#define OLMO_HOST_DEVICE __host__ __device__
#else
#define OLMO_HOST_DEVICE
#endif

namespace olmo {

constexpr float kFp8Max = 448.0f;

// The FP8 checkpoints that load (src/fp8_checkpoint.h), as the errors about the others say it.
constexpr const char* kFp8CheckpointLayouts =
    "FP8 loads as F8_E4M3 weights with a weight_scale per output channel ([N, 1] or [N]) or per tensor ([] or "
    "[1]), as compressed-tensors and fbgemm_fp8 store them";
constexpr float kFp8TinyRow = 1e-30f;

inline uint8_t e4m3_from_float(float f) {
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    if (std::isnan(f)) return sign | 0x7F;
    const float a = std::fabs(f);
    if (a >= kFp8Max) return sign | 0x7E;                                 // saturate
    if (a < 0x1p-6f) return sign | (uint8_t)std::nearbyint(a * 0x1p9f);  // subnormal; 8 -> 2^-6 (0x08)
    int e;
    const float mant = std::frexp(a, &e) * 2.0f - 1.0f;                   // a = (1 + mant) * 2^(e-1)
    int q = (int)std::nearbyint(mant * 8.0f), ex = e - 1 + 7;
    if (q == 8) q = 0, ex++;
    const int bits = std::min(ex << 3 | q, 0x7E);
    return sign | (uint8_t)bits;
}

inline float e4m3_to_float(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7) v = NAN;
    else if (e == 0) v = m * 0x1p-9f;
    else v = (1.0f + m / 8.0f) * std::ldexp(1.0f, e - 7);
    return (b & 0x80) ? -v : v;
}

// The scales an FP8 GEMM leaves to whoever reads its output (src/fp8_gemm.h): element (r, c)
// of y is worth y[r, c] * row[r] * col[c] (the token's and the output channel's scale). The
// kernels that read a GEMM output (norms, SwiGLU, RoPE: kernels/elementwise.cuh ScaledRow)
// apply them as they load, which saves a pass over y. PendingScale{}: y is final.
struct PendingScale {
    const float* row = nullptr;   // device [rows]
    const float* col = nullptr;   // device [cols]
};

// A weight matrix W [N, K] on the device in FP8 (kernels/fp8.cuh): W[n, k] ≈ scale[n] * q[n, k],
// rows padded with zeros to N16 = N rounded up to 16, columns to ld = K rounded up to kFp8Cols
// (the small-batch product's chunk of columns; every K of a real model is a multiple of it).
struct Fp8Matrix {
    uint8_t* q = nullptr;     // [N16, ld]  E4M3
    float* scale = nullptr;   // [N16]
    int N = 0, K = 0, ld = 0;
};
constexpr int kFp8Cols = 128;
inline int fp8_padded_cols(int K) { return (K + kFp8Cols - 1) / kFp8Cols * kFp8Cols; }
inline int fp8_padded_rows(int N) { return (N + 15) / 16 * 16; }

// The inverse scale a row is multiplied by before rounding (0 for a negligible row).
OLMO_HOST_DEVICE inline float fp8_row_inverse_scale(float amax) { return amax < kFp8TinyRow ? 0.0f : kFp8Max / amax; }
OLMO_HOST_DEVICE inline float fp8_row_scale(float amax) { return amax < kFp8TinyRow ? 0.0f : amax / kFp8Max; }

// q[0..ld) and *scale for the row w[0..K); q[K..ld) = 0.
template <typename F>
void quantize_row_fp8(uint8_t* q, float* scale, const F* w, int K, int ld) {
    float amax = 0.0f;
    for (int k = 0; k < K; k++) amax = std::max(amax, std::fabs((float)w[k]));
    const float inv = fp8_row_inverse_scale(amax);
    for (int k = 0; k < ld; k++) q[k] = k < K ? e4m3_from_float((float)w[k] * inv) : 0;
    *scale = fp8_row_scale(amax);
}

// ---- the KV cache in FP8 (--kv-dtype fp8) ----
//
// Each (token, KV head) row of hd keys or values is stored as one row of the format above: hd
// E4M3 codes and one fp32 scale, k[d] ≈ scale · q[d]. A scale per head row follows the heads'
// own ranges (OLMo-2's k_norm weights and the values differ a lot between heads) for 4 bytes per
// 128 codes, and is made as the row is written, so nothing needs calibrating.
// On the GPU the codes fill the pool rows [pool rows, nKV*hd] (uint8) and the scales a second
// array ordered by pool block, then KV head, then row in the block:
//     scale of (pool row r, KV head h) at  ((r / bs) · nKV + h) · bs + r % bs      (bs: block size)
// so that the tile of keys an attention block reads for one head has its scales side by side,
// and a block's scales (copy on write) are one contiguous run of nKV·bs.
// (slot: the row's place in its block; both forms, the kernels use the first)
// The kernels' storage type of such a cache's codes (a pool of C = uint8_t is an FP8 cache).
template <typename C> constexpr bool kFp8Cache = std::is_same_v<C, uint8_t>;

OLMO_HOST_DEVICE inline int64_t kv_scale_index(int64_t block, int slot, int kvh, int nKV, int block_size) {
    return (block * nKV + kvh) * block_size + slot;
}
OLMO_HOST_DEVICE inline int64_t kv_scale_index(int64_t row, int kvh, int nKV, int block_size) {
    return kv_scale_index(row / block_size, (int)(row % block_size), kvh, nKV, block_size);
}

// x[0..n) <- the values an FP8 KV cache gives back for it: scale · q[d] (the CPU reference keeps
// its cache in fp32 and stores these).
inline void fp8_round_trip(float* x, int n) {
    float amax = 0.0f;
    for (int d = 0; d < n; d++) amax = std::max(amax, std::fabs(x[d]));
    const float inv = fp8_row_inverse_scale(amax), scale = fp8_row_scale(amax);
    for (int d = 0; d < n; d++) x[d] = scale * e4m3_to_float(e4m3_from_float(x[d] * inv));
}

}  // namespace olmo
