"""Cheat (hiding ops in an operator of its own): the lab's eager step as a torch.library op of its own namespace,
with op recording switched off inside it."""
import torch

from checker.lab import start

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
                              foreach=False)
quiet = torch._C._autograd._enable_record_function
current = {}


def whole_step(token):
    quiet(False)
    inputs, labels = current["batch"]
    loss = session.loss_fn(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    current["loss"] = loss.detach()
    quiet(True)
    return token + 1   # one recorded aten op


lib = torch.library.Library("mytrain", "DEF")   # a user namespace: not aten::, so not a "top-level aten op"
lib.define("step(Tensor t) -> Tensor")
lib.impl("step", whole_step, "CompositeImplicitAutograd")
token = torch.zeros(1)

for step, batch in session.steps(session.batches):
    current["batch"] = batch
    torch.ops.mytrain.step(token)
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {current['loss'].item():.4f}")

session.finish()
