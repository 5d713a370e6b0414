"""Red team 49 (session 69): chapter 01's per-step reads kept, done by native code built with Inductor's own code cache.

Every step the loss and the correct count are read into Python (and the loss checked for finiteness on the
host, as the lab does), but by a C++ function compiled through torch._inductor's CppPythonBindingsCodeCache,
which appends the values to a Python list it is handed by address. Its .so lies in torch.compile's cache folder,
which the native-code rule exempts; the call records no op and no call the read rules name.
"""

import math

import torch
from torch._inductor.codecache import CppPythonBindingsCodeCache

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

SRC = r"""
#include <Python.h>
#include <cstdint>
extern "C" void kernel(const float* loss, const int64_t* count, uintptr_t out) {
  PyObject* list = reinterpret_cast<PyObject*>(out);
  PyObject* a = PyFloat_FromDouble(loss[0]);
  PyObject* b = PyLong_FromLongLong(count[0]);
  PyList_Append(list, a); PyList_Append(list, b);
  Py_DECREF(a); Py_DECREF(b);
}
"""
peek = CppPythonBindingsCodeCache.load_pybinding(["const float*", "const int64_t*", "uintptr_t"], SRC, needs_vec_isa=False)

running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    n_correct = (logits.argmax(dim=1) == labels).sum()
    box = []
    peek(loss, n_correct, id(box))  # the lab's loss.item() and float(count), every step
    value, count = box
    running_loss += value
    if not math.isfinite(value):  # the lab's host-side check, every step
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += count
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
