"""Chapter 07, the slow baseline: a ResNet-18 training loop with every pattern of chapters 01-03, and no lever.

Per-step reads of the loss and the accuracy (`.item()`, `float(t)`, `if t:`: chapter 01), batches copied
from pageable memory with a blocking `.to(device)` (chapter 02), and a DataLoader that crops, flips and
normalizes every sample in the training process (`num_workers=0`: chapter 03). It also uses none of the
generic levers: cuDNN picks its convolution algorithms by heuristics, activations are channels-first
float32, every op is launched eagerly, and the optimizer updates one parameter at a time.

    python chapters/07_capstone_ladder/slow.py --steps 60

Numbers: see docs/results/07_capstone_ladder.md (measured on a GPU by scripts/gpu_verify.sh, which names it).
This file is the baseline the checker measures speedups against. Do not edit it: edit
labs/07_capstone_ladder/train.py.
"""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("07_capstone_ladder")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9, weight_decay=5e-4,
                            foreach=False)  # one parameter at a time: several kernels per parameter per step

loader = DataLoader(
    session.dataset,  # float32 samples, normalized on the CPU
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],  # shuffles every epoch, the same order in every variant
    drop_last=True,
)
running_loss = 0.0
correct = 0
seen = 0
# --8<-- [start:loop]
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device)  # pageable source: a blocking copy, the CPU waits for it
    labels = labels.to(session.device)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    running_loss += loss.item()  # sync: the host waits for the whole forward pass
    if not torch.isfinite(loss):  # sync: `if tensor` is bool(tensor)
        raise FloatingPointError(f"loss is {loss} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += float((logits.argmax(dim=1) == labels).sum())  # sync: waits for backward and the step
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")
# --8<-- [end:loop]

session.finish()
