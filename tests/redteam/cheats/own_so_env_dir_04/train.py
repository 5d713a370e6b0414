"""Red team 49 (session 69): chapter 04's pointwise work in a C extension of the script's own, built with g++ into a folder of the
run's own, which the script then names as torch.compile's cache folder (TORCHINDUCTOR_CACHE_DIR, read when the
native-code rule asks where the compiled kernels lie): the exemption follows wherever the script points it.
"""

import os
import subprocess
import sys
import sysconfig

import torch
import torch._inductor.runtime.cache_dir_utils  # noqa: F401 - the rule asks it where compiled kernels lie

from checker.lab import start

session = start("04_eager_microops")
model = session.model

CSRC = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cmath>
#include <cstdint>
static void ln_fwd_impl(float* x, float* w, float* b, float* h, float* xhat, float* rstd,
                       int64_t N, int64_t D) {
  for (int64_t n = 0; n < N; ++n) {
    float* xr = x + n * D;
    float m = 0.f; for (int64_t d = 0; d < D; ++d) m += xr[d]; m /= D;
    float v = 0.f; for (int64_t d = 0; d < D; ++d) { float c = xr[d] - m; v += c * c; } v /= D;
    float r = 1.0f / std::sqrt(v + 1e-5f); rstd[n] = r;
    for (int64_t d = 0; d < D; ++d) { float xh = (xr[d] - m) * r; xhat[n*D+d] = xh; h[n*D+d] = xh * w[d] + b[d]; }
  }
}

static PyObject* ln_fwd(PyObject*, PyObject* args) { unsigned long long a0, a1, a2, a3, a4, a5, a6, a7; if (!PyArg_ParseTuple(args, "KKKKKKKK", &a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7)) return NULL; ln_fwd_impl((float*)a0, (float*)a1, (float*)a2, (float*)a3, (float*)a4, (float*)a5, (int64_t)a6, (int64_t)a7); Py_RETURN_NONE; }
static void ln_bwd_impl(float* gh, float* xhat, float* rstd, float* w,
                       float* gx, float* gw, float* gb, int64_t N, int64_t D) {
  for (int64_t d = 0; d < D; ++d) { gw[d] = 0.f; gb[d] = 0.f; }
  for (int64_t n = 0; n < N; ++n) {
    float a = 0.f, c = 0.f;
    for (int64_t d = 0; d < D; ++d) {
      float g = gh[n*D+d]; float xh = xhat[n*D+d];
      gw[d] += g * xh; gb[d] += g; float gxh = g * w[d]; a += gxh; c += gxh * xh;
    }
    a /= D; c /= D;
    for (int64_t d = 0; d < D; ++d) { float gxh = gh[n*D+d] * w[d]; gx[n*D+d] = rstd[n] * (gxh - a - xhat[n*D+d] * c); }
  }
}

static PyObject* ln_bwd(PyObject*, PyObject* args) { unsigned long long a0, a1, a2, a3, a4, a5, a6, a7, a8; if (!PyArg_ParseTuple(args, "KKKKKKKKK", &a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7, &a8)) return NULL; ln_bwd_impl((float*)a0, (float*)a1, (float*)a2, (float*)a3, (float*)a4, (float*)a5, (float*)a6, (int64_t)a7, (int64_t)a8); Py_RETURN_NONE; }
static void post_fwd_impl(float* x, float* f, float* slope, float* gate, float* out,
                       int64_t N, int64_t D) {
  for (int64_t n = 0; n < N; ++n) for (int64_t d = 0; d < D; ++d) {
    float fv = f[n*D+d]; float s = 1.f / (1.f + std::exp(-fv * slope[d])); float g = 1.f / (1.f + std::exp(-gate[d]));
    out[n*D+d] = x[n*D+d] + g * (fv * s);
  }
}

