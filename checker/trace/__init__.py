"""The trace engine: torch.profiler (Kineto) JSON and Nsight Systems exports in one event table, and the
analyses the workbook's checks and `workbook report` read.

    from checker.trace import load
    trace = load("run.json.gz")     # or .sqlite / .sqlite.gz / .nsys-rep / a TensorBoard folder
    trace.events                     # the normalized table (checker.trace.events documents it)
    trace.get_steps(); trace.get_host_syncs(); trace.summary()
"""

from checker.trace.analysis import TraceAnalysis, load
from checker.trace.errors import TraceError
from checker.trace.events import empty_events

__all__ = ["TraceAnalysis", "TraceError", "empty_events", "load"]
