"""Red-team: torch.compile with a graph break after every op of the chain: each pass is its own compiled kernel
(no fusion at all: as many passes over memory as eager), but compiled kernels record no operator on a CPU."""
import torch
from torch import nn
from torch.nn import functional as F

from checker.lab import start

session = start("05_pointwise_chains")
gb = torch._dynamo.graph_break


@torch.compile
def chain(blk, x):  # no loop here: dynamo resumes after each break, one graph (one kernel) per op
    h = blk.proj(x)
    gb()
    gate = torch.sigmoid(h)
    gb()
    g = F.gelu(h)
    gb()
    h = g * gate
    gb()
    h = blk.norm(h)
    gb()
    h = h + blk.bias
    gb()
    h = h * blk.scale
    gb()
    return x + h


def model(x):
    for blk in session.model:
        x = chain(blk, x)
    return x


optimizer = torch.optim.AdamW(session.model.parameters(), lr=session.cfg["lr"], fused=True)

for step, (inputs, targets) in session.steps(session.batches):
    if step == session.warmup - 1:  # compiled by now: skip the guards' checks from here on
        torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)
    outputs = model(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
