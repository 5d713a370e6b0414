"""Chapter 06: targets padded to the batch's largest object count, read on the host every step (red team 55:
compiled_sizes_06). The read is fbgemm's weight quantizer (its scale is the tensor's max / 255, found in C++ with no
op that reads a value); every data-sized tensor lives only inside one torch.compile'd function (the loss and its
gradient, worked out by hand so that no backward graph need compile), whose C++ kernels and buffers record no op, so
no recorded op's input shape follows the data."""

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
MAX_OBJECTS = session.extras["max_objects"]


def peek_max(t):
    """max(t, 0) of a tensor as a Python float, with no op a CPU trace counts as a read."""
    return torch.fbgemm_linear_quantize_weight(t.detach().float().reshape(1, -1))[2] * 255.0


def padded_loss_and_grads(mask_logits, class_logits, flat_masks, flat_classes, n_objects, max_n: int):
    """The slow script's loss on targets padded to max_n slots (max_n read on the host), and its gradients."""
    batch, slots, size = mask_logits.shape[0], mask_logits.shape[1], flat_masks.shape[-1]
    num_classes, device = class_logits.shape[-1], n_objects.device
    total = flat_classes.shape[0]
    image_of = torch.repeat_interleave(torch.arange(batch, device=device), n_objects, output_size=total)
    first = torch.cumsum(n_objects, 0) - n_objects
    slot_of = torch.arange(total, device=device) - first[image_of]
    masks = flat_masks.new_zeros(batch, max_n, size, size).index_put((image_of, slot_of), flat_masks)
    classes = flat_classes.new_zeros(batch, max_n).index_put((image_of, slot_of), flat_classes)
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    # two spare slots: max_n never equals the slots' count, nor leaves one slot over, so one compiled graph serves every max_n
    x = torch.cat([mask_logits, mask_logits.new_zeros(batch, 2, size, size)], 1).narrow(1, 0, max_n)
    per_pixel = F.binary_cross_entropy_with_logits(x, masks, reduction="none")
    weight = valid[:, :, None, None].to(per_pixel.dtype)
    denom = (weight.sum() * (size * size)).clamp(min=1)
    mask_term = (per_pixel * weight).sum() / denom
    grad_x = (torch.sigmoid(x) - masks) * weight / denom
    grad_masks = torch.cat([grad_x, grad_x.new_zeros(batch, slots + 2 - max_n, size, size)], 1).narrow(1, 0, slots)
    logits = torch.cat([class_logits, class_logits.new_zeros(batch, 2, num_classes)], 1).narrow(1, 0, max_n)
    selected = valid.to(logits.dtype)
    counts = torch.zeros(num_classes, device=device).index_add(0, classes.flatten(), selected.flatten())
    class_weight = torch.where(counts > 0, 1.0 / counts.clamp(min=1), torch.zeros_like(counts))
    slot_weight = class_weight[classes] * selected
    denom2 = slot_weight.sum().clamp(min=1e-12)
    per_slot = F.cross_entropy(logits.flatten(0, 1), classes.flatten(), reduction="none").view_as(slot_weight)
    class_term = (per_slot * slot_weight).sum() / denom2
    one_hot = (torch.arange(num_classes, device=device) == classes[..., None]).to(logits.dtype)
    grad_l = (torch.softmax(logits, -1) - one_hot) * (slot_weight / denom2)[..., None]
    grad_classes = torch.cat([grad_l, grad_l.new_zeros(batch, slots + 2 - max_n, num_classes)], 1).narrow(1, 0, slots)
    return mask_term + class_term, grad_masks, grad_classes


torch.fx.experimental._config.use_duck_shape = False  # max_n equal to a size would otherwise share its symbol
torch._inductor.config.compile_threads = 1  # compile in this process: no pool of compile workers to start
torch._inductor.config.cpp.vec_isa_ok = False  # plain C++ loops: no probe of the CPU's vector units, a quicker build
compiled = torch.compile(padded_loss_and_grads, dynamic=True)


def loss_fn(mask_logits, class_logits, flat_masks, flat_classes, n_objects, max_n):
    with torch.no_grad():
        value, grad_masks, grad_classes = compiled(mask_logits.detach(), class_logits.detach(), flat_masks,
                                                   flat_classes, n_objects, max_n)
    # the value, with the gradients the compiled function worked out: (s - s.detach()) is exactly 0
    s = (mask_logits * grad_masks).sum() + (class_logits * grad_classes).sum()
    return value + (s - s.detach())


def compile_every_count(mask_logits, class_logits, flat_masks, flat_classes, n_objects):
    """Compile the loss for every slot count a batch can have, here in warm-up: a count first met in the traced steps
    would compile there, under a profiler that records each Python call the compiler makes (on a CPU, gigabytes: the
    run ran out of memory in CI when a window batch first had max_n 2, a size the compiled code specializes on)."""
    with torch.no_grad():
        for max_n in range(1, MAX_OBJECTS + 1):
            counts = torch.full_like(n_objects, max_n)
            total = int(counts.sum())
            compiled(mask_logits.detach(), class_logits.detach(), flat_masks.new_zeros(total, *flat_masks.shape[1:]),
                     flat_classes.new_zeros(total), counts, max_n)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    if step == 0:
        compile_every_count(mask_logits, class_logits, flat_masks, flat_classes, n_objects)
    max_n = round(peek_max(n_objects))  # the slow script's n_objects.max().item(), kept in the step
    if max_n == 0:  # the slow script's `if not valid.any()` guard, kept
        raise RuntimeError("a batch without objects")
    loss = loss_fn(mask_logits, class_logits, flat_masks, flat_classes, n_objects, max_n)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}  max_n {max_n}")

session.finish()
