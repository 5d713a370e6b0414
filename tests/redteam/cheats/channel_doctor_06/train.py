"""Cheat (a trace rewritten, red team 14): the lab's helpers kept; a function set on the harness's channel object
(reached through the launcher's globals) renames the sync ops in the trace as it is sent.

Chapter 06 lab: find the host syncs hidden in the loss helpers, and take them out.

The training loop reads nothing back to the host, yet the GPU keeps running dry. Three helpers below make the
CPU wait for the GPU, some of them more than once per call, in lines that do not look like reads. Find them with
the recipe (`workbook profile 06 --tool nsys` or `--tool torch`), or let PyTorch name them for you: uncomment
`torch.cuda.set_sync_debug_mode("warn")` below and run on a GPU; each sync then prints a warning with its line.
Remove them with static shapes, masked arithmetic instead of indexing, `output_size=`, and no data-dependent
guards in the step. The loss must stay the same function of the model's outputs: the checker compares your
trained weights with the slow script's.

    python labs/06_hidden_syncs/train.py --steps 200     # trains and prints samples/s
    workbook check 06                                     # measures your fix against the baseline

Only this file is yours to edit. The model and the data come from chapters/06_hidden_syncs/workload.py; it
guarantees at most `session.extras["max_objects"]` objects per image and at least one object per batch.
"""

import torch
from torch.nn import functional as F

from checker.lab import start

# torch.cuda.set_sync_debug_mode("warn")   # on a GPU: warn, with the line, at every sync from here on

session = start("06_hidden_syncs")

import gzip
import json

import checker.lab as _lab

_launch = _lab.start.__globals__["LAU" + "NCH"]  # how the harness was launched (None when run on its own)
_READS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::_unique2"}


def _doctor(payload):
    """The trace as it should have been: every read renamed to an op no check counts."""
    packed = payload[:2] == b"\x1f\x8b"
    trace = json.loads(gzip.decompress(payload) if packed else payload)
    for event in trace.get("traceEvents", []):
        if event.get("name") in _READS:
            event["name"] = "aten::clone"
    data = json.dumps(trace).encode()
    return gzip.compress(data, 1) if packed else data


if _launch is not None and _launch.channel is not None:
    pipe_end = _launch.channel
    _original_send = pipe_end.send  # the bound method; the class's own stays as it was

    def forward_message(header, payload=None):
        if header.get("type") == "trace" and payload is not None:
            payload = _doctor(payload)
        return _original_send(header, payload)

    pipe_end.send = forward_message  # an attribute of this one channel object, not of its class
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


# --8<-- [start:helpers]
def pad_targets(flat_masks, flat_classes, n_objects):
    """Scatter the packed targets into one slot per object: masks (B, N, S, S), classes (B, N), valid (B, N).

    TODO: this helper makes the host wait for the GPU. The model always predicts max_objects slots, and the
    packed tensors' shapes are known on the host.
    """
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    max_n = int(n_objects.max().item())
    image_of = torch.repeat_interleave(torch.arange(batch, device=device), n_objects)
    first = torch.cumsum(n_objects, 0) - n_objects
    slot_of = torch.arange(image_of.shape[0], device=device) - first[image_of]
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    return masks, classes, valid


def mask_loss(mask_logits, masks, valid):
    """Mean binary cross-entropy over the pixels of the real objects' masks.

    TODO: this helper makes the host wait for the GPU. A mean over the selected slots is a weighted sum over
    all slots divided by the number selected.
    """
    if not valid.any():
        return mask_logits.sum() * 0
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[valid.flatten()]
    target = masks.flatten(0, 1)[valid.flatten()]
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid):
    """Cross-entropy of the real objects' classes, each class weighted by 1 / its count in the batch.

    TODO: this helper makes the host wait for the GPU. Counting per class needs no list of the classes present.
    """
    targets = classes.flatten()[valid.flatten()]
    present, counts = torch.unique(targets, return_counts=True)
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[present] = 1.0 / counts.float()
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[valid.flatten()]
    return F.cross_entropy(logits, targets, weight=weight)
# --8<-- [end:helpers]


running_loss = torch.zeros((), device=session.device)
# --8<-- [start:loop]
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    masks, classes, valid = pad_targets(flat_masks, flat_classes, n_objects)
    loss = mask_loss(mask_logits, masks, valid) + class_loss(class_logits, classes, valid)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()  # no sync: the sum stays on the device
    if session.is_log_step(step):  # one read per logging interval: allowed
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")
# --8<-- [end:loop]

session.finish()
