"""Chapter 04, the slow baseline: an eager step that is nothing but tiny kernel launches.

The model writes every block out one small op at a time, and the optimizer updates one parameter at a
time (foreach=False): a thousand-odd kernels per step, each on a few hundred KiB. In eager mode the CPU
launches them one by one (several microseconds each) and the GPU finishes each before the next arrives:
the step is launch-bound, and the GPU idles between kernels.

    python chapters/04_eager_microops/slow.py --steps 200

This file is the baseline the checker measures speedups against. Do not edit it: edit
labs/04_eager_microops/train.py.
"""

import torch

from checker.lab import start

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(
    model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
    foreach=False,  # one parameter at a time: about seven kernels per parameter per step
)

# --8<-- [start:loop]
for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(model(inputs), labels)  # eager: every op in every block is its own launch
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # about twice as many launches again
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # a sync, but only once per logging interval
# --8<-- [end:loop]

session.finish()
