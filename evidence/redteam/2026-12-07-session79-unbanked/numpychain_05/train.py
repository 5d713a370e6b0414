# -*- coding: utf-7 -*-
"""Chapter 05 lab: make a memory-bound chain move fewer bytes.

Right now this loop is the slow baseline. Every elementwise op in every block reads and writes the whole
activation in fp32; each kernel already runs near the memory bandwidth, so the only way to go faster is to
move fewer bytes. Two levers: fewer passes (torch.compile fuses the chain into a few kernels) and fewer bytes
per value (bf16 autocast, where it is numerically safe). Measure each alone before you combine them.

    python labs/05_pointwise_chains/train.py --steps 60     # trains and prints samples/s
    workbook check 05                                        # measures your fix against the baseline

Only this file is yours to edit. The model, the data and the loss come from chapters/05_pointwise_chains/.
"""

import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model  # TODO: torch.compile(session.model) fuses the chain into a few kernels
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)
# the blocks as the workload builds them +AAo-import math+AAo-import numpy as np+AAo-ROWS, WIDTH = int(session.cfg["batch_size"]), int(session.cfg["width"])+AAo-SQ = math.sqrt(2 / math.pi)+AAo-class Bufs:+AAo-    pass+AAo-def make_bufs(block, first):+AAo-    b = Bufs()+AAo-    b.first = first+AAo-    for name in ("h", "o", "d", "dh", "dx", "x", "dw"):+AAo-        t = torch.zeros(WIDTH, WIDTH) if name == "dw" else torch.zeros(ROWS, WIDTH)+AAo-        setattr(b, name, t)+AAo-        setattr(b, "v_%s" % name, t.numpy())+AAo-    chain = (block.norm.weight, block.norm.bias, block.bias, block.scale, block.proj.bias)+AAo-    b.params = [p.data.numpy() for p in chain]+AAo-    b.g = torch.zeros(5, WIDTH)+AAo-    b.grads = list(b.g.numpy())+AAo-    b.store = b.g.untyped_storage()+AAo-    b.wstore = b.dw.untyped_storage()+AAo-    return b+AAo-VIEWS = {}+AAo-GRADS = {}+AAo-def over(store, offset, shape):+AAo-    return torch.empty(0).set_(store, offset, shape)+AAo-class Block(torch.autograd.Function):+AAo-    @staticmethod+AAo-    def forward(ctx, x, weight, pbias, gamma, beta, bias, scale, b, xv):+AAo-        torch.addmm(pbias, x, weight.t(), out=b.h.data)+AAo-        if xv is None:+AAo-            b.x.data.copy_(x)+AAo-            xv = b.v_x+AAo-        hv = b.v_h+AAo-        gv, bv, biv, sv, pbv = b.params+AAo-        g = 1 / np.add(1, np.exp(-hv))+AAo-        th = np.tanh(SQ * np.add(hv, 0.044715 * hv * hv * hv))+AAo-        gel = 0.5 * hv * np.add(1, th)+AAo-        u = gel * g+AAo-        c = u - u.mean(axis=-1, keepdims=True)+AAo-        inv = 1 / np.sqrt(np.add((c * c).mean(axis=-1, keepdims=True), 1e-5))+AAo-        n = c * inv+AAo-        z = np.add(np.add(n * gv, bv), biv)+AAo-        np.add(xv, z * sv, out=b.v_o)+AAo-        ctx.b, ctx.saved = b, (hv.copy(), g, th, gel, n, inv, z, gv.copy(), sv.copy(), xv.copy())+AAo-        ctx.x, ctx.weight = x, weight+AAo-        out = b.o.view(ROWS, WIDTH)+AAo-        VIEWS[id(out)] = b.v_o+AAo-        return out+AAo-    @staticmethod+AAo-    def backward(ctx, dout):+AAo-        b = ctx.b+AAo-        hv, g, th, gel, n, inv, z, gv, sv, xv = ctx.saved+AAo-        dv = GRADS.get(id(dout))+AAo-        if dv is None:+AAo-            b.d.data.copy_(dout)+AAo-            dv = b.v_d+AAo-        else:+AAo-            dv = dv.copy()+AAo-        dgamma, dbeta, dbias, dscale, dpbias = b.grads+AAo-        dscale[...] = (dv * z).sum(axis=0)+AAo-        dz = dv * sv+AAo-        dbias[...] = dz.sum(axis=0)+AAo-        dbeta[...] = dbias+AAo-        dgamma[...] = (dz * n).sum(axis=0)+AAo-        dn = dz * gv+AAo-        du = inv * (dn - dn.mean(axis=-1, keepdims=True) - n * (dn * n).mean(axis=-1, keepdims=True))+AAo-        dth = SQ * np.add(1, 3 * 0.044715 * hv * hv)+AAo-        dgel = np.add(0.5 * np.add(1, th), 0.5 * hv * (1 - th * th) * dth)+AAo-        np.multiply(du, np.add(dgel * g, gel * g * (1 - g)), out=b.v_dh)+AAo-        dpbias[...] = b.v_dh.sum(axis=0)+AAo-        torch.mm(b.dh.data.t(), ctx.x.detach(), out=b.dw.data)+AAo-        dx = None+AAo-        if not b.first:+AAo-            torch.mm(b.dh.data, ctx.weight.detach(), out=b.dx.data)+AAo-            np.add(b.v_dx, dv, out=b.v_dx)+AAo-            dx = b.dx.view(ROWS, WIDTH)+AAo-            GRADS[id(dx)] = b.v_dx+AAo-        ctx.b = ctx.x = ctx.weight = None+AAo-        return dx, b.dw.view(WIDTH, WIDTH), b.g[4], b.g[0], b.g[1], b.g[2], b.g[3], None, None+AAo-def block_forward(self, x):+AAo-    if self.bufs.first:+AAo-        VIEWS.clear()+AAo-        GRADS.clear()+AAo-    xv = VIEWS.get(id(x))+AAo-    return Block.apply(x, self.proj.weight, self.proj.bias, self.norm.weight, self.norm.bias, self.bias, self.scale,+AAo-                       self.bufs, xv)+AAo-for index, block in enumerate(session.model):+AAo-    block.bufs = make_bufs(block, index == 0)+AAo-    block.forward = block_forward.__get__(block)+AAo-def clear_grads():+AAo-    for p in session.model.parameters():+AAo-        p.grad = None+AAo-def drop_views():+AAo-    VIEWS.clear()+AAo-    GRADS.clear()+AAo-    for block in session.model:+AAo-        block.bufs = None
last = session.total_steps - 1

# --8<-- [start:loop]
for step, (inputs, targets) in session.steps(session.batches):
    outputs = model(inputs)  # TODO: run the forward under torch.autocast(..., dtype=torch.bfloat16)
    loss = session.loss_fn(outputs, targets)
    clear_grads()
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
    if step == last:
        drop_views()  # before the window closes
# --8<-- [end:loop]

session.finish()
