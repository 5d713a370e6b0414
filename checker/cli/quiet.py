"""A command run under a profiler or on a machine's CPU, its output passed through less the noise a learner need not read (Kineto's markers, its probe for GPUs, the DataLoader's pin_memory warning), each explained once."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


# Lines torch.profiler's Kineto writes to stderr that say nothing to a learner: its start/stop markers, and on
# a machine without a usable CUDA driver its probe for GPUs (code 35: cudaErrorInsufficientDriver).
_MARKER = re.compile(r"^USDT:.*\] profiler_(start|stop)\s*$")
_NO_GPU = re.compile(r"^ERROR:.*gpuGetDeviceCount failed with code (\d+)\s*$")
# The DataLoader's warning on a machine without a GPU, when the lab pins its batches (as chapters 02 and 03 teach);
# Python prints the warning's line, then the source line it came from (indented).
_PIN_MEMORY = re.compile(r"UserWarning: 'pin_memory' argument is set as true but no accelerator is found")
PIN_MEMORY_NOTE = ("note: torch warns that pin_memory=True finds no accelerator: expected on a CPU, where there is "
                   "no GPU to copy batches to; on a GPU the same setting is what makes the copies asynchronous")


def call_quieting_noise(argv: list[str], env: dict[str, str], cwd: Path | None) -> int:
    """Run a command under a profiler or on a machine's CPU, in ``cwd`` (None: here); pass its output through, less
    Kineto's noise and the DataLoader's pin_memory warning, each explained once."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True, errors="replace")
    explained = False
    pinned = skip_source = False
    try:
        for line in proc.stderr:
            if skip_source and line.startswith((" ", "\t")):  # the warning's source line
                skip_source = False
                continue
            skip_source = False
            if _PIN_MEMORY.search(line):
                if not pinned:
                    print(PIN_MEMORY_NOTE, file=sys.stderr, flush=True)
                    pinned = True
                skip_source = True
                continue
            if _MARKER.match(line):
                continue
            no_gpu = _NO_GPU.match(line)
            if no_gpu:
                if not explained:
                    print(f"note: torch.profiler looked for CUDA GPUs and found none (its `gpuGetDeviceCount failed "
                          f"with code {no_gpu.group(1)}`): harmless here, the trace records the CPU's activity only",
                          file=sys.stderr, flush=True)
                    explained = True
                continue
            sys.stderr.write(line)
            sys.stderr.flush()
        return proc.wait()
    except KeyboardInterrupt:
        proc.wait()
        raise
