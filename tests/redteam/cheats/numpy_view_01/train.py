"""Red team 11's class by the road the scan leaves open: the lab's reads kept, made through a numpy view of a
tensor (`Tensor.numpy()`, made in set-up): the values are copied into the tensor and read by indexing the array,
which a CPU trace does not record, in a function whose locals hold the view."""

import torch

from checker.lab import start


def main():
    session = start("01_item_syncs")
    model = session.model
    optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
    mirror = torch.zeros(2)
    view = mirror.numpy()  # memory the tensor and the array share, made before the window
    running_loss, correct, seen = 0.0, 0, 0
    for step, (images, labels) in session.steps(session.batches):
        images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
        logits = model(images)
        loss = session.loss_fn(logits, labels)
        mirror[0:1].copy_(loss.detach().reshape(1))
        running_loss += view[0]
        if not view[0] == view[0]:
            raise FloatingPointError(f"loss is {view[0]} at step {step}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        mirror[1:2].copy_((logits.argmax(dim=1) == labels).sum().reshape(1))
        correct += view[1]
        seen += labels.shape[0]
        if session.is_log_step(step):
            print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")
    session.finish()


main()
