"""Cheat (forging): replace every clock the process can read with one that runs 20x slow, then train like the lab.
Chapter 04 on CPU grades speed: an in-process timer would see a 20x speedup."""
import pathlib as _p, checker as _c
BASE = lambda name: (_p.Path(_c.__file__).resolve().parent.parent / "tests" / "redteam" / "base" / f"{name}.py").read_text()
import time
_real = {name: getattr(time, name) for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns")}
_t0 = {name: f() for name, f in _real.items()}
for name, f in _real.items():
    setattr(time, name, (lambda n, f: (lambda: _t0[n] + (f() - _t0[n]) / 20 if isinstance(_t0[n], float) else _t0[n] + (f() - _t0[n]) // 20))(name, f))
exec(compile(BASE("lab04"), "train.py", "exec"))
