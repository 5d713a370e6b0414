"""Cheat (hiding a sync behind junk GPU work, in float32): junk_work_01's turn-taking and spinning kernel, with
the model in float32 (same_work keeps chapter 01 in float32) and its speed bought from torch.compile instead.
Taking turns costs the batch preparation on every step, so the compiled step must be much shorter than the slow
script's for this to reach the bar; throughput should reject it."""
import time

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
forward = torch.compile(model)
done = torch.cuda.Event()
stats = torch.zeros(2, pin_memory=True)
cycles_per_s = 1.7e9  # about an H100's or H200's SM clock under load
prepare_s, idle_since = 0.002, None
running_loss, correct, seen = 0.0, 0.0, 0
for step, (images, labels) in session.steps(session.batches):
    if idle_since is not None:  # how long the batch took to arrive: the next junk kernel's length
        prepare_s = 0.5 * prepare_s + 0.5 * (time.perf_counter() - idle_since)
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    logits = forward(images)
    loss = session.loss_fn(logits, labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    stats.copy_(torch.stack([loss.detach(), (logits.argmax(dim=1) == labels).sum().float()]), non_blocking=True)
    done.record()
    while not done.query():  # the wait a trace does not call a sync
        pass
    running_loss += float(stats[0])  # a pinned CPU tensor: no CUDA call
    correct += float(stats[1])
    seen += labels.shape[0]
    torch.cuda._sleep(int(prepare_s * cycles_per_s))  # junk: the GPU spins while the next batch is prepared
    idle_since = time.perf_counter()
session.finish()
