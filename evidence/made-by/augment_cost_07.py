"""Chapter 07: one sample made as the dataset makes it (pad, crop, flip) against a copy of a stored image, the cost of a
table of every augmented variant (red team 42's crop_table_07). Prints one line per config; run from the checkout."""
import platform
import time
import tomllib
from datetime import date
from pathlib import Path

import torch

from checker.base.workloads import load_workload_module

chapter = Path("chapters/07_capstone_ladder")
workload = load_workload_module(chapter)
config = tomllib.loads((chapter / "chapter.toml").read_text())["workload"]
print(f"# {date.today()} {platform.processor() or platform.machine()} torch {torch.__version__}, one thread, 2000 samples")
torch.set_num_threads(1)
for name, cfg in config.items():
    size, pool = int(cfg["image_size"]), int(cfg["pool_size"])
    generator = torch.Generator().manual_seed(0)
    templates = torch.rand(workload.NUM_CLASSES, 3, 4, 4, generator=generator) * 2 - 1
    images, labels = workload.make_images(pool, size, templates, generator)
    dataset = workload.AugmentedImages(images, labels, 4096, 0, raw=True)
    timings = {}
    for what, make in (("made", lambda i: dataset[(i, 5)]), ("copied", lambda i: images[i % pool].clone())):
        start = time.perf_counter()
        for i in range(2000):
            make(i)
        timings[what] = (time.perf_counter() - start) / 2000 * 1e6
    print(f"{name}: image {size}, pool {pool}: a sample made {timings['made']:.1f} us, a stored image copied "
          f"{timings['copied']:.1f} us")
