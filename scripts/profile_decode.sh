#!/usr/bin/env bash
# Decode-attention study on the GPU machine (docs/attention_notes.md, issue 3): our kernel next
# to cuDNN (PyTorch SDPA) and a plain read kernel (the roofline), then Nsight Compute on the
# split kernel at 40/8 heads: stall reasons in total and the instructions with the most samples.
# Logs under $OUT; run from the repository root with carry .carry/sys.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash scripts/device_prep.sh
make -j16 build/bench/bench_attention >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
build/bench/bench_attention "$OUT/ours.txt" decode 2>&1 | tee "$OUT/decode.log"
python3 -W ignore bench/bench_attention_torch.py --ours "$OUT/ours.txt" 2>&1 | grep -E "cudnn|decode ctx" | tee "$OUT/torch.log"
ncu --kernel-name regex:attention_decode_kernel --launch-skip 30 --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section SourceCounters --export "$OUT/decode_40_8" \
  build/bench/bench_attention - decode_40_8 >"$OUT/ncu.log" 2>&1
ncu --import "$OUT/decode_40_8.ncu-rep" --page details 2>&1 | grep -E "SM Frequency|DRAM Throughput|Duration"
ncu --import "$OUT/decode_40_8.ncu-rep" --page source --csv --print-source sass >"$OUT/sass.csv" 2>&1
python3 - "$OUT/sass.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr, data = rows[1], rows[2:]
src, total = hdr.index("Source"), hdr.index("Warp Stall Sampling (All Samples)")
reasons = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
n = lambda r, i: int(r[i] or 0)
print("stall samples:", {hdr[i][6:]: sum(n(r, i) for r in data) for i in reasons if sum(n(r, i) for r in data)})
for r in sorted(data, key=lambda r: -n(r, total))[:8]:
    print(f"{n(r, total):5d}  {r[src].strip()[:60]:60s}", {hdr[i][6:]: n(r, i) for i in reasons if n(r, i)})
PY
