"""How far HF transformers' own bf16 forward lands from the fp32 goldens, per fixture: the
yardstick for the engine's bf16 bar (test_golden GpuBf16CloseToReference).

    python3 tests/hf_bf16_error.py [--fixtures tests/fixtures] [--device cuda]

Loads each fixture in bfloat16 (eager attention, as make_goldens.py in fp32), runs the golden
prompt, then the 8 golden decode ids one at a time through the KV cache, and prints the rel-L2
of the prompt logits and of each decode step's logits against golden.safetensors.
"""
import argparse, os

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def rel_l2(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", default="tests/fixtures")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    for name in sorted(os.listdir(args.fixtures)):
        d = os.path.join(args.fixtures, name)
        if not os.path.exists(os.path.join(d, "golden.safetensors")):
            continue
        g = load_file(os.path.join(d, "golden.safetensors"))
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager")
        model = model.to(args.device).eval()
        ids = g["prompt_ids"].long()[None].to(args.device)
        out = model(ids, use_cache=True)
        prompt_err = rel_l2(out.logits[0].cpu(), g["logits"])
        past, steps = out.past_key_values, []
        for s, t in enumerate(g["decode_ids"].tolist()):
            out = model(torch.tensor([[t]], device=args.device), past_key_values=past, use_cache=True)
            past = out.past_key_values
            steps.append(rel_l2(out.logits[0, -1].cpu(), g["decode_logits"][s]))
        print(f"{name:20s} HF bf16 vs fp32 golden: prompt logits {prompt_err:.2e}; decode steps "
              + " ".join(f"{e:.2e}" for e in steps) + f" (worst {max(steps):.2e})")


if __name__ == "__main__":
    main()
