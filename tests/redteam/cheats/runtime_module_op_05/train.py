"""Chapter 05: the unfused eager step, run whole inside one "aten::" op so that a CPU trace sees one top-level op.

The op's body lives in a module this script writes at start-up (its frames then name neither this script nor
torch.nn.modules), and runs the same eager chain as the slow script: every pass over memory still happens.
"""

import os
import sys
import tempfile

import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)

BODY = '''
import torch
import torch.nn.functional as F

STATE = {}


def step(token):
    x, targets = STATE["batch"]
    for w, b, shape, nw, nb, eps, bias, scale in STATE["blocks"]:
        h = F.linear(x, w, b)
        gate = torch.sigmoid(h)
        h = F.gelu(h) * gate
        h = F.layer_norm(h, shape, nw, nb, eps)
        h = h + bias
        x = x + h * scale
    loss = F.mse_loss(x.float(), targets)
    loss.backward()
    STATE["loss"] = loss.detach()
    return token.clone()
'''
folder = tempfile.mkdtemp()
with open(os.path.join(folder, "pointwise_fused.py"), "w") as handle:
    handle.write(BODY)
sys.path.insert(0, folder)
import pointwise_fused  # noqa: E402

# the parameters, looked up once here (a module's attribute lookup is Python in torch.nn.modules)
pointwise_fused.STATE["blocks"] = [
    (blk.proj.weight, blk.proj.bias, tuple(blk.norm.normalized_shape), blk.norm.weight, blk.norm.bias, blk.norm.eps,
     blk.bias, blk.scale) for blk in model]
torch.library.define("aten::fused_pointwise_step", "(Tensor token) -> Tensor")
torch.library.impl("aten::fused_pointwise_step", "CompositeImplicitAutograd", pointwise_fused.step)

token = torch.zeros(())
for step, batch in session.steps(session.batches):
    pointwise_fused.STATE["batch"] = batch
    optimizer.zero_grad(set_to_none=True)
    torch.ops.aten.fused_pointwise_step(token)
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {pointwise_fused.STATE['loss'].item():.4f}")

session.finish()
