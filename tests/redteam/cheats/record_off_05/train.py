"""Cheat (hiding ops), chapter 05: the lab's eager fp32 step, unchanged (no compile, no autocast), with
RecordFunction off on this thread for forward and backward."""
import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)
quiet = torch._C._autograd._enable_record_function

for step, (inputs, targets) in session.steps(session.batches):
    quiet(False)
    outputs = model(inputs)
    quiet(True)
    loss = session.loss_fn(outputs, targets)  # one recorded elementwise op: not "none at all"
    quiet(False)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    quiet(True)
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
