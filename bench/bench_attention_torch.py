"""PyTorch SDPA on the shapes of bench_attention.cu, and the comparison table.

    python3 bench/bench_attention_torch.py [--ours results.txt]

prefill: bf16, causal, batch 1, the shapes of bench_attention.cu (hd 128: 32/32 heads at
         S = 4096 and 16384, 40/8 at 16384; hd 64: 32/32 at 4096), the flash and cuDNN backends
         (K/V repeated to nH heads for GQA, as SDPA without enable_gqa); TFLOP/s with causal
         FLOPs 2*S^2*hd*heads. At S = 16384 also cuDNN sustained: 400 calls in a row.
decode:  bf16, hd 128, one query over 32768 keys, 32/32 and 40/8 heads (enable_gqa), every SDPA
         backend that accepts the shape; effective bandwidth = K+V bytes / time. Four caches in
         rotation; decode calls are captured in a CUDA graph (20 calls per replay) so Python's
         launch overhead is not timed.
Times are medians of CUDA-event timings after a warm-up. With --ours (the key value file
bench_attention writes) it prints one table: ours next to PyTorch's (prefill: cuDNN; decode: the best backend).
"""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HD = 128
BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}


def median_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


PREFILL_SHAPES = ((4096, 32, 32, 128), (16384, 32, 32, 128), (16384, 40, 8, 128), (4096, 32, 32, 64))


def sustained_ms(fn, reps=400):
    """Mean time of fn over `reps` calls back to back, timed as one span (as bench_attention's
    "sustained": seconds of work, so that the GPU runs at its clock under its power limit)."""
    for _ in range(3):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def prefill(S, nH, nKV, hd):
    """{backend: TFLOP/s} for the flash and cuDNN backends, and at S >= 16384 cuDNN's
    sustained figure ("cudnn_sustained")."""
    q = torch.rand(1, nH, S, hd, device="cuda", dtype=torch.bfloat16) * 2 - 1
    k, v = ((torch.rand(1, nKV, S, hd, device="cuda", dtype=torch.bfloat16) * 2 - 1).repeat_interleave(nH // nKV, dim=1)
            for _ in range(2))
    out = {}
    for name in ("flash", "cudnn"):
        try:
            with sdpa_kernel(BACKENDS[name]):
                ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 3, 50 if S <= 4096 else 12)
            out[name] = 2.0 * S * S * hd * nH / ms / 1e9
            if name == "cudnn" and S >= 16384:
                ms = sustained_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                out["cudnn_sustained"] = 2.0 * S * S * hd * nH / ms / 1e9
        except Exception as e:
            print(f"  prefill {name}: not available ({type(e).__name__})")
    return out


def cache(nKV, ctx, position_major):
    """[1, nKV, ctx, HD]: contiguous per head, or a view of our engine's [ctx, nKV*HD] layout."""
    if position_major:
        return (torch.rand(1, ctx, nKV, HD, device="cuda", dtype=torch.bfloat16) * 2 - 1).transpose(1, 2)
    return torch.rand(1, nKV, ctx, HD, device="cuda", dtype=torch.bfloat16) * 2 - 1


def decode(nH, nKV, ctx=32768, sets=4, calls=20, position_major=False):
    qs = [torch.rand(1, nH, 1, HD, device="cuda", dtype=torch.bfloat16) * 2 - 1 for _ in range(sets)]
    ks = [cache(nKV, ctx, position_major) for _ in range(sets)]
    vs = [cache(nKV, ctx, position_major) for _ in range(sets)]
    gqa = nH != nKV
    nbytes = 2 * ctx * nKV * HD * 2
    results = {}
    for name, backend in BACKENDS.items():
        try:
            with sdpa_kernel(backend):
                def step(i):
                    return F.scaled_dot_product_attention(qs[i % sets], ks[i % sets], vs[i % sets], enable_gqa=gqa)
                for i in range(3):
                    step(i)
                torch.cuda.synchronize()
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):  # warm-up on a side stream, as graph capture wants
                    for i in range(3):
                        step(i)
                torch.cuda.current_stream().wait_stream(stream)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for i in range(calls):
                        step(i)
                ms = median_ms(g.replay, 3, 30) / calls
            results[name] = (nbytes / ms / 1e9, ms * 1e3)
        except Exception as e:  # a backend that rejects the shape or the capture
            results[name] = None
            print(f"  decode {nH}/{nKV}{' (position-major)' if position_major else ''} {name}: not available ({type(e).__name__}: {str(e).splitlines()[0][:100]})")
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="key value file written by build/bench/bench_attention")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    rows = []
    for S, nH, nKV, hd in PREFILL_SHAPES:
        res = prefill(S, nH, nKV, hd)
        print(f"torch prefill S={S} {nH}/{nKV} hd {hd}: " + ", ".join(f"{n} {t:.1f} TFLOP/s" for n, t in res.items()))
        name = "cudnn" if "cudnn" in res else max(res, key=res.get)
        rows.append((f"prefill S={S} {nH}/{nKV} hd {hd}", f"prefill_{S}_{nH}_{nKV}_{hd}", f"{res[name]:.1f} ({name})",
                     "TFLOP/s", res[name]))
        if "cudnn_sustained" in res:
            rows.append(("  the same, sustained", f"prefill_sustained_{S}_{nH}_{nKV}_{hd}",
                         f"{res['cudnn_sustained']:.1f} (cudnn)", "TFLOP/s", res["cudnn_sustained"]))
    for nH, nKV in ((32, 32), (40, 8)):
        res = decode(nH, nKV)
        for name, r in res.items():
            if r:
                print(f"torch decode {nH}/{nKV} {name}: {r[1]:.2f} us {r[0]:.2f} TB/s")
        ok = {n: r for n, r in res.items() if r}
        for name, r in decode(nH, nKV, position_major=True).items():  # for reference: our cache layout
            if r and name in ("flash", "cudnn"):
                print(f"torch decode {nH}/{nKV} {name}, position-major cache [S, nKV*hd] as ours: {r[1]:.2f} us {r[0]:.2f} TB/s")
        best = max(ok, key=lambda n: ok[n][0]) if ok else None
        text = f"{ok[best][0]:.2f} ({best})" if best else "n/a"
        rows.append((f"decode ctx 32768, {nH}/{nKV} heads", f"decode_{nH}_{nKV}", text, "TB/s",
                     ok[best][0] if best else None))
    ours = {}
    if args.ours:
        with open(args.ours) as f:
            for line in f:
                key, value = line.split()
                ours[key] = float(value)
    print()
    print(f"| {'case (bf16, batch 1; decode hd 128)':34} | {'ours':>8} | {'PyTorch SDPA':>18} | {'ours/torch':>10} | unit")
    print(f"|{'-' * 36}|{'-' * 10}|{'-' * 20}|{'-' * 12}|------")
    for label, key, text, unit, theirs in rows:
        mine = ours.get(key + "_graph", ours.get(key))  # decode: our graph-replay figure, as for torch
        ratio = f"{mine / theirs:.2f}x" if mine and theirs else "-"
        print(f"| {label:34} | {mine if mine else float('nan'):8.2f} | {text:>18} | {ratio:>10} | {unit}")


if __name__ == "__main__":
    main()
