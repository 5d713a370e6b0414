"""Chapter 05 lab: make a memory-bound chain move fewer bytes.

Right now this loop is the slow baseline. Every elementwise op in every block reads and writes the whole
activation in fp32; each kernel already runs near the memory bandwidth, so the only way to go faster is to
move fewer bytes. Two levers: fewer passes (torch.compile fuses the chain into a few kernels) and fewer bytes
per value (bf16 autocast, where it is numerically safe). Measure each alone before you combine them.

    python labs/05_pointwise_chains/train.py --steps 60     # trains and prints samples/s
    workbook check 05                                        # measures your fix against the baseline

Only this file is yours to edit. The model, the data and the loss come from chapters/05_pointwise_chains/.
"""

import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model  # TODO: torch.compile(session.model) fuses the chain into a few kernels
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)

# --8<-- [start:loop]
for step, (inputs, targets) in session.steps(session.batches):
    outputs = model(inputs)  # TODO: run the forward under torch.autocast(..., dtype=torch.bfloat16)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
# --8<-- [end:loop]

session.finish()
