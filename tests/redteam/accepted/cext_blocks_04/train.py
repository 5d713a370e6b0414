"""Chapter 04 lab: fewer launches per step.

Each block's small ops (the written-out layer norm, the swish, the gated residual) and their backward run as
plain C loops in a tiny extension module built once at start-up, so the dispatcher is not entered once per op.
The linear layers stay PyTorch's (same products), and the optimizer is the fused AdamW.
"""

import os
import subprocess
import sys
import sysconfig
import tempfile

import torch
from torch.nn import functional as F

from checker.lab import start

C_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
typedef float f;
static f sg(f v) { return 1.0f / (1.0f + expf(-v)); }

/* y = (x - mean) * rstd * nw + nb, row by row; keeps hn and rstd */
static PyObject* ln_fwd(PyObject* self, PyObject* a) {
    unsigned long long px, pnw, pnb, py, phn, pr; long B, W;
    if (!PyArg_ParseTuple(a, "KKKKKKll", &px, &pnw, &pnb, &py, &phn, &pr, &B, &W)) return NULL;
    f *x=(f*)px,*nw=(f*)pnw,*nb=(f*)pnb,*y=(f*)py,*hn=(f*)phn,*r=(f*)pr;
    for (long i = 0; i < B; i++) {
        f *xi = x + i*W; double m = 0, v = 0;
        for (long j = 0; j < W; j++) m += xi[j];
        m /= W;
        for (long j = 0; j < W; j++) { double c = xi[j] - m; v += c*c; }
        v /= W;
        f rs = 1.0f / sqrtf((f)v + 1e-5f); r[i] = rs;
        for (long j = 0; j < W; j++) { f h = (xi[j] - (f)m) * rs; hn[i*W+j] = h; y[i*W+j] = h*nw[j] + nb[j]; }
    }
    Py_RETURN_NONE;
}

/* out = x + sigmoid(gate) * h * sigmoid(h * slope); keeps s = sigmoid(h * slope) */
static PyObject* act_fwd(PyObject* self, PyObject* a) {
    unsigned long long px, ph, psl, pg, po, ps; long B, W;
    if (!PyArg_ParseTuple(a, "KKKKKKll", &px, &ph, &psl, &pg, &po, &ps, &B, &W)) return NULL;
    f *x=(f*)px,*h=(f*)ph,*sl=(f*)psl,*g=(f*)pg,*o=(f*)po,*s=(f*)ps;
    for (long i = 0; i < B; i++) for (long j = 0; j < W; j++) {
        long k = i*W+j; f sv = sg(h[k]*sl[j]); s[k] = sv; o[k] = x[k] + sg(g[j]) * (h[k]*sv);
    }
    Py_RETURN_NONE;
}

static PyObject* act_bwd(PyObject* self, PyObject* a) {
    unsigned long long pgo, ph, ps, psl, pg, pdh, pdsl, pdg; long B, W;
    if (!PyArg_ParseTuple(a, "KKKKKKKKll", &pgo, &ph, &ps, &psl, &pg, &pdh, &pdsl, &pdg, &B, &W)) return NULL;
    f *go=(f*)pgo,*h=(f*)ph,*s=(f*)ps,*sl=(f*)psl,*g=(f*)pg,*dh=(f*)pdh,*dsl=(f*)pdsl,*dg=(f*)pdg;
    for (long j = 0; j < W; j++) {
        f gs = sg(g[j]); double acc_g = 0, acc_s = 0;
        for (long i = 0; i < B; i++) {
            long k = i*W+j; f sv = s[k], hv = h[k], dsw = go[k]*gs, ds = sv*(1.0f-sv);
            acc_g += go[k]*hv*sv;
            dh[k] = dsw*(sv + hv*ds*sl[j]);
            acc_s += dsw*hv*ds*hv;
        }
        dg[j] = (f)acc_g * gs * (1.0f - gs); dsl[j] = (f)acc_s;
    }
    Py_RETURN_NONE;
}

static PyObject* colsum(PyObject* self, PyObject* a) {
    unsigned long long pa, po; long B, W;
    if (!PyArg_ParseTuple(a, "KKll", &pa, &po, &B, &W)) return NULL;
    f *x=(f*)pa,*o=(f*)po;
    for (long j = 0; j < W; j++) { double acc = 0; for (long i = 0; i < B; i++) acc += x[i*W+j]; o[j] = (f)acc; }
    Py_RETURN_NONE;
}

