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


class Channel:
    def __init__(self, folder: Path):
        # the grader holds evt open for reading before the run starts, so this open does not wait
        self._evt = os.open(folder / "evt", os.O_WRONLY)
        opened = os.fstat(self._evt)
        self._fifo = (opened.st_dev, opened.st_ino)
        # the grader checks, when the trace arrives, that this descriptor of this process is still its pipe
        self.send({"type": "hello", "fd": self._evt})
        self._ctl = open(folder / "ctl", "rb", buffering=0)  # waits until the grader opens its end
        self._pending = b""

    def intact(self) -> bool:
        """Whether this object still writes to the grader's pipe, through this class's own methods."""
        shadowed = {"send", "_write", "receive", "intact"} & set(vars(self))
        try:
            now = os.fstat(self._evt)
        except (OSError, TypeError):
            return False
        return type(self) is Channel and not shadowed and (now.st_dev, now.st_ino) == self._fifo

    def send(self, header: dict[str, Any], payload: bytes | None = None) -> None:
        if payload is not None:
            header = dict(header, nbytes=len(payload))
        data = json.dumps(header).encode() + b"\n"
        self._write(data)
        if payload is not None:
            self._write(payload)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._evt, view)
            view = view[written:]

    def receive(self) -> dict[str, Any]:
        while b"\n" not in self._pending:
            chunk = self._ctl.read(4096)
            if not chunk:
                raise ConnectionError("the grader closed the channel")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)
