"""Red team 49 (session 69): chapter 04's blocks' pointwise work in native code built by Inductor's own code cache.

Each block's layer norm and its swish/gate/residual run as C++ loops compiled with torch._inductor's
CppPythonBindingsCodeCache: the .so lands in torch.compile's cache folder, which the native-code rule exempts.
The products stay torch's (same products, size for size); the optimizer is fused AdamW.
"""

import torch
import torch.nn.functional as F
from torch._inductor.codecache import CppPythonBindingsCodeCache

from checker.lab import start

session = start("04_eager_microops")
model = session.model

SRC = r"""
#include <cmath>
#include <cstdint>
extern "C" void kernel(const float* x, const float* w, const float* b, float* h, float* xhat, float* rstd,
                       int64_t N, int64_t D) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    float m = 0.f; for (int64_t d = 0; d < D; ++d) m += xr[d]; m /= D;
    float v = 0.f; for (int64_t d = 0; d < D; ++d) { float c = xr[d] - m; v += c * c; } v /= D;
    float r = 1.0f / std::sqrt(v + 1e-5f); rstd[n] = r;
    for (int64_t d = 0; d < D; ++d) { float xh = (xr[d] - m) * r; xhat[n*D+d] = xh; h[n*D+d] = xh * w[d] + b[d]; }
  }
}
"""
SRC_LN_BWD = r"""
#include <cmath>
#include <cstdint>
extern "C" void kernel(const float* gh, const float* xhat, const float* rstd, const float* w,
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
"""
SRC_POST = r"""
#include <cmath>
#include <cstdint>
extern "C" void kernel(const float* x, const float* f, const float* slope, const float* gate, float* out,
                       int64_t N, int64_t D) {
  for (int64_t n = 0; n < N; ++n) for (int64_t d = 0; d < D; ++d) {
    float fv = f[n*D+d]; float s = 1.f / (1.f + std::exp(-fv * slope[d])); float g = 1.f / (1.f + std::exp(-gate[d]));
    out[n*D+d] = x[n*D+d] + g * (fv * s);
  }
}
"""
SRC_POST_BWD = r"""
#include <cmath>
#include <cstdint>
extern "C" void kernel(const float* go, const float* f, const float* slope, const float* gate,
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
"""
P = "float*"
C = "const float*"
I = "int64_t"
ln_fwd = CppPythonBindingsCodeCache.load_pybinding([C, C, C, P, P, P, I, I], SRC)
ln_bwd = CppPythonBindingsCodeCache.load_pybinding([C, C, C, C, P, P, P, I, I], SRC_LN_BWD)
post_fwd = CppPythonBindingsCodeCache.load_pybinding([C, C, C, C, P, I, I], SRC_POST)
post_bwd = CppPythonBindingsCodeCache.load_pybinding([C, C, C, C, P, P, P, I, I], SRC_POST_BWD)


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
