"""Chapter 04 lab: make a launch-bound step launch fewer, bigger kernels.

Right now this loop is the slow baseline. Every small op of every block is its own kernel launch, and the
optimizer updates one parameter at a time; the GPU waits on the CPU between kernels. Cut the number of
launches: compile the model (torch.compile fuses the small ops; mode="reduce-overhead" also replays the
step as CUDA graphs) and use an optimizer that updates all parameters in a few kernels (fused=True).
Keep the batch as it is: the checker compares the same work.

    python labs/04_eager_microops/train.py --steps 200     # trains and prints samples/s
    workbook check 04                                       # measures your fix against the baseline

Only this file is yours to edit. The model, the data and the loss come from chapters/04_eager_microops/.
"""

import torch

from checker.lab import start

session = start("04_eager_microops")
model = session.model  # TODO: torch.compile(session.model, ...) fuses the small ops into a few kernels
optimizer = torch.optim.AdamW(
    model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
    foreach=False,  # TODO: one parameter at a time; fused=True updates them all in a few kernels
)

# --8<-- [start:loop]
for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
# --8<-- [end:loop]

session.finish()
