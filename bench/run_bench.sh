#!/usr/bin/env bash
# `make bench` (on a machine with an NVIDIA GPU, torch and transformers): the attention kernels
# and the end-to-end engine, each next to PyTorch / HF transformers measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
build/bench/bench_attention "$out/ours.txt"
python3 -W ignore bench/bench_attention_torch.py --ours "$out/ours.txt"
python3 bench/bench_e2e.py
python3 bench/bench_e2e.py --batches 1 8 32 64
