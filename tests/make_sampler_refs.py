#!/usr/bin/env python3
"""make_sampler_refs.py: transformers' own results for the samplers and the repetition penalty,
on the golden fixtures, for tests/test_generation_options.cpp and tests/test_sampling.cpp.

Usage (needs torch + transformers; CPU, float32; about a minute):
    python3 tests/make_sampler_refs.py [--out tests/fixtures/sampler_refs.json]

For every fixture in tests/fixtures/*/ with golden.safetensors, and the default model
(weights/ with tests/default_model/golden.safetensors), it writes under the fixture's name:
    repetition_penalty           the penalty used below (1.3)
    penalized_last_logits        RepetitionPenaltyLogitsProcessor(1.3)(prompt_ids, the golden
                                 logits of the prompt's last position), float32 as floats
    greedy_ids                   generate(do_sample=False, repetition_penalty=1.3,
                                 max_new_tokens=24), new tokens only
    beam2_ids, beam4_ids         generate(num_beams=N, do_sample=False, repetition_penalty=1.3,
                                 max_new_tokens=16), the best beam, new tokens only
    kept                         for each warper setting in SETTINGS (temperature, top_k, top_p,
                                 min_p): the ids whose score stays finite after transformers'
                                 warpers in generate()'s order (Temperature, TopK, TopP, MinP)
                                 on the golden logits of the prompt's last position, sorted
The C++ tests read the file when it is there and skip those checks (saying so) when not.
"""
import argparse
import json
import os
import struct
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM
from transformers.generation.logits_process import (LogitsProcessorList, MinPLogitsWarper,
                                                    RepetitionPenaltyLogitsProcessor,
                                                    TemperatureLogitsWarper, TopKLogitsWarper,
                                                    TopPLogitsWarper)

PENALTY = 1.3
GREEDY_NEW, BEAM_NEW = 24, 16
# (temperature, top_k, top_p, min_p): the same list is in tests/test_sampling.cpp (kWarperSettings).
SETTINGS = [(1.0, 0, 1.0, 0.05), (0.7, 0, 1.0, 0.2), (1.3, 50, 0.9, 0.1), (0.8, 0, 0.95, 0.02), (1.0, 0, 1.0, 1.0)]


def read_safetensors(path):
    """name -> torch tensor, for the F32 and I32 tensors of a golden file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        dtype = {"F32": torch.float32, "I32": torch.int32}[t["dtype"]]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=dtype).reshape(t["shape"])
    return out


def kept_ids(logits, setting):
    t, k, p, m = setting
    warpers = LogitsProcessorList()
    if t != 1.0:
        warpers.append(TemperatureLogitsWarper(t))
    if k:
        warpers.append(TopKLogitsWarper(top_k=k, min_tokens_to_keep=1))
    if p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=p, min_tokens_to_keep=1))
    warpers.append(MinPLogitsWarper(min_p=m, min_tokens_to_keep=1))
    scores = warpers(torch.zeros(1, 1, dtype=torch.long), logits[None].clone())[0]
    return torch.nonzero(torch.isfinite(scores)).flatten().tolist()


@torch.no_grad()
def refs_for(model_dir, golden_path):
    g = read_safetensors(golden_path)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    prompt = g["prompt_ids"].long()
    last = g["logits"][-1].float()
    eos = model.generation_config.eos_token_id
    pad = model.config.pad_token_id
    pad = pad if pad is not None else (eos[0] if isinstance(eos, list) else eos)

    def generate(**kw):
        out = model.generate(prompt[None], attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             do_sample=False, eos_token_id=eos, pad_token_id=pad, repetition_penalty=PENALTY, **kw)
        return out[0, len(prompt):].tolist()

    penalized = RepetitionPenaltyLogitsProcessor(PENALTY)(prompt[None], last[None].clone())[0]
    return {
        "repetition_penalty": PENALTY,
        "penalized_last_logits": penalized.tolist(),
        "greedy_ids": generate(max_new_tokens=GREEDY_NEW),
        "beam2_ids": generate(num_beams=2, max_new_tokens=BEAM_NEW),
        "beam4_ids": generate(num_beams=4, max_new_tokens=BEAM_NEW),
        "kept": [{"setting": list(s), "ids": kept_ids(last, s)} for s in SETTINGS],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/sampler_refs.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    refs = {"transformers": transformers.__version__, "torch": torch.__version__, "fixtures": {}}
    names = sorted(n for n in os.listdir("tests/fixtures") if os.path.exists(f"tests/fixtures/{n}/golden.safetensors"))
    for name in names:
        refs["fixtures"][name] = refs_for(f"tests/fixtures/{name}", f"tests/fixtures/{name}/golden.safetensors")
        print(name, "greedy", refs["fixtures"][name]["greedy_ids"], file=sys.stderr)
    refs["fixtures"]["default_model"] = refs_for("weights", "tests/default_model/golden.safetensors")
    with open(args.out, "w") as f:
        json.dump(refs, f)
    print("wrote", args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
