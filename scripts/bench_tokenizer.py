#!/usr/bin/env python3
"""Times ./tokenize against Hugging Face `tokenizers` (one thread) on the same text and checks that
the ids are identical. The text is the first MB megabytes of a corpus (.xz or plain), cut at a
line end. `tokenizers` is timed on one encode() of the whole text and on encode_batch() of its
lines (RAYON_NUM_THREADS=1); ./tokenize reports its own encode time (--time, load excluded).
Every figure is the best of 3 runs.

Usage: python3 scripts/bench_tokenizer.py CORPUS MB tokenizer.json...
"""
import lzma
import os
import re
import subprocess
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer, __version__ as tokenizers_version  # noqa: E402


def best_of(n, f):
    best, result = float("inf"), None
    for _ in range(n):
        t0 = time.perf_counter()
        result = f()
        best = min(best, time.perf_counter() - t0)
    return best, result


def ours(path, data):
    r = subprocess.run(["./tokenize", "--tokenizer", path, "--time"], input=data, capture_output=True, check=True)
    seconds = float(re.search(rb"in ([0-9.]+) s", r.stderr).group(1))
    return seconds, [int(x) for x in r.stdout.split(b",")] if r.stdout.strip() else []


def main():
    corpus, mb, paths = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    opener = lzma.open if corpus.endswith(".xz") else open
    with opener(corpus, "rb") as f:
        data = f.read(int(mb * 1e6))
    data = data[: data.rfind(b"\n") + 1]
    text = data.decode("utf-8")
    lines = text.splitlines(keepends=True)
    size = len(data) / 1e6
    print(f"{size:.2f} MB of {os.path.basename(corpus)}, tokenizers {tokenizers_version}, one thread\n")
    print("| tokenizer | ids | tokenizers encode MB/s | tokenizers encode_batch(lines) MB/s | ./tokenize MB/s | ids identical |")
    print("|---|---|---|---|---|---|")
    for path in paths:
        tok = Tokenizer.from_file(path)
        t_one, enc = best_of(3, lambda: tok.encode(text, add_special_tokens=False))
        t_batch, _ = best_of(3, lambda: tok.encode_batch(lines, add_special_tokens=False))
        runs = [ours(path, data) for _ in range(3)]
        t_ours, ids = min(runs)[0], runs[0][1]
        same = ids == enc.ids
        if not same:
            k = next((i for i, (a, b) in enumerate(zip(ids, enc.ids)) if a != b), min(len(ids), len(enc.ids)))
            print(f"MISMATCH in {path} at id {k}: tokenizers {enc.ids[k:k+8]} ours {ids[k:k+8]}", file=sys.stderr)
        print(f"| {os.path.basename(path)} | {len(enc.ids)} | {size / t_one:.2f} | {size / t_batch:.2f} | "
              f"{size / t_ours:.2f} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
