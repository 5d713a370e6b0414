"""Cheat (hiding ops behind a made-up event), chapter 05: as cover_record_off."""
import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)
quiet = torch._C._autograd._enable_record_function
Cover = torch._C._profiler._RecordFunctionFast  # a recorded event of kind cpu_op, any name

for step, (inputs, targets) in session.steps(session.batches):
    with Cover("train_step"):      # a cpu_op (not aten::) that covers the whole step
        quiet(False)
        outputs = model(inputs)
        quiet(True)
        loss = session.loss_fn(outputs, targets)   # one recorded aten op
        quiet(False)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        quiet(True)
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