/* dx = go + layer-norm backward of dy; dnw, dnb */
static PyObject* ln_bwd(PyObject* self, PyObject* a) {
    unsigned long long pdy, pgo, phn, pr, pnw, pdx, pdnw, pdnb; long B, W;
    if (!PyArg_ParseTuple(a, "KKKKKKKKll", &pdy, &pgo, &phn, &pr, &pnw, &pdx, &pdnw, &pdnb, &B, &W)) return NULL;
    f *dy=(f*)pdy,*go=(f*)pgo,*hn=(f*)phn,*r=(f*)pr,*nw=(f*)pnw,*dx=(f*)pdx,*dnw=(f*)pdnw,*dnb=(f*)pdnb;
    for (long j = 0; j < W; j++) { double a1 = 0, a2 = 0;
        for (long i = 0; i < B; i++) { a1 += dy[i*W+j]*hn[i*W+j]; a2 += dy[i*W+j]; }
        dnw[j] = (f)a1; dnb[j] = (f)a2; }
    for (long i = 0; i < B; i++) {
        double m1 = 0, m2 = 0;
        for (long j = 0; j < W; j++) { f d = dy[i*W+j]*nw[j]; m1 += d; m2 += d*hn[i*W+j]; }
        m1 /= W; m2 /= W;
        for (long j = 0; j < W; j++) { long k = i*W+j; f d = dy[k]*nw[j];
            dx[k] = go[k] + r[i]*(d - (f)m1 - hn[k]*(f)m2); }
    }
    Py_RETURN_NONE;
}

static PyMethodDef M[] = {{"ln_fwd", ln_fwd, METH_VARARGS, 0}, {"act_fwd", act_fwd, METH_VARARGS, 0},
    {"act_bwd", act_bwd, METH_VARARGS, 0}, {"colsum", colsum, METH_VARARGS, 0}, {"ln_bwd", ln_bwd, METH_VARARGS, 0},
    {0, 0, 0, 0}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "microops_c", 0, -1, M};
PyMODINIT_FUNC PyInit_microops_c(void) { return PyModule_Create(&D); }
"""


def build_extension():
    folder = tempfile.mkdtemp(prefix="microops-")
    src = os.path.join(folder, "microops_c.c")
    with open(src, "w") as out:
        out.write(C_SOURCE)
    target = os.path.join(folder, "microops_c" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-I" + sysconfig.get_paths()["include"], src, "-o", target],
                   check=True)
    sys.path.insert(0, folder)


build_extension()
import microops_c as mc  # noqa: E402

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(
    model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"], fused=True,
)
B, W = int(session.cfg["batch_size"]), int(session.cfg["width"])


def p(t):
    return t.data_ptr()


class Block(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, nw, nb, weight, bias, slope, gate):
        y, hn, rstd = torch.empty(B, W), torch.empty(B, W), torch.empty(B)
        mc.ln_fwd(p(x), p(nw), p(nb), p(y), p(hn), p(rstd), B, W)
        h = F.linear(y, weight, bias)
        out, s = torch.empty(B, W), torch.empty(B, W)
        mc.act_fwd(p(x), p(h), p(slope), p(gate), p(out), p(s), B, W)
        ctx.save_for_backward(y, hn, rstd, h, s, nw, weight, slope, gate)
        return out

    @staticmethod
    def backward(ctx, go):
        y, hn, rstd, h, s, nw, weight, slope, gate = ctx.saved_tensors
        go = go.contiguous()
        d_h, d_slope, d_gate = torch.empty(B, W), torch.empty(W), torch.empty(W)
        mc.act_bwd(p(go), p(h), p(s), p(slope), p(gate), p(d_h), p(d_slope), p(d_gate), B, W)
        d_y = torch.mm(d_h, weight)
        d_w = torch.mm(d_h.t(), y)
        d_b = torch.empty(W)
        mc.colsum(p(d_h), p(d_b), B, W)
        d_x, d_nw, d_nb = torch.empty(B, W), torch.empty(W), torch.empty(W)
        mc.ln_bwd(p(d_y), p(go), p(hn), p(rstd), p(nw), p(d_x), p(d_nw), p(d_nb), B, W)
        return d_x, d_nw, d_nb, d_w, d_b, d_slope, d_gate


first, *blocks, last = list(model)


def forward(x):
    x = first(x)
    for b in blocks:
        x = Block.apply(x, b.norm_weight, b.norm_bias, b.fc.weight, b.fc.bias, b.act_slope, b.gate)
    return last(x)


# --8<-- [start:loop]
for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(forward(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
# --8<-- [end:loop]

session.finish()
