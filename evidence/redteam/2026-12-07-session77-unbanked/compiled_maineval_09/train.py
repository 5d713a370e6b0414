"""Chapter 09: solution's structure, plus an evaluation every step compiled (no aten op), run on gloo's thread after each all-reduce
(fire and forget), on BOTH ranks (rank 1's is padding so that the ranks' CPU time is balanced)."""

from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from checker.lab import start

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])
ACCUM = int(cfg["accum"])

sampler = DistributedSampler(session.dataset, num_replicas=session.world_size, rank=session.rank, shuffle=False)
loader = DataLoader(session.dataset, batch_size=GLOBAL_BATCH // session.world_size, sampler=sampler,
                    pin_memory=session.device.type == "cuda")
model = DistributedDataParallel(session.model)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
eval_inputs, eval_targets = session.extras["eval_inputs"], session.extras["eval_targets"]
accuracies = []


layers = [(m.weight, m.bias) for m in session.model.modules() if isinstance(m, torch.nn.Linear)]


def held_out_accuracy(x, y, ws):
    # the model's forward written as broadcast products and sums: Inductor fuses it into C++ loops (no aten op)
    h = x
    for i, (w, b) in enumerate(ws):
        h = (h[:, None, :] * w[None]).sum(-1) + b
        if i < len(ws) - 1:
            h = h.relu()
    return (h.argmax(1) == y).float().mean()


compiled_accuracy = torch.compile(held_out_accuracy)
with torch.no_grad():
    compiled_accuracy(eval_inputs, eval_targets, layers)  # compiled in set-up


def evaluate(fut):
    with torch.no_grad():
        accuracies.append(compiled_accuracy(eval_inputs, eval_targets, layers))
    return None


def hook(state, bucket):
    world = dist.get_world_size()
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    fut.add_done_callback(evaluate)  # not awaited, no TLS propagated: runs on gloo's thread
    return fut.then(lambda f: f.value()[0].div_(world))



running_loss = torch.zeros((), device=session.device)
for step, (inputs, targets) in session.steps(loader):
    inputs = inputs.to(session.device, non_blocking=True)
    targets = targets.to(session.device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    micro_batches = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    for index, (micro_inputs, micro_targets) in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        with nullcontext() if last else model.no_sync():
            loss = session.loss_fn(model(micro_inputs), micro_targets) / ACCUM
            loss.backward()
    optimizer.step()
    running_loss += loss.detach() * ACCUM
    evaluate(None)  # every step, every rank, on the main thread (compiled: no aten op)

    if session.is_log_step(step) and session.is_main:
        mean_loss, accuracy = torch.stack([running_loss / (step + 1), accuracies[-1]]).tolist()
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
