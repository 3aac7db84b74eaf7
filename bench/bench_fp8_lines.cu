// bench_fp8_lines.cu: does the order in which fp8_gemv's warps copy a tile of weights limit its
// stream? A copy-only kernel (no arithmetic: the bytes are XORed) walks the 7B layer's FP8
// matrices as fp8_gemv does (a block per 16 rows, warps taking chunks of K in turn, a ring of D
// chunks per warp in shared memory, D - 1 in flight), with the copy instructions laid out five
// ways:
//   halves   each lane copies the 16 bytes it multiplies: a chunk is 16 rows x 64 bytes and
//            every instruction reads eight 64-byte halves of lines (fp8_gemv before 2026-11-27);
//   tiled    the same chunk stored contiguously (a pre-tiled layout): 1 KB in a row;
//   rows128  16 rows x 128 bytes, but each instruction still reads 64-byte halves;
//   rows256  16 rows x 256 bytes, likewise;
//   lines    16 rows x 128 bytes, each instruction reading four whole 128-byte lines, 8 lanes a
//            line (fp8_gemv now).
// and, as ceilings, "plainN": the matrix's bytes read by a grid-stride loop of 16-byte loads (4
// per thread in flight, N blocks of 512 threads an SM, N = 4 or 2), with no tiles at all; and
// "tileldg": the engine's blocks (16 rows each, its warps and padding) reading their tile row by
// row with 16-byte loads into registers (4 per thread in flight), no shared memory.
// Blocks, warps and the shared-memory padding are those the engine picks for each matrix (one
// wave; the output layer in several: fp8_gemv_shape). These copy kernels hold fewer registers
// than fp8_gemv, which fits about 24 warps an SM, so "lines" also runs with twice the engine's
// warps per block (the same blocks an SM: twice the warps, and bytes in flight, an SM) and with a
// ring of 3 (twice the bytes in flight per warp): is it the bytes in flight an SM that the stream
// wants, or how they are spread? "one": a launch alone; "chained": 16 launches on different
// weights in a CUDA graph, time per launch. Best of 5. docs/fp8.md has runs ("Whole lines" on an
// H100, "Session 25" and "Session 39" on an H200).
#include <algorithm>
#include <cstdio>

#include "cuda_common.cuh"
#include "tensor_core.cuh"

using namespace olmo;

