"""Cheat (hiding a sync, GPU): keep chapter 01's turn-taking but make it with no call a trace names as a sync:
after each step, poll a CUDA event until the GPU is done (cudaEventQuery, not cudaEventSynchronize), and read
the statistics from pinned buffers filled by non-blocking copies. Buy speed elsewhere (bf16 autocast,
channels-last), as rewrite_trace_01 does, to reach the speed bar. host_syncs counts no sync; gpu_fed sees the GPU
idle while every batch is prepared."""
import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model.to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
done = torch.cuda.Event()
stats = torch.zeros(2, pin_memory=True)
running_loss, correct, seen = 0.0, 0.0, 0
for step, (images, labels) in session.steps(session.batches):
    images = images.to(session.device, non_blocking=True).to(memory_format=torch.channels_last)
    labels = labels.to(session.device, non_blocking=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(images)
    loss = session.loss_fn(logits.float(), labels)
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
session.finish()
