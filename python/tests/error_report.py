"""Errors of each op against the fp64 reference, ours next to torch's own op on the same inputs
(SDPA for attention, F.rms_norm / F.layer_norm for the norms), collected by the tests and
summarised by conftest.py at the end of the run."""
import os

ROWS = []  # (group, case, dtype, ours_rel, ours_abs, torch_rel, torch_abs); torch_* None when not run


def add(group, case, dtype, ours, theirs=None):
    """ours, theirs: (rel_l2, max_abs) pairs."""
    ROWS.append((group, case, dtype, *ours, *(theirs if theirs else (None, None))))


def summary():
    """One line per (group, dtype): the case with our largest rel-L2, and torch's on it. With
    OLMO_KERNELS_ERROR_LOG set, every row is also written to that file."""
    if not ROWS:
        return []
    fmt = lambda x: f"{x:.2e}" if x is not None else "     -  "
    if os.environ.get("OLMO_KERNELS_ERROR_LOG"):
        with open(os.environ["OLMO_KERNELS_ERROR_LOG"], "w") as f:
            for r in ROWS:
                f.write(f"{r[0]:<18} {r[2]:<9} ours {fmt(r[3])} {fmt(r[4])}  torch {fmt(r[5])} {fmt(r[6])}  {r[1]}\n")
    worst = {}
    for row in ROWS:
        key = (row[0], row[2])
        if key not in worst or row[3] > worst[key][3]:
            worst[key] = row
    lines = [f"olmo_kernels errors vs fp64 reference ({len(ROWS)} cases; worst case per group):",
             f"  {'group':<18} {'dtype':<9} {'ours rel-L2':>11} {'max-abs':>9} {'torch rel-L2':>12} {'max-abs':>9}  case"]
    for (group, dtype), r in sorted(worst.items()):
        lines.append(f"  {group:<18} {dtype:<9} {fmt(r[3]):>11} {fmt(r[4]):>9} {fmt(r[5]):>12} {fmt(r[6]):>9}  {r[1]}")
    return lines
