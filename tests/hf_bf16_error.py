"""How far HF transformers' own bf16 forward lands from the fp32 goldens, per fixture: the
yardstick for the engine's bf16 bar (test_golden GpuBf16CloseToReference).

    python3 tests/hf_bf16_error.py [--fixtures tests/fixtures] [--device cuda]

Loads each fixture twice (eager attention, as make_goldens.py in fp32):
  bf16            the whole model in bfloat16, as a bf16 user of transformers runs it;
  bf16 weights    fp32 math on weights rounded to bfloat16: the error that storing the
                  weights in bf16 costs by itself, before any bf16 arithmetic (a floor for
                  every bf16 engine on fixtures whose weights are not bf16 already).
Each runs the golden prompt, then the 8 golden decode ids one at a time through the KV cache,
and prints the rel-L2 of the prompt logits, of each decode step's logits, and of the whole
decode_logits tensor [8, V] against golden.safetensors.
"""
import argparse, os

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def rel_l2(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@torch.no_grad()
def run(model, g, device):
    ids = g["prompt_ids"].long()[None].to(device)
    out = model(ids, use_cache=True)
    prompt_err = rel_l2(out.logits[0].cpu(), g["logits"])
    past, steps = out.past_key_values, []
    for t in g["decode_ids"].tolist():
        out = model(torch.tensor([[t]], device=device), past_key_values=past, use_cache=True)
        past = out.past_key_values
        steps.append(out.logits[0, -1].float().cpu())
    steps = torch.stack(steps)
    per_step = [rel_l2(steps[s], g["decode_logits"][s]) for s in range(len(steps))]
    return prompt_err, per_step, rel_l2(steps, g["decode_logits"])


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
        for label in ("bf16", "bf16 weights"):
            model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager")
            if label == "bf16 weights":
                model = model.float()   # bf16-rounded weights, fp32 math from here on
            model = model.to(args.device).eval()
            prompt_err, steps, whole = run(model, g, args.device)
            print(f"{name:20s} HF {label:12s} vs fp32 golden: prompt logits {prompt_err:.2e}; decode steps "
                  + " ".join(f"{e:.2e}" for e in steps)
                  + f" (worst {max(steps):.2e}; decode_logits tensor {whole:.2e})")


if __name__ == "__main__":
    main()
