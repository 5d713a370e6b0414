"""Chapter 04 lab: the small ops in C.

Each small op of each block (the written-out layer norm, the swish, the gated residual), each op of their backward
and each op of AdamW's per-parameter update is one call of a C loop over the whole tensor, in an extension built at
start-up: one call per op, as the slow script makes one launch per op. The linear layers stay PyTorch's.
"""

import math
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
/* one op, one loop over the whole output: k(op, out, a, b, rows, cols, scalar) */
static PyObject* k(PyObject* self, PyObject* args) {
    int op; unsigned long long po, pa, pb; long R, C; double s;
    if (!PyArg_ParseTuple(args, "iKKKlld", &op, &po, &pa, &pb, &R, &C, &s)) return NULL;
    f *o = (f*)po, *a = (f*)pa, *b = (f*)pb; long n = R * C, i, j; f sf = (f)s;
    switch (op) {
    case 0: for (i = 0; i < n; i++) o[i] = a[i] + b[i]; break;               /* add */
    case 1: for (i = 0; i < n; i++) o[i] = a[i] - b[i]; break;               /* sub */
    case 2: for (i = 0; i < n; i++) o[i] = a[i] * b[i]; break;               /* mul */
    case 3: for (i = 0; i < R; i++) for (j = 0; j < C; j++) o[i*C+j] = a[i*C+j] - b[i]; break;  /* sub row */
    case 4: for (i = 0; i < R; i++) for (j = 0; j < C; j++) o[i*C+j] = a[i*C+j] * b[i]; break;  /* mul row */
    case 5: for (i = 0; i < R; i++) for (j = 0; j < C; j++) o[i*C+j] = a[i*C+j] * b[j]; break;  /* mul col */
    case 6: for (i = 0; i < R; i++) for (j = 0; j < C; j++) o[i*C+j] = a[i*C+j] + b[j]; break;  /* add col */
    case 7: for (i = 0; i < n; i++) o[i] = a[i] + sf; break;                 /* add scalar */
    case 8: for (i = 0; i < n; i++) o[i] = a[i] * sf; break;                 /* mul scalar */
    case 9: for (i = 0; i < n; i++) o[i] = 1.0f / (1.0f + expf(-a[i])); break;   /* sigmoid */
    case 10: for (i = 0; i < n; i++) o[i] = 1.0f / sqrtf(a[i]); break;       /* rsqrt */
    case 11: for (i = 0; i < R; i++) { f acc = 0; for (j = 0; j < C; j++) acc += a[i*C+j]; o[i] = acc / C; } break; /* row mean */
    case 12: for (i = 0; i < R; i++) { f acc = 0; for (j = 0; j < C; j++) acc += a[i*C+j]; o[i] = acc; } break;     /* row sum */
    case 13: for (j = 0; j < C; j++) { f acc = 0; for (i = 0; i < R; i++) acc += a[i*C+j]; o[j] = acc; } break;     /* col sum */
    case 14: for (i = 0; i < n; i++) o[i] = sf - a[i]; break;                /* rsub scalar */
    case 15: for (i = 0; i < R; i++) for (j = 0; j < C; j++) o[i*C+j] = a[i*C+j] + b[i]; break;  /* add row */
    case 16: for (i = 0; i < n; i++) o[i] = a[i] + sf * (b[i] - a[i]); break;    /* lerp, weight < 0.5 */
    case 17: for (i = 0; i < n; i++) o[i] = a[i] + sf * b[i] * b[i]; break;      /* addcmul(b, b) */
    case 18: for (i = 0; i < n; i++) o[i] = sqrtf(a[i]); break;              /* sqrt */
    case 19: for (i = 0; i < n; i++) o[i] = a[i] / sf; break;                /* div scalar */
    case 20: for (i = 0; i < n; i++) o[i] = a[i] + sf * (a[i] * 0 + 1) * 0 + sf * 0; break;
    case 21: for (i = 0; i < n; i++) o[i] = o[i] + sf * a[i] / b[i]; break;  /* addcdiv into o */
    }
    Py_RETURN_NONE;
}
static PyMethodDef M[] = {{"k", k, METH_VARARGS, 0}, {0, 0, 0, 0}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "microops_k", 0, -1, M};
PyMODINIT_FUNC PyInit_microops_k(void) { return PyModule_Create(&D); }
"""


def build_extension():
    folder = tempfile.mkdtemp(prefix="microops-")
    src = os.path.join(folder, "microops_k.c")
    with open(src, "w") as out:
        out.write(C_SOURCE)
    target = os.path.join(folder, "microops_k" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-I" + sysconfig.get_paths()["include"], src, "-o", target],
                   check=True)
    sys.path.insert(0, folder)


build_extension()
from microops_k import k  # noqa: E402

ADD, SUB, MUL, SUBROW, MULROW, MULCOL, ADDCOL, ADDS, MULS, SIG, RSQRT, RMEAN, RSUM, CSUM, RSUBS, ADDROW, LERP, \
    ADDCMUL, SQRT, DIVS, _, ADDCDIV = range(22)

session = start("04_eager_microops")
model = session.model
B, W = int(session.cfg["batch_size"]), int(session.cfg["width"])


class Pool:
    """Scratch tensors for the intermediates, made in the first step and reused (nothing returned to autograd)."""

    def __init__(self):
        self.kept, self.i = [], 0

    def get(self, *shape):
        if self.i == len(self.kept):
            self.kept.append(torch.empty(*shape))
        t = self.kept[self.i]
        self.i += 1
        return t

    def rewind(self):
        self.i = 0


pool = Pool()


def p(t):
    return t.data_ptr()


def op(code, a, b=None, rows=1, cols=1, s=0.0, out=None, shape=None):
    """One op: one C loop over the whole output."""
    out = pool.get(*(shape or a.shape)) if out is None else out
    k(code, p(out), p(a), p(b) if b is not None else 0, rows, cols, s)
    return out


class Norm(torch.autograd.Function):
    """mean, centered, square, variance, +eps, rsqrt, normalize, *weight, +bias: one call each."""

    @staticmethod
    def forward(ctx, x, nw, nb):
        n = B * W
        mean = op(RMEAN, x, rows=B, cols=W, shape=(B,))
        c = op(SUBROW, x, mean, B, W)
        sq = op(MUL, c, c, 1, n)
        var = op(RMEAN, sq, rows=B, cols=W, shape=(B,))
        ve = op(ADDS, var, rows=1, cols=B, s=1e-5)
        r = op(RSQRT, ve, rows=1, cols=B)
        hn = op(MULROW, c, r, B, W)
        h1 = op(MULCOL, hn, nw, B, W)
        y = torch.empty(B, W)
        op(ADDCOL, h1, nb, B, W, out=y)
        ctx.save_for_backward(c, r, hn, nw)
        return y

    @staticmethod
    def backward(ctx, dy):
        c, r, hn, nw = ctx.saved_tensors
        dy = dy.contiguous()
        n = B * W
        d_nb = torch.empty(W)
        op(CSUM, dy, rows=B, cols=W, out=d_nb)
        t = op(MUL, dy, hn, 1, n)
        d_nw = torch.empty(W)
        op(CSUM, t, rows=B, cols=W, out=d_nw)
        d_hn = op(MULCOL, dy, nw, B, W)
        t2 = op(MUL, d_hn, c, 1, n)
        d_r = op(RSUM, t2, rows=B, cols=W, shape=(B,))
        d_c1 = op(MULROW, d_hn, r, B, W)
        r2 = op(MUL, r, r, 1, B)
        r3 = op(MUL, r2, r, 1, B)
        d_ve0 = op(MUL, d_r, r3, 1, B)
        d_ve = op(MULS, d_ve0, rows=1, cols=B, s=-0.5)
        d_sq = op(MULS, d_ve, rows=1, cols=B, s=1.0 / W)
        c2 = op(MULS, c, rows=1, cols=n, s=2.0)
        d_c2 = op(MULROW, c2, d_sq, B, W)
        d_c = op(ADD, d_c1, d_c2, 1, n)
        d_m0 = op(RSUM, d_c, rows=B, cols=W, shape=(B,))
        d_m = op(MULS, d_m0, rows=1, cols=B, s=-1.0 / W)
        d_x = torch.empty(B, W)
        op(ADDROW, d_c, d_m, B, W, out=d_x)
        return d_x, d_nw, d_nb


class Act(torch.autograd.Function):
    """x + sigmoid(gate) * h * sigmoid(h * slope): one call per op."""

    @staticmethod
    def forward(ctx, x, h, slope, gate):
        n = B * W
        z = op(MULCOL, h, slope, B, W)
        sz = op(SIG, z, rows=1, cols=n)
        a = op(MUL, h, sz, 1, n)
        sg = op(SIG, gate, rows=1, cols=W)
        ga = op(MULCOL, a, sg, B, W)
        out = torch.empty(B, W)
        op(ADD, x, ga, 1, n, out=out)
        ctx.save_for_backward(h, slope, sz, a, sg)
        return out

    @staticmethod
    def backward(ctx, go):
        h, slope, sz, a, sg = ctx.saved_tensors
        go = go.contiguous()
        n = B * W
        d_a = op(MULCOL, go, sg, B, W)
        t = op(MUL, go, a, 1, n)
        d_sg = op(CSUM, t, rows=B, cols=W, shape=(W,))
        one_m = op(RSUBS, sg, rows=1, cols=W, s=1.0)
        sgd = op(MUL, sg, one_m, 1, W)
        d_gate = torch.empty(W)
        op(MUL, d_sg, sgd, 1, W, out=d_gate)
        d_hd = op(MUL, d_a, sz, 1, n)
        d_sz = op(MUL, d_a, h, 1, n)
        one_mz = op(RSUBS, sz, rows=1, cols=n, s=1.0)
        szd = op(MUL, sz, one_mz, 1, n)
        d_z = op(MUL, d_sz, szd, 1, n)
        t2 = op(MUL, d_z, h, 1, n)
        d_slope = torch.empty(W)
        op(CSUM, t2, rows=B, cols=W, out=d_slope)
        d_hz = op(MULCOL, d_z, slope, B, W)
        d_h = torch.empty(B, W)
        op(ADD, d_hd, d_hz, 1, n, out=d_h)
        return go, d_h, d_slope, d_gate


class AdamW(torch.optim.Optimizer):
    """torch's single-tensor AdamW, one C call per op per parameter (as foreach=False launches it)."""

    def __init__(self, params, lr, weight_decay, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, wd, (b1, b2), eps = group["lr"], group["weight_decay"], group["betas"], group["eps"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                    state["denom"] = torch.empty_like(param)
                state["step"] += 1
                step = state["step"]
                grad, m, v, d = param.grad, state["exp_avg"], state["exp_avg_sq"], state["denom"]
                n = param.numel()
                k(MULS, p(param), p(param), 0, 1, n, 1 - lr * wd)
                k(LERP, p(m), p(m), p(grad), 1, n, 1 - b1)
                k(MULS, p(v), p(v), 0, 1, n, b2)
                k(ADDCMUL, p(v), p(v), p(grad), 1, n, 1 - b2)
                bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
                k(SQRT, p(d), p(v), 0, 1, n, 0.0)
                k(DIVS, p(d), p(d), 0, 1, n, math.sqrt(bc2))
                k(ADDS, p(d), p(d), 0, 1, n, eps)
                k(ADDCDIV, p(param), p(m), p(d), 1, n, -lr / bc1)


optimizer = AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"])
first, *blocks, last = list(model)


def forward(x):
    pool.rewind()
    x = first(x)
    for b in blocks:
        y = Norm.apply(x, b.norm_weight, b.norm_bias)
        x = Act.apply(x, b.fc(y), b.act_slope, b.gate)
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
