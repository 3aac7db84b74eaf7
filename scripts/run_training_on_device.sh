#!/usr/bin/env bash
# What the device call runs (from the repository root, with carry [".carry"] holding
# .carry/corpus.txt.xz): trains the default model with scripts/train_default_model.py and leaves
# under $OUT what comes back: train.log, config.json, generation_config.json, and
# model.safetensors cut into 15 MiB parts (the device returns files of at most 16 MiB) with its
# sha256. Extra arguments go to the training script (e.g. --train_seconds 40 for a smoke test).
# Join the parts here with:
#   cat $AT/model.safetensors.part-* > weights/model.safetensors
#   (cd weights && sha256sum -c $AT/model.safetensors.sha256)
set -euo pipefail
: "${OUT:?set OUT to the folder that comes back}"
export HF_HUB_OFFLINE=1  # the machine has no network; never try the Hub
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c 'import torch, transformers, sentencepiece as s; print("torch", torch.__version__,
        "transformers", transformers.__version__, "sentencepiece", s.__version__)'
    python3 scripts/train_default_model.py --corpus .carry/corpus.txt.xz \
        --tokenizer tokenizer/tokenizer.model --out "$OUT/model" "$@"
} 2>&1 | tee "$OUT/train.log"
cd "$OUT/model"
sha256sum model.safetensors > ../model.safetensors.sha256
split -b 15M -d model.safetensors ../model.safetensors.part-
mv config.json generation_config.json ..
cd .. && rm -r model
ls -l "$OUT"
