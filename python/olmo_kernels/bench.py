"""python3 -m olmo_kernels.bench: olmo_kernels' attention against PyTorch SDPA's flash and cuDNN
backends on the same tensors, in one table.

Prefill rows are causal attention of S queries over S keys, in TFLOP/s (4·D flops per visible
(query, key) pair per head: q·k and p·v). Decode rows are one new token per sequence over a
cache of S keys, in TB/s (K and V bytes read per call). ratio = ours / the faster SDPA backend.
"err" is the rel-L2 of our output against SDPA's flash (cuDNN's where flash cannot run).
Tensors are made [B, S, H, D] in memory and handed to both as [B, H, S, D] views (the layout
a model's projections give); times are CUDA-event means over repeated calls, after warm-up.

    python3 -m olmo_kernels.bench [--quick] [--dtype bf16|fp16]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import olmo_kernels as ok

# (kind, batch, heads, kv_heads, seq, head_dim)
CASES = [
    ("prefill", 1, 32, 32, 4096, 128),
    ("prefill", 1, 32, 8, 4096, 128),
    ("prefill", 1, 32, 32, 16384, 128),
    ("prefill", 1, 16, 16, 4096, 64),
    ("decode", 1, 32, 32, 32768, 128),
    ("decode", 1, 40, 8, 32768, 128),
    ("decode", 16, 32, 8, 4096, 128),
]
QUICK = [("prefill", 1, 32, 8, 4096, 128), ("decode", 1, 32, 8, 32768, 128), ("decode", 16, 32, 8, 4096, 128)]


def timed(fn, min_ms=200.0):
    """Mean milliseconds per call of fn(), over enough calls to fill about min_ms."""
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    n = max(3, int(min_ms / max(start.elapsed_time(end), 1e-3)))
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def tensors(kind, B, H, KV, S, D, dtype):
    def make(heads, seq):
        return torch.randn(B, seq, heads, D, device="cuda", dtype=dtype).transpose(1, 2)
    return make(H, 1 if kind == "decode" else S), make(KV, S), make(KV, S)


def run_case(kind, B, H, KV, S, D, dtype):
    q, k, v = tensors(kind, B, H, KV, S, D, dtype)
    if kind == "prefill":
        ours = lambda: ok.flash_attention(q, k, v, causal=True)
        sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=H != KV)
        work, unit = 4.0 * D * B * H * S * (S + 1) / 2, 1e12  # flops
    else:
        lengths = [S] * B
        ours = lambda: ok.decode_attention(q, k, v, lengths)
        sdpa = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=H != KV)
        work, unit = 2.0 * B * KV * S * D * q.element_size(), 1e12  # bytes
    rate = lambda ms: work / (ms * 1e-3) / unit
    row = {"ours": rate(timed(ours))}
    out = ours().float()
    ref = None
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                row[name] = rate(timed(sdpa))
                ref = sdpa().float() if ref is None else ref
        except RuntimeError as e:  # the backend cannot run this case
            row[name] = None
            row.setdefault("note", f"{name}: {str(e).splitlines()[0][:60]}")
    row["err"] = ((out - ref).norm() / ref.norm()).item() if ref is not None else None
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="three cases only")
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("olmo_kernels.bench: no CUDA device")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}")
    print(f"{'case':<40} {'unit':<8} {'ours':>8} {'SDPA flash':>11} {'SDPA cuDNN':>11} {'ratio':>7} {'err':>9}")
    fmt = lambda x: f"{x:.2f}" if x is not None else "n/a"
    for kind, B, H, KV, S, D in QUICK if args.quick else CASES:
        row = run_case(kind, B, H, KV, S, D, dtype)
        best = max([x for x in (row["flash"], row["cudnn"]) if x is not None], default=None)
        label = f"{kind} B={B} heads {H}/{KV} S={S} hd {D}" + (" causal" if kind == "prefill" else "")
        unit = "TFLOP/s" if kind == "prefill" else "TB/s"
        ratio = f"{row['ours'] / best:.2f}x" if best else "n/a"
        err = f"{row['err']:.1e}" if row["err"] is not None else "n/a"
        print(f"{label:<40} {unit:<8} {fmt(row['ours']):>8} {fmt(row['flash']):>11} {fmt(row['cudnn']):>11} "
              f"{ratio:>7} {err:>9}" + (f"  ({row['note']})" if "note" in row else ""))
        del row
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