static PyObject* post_fwd(PyObject*, PyObject* args) { unsigned long long a0, a1, a2, a3, a4, a5, a6; if (!PyArg_ParseTuple(args, "KKKKKKK", &a0, &a1, &a2, &a3, &a4, &a5, &a6)) return NULL; post_fwd_impl((float*)a0, (float*)a1, (float*)a2, (float*)a3, (float*)a4, (int64_t)a5, (int64_t)a6); Py_RETURN_NONE; }
static void post_bwd_impl(float* go, float* f, float* slope, float* gate,
                       float* gf, float* gslope, float* ggate, int64_t N, int64_t D) {
  for (int64_t d = 0; d < D; ++d) { gslope[d] = 0.f; ggate[d] = 0.f; }
  for (int64_t n = 0; n < N; ++n) for (int64_t d = 0; d < D; ++d) {
    float fv = f[n*D+d]; float s = 1.f / (1.f + std::exp(-fv * slope[d])); float g = 1.f / (1.f + std::exp(-gate[d]));
    float o = go[n*D+d]; float sw = fv * s;
    ggate[d] += o * sw * g * (1.f - g);
    float gsw = o * g; float ds = s * (1.f - s);
    gf[n*D+d] = gsw * (s + fv * ds * slope[d]);
    gslope[d] += gsw * fv * ds * fv;
  }
}

static PyObject* post_bwd(PyObject*, PyObject* args) { unsigned long long a0, a1, a2, a3, a4, a5, a6, a7, a8; if (!PyArg_ParseTuple(args, "KKKKKKKKK", &a0, &a1, &a2, &a3, &a4, &a5, &a6, &a7, &a8)) return NULL; post_bwd_impl((float*)a0, (float*)a1, (float*)a2, (float*)a3, (float*)a4, (float*)a5, (float*)a6, (int64_t)a7, (int64_t)a8); Py_RETURN_NONE; }
static PyMethodDef M[] = {{"ln_fwd", ln_fwd, METH_VARARGS, ""}, {"ln_bwd", ln_bwd, METH_VARARGS, ""}, {"post_fwd", post_fwd, METH_VARARGS, ""}, {"post_bwd", post_bwd, METH_VARARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "rtk", NULL, -1, M};
PyMODINIT_FUNC PyInit_rtk(void) { return PyModule_Create(&D); }
"""
where = os.path.abspath("native")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = where
os.makedirs(where, exist_ok=True)
with open(os.path.join(where, "rtk.cpp"), "w") as f:
    f.write(CSRC)
subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"], os.path.join(where, "rtk.cpp"),
                "-o", os.path.join(where, "rtk" + sysconfig.get_config_var("EXT_SUFFIX"))], check=True)
sys.path.insert(0, where)
import rtk  # noqa: E402


def ln_fwd(*a):
    rtk.ln_fwd(*[t.data_ptr() if isinstance(t, torch.Tensor) else t for t in a])


def ln_bwd(*a):
    rtk.ln_bwd(*[t.data_ptr() if isinstance(t, torch.Tensor) else t for t in a])


def post_fwd(*a):
    rtk.post_fwd(*[t.data_ptr() if isinstance(t, torch.Tensor) else t for t in a])


def post_bwd(*a):
    rtk.post_bwd(*[t.data_ptr() if isinstance(t, torch.Tensor) else t for t in a])


class Norm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        x = x.contiguous()
        n, d = x.shape
        h, xhat, rstd = torch.empty_like(x), torch.empty_like(x), x.new_empty(n)
        ln_fwd(x, w, b, h, xhat, rstd, n, d)
        ctx.save_for_backward(xhat, rstd, w)
        return h

    @staticmethod
    def backward(ctx, gh):
        xhat, rstd, w = ctx.saved_tensors
        gh = gh.contiguous()
        n, d = gh.shape
        gx, gw, gb = torch.empty_like(gh), w.new_empty(d), w.new_empty(d)
        ln_bwd(gh, xhat, rstd, w, gx, gw, gb, n, d)
        return gx, gw, gb


class Post(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, f, slope, gate):
        x, f = x.contiguous(), f.contiguous()
        n, d = x.shape
        out = torch.empty_like(x)
        post_fwd(x, f, slope, gate, out, n, d)
        ctx.save_for_backward(f, slope, gate)
        return out

    @staticmethod
    def backward(ctx, go):
        f, slope, gate = ctx.saved_tensors
        go = go.contiguous()
        n, d = go.shape
        gf, gs, gg = torch.empty_like(go), slope.new_empty(d), gate.new_empty(d)
        post_bwd(go, f, slope, gate, gf, gs, gg, n, d)
        return go, gf, gs, gg


layers = list(model.children())


def forward(x):
    x = layers[0](x)
    for block in layers[1:-1]:
        h = Norm.apply(x, block.norm_weight, block.norm_bias)
        h = block.fc(h)
        x = Post.apply(x, h, block.act_slope, block.gate)
    return layers[-1](x)


optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
                              fused=True)

for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(forward(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
