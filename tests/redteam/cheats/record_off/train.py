"""Cheat (hiding ops): the lab's eager step, unchanged, with PyTorch's RecordFunction switched off on this
thread for all of it but the loss, so torch.profiler records ~1 aten op per step instead of hundreds."""
import torch

from checker.lab import start

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
                              foreach=False)  # still one parameter at a time
quiet = torch._C._autograd._enable_record_function

for step, (inputs, labels) in session.steps(session.batches):
    quiet(False)
    logits = model(inputs)          # the same eager micro-ops, unrecorded
    quiet(True)
    loss = session.loss_fn(logits, labels)   # one recorded top-level op: the step "holds work"
    quiet(False)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    quiet(True)
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
