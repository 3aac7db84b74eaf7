"""Writes a random-weight OLMo checkpoint folder exactly as transformers' save_pretrained does
(config.json, generation_config.json, sharded model-0000k-of-0000n.safetensors + index), for
load benchmarks at real sizes. Runs where torch + transformers are (the GPU machine).

    python3 scripts/make_checkpoint.py --config bench/olmo2_7b.json --out DIR \
        [--shard-size 5GB] [--tokenizer tests/tokenizers/allenai_dolma2.json]
"""
import argparse, json, os, shutil, time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--config", required=True, help="a config.json (model_type olmo, olmo2 or olmo3)")
ap.add_argument("--out", required=True)
ap.add_argument("--shard-size", default="5GB", help="save_pretrained's max_shard_size (7B bf16 in 5GB: 3 shards)")
ap.add_argument("--tokenizer", help="a tokenizer.json to copy beside the weights")
a = ap.parse_args()

t = time.time()
cfg = json.load(open(a.config))
conf = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda" if torch.cuda.is_available() else "cpu"):   # random init on the GPU: seconds
    model = AutoModelForCausalLM.from_config(conf)
model.save_pretrained(a.out, max_shard_size=a.shard_size)
if a.tokenizer:
    shutil.copy(a.tokenizer, os.path.join(a.out, "tokenizer.json"))
size = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out) if f.endswith(".safetensors"))
print(f"{a.out}: {size / 1e9:.2f} GB of safetensors in "
      f"{sum(f.endswith('.safetensors') for f in os.listdir(a.out))} files, {time.time() - t:.1f} s")
