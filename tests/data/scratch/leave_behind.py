"""A chapter 00 benchmark that keeps state between runs outside its folder: tests/test_scratch_isolation.py.

It reports `found` (1 when a file an earlier run left in /dev/shm or /tmp is there) and leaves one in each,
`ipc_found` (1 when a System V semaphore set an earlier run made is there) and leaves one, and `libraries` (1 when every folder LD_LIBRARY_PATH names is there: a library unpacked under /tmp stays in reach).
"""

import ctypes
import os

from checker.lab import start

MARKS = ("/dev/shm/workbook-scratch-probe", "/tmp/workbook-scratch-probe")
IPC_KEY, IPC_CREAT = 0x57425343, 0o1000  # the semaphore set's key (see tests/test_scratch_isolation.py)

found = any(os.path.exists(mark) for mark in MARKS)
for mark in MARKS:
    with open(mark, "w") as handle:
        handle.write("an earlier run was here")
libc = ctypes.CDLL(None)
ipc_found = libc.semget(IPC_KEY, 1, 0o666) >= 0
libc.semget(IPC_KEY, 1, IPC_CREAT | 0o666)
session = start("00_measuring_right")
for step, batch in session.steps(session.batches):
    tokens, labels = batch
    session.loss_fn(session.model(tokens), labels).backward()
session.report("found", 1.0 if found else 0.0)
session.report("ipc_found", 1.0 if ipc_found else 0.0)
folders = [f for f in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if f]
session.report("libraries", 1.0 if all(os.path.isdir(f) for f in folders) else 0.0)
session.finish()
