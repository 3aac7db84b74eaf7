"""FP8 weights against bf16 (issue 13): ./generate with random weights, same run, same GPU.

For each shape and dtype: decode tokens/s at batch 1 after a 128-token prompt, against the
weight roofline of that dtype (bytes read per token / 4.25 TB/s), and time to first token for a
4096-token prompt. bf16 is left out where it does not fit (the 80-layer 8192-wide shape).
Usage: python3 bench/bench_fp8.py [--shapes olmo2_1b olmo2_7b olmo2_32b mha_80l_8192] [--n-new 256]
"""
import argparse, json

from bench_e2e import BW, ours, params, weight_bytes

FITS_BF16 = 130e9   # bytes of weights a 141 GB H200 holds in bf16 with room to run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=["olmo2_1b", "olmo2_7b", "olmo2_32b", "mha_80l_8192"])
    ap.add_argument("--n-new", type=int, default=256)
    ap.add_argument("--ttft-shapes", nargs="*", default=["olmo2_7b"])
    a = ap.parse_args()
    rows = []
    for shape in a.shapes:
        path = f"bench/{shape}.json"
        cfg = json.load(open(path))
        for dtype in ["bf16", "fp8"]:
            if dtype == "bf16" and weight_bytes(cfg) > FITS_BF16:
                continue
            roof = BW / weight_bytes(cfg, dtype)
            _, dec = ours(path, 128, a.n_new, dtype=dtype)
            ttft = ours(path, 4096, 2, dtype=dtype)[0] if shape in a.ttft_shapes else float("nan")
            rows.append((shape, dtype, dec, roof, ttft))
            print(f"{shape} ({params(cfg) / 1e9:.1f} B) {dtype}: decode {dec:.1f} tok/s ({dec / roof:.0%} of "
                  f"{roof:.0f}), TTFT(4096) {ttft:.1f} ms", flush=True)
    print("\n| shape | dtype | decode tok/s, batch 1 | weight roofline | % | TTFT 4096 ms |")
    print("|---|---|---|---|---|---|")
    for shape, dtype, dec, roof, ttft in rows:
        print(f"| {shape} | {dtype} | {dec:.1f} | {roof:.0f} | {dec / roof:.0%} | {ttft:.1f} |")


if __name__ == "__main__":
    main()
