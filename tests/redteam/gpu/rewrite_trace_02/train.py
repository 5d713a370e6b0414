"""Cheat (a trace rewritten, GPU): keep chapter 02's pageable copies, buy speed elsewhere (bf16 autocast,
channels-last), and when the run ends rewrite the torch.profiler trace the harness wrote into the working
folder so that every copy reads "Pinned". Against a trace the run writes, pageable_copies reads 0 per step;
against the grader's own nsys trace, the pageable copies are there."""
import atexit
import gzip
import json
import os

import torch
from torch.utils.data import DataLoader

from checker.lab import start


def scrub():
    for name in os.listdir("."):
        if name.endswith(".json.gz"):
            with gzip.open(name, "rt") as f:
                text = f.read()
            with gzip.open(name, "wt") as f:
                f.write(text.replace("Pageable", "Pinned"))


atexit.register(scrub)
session = start("02_pageable_copies")
model = session.model.to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
loader = DataLoader(session.dataset, batch_size=None)
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device).to(memory_format=torch.channels_last)  # pageable, as in the lab
    labels = labels.to(session.device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = session.loss_fn(model(images).float(), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
scrub()
