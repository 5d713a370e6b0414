"""The run's end of the channel to the grader: two named pipes in the run's folder.

``evt`` carries messages to the grader, ``ctl`` the grader's answers (the run's seed, the window key). A
message is one line of JSON; when it names ``nbytes``, that many raw bytes follow it. The grader stamps
each message on its own clock when it arrives, so the times that count are never taken in this process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


# What the channel writes with, as it was when this module was imported (before any script ran): a script that
# replaces os.write, json.dumps or this class's methods later changes nothing the harness sends.
_OS_WRITE, _OS_FSTAT, _DUMPS = os.write, os.fstat, json.dumps
_OPENED: dict[int, tuple[int, int]] = {}  # the descriptor each channel opened -> the grader's pipe (device, inode)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = _OS_WRITE(fd, view)
        view = view[written:]


def deliver(channel: "Channel", header: dict[str, Any], payload: bytes | None = None) -> None:
    """One message to the grader, through the descriptor the channel opened (what its hello announced)."""
    fd = next(iter(_OPENED)) if len(_OPENED) == 1 else channel._evt
    if payload is not None:
        header = dict(header, nbytes=len(payload))
    _write_all(fd, _DUMPS(header).encode() + b"\n")
    if payload is not None:
        _write_all(fd, payload)


class Channel:
    def __init__(self, folder: Path):
        # the grader holds evt open for reading before the run starts, so this open does not wait
        self._evt = os.open(folder / "evt", os.O_WRONLY)
        opened = os.fstat(self._evt)
        self._fifo = (opened.st_dev, opened.st_ino)
        _OPENED[self._evt] = self._fifo
        # the grader checks, when the trace arrives, that this descriptor of this process is still its pipe
        self.send({"type": "hello", "fd": self._evt})
        self._ctl = open(folder / "ctl", "rb", buffering=0)  # waits until the grader opens its end
        self._pending = b""

    def intact(self) -> bool:
        """Whether this object still writes to the grader's pipe, through this class's own methods."""
        shadowed = {"send", "_write", "receive", "intact"} & set(vars(self))
        if len(_OPENED) != 1 or shadowed or type(self) is not Channel:
            return False
        (fd, pipe), = _OPENED.items()
        try:
            now = _OS_FSTAT(fd)
        except (OSError, TypeError):
            return False
        return fd == self._evt and (now.st_dev, now.st_ino) == pipe == self._fifo

    def send(self, header: dict[str, Any], payload: bytes | None = None) -> None:
        deliver(self, header, payload)

    def _write(self, data: bytes) -> None:
        _write_all(self._evt, data)

    def receive(self) -> dict[str, Any]:
        while b"\n" not in self._pending:
            chunk = self._ctl.read(4096)
            if not chunk:
                raise ConnectionError("the grader closed the channel")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)
