"""Cheat (hiding ops behind a made-up event): the lab's eager step with PyTorch's op recording switched off,
inside one event of its own (_RecordFunctionFast) that covers the step, so the trace looks accounted for."""
import torch

from checker.lab import start

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
                              foreach=False)  # the lab's eager step, unchanged
quiet = torch._C._autograd._enable_record_function
Cover = torch._C._profiler._RecordFunctionFast  # a recorded event of kind cpu_op, any name

for step, (inputs, labels) in session.steps(session.batches):
    with Cover("train_step"):      # a cpu_op (not aten::) that covers the whole step
        quiet(False)
        logits = model(inputs)
        quiet(True)
        loss = session.loss_fn(logits, labels)   # one recorded aten op
        quiet(False)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        quiet(True)
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
