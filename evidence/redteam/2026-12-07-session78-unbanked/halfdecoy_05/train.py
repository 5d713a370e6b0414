"""Chapter 05: the solution (torch.compile), but each window step trains on half its batch; the products the other
half would have run are stood in for by convolution_backward calls that compute nothing (output_mask all False),
recorded with shapes whose FLOPs sum to the missing half, each small enough to be credited in full."""
import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = torch.compile(session.model, dynamic=False)  # one static graph per batch shape
optimizer = torch.optim.AdamW(session.model.parameters(), lr=session.cfg["lr"], fused=True)
WIDTH = int(session.cfg["width"])
BLOCKS = len(session.model)
BATCH = int(session.cfg["batch_size"])
HALF = BATCH // 2
L = 131072  # one decoy: 4 * L = 524288 recorded FLOPs
_g = torch.zeros(1, 8, 128, 128)  # 4 * 1 * 8 * 1 * 16384 = 4 * L recorded FLOPs
_x = torch.zeros(1, 1, 128, 128)
_w = torch.zeros(8, 1, 1, 1)
MISSING_FWD = BLOCKS * 2 * (BATCH - HALF) * WIDTH * WIDTH
MISSING_BWD = (2 * BLOCKS - 1) * 2 * (BATCH - HALF) * WIDTH * WIDTH  # weight grads, input grads but the first block's
N_FWD, N_BWD = MISSING_FWD // (4 * L), MISSING_BWD // (4 * L)


def decoys(n):
    for _ in range(n):
        torch.ops.aten.convolution_backward(_g, _x, _w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
                                            [False, False, False])


class Stand(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        decoys(N_BWD)
        return grad


for step, (inputs, targets) in session.steps(session.batches):
    if step == 0:  # warm-up: compile the half batch's graph too, so no window step compiles
        model(inputs[:HALF]).sum().backward()
        optimizer.zero_grad(set_to_none=True)
    if step >= session.warmup:
        inputs, targets = inputs[:HALF], targets[:HALF]
        outputs = Stand.apply(model(inputs))
        decoys(N_FWD)
    else:
        outputs = model(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
