#!/usr/bin/env python3
"""make_perplexity_refs.py: reference perplexities from Hugging Face `transformers` for the
./perplexity tests (tests/test_perplexity.cpp).

    python3 tests/make_perplexity_refs.py [--out tests/fixtures/perplexity/refs.json]

Needs torch, transformers and sentencepiece; runs on the CPU (float32, eager attention), from
the repository root. For each model it scores the same windows as ./perplexity (the rule of
src/scoring.h, repeated in windows() below) and records the mean negative log-likelihood:

    default_model   weights/ with the text of tests/fixtures/perplexity/pinocchio.txt tokenized
                    by tokenizer/tokenizer.model (sentencepiece, no BOS: what ./perplexity does)
    <fixture>       every golden-test fixture tests/fixtures/<name>/ (random tiny models with no
                    tokenizer): the ids are the text's first FIXTURE_BYTES UTF-8 bytes (each < 256,
                    inside every fixture's vocabulary)

Output (JSON, what the C++ test reads):
    {"transformers": ver, "torch": ver, "text": path,
     "models": [{"name", "model" (folder), "cli" (true: the test runs ./perplexity on the text),
                 "ids" [n] (the ids scored),
                 "runs": [{"ctx", "stride", "default_flags" (true: ctx and stride are
                           ./perplexity's defaults for this model), "windows", "scored",
                           "mean_nll" (float32 model), "token_nll" [scored] (each scored token's
                           NLL in text order), "mean_nll_bf16" (the same model in bfloat16, the
                           yardstick of the engine's bf16 bar)}]}]}

Each window's NLL sum is checked against transformers' own loss for the same window (labels
-100 on the tokens the window does not score, as in Hugging Face's "Perplexity of fixed-length
models"), so the windows here are that method's.
"""
import argparse
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the GPU machine has no network

import sentencepiece
import torch
import transformers
from transformers import AutoModelForCausalLM

TEXT = "tests/fixtures/perplexity/pinocchio.txt"
FIXTURE_BYTES = 400
DEFAULT_MAX_CTX = 2048  # ./perplexity's default ctx: min(max_position_embeddings, 2048)


def windows(n, ctx, stride):
    """(begin, first, end) of each window: tokens [begin, end) fed, [first, end) scored."""
    count = 1 if n <= ctx else (n - ctx + stride - 1) // stride + 1
    return [(k * stride, 1 if k == 0 else (k - 1) * stride + ctx, min(k * stride + ctx, n)) for k in range(count)]


@torch.no_grad()
def token_nlls(model, ids, ctx, stride, check_hf_loss):
    """NLL of every scored token, in text order (float64)."""
    out = []
    for begin, first, end in windows(len(ids), ctx, stride):
        x = torch.tensor([ids[begin:end]])
        logits = model(x).logits[0].double()                       # [end - begin, V]
        logp = torch.log_softmax(logits, dim=-1)
        rows = torch.arange(first - begin - 1, end - begin - 1)    # row j predicts token begin + j + 1
        nll = -logp[rows, torch.tensor(ids[first:end])]
        if check_hf_loss:
            labels = x.clone()
            labels[0, : first - begin] = -100
            hf = model(x, labels=labels).loss.item() * (end - first)
            assert abs(hf - nll.sum().item()) <= 1e-5 * abs(hf), (begin, hf, nll.sum().item())
        out.extend(nll.tolist())
    assert len(out) == len(ids) - 1, "every token after the first is scored once"
    return out


def load(model_dir, dtype):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager").eval()


def entry(name, model_dir, ids, cli, runs):
    fp32, bf16 = load(model_dir, torch.float32), load(model_dir, torch.bfloat16)
    ctx0 = min(fp32.config.max_position_embeddings, DEFAULT_MAX_CTX)
    e = {"name": name, "model": model_dir, "cli": cli, "ids": ids, "runs": []}
    for ctx, stride, default in [(ctx0, ctx0 // 2, True)] + [(c, s, False) for c, s in runs]:
        nll = token_nlls(fp32, ids, ctx, stride, check_hf_loss=True)
        nll16 = token_nlls(bf16, ids, ctx, stride, check_hf_loss=False)
        mean, mean16 = sum(nll) / len(nll), sum(nll16) / len(nll16)
        e["runs"].append({"ctx": ctx, "stride": stride, "default_flags": default,
                          "windows": len(windows(len(ids), ctx, stride)), "scored": len(nll),
                          "mean_nll": mean, "token_nll": nll, "mean_nll_bf16": mean16})
        print(f"{name:20s} ctx {ctx:5d} stride {stride:5d}: {len(nll)} tokens, mean NLL {mean:.6f} "
              f"(ppl {math.exp(mean):.4f}); bf16 {mean16:.6f} ({(mean16 - mean) / mean:+.2e} relative)",
              file=sys.stderr)
    return e


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/perplexity/refs.json")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    text = open(TEXT, encoding="utf-8").read()
    sp = sentencepiece.SentencePieceProcessor(model_file="tokenizer/tokenizer.model")
    refs = {"transformers": transformers.__version__, "torch": torch.__version__, "text": TEXT, "models": []}
    refs["models"].append(entry("default_model", "weights", sp.encode(text), True, [(200, 120)]))
    fixture_ids = list(text.encode("utf-8")[:FIXTURE_BYTES])
    for name in sorted(os.listdir("tests/fixtures")):
        d = f"tests/fixtures/{name}"
        if os.path.exists(f"{d}/golden.safetensors"):
            refs["models"].append(entry(name, d, fixture_ids, False, [(48, 20)]))
    with open(args.out, "w") as f:
        json.dump(refs, f)
    print("wrote", args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