namespace {

enum Order { kHalves, kTiled, kRows128, kRows256, kLines };
const char* kOrderName[] = {"halves", "tiled", "rows128", "rows256", "lines"};

constexpr int chunk_cols(Order o) { return o == kRows128 || o == kLines ? 128 : o == kRows256 ? 256 : 64; }

template <Order O, int D>
__global__ void __launch_bounds__(512, 1) copy_kernel(const uint8_t* q, int ld, unsigned* sink) {
    constexpr int CB = chunk_cols(O), SLOT = 16 * CB;
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int chunks = ld / CB, mine = (chunks - warp + warps - 1) / warps;
    extern __shared__ uint4 smem[];
    const uint32_t ring = (uint32_t)__cvta_generic_to_shared(smem) + warp * D * SLOT + lane * 16;
    const uint8_t* tile = q + (size_t)blockIdx.x * 16 * ld;
    auto fetch = [&](int i) {
        if (i < mine) {
            const int c = warp + i * warps;
            const uint32_t s = ring + (i % D) * SLOT;
            if constexpr (O == kTiled) {
                attn::cp_async_16(s, tile + (size_t)c * 1024 + 16 * lane, true);
                attn::cp_async_16(s + 512, tile + (size_t)c * 1024 + 512 + 16 * lane, true);
            } else if constexpr (O == kLines) {
#pragma unroll
                for (int p = 0; p < 4; p++) attn::cp_async_16(s + p * 512, tile + (size_t)(4 * p + lane / 8) * ld + CB * c + 16 * (lane % 8), true);
            } else {
#pragma unroll
                for (int p = 0; p < CB / 64; p++) {
                    attn::cp_async_16(s + p * 1024, tile + (size_t)g * ld + CB * c + 64 * p + 16 * t, true);
                    attn::cp_async_16(s + p * 1024 + 512, tile + (size_t)(g + 8) * ld + CB * c + 64 * p + 16 * t, true);
                }
            }
        }
        attn::cp_async_commit();
    };
    for (int i = 0; i < D - 1; i++) fetch(i);
    unsigned acc = 0;
    for (int i = 0; i < mine; i++) {
        fetch(i + D - 1);
        attn::cp_async_wait<D - 1>();
#pragma unroll
        for (int p = 0; p < SLOT / 512; p++) {   // this lane's own 16-byte pieces
            const uint4 v = smem[(warp * D * SLOT + (i % D) * SLOT) / 16 + lane + 32 * p];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        if constexpr (O == kLines) __syncwarp();   // fp8_gemv's lanes read each other's bytes
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;   // keeps the copies; practically never stores
}

// The ceiling: every thread XORs four 16-byte loads a step, with a grid stride.
__global__ void __launch_bounds__(512) plain_kernel(const uint4* q, size_t n16, unsigned* sink) {
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] = __ldcs(q + i + j * stride);
#pragma unroll
        for (int j = 0; j < 4; j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    for (; i < n16; i += stride) {
        const uint4 v = __ldcs(q + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

// A block reads its 16 rows x ld bytes in order, four 16-byte loads per thread at a time.
__global__ void __launch_bounds__(512) tile_ldg_kernel(const uint8_t* q, int ld, unsigned* sink) {
    const uint4* tile = reinterpret_cast<const uint4*>(q + (size_t)blockIdx.x * 16 * ld);
    const int n16 = ld, stride = blockDim.x;   // 16 rows x ld bytes = ld units of 16 bytes
    unsigned acc = 0;
    for (int i = threadIdx.x; i < n16; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] = i + j * stride < n16 ? __ldcs(tile + i + j * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < 4; j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

struct Shape {
    const char* name;
    int N, ld, warps, per_sm;   // the engine's choice for the 7B shape; per_sm 0: several waves, no padding
};

float best_ms(cudaGraphExec_t exec, cudaStream_t stream, int launches) {
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    float best = 1e30f;
    for (int r = 0; r < 5; r++) {
        cudaCheck(cudaEventRecord(a, stream));
        cudaCheck(cudaGraphLaunch(exec, stream));
        cudaCheck(cudaEventRecord(b, stream));
        cudaCheck(cudaEventSynchronize(b));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, a, b));
        best = std::min(best, ms / launches);
    }
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    return best;
}

// Times launch(weights) alone and 16 times chained on different weights, and prints the rates.
template <typename Launch>
void time_launches(const Shape& s, const char* name, int D, const uint8_t* q, size_t q_bytes, cudaStream_t stream,
                   Launch launch) {
    const size_t bytes = (size_t)s.N * s.ld, room = q_bytes - bytes;
    float ms[2];
    for (int chained = 0; chained < 2; chained++) {   // a graph of 1 launch, or of 16 on different weights
        const int launches = chained ? 16 : 1;
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < launches; i++) launch(q + (room ? i * bytes % room / 4096 * 4096 : 0));
        cudaCheck(cudaStreamEndCapture(stream, &graph));
        cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
        cudaCheck(cudaGraphLaunch(exec, stream));   // warm-up
        ms[chained] = best_ms(exec, stream, launches);
        cudaCheck(cudaGraphExecDestroy(exec));
        cudaCheck(cudaGraphDestroy(graph));
    }
    std::printf("%-8s %-10s D %d: one %6.1f us %5.0f GB/s | chained %6.1f us %5.0f GB/s\n", s.name, name, D,
                ms[0] * 1e3, bytes / ms[0] / 1e6, ms[1] * 1e3, bytes / ms[1] / 1e6);
}

// warps: per block (0: the engine's).
template <Order O, int D>
void run(const Shape& s, const uint8_t* q, size_t q_bytes, unsigned* sink, cudaStream_t stream, int warps = 0) {
    constexpr auto kernel = copy_kernel<O, D>;
    if (warps == 0) warps = s.warps;
    const int need = warps * D * 16 * chunk_cols(O);
    const int padded = s.per_sm > 0 ? (kSmemPerSmBytes / s.per_sm - kSmemReservedBytes) / 1024 * 1024 : 0;
    const int smem = std::min(std::max(need, padded), kMaxSmemBytes);
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    char name[32];
    std::snprintf(name, sizeof name, "%s/%dw", kOrderName[O], warps);
    time_launches(s, name, D, q, q_bytes, stream, [&](const uint8_t* w) {
        kernel<<<s.N / 16, warps * 32, smem, stream>>>(w, s.ld, sink);
    });
}

void run_tile_ldg(const Shape& s, const uint8_t* q, size_t q_bytes, unsigned* sink, cudaStream_t stream) {
    const int padded = s.per_sm > 0 ? (kSmemPerSmBytes / s.per_sm - kSmemReservedBytes) / 1024 * 1024 : 0;
    cudaCheck(cudaFuncSetAttribute(tile_ldg_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, padded));
    time_launches(s, "tileldg", 0, q, q_bytes, stream, [&](const uint8_t* w) {
        tile_ldg_kernel<<<s.N / 16, s.warps * 32, padded, stream>>>(w, s.ld, sink);
    });
}

void run_plain(const Shape& s, const uint8_t* q, size_t q_bytes, unsigned* sink, cudaStream_t stream, int per_sm) {
    int sms;
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    char name[32];
    std::snprintf(name, sizeof name, "plain%d", per_sm);
    time_launches(s, name, 0, q, q_bytes, stream, [&](const uint8_t* w) {
        plain_kernel<<<sms * per_sm, 512, 0, stream>>>(reinterpret_cast<const uint4*>(w), (size_t)s.N * s.ld / 16, sink);
    });
}

}  // namespace

int main() {
    const Shape shapes[] = {{"q|k|v", 12288, 4096, 4, 6},   // the engine's choices at 7B (fp8_gemv_shape)
                            {"o", 4096, 4096, 12, 2},
                            {"gate|up", 22016, 4096, 2, 11},
                            {"down", 4096, 11008, 12, 2},
                            {"lm head", 100352, 4096, 4, 0}};
    const size_t q_bytes = (size_t)100352 * 4096;   // the largest matrix; the others rotate through it
    uint8_t* q;
    unsigned* sink;
    cudaCheck(cudaMalloc(&q, q_bytes));
    cudaCheck(cudaMalloc(&sink, 1 << 20));
    cudaCheck(cudaMemset(q, 0x3c, q_bytes));
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (const Shape& s : shapes) {
        run_plain(s, q, q_bytes, sink, stream, 4);
        run_plain(s, q, q_bytes, sink, stream, 2);
        run_tile_ldg(s, q, q_bytes, sink, stream);
        run<kLines, 4>(s, q, q_bytes, sink, stream);
        run<kHalves, 2>(s, q, q_bytes, sink, stream);
        run<kTiled, 2>(s, q, q_bytes, sink, stream);
        run<kTiled, 5>(s, q, q_bytes, sink, stream);
        run<kRows128, 2>(s, q, q_bytes, sink, stream);
        run<kRows256, 2>(s, q, q_bytes, sink, stream);
        run<kLines, 2>(s, q, q_bytes, sink, stream);
        run<kLines, 3>(s, q, q_bytes, sink, stream);
        run<kLines, 2>(s, q, q_bytes, sink, stream, std::min(2 * s.warps, 16));
    }
    cudaCheck(cudaFree(q));
    cudaCheck(cudaFree(sink));
    return 0;
}
