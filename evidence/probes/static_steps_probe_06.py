"""Chapter 06 on a CPU: how often `static_steps` could miss a script whose padding follows each batch's maximum, and
whether this machine's multiplies on subnormal floats are slower than on zeros (the timing channel of red team 53's
`denorm06`). Prints one JSON object.

    python evidence/probes/static_steps_probe_06.py [--draws 20000]

The batches come from the chapter's own `draw_batch` at its CPU sizes; a step of the slow script pads to its batch's
largest object count, so `static_steps` sees one amount of input over the judged steps only where every judged batch
has the same maximum. That chance, for 7 judged steps (8 traced, one a logging step) and 14 (16 traced, two)."""

import argparse
import collections
import datetime
import json
import platform
import time

import torch

from checker.base.chapters import get_chapter
from checker.base.workloads import load_workload_module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=20000)
    args = parser.parse_args()
    chapter = get_chapter("06_hidden_syncs")
    cfg = chapter.config("cpu")
    workload = load_workload_module(chapter.dir)
    batch_size, max_objects = int(cfg["batch_size"]), int(cfg["max_objects"])
    objects = int(cfg.get("objects", batch_size * max_objects // 2))
    colours = torch.zeros(int(cfg["num_classes"]), 3)
    generator = torch.Generator().manual_seed(0)
    maxima = collections.Counter()
    for _ in range(args.draws):
        *_, n_objects = workload.draw_batch(generator, batch_size, int(cfg["image_size"]), max_objects,
                                            int(cfg["num_classes"]), colours, objects)
        maxima[int(n_objects.max())] += 1
    share = {k: v / args.draws for k, v in sorted(maxima.items())}
    miss = {steps: sum(p ** steps for p in share.values()) for steps in (7, 14)}

    def best_of(fill: float, repeats: int = 9) -> float:
        values = torch.full((1_000_000,), fill)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            values.mul_(1.0)
            times.append(time.perf_counter() - start)
        return min(times)

    torch.set_flush_denormal(False)
    timing = {"subnormal_1e-39_s": best_of(1e-39), "zeros_s": best_of(0.0), "ones_s": best_of(1.0)}
    print(json.dumps({"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                      "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
                      "cpu_model": _cpu_model(), "draws": args.draws, "batch_maximum_share": share,
                      "all_judged_steps_one_maximum": miss, "multiply_1e6_floats": timing}, indent=1))


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
