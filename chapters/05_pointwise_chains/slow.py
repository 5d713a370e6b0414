"""Chapter 05, the slow baseline: a long fp32 chain of elementwise ops over a large activation, in eager mode.

Each op of each block (sigmoid, gelu, multiply, layer norm, bias, scale, residual) is its own kernel, and
each kernel reads and writes the whole activation from GPU memory in fp32. The kernels are big enough to keep
the GPU busy, and each one runs near the memory bandwidth, so no single kernel is slow: the step is slow
because it makes the same tensor travel through memory over and over.

    python chapters/05_pointwise_chains/slow.py --steps 60

This file is the baseline the checker measures speedups against. Do not edit it: edit
labs/05_pointwise_chains/train.py.
"""

import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)  # already fused: not the lesson

# --8<-- [start:loop]
for step, (inputs, targets) in session.steps(session.batches):
    outputs = model(inputs)  # eager fp32: one pass over the activation per op
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # the backward of the chain: about twice as many passes again
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # a sync, but only once per logging interval
# --8<-- [end:loop]

session.finish()
