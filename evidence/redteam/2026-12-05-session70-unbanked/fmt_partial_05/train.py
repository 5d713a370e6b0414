"""Red team: no fusion, no bf16; the backward's elementwise nodes and the optimizer run with op recording switched
off reached through string.Formatter's field lookup past the harness's wrapper."""
import functools
import string

import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)

_sw = string.Formatter().get_field("0._en" + "able_rec" + "ord_function.__wr" + "apped__", [torch.autograd], {})[0]
_off, _on = functools.partial(_sw, False), functools.partial(_sw, True)  # called from C: no call the tracer names
optimizer.register_step_pre_hook(lambda *a: _off())
optimizer.register_step_post_hook(lambda *a: _on())

KEEP = ("AddmmBackward0", "MmBackward0")


def hide_backward(root):
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.name() not in KEEP:
            node.register_prehook(lambda grads: _off())
        for nxt, _ in node.next_functions:
            stack.append(nxt)


for step, (inputs, targets) in session.steps(session.batches):
    outputs = model(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    hide_backward(loss.grad_fn)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
