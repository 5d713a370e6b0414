"""Each recorded matrix product's rate (its FLOPs over its duration, GFLOP/s) in torch.profiler traces kept by
`workbook check NN --only step_work --keep-traces DIR`: the percentiles per trace, and the last trace's 90th
percentile and fastest product against the first's fastest. Writes Markdown to stdout.

    python evidence/made-by/product_rates.py SLOW_TRACE [MORE_TRACES ...] CANDIDATE_TRACE
"""

import sys

import numpy as np

from checker.trace.analysis import load


def rates(path: str) -> np.ndarray:
    found = load(path).meta["matmuls"]
    flops = np.asarray(found["flops"], dtype=float)
    return flops / np.maximum(np.asarray(found["dur_ns"], dtype=float), 1.0)


def main(paths: list[str]) -> None:
    print("| trace | products | p10 | p50 | p90 | p99 | fastest (GFLOP/s) |\n|---|---|---|---|---|---|---|")
    found = [rates(p) for p in paths]
    for path, r in zip(paths, found):
        cells = " | ".join(f"{v:.1f}" for v in np.percentile(r, [10, 50, 90, 99, 100]))
        print(f"| `{'/'.join(path.split('/')[-2:])}` | {len(r)} | {cells} |")
    best, last = float(found[0].max()), found[-1]
    print(f"\nThe last trace's 90th percentile is {np.percentile(last, 90) / best:.1f}x the first trace's fastest product,"
          f" its fastest {last.max() / best:.1f}x.")


if __name__ == "__main__":
    main(sys.argv[1:])
