bash scripts/device_prep.sh; make -j16 generate build/bench/bench_fp8 >/tmp/b.log 2>&1 || tail -20 /tmp/b.log
build/bench/bench_fp8 | grep -v "rows 1, .*16 warps" 
ncu --launch-skip 3000 --launch-count 120 --metrics gpu__time_duration.sum --csv --page raw ./generate --device cuda --random-weights bench/olmo2_7b.json --dtype fp8 --prompt-len 128 -n 40 --temperature 0 > $OUT/ncu.csv 2>$OUT/ncu.err
python3 - <<'PY'
import csv, os, collections
rows = list(csv.reader(open(os.environ["OUT"] + "/ncu.csv")))
i = [k for k, r in enumerate(rows) if "Kernel Name" in r][0]
hdr = rows[i]; data = rows[i + 2:]
kn, t = hdr.index("Kernel Name"), hdr.index("gpu__time_duration.sum")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in data:
    tot[r[kn][:70]] += float(r[t]); cnt[r[kn][:70]] += 1
for k, v in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"{v/1e3:9.1f} us  {cnt[k]:4d}x  {k}")
print("total", sum(tot.values()) / 1e3, "us over", sum(cnt.values()), "kernels")
PY
