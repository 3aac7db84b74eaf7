"""End-to-end benchmark: ./generate (random bf16 weights) vs HF transformers, same run, same GPU.

For each shape: decode tokens/s at batch 1 after a 128-token prompt, and time to first token
for a 4096-token prompt. The roofline for decode is (bytes of weights read per token) / 4.25 TB/s.
Usage: python3 bench/bench_e2e.py [--shapes olmo2_1b olmo2_7b] [--no-hf]
"""
import argparse, json, re, subprocess, sys, time

import torch

BW = 4.25e12   # measured H200 copy bandwidth (bytes/s)


def ours(cfg_path, prompt_len, n_new, batch=1, dtype="bf16"):
    out = subprocess.run(["./generate", "--device", "cuda", "--random-weights", cfg_path, "--prompt-len", str(prompt_len),
                          "-n", str(n_new), "--stats", "--temperature", "0", "--max-seq-len", str(prompt_len + n_new + 1),
                          "--batch", str(batch), "--dtype", dtype],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"./generate failed: {out.stderr}")
    ttft = float(re.search(r"time to 1st tok\s+([\d.]+) ms", out.stderr).group(1))
    m = re.search(r"decode\s+([\d.]+) tokens/s", out.stderr)
    return ttft, float(m.group(1)) if m else float("nan")


def layer_params(c):
    H, I = c["hidden_size"], c["intermediate_size"]
    hd = c.get("head_dim", H // c["num_attention_heads"])
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    return 2 * H * q + 2 * H * kv + 3 * H * I + q + kv + 2 * H   # q, o; k, v; gate, up, down; 4 norms


def params(c):
    """Every parameter: the layers, the embedding, the final norm, and the LM head unless tied."""
    H, V = c["hidden_size"], c["vocab_size"]
    lm_head = 0 if c.get("tie_word_embeddings", False) else V * H
    return c["num_hidden_layers"] * layer_params(c) + V * H + H + lm_head


def weight_bytes(c, dtype="bf16"):
    """Bytes of weights one decode step reads: every layer, the final norm and the LM head
    (V x H, tied or not). Of the embedding only one row per token is read: left out. fp8: one
    byte per weight of the linear layers (their scales are noise), two per norm weight."""
    H, V = c["hidden_size"], c["vocab_size"]
    bf16 = 2 * (c["num_hidden_layers"] * layer_params(c) + H + V * H)
    if dtype != "fp8":
        return bf16
    hd = c.get("head_dim", H // c["num_attention_heads"])
    norms = c["num_hidden_layers"] * (c["num_attention_heads"] * hd + c["num_key_value_heads"] * hd + 2 * H) + H
    return bf16 / 2 + norms


def hf_model(cfg):
    """An HF transformers Olmo2ForCausalLM of this shape, random bf16 weights, on the GPU."""
    from transformers import Olmo2Config, Olmo2ForCausalLM
    conf = Olmo2Config(**{k: v for k, v in cfg.items() if k != "model_type"})
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = Olmo2ForCausalLM(conf).eval()
    torch.set_default_dtype(torch.float32)
    return model


def hf(cfg, prompt_len, n_new, batch=1):
    """HF transformers greedy generate(): (time to first token in ms, decode tokens/s summed
    over the batch), decode measured as the extra time of n_new tokens over one."""
    model = hf_model(cfg)
    ids = torch.randint(0, cfg["vocab_size"], (batch, prompt_len), device="cuda")
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0, attention_mask=torch.ones_like(ids))

    def timed(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    with torch.no_grad():
        timed(2)   # warm-up
        t1, tn = timed(1), timed(n_new)
    del model
    torch.cuda.empty_cache()
    return t1 * 1e3, batch * (n_new - 1) / (tn - t1)


def batch_table(no_hf, batches, n_new=128, prompt_len=512):
    """Issue 6: decode throughput on the 7B shape at several batch sizes vs the step roofline
    (weights + every sequence's K/V bytes read per step, over the copy bandwidth)."""
    path = "bench/olmo2_7b.json"
    cfg = json.load(open(path))
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    kv_dim = cfg["num_key_value_heads"] * (H // cfg["num_attention_heads"])
    rows = []
    for b in batches:
        _, dec = ours(path, prompt_len, n_new, b)
        ctx = prompt_len + n_new / 2                                   # mean context during decode
        step_bytes = weight_bytes(cfg) + b * ctx * 2 * L * kv_dim * 2
        roof = b * BW / step_bytes
        h = float("nan") if no_hf else hf(cfg, prompt_len, 32, b)[1]
        rows.append((b, dec, roof, h))
        print(f"batch {b}: {dec:.0f} tok/s, roofline {roof:.0f} ({dec / roof:.0%}), HF {h:.0f}", flush=True)
    print("\n| batch | decode tok/s (ours, summed) | step roofline | % | HF tok/s | ratio |")
    print("|---|---|---|---|---|---|")
    for b, dec, roof, h in rows:
        print(f"| {b} | {dec:.0f} | {roof:.0f} | {dec / roof:.0%} | {h:.0f} | {dec / h:.1f}x |")


def hf_ttft(cfg, prompt_len):
    model = hf_model(cfg)
    ids = torch.randint(0, cfg["vocab_size"], (1, prompt_len), device="cuda")
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0, max_new_tokens=1, min_new_tokens=1)
    with torch.no_grad():
        model.generate(ids, **kw)
        torch.cuda.synchronize()
        times = []
        for _ in range(3):
            t = time.perf_counter()
            model.generate(ids, **kw)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    del model
    torch.cuda.empty_cache()
    return sorted(times)[1] * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=["olmo2_1b", "olmo2_7b"])
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--n-new", type=int, default=256)
    ap.add_argument("--batches", type=int, nargs="*", default=[], help="issue 6 table: batch sizes on the 7B shape")
    a = ap.parse_args()
    if a.batches:
        return batch_table(a.no_hf, a.batches)
    rows = []
    for shape in a.shapes:
        path = f"bench/{shape}.json"
        cfg = json.load(open(path))
        roof = BW / weight_bytes(cfg)
        _, dec = ours(path, 128, a.n_new)
        ttft, _ = ours(path, 4096, 2)
        h_dec = h_ttft = float("nan")
        if not a.no_hf:
            _, h_dec = hf(cfg, 128, 64)
            h_ttft = hf_ttft(cfg, 4096)
        rows.append((shape, dec, roof, h_dec, ttft, h_ttft))
        print(f"{shape} ({params(cfg) / 1e9:.2f} B parameters): decode {dec:.1f} tok/s ({dec / roof:.0%} of roofline {roof:.0f}), HF {h_dec:.1f}; "
              f"TTFT(4096) {ttft:.1f} ms, HF {h_ttft:.1f} ms", flush=True)
    print("\n| shape | decode tok/s (ours) | % roofline | HF decode tok/s | ratio | TTFT 4096 ms (ours) | HF TTFT ms | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for shape, dec, roof, h_dec, ttft, h_ttft in rows:
        print(f"| {shape} | {dec:.1f} | {dec / roof:.0%} of {roof:.0f} | {h_dec:.1f} | {dec / h_dec:.2f}x | {ttft:.1f} | "
              f"{h_ttft:.1f} | {h_ttft / ttft:.2f}x |")


if __name__ == "__main__":
    main()
