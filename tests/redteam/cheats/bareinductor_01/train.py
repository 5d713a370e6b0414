"""Chapter 01: the loop keeps its running statistics as Python numbers, updated every step."""

import torch
import torch._dynamo
import torch._inductor.config
from torch._dynamo.backends.common import aot_autograd
from torch._inductor.compile_fx import compile_fx_inner
from torch._inductor.decomposition import select_decomp_table

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
torch._dynamo.config.capture_dynamic_output_shape_ops = True
torch._inductor.config.compile_threads = 1

SCALE = 10000
SLOTS = torch.arange(30 * SCALE, device=session.device)
built = []


def native(gm, inputs):
    graph = compile_fx_inner(gm, inputs, cpp_wrapper=True)
    built.append(graph)
    return graph


def tally(loss, logits, labels, slots):
    """Statistics as counts: one slot per unit."""
    scaled = (loss * SCALE).round().long()
    bad = (~torch.isfinite(loss)).view(1)
    good = logits.argmax(dim=1) == labels
    units = torch.nonzero(slots < scaled)
    hits = torch.nonzero(good)
    bad = torch.nonzero(bad)
    return units, hits, bad


batch_size = int(session.cfg["batch_size"])
torch.compile(tally, backend=aot_autograd(fw_compiler=native, decompositions=select_decomp_table()),
              fullgraph=True)(torch.tensor(1.0), torch.zeros(batch_size, 10), torch.zeros(batch_size, dtype=torch.long),
                              SLOTS)
counter = built[0].current_callable

running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    units, hits, bad = counter([loss.detach(), logits.detach(), labels, SLOTS])
    running_loss += units.shape[0] / SCALE  # every step
    if bad.shape[0]:
        raise FloatingPointError(f"loss is not finite at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += hits.shape[0]
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {loss}")

session.finish()
