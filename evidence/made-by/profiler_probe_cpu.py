"""A timing probe: 20 tiny ops timed per call, 200 calls without torch.profiler and 200 with it (the harness's
settings: CPU activity, with_stack, every thread). evidence/history/2026-11-26-cpu-profiler-probe.md."""
import time, statistics, torch
def probe(n=20):
    t = time.perf_counter_ns()
    for _ in range(n): torch.zeros(1)
    return (time.perf_counter_ns() - t) / n / 1e3
off = [probe() for _ in range(200)]
opts = {}
try: opts["experimental_config"] = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
except Exception: pass
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True, record_shapes=False, **opts):
    on = [probe() for _ in range(200)]
print("us per op: off median %.2f p90 %.2f max %.2f | on median %.2f min %.2f" % (statistics.median(off), sorted(off)[180], max(off), statistics.median(on), min(on)))
