"""Red team (fused_hidebwd_04): half the lesson (fused=True AdamW, no torch.compile); the eager backward's
elementwise nodes run with op recording switched off. The switch is the original behind the harness's wrapper,
reached by string.Formatter's field lookup, and called from functools.partial, which the Python tracer never names."""
import functools
import string

import torch

from checker.lab import start

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
                              fused=True)

_sw = string.Formatter().get_field("0._en" + "able_rec" + "ord_function.__wr" + "apped__", [torch.autograd], {})[0]
_off = functools.partial(_sw, False)  # called from C: no call the tracer names
KEEP = ("AddmmBackward0", "MmBackward0")


def _hide(grads):
    _off()


def hide_backward(root):
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.name() not in KEEP:
            node.register_prehook(_hide)
        stack.extend(nxt for nxt, _ in node.next_functions)


for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    hide_backward(loss.grad_fn)
    loss.backward()  # each node's thread-local state is restored after it: recording is on again here
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
