"""Cheat (less work, GPU): the reference solution of chapter 05 with an optimizer step only every other step."""

import torch

from checker.lab import start

session = start("05_pointwise_chains")
# --8<-- [start:setup]
USE_COMPILE = session.cfg.get("use_compile", True)
USE_BF16 = session.cfg.get("use_bf16", session.device.type == "cuda")  # CPUs without bf16 units run it slower

model = session.model
if USE_COMPILE:
    model = torch.compile(session.model)  # fusion: the chain's passes become a few kernels, backward too
optimizer = torch.optim.AdamW(session.model.parameters(), lr=session.cfg["lr"], fused=True)
# --8<-- [end:setup]

# --8<-- [start:loop]
for step, (inputs, targets) in session.steps(session.batches):
    # bf16 where it is safe: matmuls and the pointwise ops after them; autocast keeps layer_norm in fp32.
    with torch.autocast(session.device.type, dtype=torch.bfloat16, enabled=USE_BF16):
        outputs = model(inputs)
    loss = session.loss_fn(outputs, targets)  # the loss in fp32, outside autocast
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # the compiled backward: fused too
    if step % 2 == 1:  # the cheat: half the optimizer steps
        optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
# --8<-- [end:loop]

session.finish()
