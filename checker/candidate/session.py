"""The runtime every chapter script imports: the workload, the step loop, and the timed window.

A script (slow, lab or solution) looks like this::

    from checker.lab import start

    session = start("01_item_syncs")
    for step, (images, labels) in session.steps(session.batches):
        ...                       # the training step: the part the learner edits
    session.finish()

``session.steps`` is the step loop, in code the learner does not edit:

* every step is one NVTX range and one torch.profiler ``record_function`` range named ``step N``; the batch
  is fetched inside it, under a nested ``data`` range, so time spent waiting for data counts in the step;
* after the warm-up steps it synchronizes the device and opens the timed window: ``cudaProfilerStart``
  (``nsys profile --capture-range=cudaProfilerApi`` then captures steady state only), and under the grader
  it tells the grader, which answers with the window key; the model's last layer is then re-drawn from that
  key (``checker.base.workloads.redraw_head``), so the loss jumps once at the window's first step;
* after the last step it synchronizes, closes the window and, under the grader, sends the trained weights.

Run on its own (``python labs/01_item_syncs/train.py``) the session times the window itself and prints
samples/s: a convenience for the learner. Under the grader (``checker.grader.runs``) that clock is ignored: the
grader stamps every message on its own clock and checks the weights itself (see ``checker.candidate``).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import dis
import functools
import gc
import io
import os
import re
import signal
import site
import stat
import sys
import sysconfig
import threading
import time
import types
import warnings
import weakref
from collections import Counter
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

try:  # the path prefixes torch.profiler's Python tracer cuts from a frame's file (sys.path now, site's folders)
    from torch.profiler.python_tracer import _prefix_regex
except ImportError:  # pragma: no cover - an older torch: the same list, as it builds it
    def _prefix_regex() -> list[str]:
        raw = [*site.getsitepackages(), *sys.path, site.getuserbase(), site.getusersitepackages()]
        return [p + os.sep for p in sorted({os.path.abspath(p) for p in raw}, reverse=True)]

import checker.base.paths  # imported here, never first inside the audit hook (_own_code_roots)
from checker.base.ranks import LoggedSamples, world_from_env
from checker.base.scan import COUNTS_OPS, findings, python_source
from checker.base.workloads import (KeyedDraws, KeyedEpochs, Workload, check_fetched, harness_fetch, in_harness_fetch,
                                     initial_rms, load_workload_module, redraw_head)
from checker.candidate.channel import Channel, deliver

try:  # the `nvtx` package; torch's own NVTX bindings work too when CUDA is there
    import nvtx as _nvtx

    _push_range, _pop_range = _nvtx.push_range, _nvtx.pop_range
except ImportError:  # pragma: no cover - nvtx is a dependency
    _push_range = _pop_range = None


def tensor_views() -> int:
    """How many Python objects share memory with a tensor that the run can write values into and read back from
    Python with no op a CPU trace records (on a GPU the copy into such memory is a device-to-host copy and a sync):
    a numpy array (or a memoryview of one) over a tensor's memory, made by ``Tensor.numpy()`` or ``np.asarray(t)``;
    a numpy array, bytearray, bytes, array, mmap or ctypes buffer that a tensor written in place was made over
    (``torch.as_tensor``, ``from_numpy``, ``frombuffer``: its version counter moved); a tensor written in place
    over a file (``torch.from_file(shared=True)``: the file reads it back). A tensor made over data coming in and
    never written is not one. Looked for after the window, untimed and untraced: in every object the collector
    tracks, what each refers to, and the locals of every frame on the stack (a running function's own variables)."""
    import array
    import ctypes
    import gc
    import mmap
    from bisect import bisect_right

    import numpy as np

    seen: set[int] = set()
    tensors: list[torch.Tensor] = []
    storages: list = []  # bare storages: a storage's own copy_ moves no tensor's version counter
    buffers: list[tuple[int, int]] = []  # the memory of Python objects a tensor may have been made over

    def over_tensor(obj) -> bool:
        """Note ``obj`` (a tensor, or a buffer's memory); True for a numpy array whose memory is a tensor's."""
        if type(obj) is memoryview:
            obj = obj.obj
        if id(obj) in seen:
            return False
        if issubclass(type(obj), torch.Tensor):  # type(): no attribute of obj is read
            seen.add(id(obj))
            tensors.append(obj)
            return False
        if issubclass(type(obj), (torch.UntypedStorage, torch.TypedStorage)):  # a bare storage, no tensor over it
            seen.add(id(obj))
            storages.append(obj)
            return False
        if issubclass(type(obj), np.ndarray):
            seen.add(id(obj))
            base = obj
            while isinstance(base, np.ndarray):
                base = base.base
            if isinstance(base, torch.Tensor):
                return True
            if obj.nbytes:
                start = obj.__array_interface__["data"][0]
                buffers.append((start, start + obj.nbytes))
        elif type(obj) in (bytearray, array.array, mmap.mmap) or issubclass(type(obj), ctypes.Array):
            seen.add(id(obj))
            try:
                if issubclass(type(obj), ctypes.Array):
                    start, size = ctypes.addressof(obj), ctypes.sizeof(obj)
                else:
                    size = len(obj) * getattr(obj, "itemsize", 1)
                    start = np.frombuffer(obj, dtype=np.uint8).__array_interface__["data"][0] if size else 0
            except (ValueError, TypeError, BufferError):  # a closed mmap, an exported buffer
                return False
            if size:
                buffers.append((start, start + size))
        elif type(obj) is bytes and len(obj) >= 8:  # its bytes lie inside the object itself
            seen.add(id(obj))
            buffers.append((id(obj), id(obj) + sys.getsizeof(obj)))
        return False

    # the collector lists the containers it tracks; one that holds only untracked objects (a dict or a tuple of
    # arrays) it stops tracking, so those are walked into from what refers to them. Garbage first: a view dropped in
    # a cycle is no view held
    frames = []  # the locals of every frame on the stack, read first (a frame's cached copy of them is then current)
    frame = sys._getframe()
    while frame is not None:
        frames.append(dict(frame.f_locals))
        frame = frame.f_back
    gc.collect()
    pending = gc.get_objects() + frames
    walked: set[int] = set()
    found = 0
    # each type is sorted once (most of a process's objects are strings, functions and numbers, none of them memory
    # a tensor can share): 1 for what over_tensor notes, 2 for a plain container to walk into, 0 for the rest
    noted = (torch.Tensor, torch.UntypedStorage, torch.TypedStorage, np.ndarray, bytearray, array.array, mmap.mmap,
             ctypes.Array, bytes, memoryview)
    kinds: dict[type, int] = {dict: 2, list: 2, tuple: 2, set: 2, frozenset: 2}
    for obj in pending:  # grows as untracked containers are found
        for referent in (obj, *gc.get_referents(obj)):
            kind = kinds.get(type(referent))
            if kind is None:
                kind = kinds[type(referent)] = 1 if issubclass(type(referent), noted) else 0
            if kind == 1:
                found += over_tensor(referent)
            elif kind == 2 and referent is not obj and not gc.is_tracked(referent) and id(referent) not in walked:
                walked.add(id(referent))
                pending.append(referent)
    # the memory of the tensors written in place since they were made: a storage over a file, or over a buffer
    written: dict[int, int] = {}
    for tensor in tensors:
        try:
            if tensor.device.type != "cpu" or tensor.is_sparse \
                    or not (tensor.is_inference() or tensor._version):  # an inference tensor counts no writes
                continue
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):  # a wrapper subclass, a tensor without storage
            continue
        if storage.nbytes() and storage.data_ptr() not in written:
            written[storage.data_ptr()] = storage.data_ptr() + storage.nbytes()
            found += bool(storage.filename)  # a written tensor over a file: the file reads its values back
    # a bare storage mapped over a file (UntypedStorage.from_file): a value copied in by the storage's own copy_, which
    # moves no version counter, is read back from the file (os.pread) with no op; written or not, no lab holds one (a
    # tensor over a file that is never written is data coming in)
    files: set[int] = set()
    for storage in storages:
        try:
            if isinstance(storage, torch.TypedStorage):
                storage = storage.untyped()
            if storage.filename and storage.data_ptr() not in files:
                files.add(storage.data_ptr())
                found += 1
        except (RuntimeError, NotImplementedError, TypeError):
            continue
    starts = sorted(written)
    for start, end in set(buffers):
        at = bisect_right(starts, end - 1) - 1  # the last storage starting before the buffer ends
        found += at >= 0 and written[starts[at]] > start
    return found


@dataclass
class LaunchOptions:
    """Set by ``checker.candidate.launch`` before it runs a script; ``None`` when a script runs on its own."""

    trace: str | None = None  # "torch": record the window with torch.profiler
    trace_out: Path | None = None
    trace_tail: int = 0  # with trace "torch": record this many steps after the window instead of the window
    channel: Channel | None = None  # under the grader
    seed: int | None = None  # the run's seed, from the grader
    # the grader's command line for the script (--device, --steps, its --set): under the grader, start() takes its
    # settings from these alone, whatever the script passes it or puts in sys.argv (red team 67's rawflip_07 gave
    # start() "--set finished_batches=1", and the harness compared one window batch with its samples instead of all)
    args: list[str] | None = None
    script: str | None = None  # the script's real path: the code the grader scanned before the run
    # the scan the grader ran over the script, run again over every other file the run loads code from (None: off)
    scan_loaded: tuple[str, ...] | None = None
    # torch.compile's store of built kernels as the environment named it before the script ran (kernels_folder_now)
    kernels_folder: str | None = None


LAUNCH: LaunchOptions | None = None
_CURRENT: "Session | None" = None


def _export_path() -> list[tuple[str, Any, str, Any]]:
    """What writes a torch.profiler trace and hands its bytes to the grader, as (shown name, owner, attribute,
    the object there now). Taken when this module is imported, before any script runs: a script that replaces
    one (to leave its syncs out of the file it writes) is found out at export (``_replaced_on_export_path``)."""
    import gzip
    import json
    import os
    import shutil
    import tempfile

    owners = [("torch.profiler.profile", torch.profiler.profile,
               ("__enter__", "__exit__", "start", "stop", "export_chrome_trace")),
              ("torch.autograd.profiler.profile", torch.autograd.profiler.profile,
               ("__enter__", "__exit__", "export_chrome_trace")),
              ("builtins", builtins, ("open",)), ("gzip", gzip, ("open", "compress")),
              ("tempfile", tempfile, ("NamedTemporaryFile", "mkdtemp")),
              ("os", os, ("write", "read", "remove", "open", "close", "fstat", "lstat")), ("shutil", shutil, ("rmtree",)),
              ("json", json, ("dumps",)), ("pathlib.Path", Path, ("read_bytes",)),
              ("Channel", Channel, ("send", "_write", "intact"))]
    result = getattr(torch._C._autograd, "_ProfilerResult", None)
    if result is not None:
        owners.append(("torch._C._autograd._ProfilerResult", result, ("save",)))
    return [(f"{shown}.{name}", owner, name, getattr(owner, name)) for shown, owner, names in owners
            for name in names if hasattr(owner, name)]


_EXPORT_PATH = _export_path()

# PyTorch's switches of what the profiler records: op recording on or off in the calling thread, the collection
# paused. The harness calls none. A call from a thread the Python tracer does not follow (one started after the
# profiler) leaves no frame in the trace, so the harness counts every call of them, from the moment it is imported
# (before the script runs), and a traced run that made any is ended by the grader (checker.grader.runs).
PROFILER_SWITCHES = ("_enable_record_function", "_toggle_collection_dynamic", "_set_record_function_enabled")
_SWITCH_CALLS: list[str] = []
# the same switches in torch's C++ library, looked up by ctypes (red team 52's ctypes_rf_04 called
# at::enableRecordFunction so, with the scan off), or the symbol lookup itself (dlsym) called as a foreign function
_NATIVE_SWITCH = re.compile(r"RecordFunction|record_function|[Pp]rofiler|[Kk]ineto|^dlsym$|^dlvsym$")


def _watch(targets: Iterable[tuple[Any, str]], wrap: Callable[[Callable, str], Callable],
           static: Callable[[Any, str], bool] = lambda owner, name: False, hidden: bool = False) -> None:
    """Put ``wrap(original, name)`` in the place of each ``owner.name`` of ``targets`` that exists and is not watched
    yet (marked ``_workbook_watched``: an import run twice wraps nothing twice). Where ``static(owner, name)``, it is
    set as a static method (a maker called through a class). An owner that takes no new attributes keeps its own.
    ``hidden``: the original is not handed out as ``__wrapped__`` (a switch reached past its watcher so: red team
    52's fmt_partial_04)."""
    for owner, name in targets:
        original = getattr(owner, name, None)
        if original is None or getattr(original, "_workbook_watched", False):
            continue
        watched = wrap(original, name)
        watched._workbook_watched = True
        if not hidden:
            watched.__wrapped__ = original  # as functools.wraps does
        try:
            setattr(owner, name, staticmethod(watched) if static(owner, name) else watched)
        except (AttributeError, TypeError):
            pass


def _watch_profiler_switches() -> None:
    import torch.autograd.profiler

    def wrap(original: Callable, name: str) -> Callable:
        def watched(*args, **kwargs):
            _SWITCH_CALLS.append(name)  # and nothing more: what is recorded stays switched on
        return watched

    # The originals are kept nowhere (no closure, no __wrapped__): torch's own code calls none of them outside its
    # tests and profile.toggle_collection_dynamic, and a script that reached one past its watcher (red team 52's
    # fmt_partial_04, by `__wrapped__`) switched recording off with no call counted.
    modules = (torch._C, torch._C._autograd, torch.autograd, torch.autograd.profiler)
    _watch([(module, name) for module in modules for name in PROFILER_SWITCHES], wrap, hidden=True)


_watch_profiler_switches()


# Tensors made over a Python buffer's memory (a numpy array, bytes, bytearray, array, mmap, a DLPack capsule), by the
# calls that make one without copying. Made in the window: kept until it closes, where each written in place since
# counts as a view (tensor_views): values copied into it are read back from Python with no op a CPU trace records,
# and a tensor dropped in the same line as it was written is gone before tensor_views looks. Made before the window:
# held from its open like a tensor with a numpy view (red team 26 wrote each step's loss into a tensor made over a
# numpy array in set-up, read it through numpy, and dropped both in the last step). Counted on a CPU, in the chapters
# that count host reads (Session._counts_views); the collate of honest loaders makes none it writes into.
ALIASING_MAKERS = ("as_tensor", "from_numpy", "frombuffer", "asarray", "from_dlpack")
_MADE_OVER_BUFFERS: list[torch.Tensor] = []
MADE_KEPT = 50_000  # a bound on what is kept: more made in one window is counted as written


def _shares_buffer(source: Any, made: Any) -> bool:
    """Whether ``made`` (a CPU tensor) lies in the memory of ``source``, a Python object that is not a tensor."""
    if issubclass(type(source), torch.Tensor) or not issubclass(type(made), torch.Tensor) or made.device.type != "cpu":
        return False
    try:
        import numpy as np

        memory = np.asarray(memoryview(source)) if not issubclass(type(source), np.ndarray) else source
        start = memory.__array_interface__["data"][0]
        end = start + memory.nbytes
        storage = made.untyped_storage()
    except (TypeError, ValueError, BufferError, RuntimeError, NotImplementedError):
        return False
    return storage.nbytes() > 0 and storage.data_ptr() < end and start < storage.data_ptr() + storage.nbytes()


def _watch_aliasing_makers() -> None:
    import torch.utils.dlpack

    def wrap(original: Callable, name: str) -> Callable:
        def watched(*args, **kwargs):
            made = original(*args, **kwargs)
            session = _CURRENT
            source = args[0] if args else next(
                (kwargs[k] for k in ("obj", "data", "buffer", "ndarray", "ext_tensor") if k in kwargs), None)
            # a DLPack capsule (or an object exporting one) that is not a tensor is memory from outside torch
            foreign = name == "from_dlpack" and not issubclass(type(source), torch.Tensor) \
                and issubclass(type(made), torch.Tensor) and made.device.type == "cpu"
            if not (foreign or _shares_buffer(source, made)):
                return made
            if session is not None and session._counts_crossings and session._window_open:
                _RAW_READS[0] += 1  # arithmetic done outside PyTorch, coming back in: a crossing
            if session is not None and session._counts_views and session._window_open:
                if len(_MADE_OVER_BUFFERS) < MADE_KEPT:
                    _MADE_OVER_BUFFERS.append(made)
                else:
                    session._made_beyond += 1
            else:  # before the window (or before the session): held from the window's open
                _expose(made)
            return made
        return watched

    modules = (torch, torch._C._VariableFunctions, torch.utils.dlpack)
    _watch([(module, name) for module in modules for name in ALIASING_MAKERS], wrap)


# Tensors whose memory Python can read with no op: those a numpy view or a DLPack capsule was made of (Tensor.numpy,
# which np.asarray and __array__ call too; Tensor.__dlpack__, which np.from_dlpack calls), and those made over a
# Python buffer before the window (_watch_aliasing_makers), watched from import. Written through the tensor in each
# step and read from the other side, such memory is a host read no CPU trace records, and the view may be hidden (an
# object array) or dropped before tensor_views looks. The harness holds each such tensor from the window's open to
# its close and counts those written in place meanwhile.
_NUMPY_OF: "weakref.WeakSet[torch.Tensor]" = weakref.WeakSet()
# the checks that count a step's ops (Session._counts_crossings)
_NUMPY_HELD: dict[int, tuple[torch.Tensor, int]] = {}  # id -> (the tensor, its version when the window opened or the view was made)
# The numpy arrays Tensor.numpy made outside the chapter's workload build, by weak reference: one still alive as the
# window opens (it, or a view of it, kept by the script) is a way to read a tensor's values with no op, whatever writes
# its memory. The version a held tensor keeps misses a write through another tensor over the same memory
# (``tensor.data``, whose version counter is its own: red team 67's dataview_01 and dataview_06 wrote each step's
# loss there, read it through the view and dropped the view in the last step). Counted once each (_HELD_VIEWS).
_SCRIPT_ARRAYS: list["weakref.ref[Any]"] = []  # (an ndarray is unhashable: no WeakSet)
_ARRAYS_BEYOND = [0]  # arrays made while MADE_KEPT live ones were kept: each counted as held
_HELD_VIEWS = [0]
# DLPack exports the script made (outside the workload's build): what a capsule becomes (np.from_dlpack's array, or
# another library's) cannot be followed, so each counts as a view held into the window, as a numpy array kept alive
# does (a DLPack copy of a step's loss written through ``.data`` was read so, the numpy view's road)
_DLPACK_EXPORTS = [0]
_BUILDING = [False]  # while the harness builds the chapter's workload: its own exports are not the script's


def _expose(tensor: torch.Tensor) -> None:
    """Note a tensor whose memory Python can read: held now if the window is open, else from its open. An export made
    in the window on another thread than the window's is a read in itself: the Python tracer follows no thread started
    after the profiler, and a DLPack export runs no op (np.from_dlpack on a fresh thread read the loss unseen)."""
    try:
        session = _CURRENT
        if session is not None and session._watches_memory and session._window_open:
            if threading.get_ident() != session._window_thread or session._counts_crossings:
                _RAW_READS[0] += 1
            if id(tensor) not in _NUMPY_HELD and len(_NUMPY_HELD) < MADE_KEPT:
                _NUMPY_HELD[id(tensor)] = (tensor, tensor._version)
        else:
            _NUMPY_OF.add(tensor)
    except (TypeError, RuntimeError):  # a tensor that takes no weak reference or has no version
        pass


_EXPORTING = threading.local()


def _watch_numpy_views() -> None:
    import torch.utils.dlpack

    def wrap(original: Callable, name: str) -> Callable:
        def exported(tensor, *args, **kwargs):
            outer = not getattr(_EXPORTING, "on", False)  # __dlpack__ calls _to_dlpack: one export, noted once
            _EXPORTING.on = True
            try:
                made = original(tensor, *args, **kwargs)
            finally:
                _EXPORTING.on = not outer
            if outer and issubclass(type(tensor), torch.Tensor):
                _expose(tensor)
                if name == "numpy" and not _BUILDING[0]:
                    _note_array(made)
                elif not _BUILDING[0]:
                    _DLPACK_EXPORTS[0] += 1
            return made
        exported.__name__ = name
        return exported

    _watch([(torch.Tensor, "numpy"), (torch.Tensor, "__dlpack__"), (torch._C, "_to_dlpack"),
            (torch._C, "_to_dlpack_versioned"), (torch.utils.dlpack, "to_dlpack"), (torch, "to_dlpack")], wrap)


def _note_array(array: Any) -> None:
    """Keep a weak reference to a numpy array made of a tensor by the script (_SCRIPT_ARRAYS); past MADE_KEPT live
    ones, the array is counted as a view held into the window (_ARRAYS_BEYOND), alive or not."""
    if len(_SCRIPT_ARRAYS) >= MADE_KEPT:
        _SCRIPT_ARRAYS[:] = [ref for ref in _SCRIPT_ARRAYS if ref() is not None]
    if len(_SCRIPT_ARRAYS) >= MADE_KEPT:
        _ARRAYS_BEYOND[0] += 1
        return
    try:
        _SCRIPT_ARRAYS.append(weakref.ref(array))
    except TypeError:  # pragma: no cover - an ndarray takes weak references
        pass


def hold_numpy_views() -> None:
    """At the window's open: hold every tensor noted so far (_expose), with its version now; and count the numpy
    arrays made of tensors outside the workload's build that are still alive (_SCRIPT_ARRAYS)."""
    _HELD_VIEWS[0] = sum(ref() is not None for ref in _SCRIPT_ARRAYS) + _ARRAYS_BEYOND[0]
    for tensor in list(_NUMPY_OF):
        if len(_NUMPY_HELD) < MADE_KEPT:
            try:
                _NUMPY_HELD[id(tensor)] = (tensor, tensor._version)
            except RuntimeError:
                pass


def written_numpy_views() -> int:
    """How many held tensors were written in place since the window opened (or the view was made)."""
    written = 0
    for tensor, version in _NUMPY_HELD.values():
        try:
            written += tensor._version != version
        except RuntimeError:
            pass
    _NUMPY_HELD.clear()
    return written


_watch_numpy_views()


def _watch_value_callbacks() -> None:
    """Tensor.apply_, map_ and map2_ hand every value to a Python callable and dispatch no op: on the window's thread
    the trace names each call (python_reads); on a thread started after the profiler no frame does (red team 39's
    threadapply_06 read every value the slow helpers need that way). In the window, on another thread than the
    window's, each call is a read, in a chapter that counts them."""
    def wrap(original: Callable, name: str) -> Callable:
        def called(tensor, *args, **kwargs):
            session = _CURRENT
            if session is not None and session._counts_views and session._window_open \
                    and threading.get_ident() != session._window_thread:
                _RAW_READS[0] += 1
            return original(tensor, *args, **kwargs)
        called.__name__ = name
        return called

    _watch([(torch.Tensor, name) for name in ("apply_", "map_", "map2_")], wrap)


_watch_value_callbacks()


def written_made_over_buffers() -> int:
    """How many tensors made in the window over a Python buffer were written in place (their version counter moved)."""
    return sum(1 for t in _MADE_OVER_BUFFERS if t.is_inference() or t._version)


_watch_aliasing_makers()


# Memory the kernel also shows as a file, or that a Python object holds: a storage mapped over one (from_file), built
# over an address, or moved to shared memory, whose file
# descriptor or name the script can read with os.pread (red team 34's file_box_01 copied each step's loss into a
# storage made over a file in set-up, with a storage's own copy_, and read it back from the file). Made by the script
# anywhere in the run, in a chapter that counts host reads or a step's ops on a CPU, each counts (no lab makes one:
# a DataLoader's batches arrive in shared memory through the receivers, _new_shared_fd_cpu, which are not watched; a
# file mapped privately is data coming in). Each is counted by the name of its maker.
FILE_MEMORY_MAKERS = ((torch, "from_file"), (torch._C._VariableFunctions, "from_file"),
                      (torch.UntypedStorage, "from_file"), (torch.UntypedStorage, "_share_fd_cpu_"),
                      (torch.UntypedStorage, "_share_filename_cpu_"), (torch.UntypedStorage, "_new_using_fd_cpu"),
                      (torch.UntypedStorage, "_new_using_filename_cpu"),
                      # a storage built over any address, a Python buffer's among them (array.array's buffer_info): a
                      # value copied in is read back from the buffer, no file needed (red team 38's arraybox_01)
                      (torch._C, "_construct_storage_from_data_pointer"))
_FILE_MEMORY: list[str] = []


def _watch_file_memory_makers() -> None:
    def wrap(original: Callable, name: str) -> Callable:
        def made(*args, **kwargs):
            result = original(*args, **kwargs)
            # a file mapped privately (from_file's shared false) keeps what is written from the file: data coming in
            private = name == "from_file" and not (args[1] if len(args) > 1 else kwargs.get("shared", False))
            if not private and len(_FILE_MEMORY) < MADE_KEPT:
                _FILE_MEMORY.append(name)
            return result
        made.__name__ = name
        return made

    # a method of the storage (_share_*: bound per instance) stays one; the storage's makers are called through the class
    _watch(FILE_MEMORY_MAKERS, wrap,
           static=lambda owner, name: owner is torch.UntypedStorage and not name.startswith("_share_"))


_watch_file_memory_makers()


# ctypes objects over raw memory (from_address, from_buffer) and copies out of it (string_at): made in the window on a
# CPU, in a chapter that counts host reads, each is a read of memory no op records (red team 24 read the loss with
# c_float.from_address(t.data_ptr()), the address taken through a call made from C). ctypes announces each to the
# interpreter's audit hooks, which a script cannot remove; a foreign function that copies memory (memmove, a C
# extension's own) announces nothing.
CODE_EVENTS = frozenset({"compile", "exec", "code.__new__", "function.__new__", "object.__setattr__"})
RAW_MEMORY_EVENTS = frozenset({"ctypes.cdata", "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at"})
_RAW_READS = [0]
# every library ctypes opened in this process, from import on (ctypes.dlopen's audit event names it): one opened and
# closed again (_ctypes.dlclose) is no longer in the memory map when the window closes (red team 26)
_OPENED: list[str] = []
# the memory of a process opened as a file (/proc/<pid>/mem): a value copied into a tensor is read back with os.pread,
# with no op, call or audit event any count sees (red team 27 found its mailbox through /proc/<pid>/maps). Every such
# open from import on is noted (the audit hook's "open" is announced by open() and os.open() alike): a link to it, or
# a name opened relative to a folder's descriptor, counts too.
_MEMORY_FILES: list[str] = []


# a process's own accounting read as a file: /proc/<pid>/stat's fault counts carry a value's bits to Python as
# resource.getrusage's do (red team 43's faultbits_01), with no op or named call. A file opened once and read again
# after a seek holds fresh counts, so every open from import on is noted, as the memory's are; a step needs none.
_ACCOUNTING = re.compile(r"^/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/(?:stat|statm|status|io|sched|schedstat)$")
_ACCOUNTING_NAMES = frozenset({"stat", "statm", "sched", "schedstat"})  # relative to /proc/self opened as a folder
_HARNESS_SCHED: types.CodeType | None = None  # Session._sched_mark's code: its own reads of schedstat are not noted


def _opens_process_file(path: str) -> str | None:
    """"memory" for a process's memory, "accounting" for its counters (a link to either, or a name relative to a
    folder's descriptor, /proc/self opened as a folder, too), else None: one resolution of the path per open."""
    if not os.path.isabs(path):  # relative to a folder descriptor or the working folder
        name, folder = os.path.basename(path), os.path.dirname(path)
        return "memory" if name == "mem" else "accounting" if name in _ACCOUNTING_NAMES and folder in ("", ".") \
            else None
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return None
    if real.startswith("/proc/") and os.path.basename(real) == "mem":
        return "memory"
    return "accounting" if _ACCOUNTING.match(real) or _ACCOUNTING.match(os.path.normpath(path)) else None


def _opens_process_memory(path: str) -> bool:
    return _opens_process_file(path) == "memory"


# Code named like the grader's own. A trace tells the grader's code (checker/, a chapter's workload.py: its reads in a
# fetch are excused, its clock reads are the harness's) from the script's by the file its frames name, which
# torch.profiler writes relative to the sys.path folder that holds it: a module the script wrote to
# <folder>/chapters/<x>/workload.py and imported with <folder> on sys.path was "the grader's" in the trace (red team
# 35's grader_path_06). So every code object the run makes from import on (compiled, executed, built, put in a
# function or as one's code) whose file is named like that and is not one of the grader's own files is noted, and a
# step guard ends the run on any that a trace would name as the grader's (named_like_own). torch.compile's
# generated modules are named otherwise.
OWN_CODE_NAME = re.compile(r"(?:^|[/\\])(?:checker|chapters)[/\\]")
# the names the trace analyses take for the grader's code (checker.trace.analyses: syncs' GRADER_CODE and HARNESS_CODE,
# clocks' HARNESS_FRAME), as a frame shows its file
SHOWN_AS_OWN = re.compile(r"(?:^|/)(?:checker/[\w/]+\.py|chapters/[^/]+/workload\.py)$")


def _own_code_roots() -> tuple[str, ...]:
    roots = {os.path.dirname(os.path.dirname(os.path.realpath(__file__)))}  # checker/
    try:  # found as the harness finds it, without keeping what it found: a fork server imports this module once
        roots.add(os.path.realpath(checker.base.paths.repo_root.__wrapped__() / "chapters"))
    except Exception:  # noqa: BLE001 - no checkout found: only the package's own files are the grader's
        pass
    return tuple(sorted(roots))


_ROOTS_OF: dict[tuple[int, str], tuple[str, ...]] = {}  # (process id, which) -> roots: a fork server's run finds its own


def _roots(which: str, make: Callable[[], tuple[str, ...]]) -> tuple[str, ...]:
    """``make()``'s roots, found once per process (a run forked from the fork server finds its own checkout)."""
    key = (os.getpid(), which)
    if key not in _ROOTS_OF:
        for stale in [k for k in _ROOTS_OF if k[0] != key[0]]:
            del _ROOTS_OF[stale]
        _ROOTS_OF[key] = make()
    return _ROOTS_OF[key]


_NAMED_LIKE_OWN: list[str] = []


def _note_code_named(filename: Any) -> None:
    """Note ``filename`` (a code object's file) where it is named like the grader's code and is none of its files."""
    if not isinstance(filename, (str, bytes)) or len(_NAMED_LIKE_OWN) >= MADE_KEPT:
        return
    name = os.fsdecode(filename)
    if not OWN_CODE_NAME.search(name):
        return
    real = os.path.realpath(name)
    if not any(real.startswith(root + os.sep) for root in _roots("own", _own_code_roots)):
        _NAMED_LIKE_OWN.append(name)


def named_like_own(_prefixes=_prefix_regex) -> list[str]:
    """The files of code the script made that a trace would name as the grader's: each as torch.profiler's Python
    tracer shows it, cut by the first of its path prefixes (sys.path now, site's folders) that it starts with."""
    if not _NAMED_LIKE_OWN:
        return []
    prefixes = _prefixes()
    shown = [next((name[len(p):] for p in prefixes if name.startswith(p)), name) for name in _NAMED_LIKE_OWN]
    return [name for name in dict.fromkeys(shown) if SHOWN_AS_OWN.search(name.replace(os.sep, "/"))]


def _note_code(code: Any) -> None:
    """Note the files of a code object and of every code object nested in its constants (a function's, a class's)."""
    pending, seen = [code], 0
    while pending and seen < 100_000:
        code = pending.pop()
        seen += 1
        if issubclass(type(code), types.CodeType):
            _note_code_named(code.co_filename)
            pending.extend(c for c in code.co_consts if issubclass(type(c), types.CodeType))


# Code the run loads from a file of its own. The grader scans the submitted script before the run; a module the script
# writes and imports was read by no scan (red team 40's hidden_below_05 carried ops run below the profiler's hook in
# one, base64 in train.py). So under the grader the harness scans, as the grader scanned the script, the source of every
# code object compiled or executed from a file outside Python's installation, its site-packages and the grader's
# checkout, when it is loaded and before it runs; a finding ends the run (the step guard). Inductor's generated modules
# are scanned too, allowed only the idioms Inductor writes (ctypes' C types imported, the module's globals read, its own
# internals named).
_LOADED_SEEN: set[str] = set()
_LOADED_REFUSED: list[str] = []
GENERATED_IDIOMS = re.compile(r"calls native code directly \(import ctypes\.c_\w+\)|calls native code directly "
                              r"\(import ctypes\)|reads the module's namespace as a dict|reaches Inductor's code cache")


def _trusted_roots() -> tuple[str, ...]:
    """Python's installation, its site-packages and the grader's checkout: code loaded from there is not the run's."""
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages()}
    try:
        found.add(site.getusersitepackages())
    except AttributeError:
        pass
    return tuple(sorted({os.path.realpath(r) for r in found if r} | set(_roots("own", _own_code_roots))))


_SCANNING = threading.local()


def _scan_loaded(filename: Any, source: Any = None) -> None:
    """Scan the code loaded from ``filename`` (its ``source`` where the compile event gave it) when it is a file of the
    run's own: under the grader, with the scan on, and once per file. Never re-entered: what it imports itself (none
    after the first call) raises audit events of its own."""
    options = LAUNCH
    if options is None or options.scan_loaded is None or not isinstance(filename, (str, bytes)) \
            or getattr(_SCANNING, "on", False):
        return
    _SCANNING.on = True
    try:
        _scan_loaded_file(filename, source, options)
    finally:
        _SCANNING.on = False


def _scan_loaded_file(filename: Any, source: Any, options: "LaunchOptions") -> None:
    name = os.fsdecode(filename)
    if name.startswith("<") or name in _LOADED_SEEN:
        return
    if len(_LOADED_SEEN) >= MADE_KEPT:  # no file goes unscanned: past the bound, loading more is a finding itself
        if not _LOADED_REFUSED:
            _LOADED_REFUSED.append(f"more than {MADE_KEPT} files of code loaded, more than the harness scans")
        return
    _LOADED_SEEN.add(name)
    real = os.path.realpath(name)
    if real == options.script or any(real.startswith(root + os.sep) for root in _roots("trusted", _trusted_roots)):
        return
    if isinstance(source, ast.AST):
        source = ast.unparse(source)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        source = python_source(bytes(source))  # as Python decodes it: its coding cookie honoured
    elif not isinstance(source, str):
        try:
            source = python_source(Path(real).read_bytes())
        except OSError:
            _LOADED_REFUSED.append(f"{name} (its source cannot be read, so it cannot be scanned)")
            return
    cache = _compiled_kernels_folder()  # the grader's compile store for the run, or Inductor's default
    generated = bool(cache) and real.startswith(cache + os.sep)
    if generated and "cuda" in options.scan_loaded:
        return  # what Inductor generates for a GPU has not been scanned on one yet: its idioms are not listed
    found = findings(source, name, "host_reads" in options.scan_loaded, "counts_ops" in options.scan_loaded,
                     "counts_rounds" in options.scan_loaded)
    if generated:  # Inductor's generated module: its own idioms allowed, nothing else
        found = [f for f in found if not GENERATED_IDIOMS.search(f)]
    if found:
        _LOADED_REFUSED.append(f"{name}: {found[0]}")


# What the training process may look up while it unpickles a batch a loader worker sent, in the harness's fetch or on
# a thread of its own: what rebuilds data, never what computes. An unpickler calls what it looks up, so anything else
# runs in the training process with no op or frame in the step: a lazy map of numpy calls padded, cropped and stacked
# each sample there (red team 45's newargs_map_07), a function of the script's cropped and flipped the batch on the
# pin-memory thread (red team 33's unpickle_prep_07, which passed on an H100 at 3.2x while a CPU run's fetch audit
# failed it). Allowed: torch's and multiprocessing's rebuilds and handles, torch's dtypes, devices, sizes, tensor and
# storage classes, a DataLoader's own messages, numpy's array rebuilds, plain builtins and containers, and the
# script's own classes whose construction pickle can call (below) is Python's or a namedtuple's or dataclass's
# generated code.
_PLAIN_BUILTINS = frozenset({"int", "float", "complex", "bool", "str", "bytes", "bytearray", "list", "tuple", "dict",
                             "set", "frozenset", "slice", "range", "NoneType", "object"})
_NUMPY_REBUILDS = frozenset({"_reconstruct", "ndarray", "dtype", "scalar", "_frombuffer"})
_REBUILD_NAME = re.compile(r"^_*(?:rebuild|load_from_bytes$|get_layout$)")
# torch's modules whose rebuilds a batch's tensors and storages arrive by; a rebuild that converts (a dtype, a device:
# _rebuild_device_tensor_from_cpu_tensor) is work, not a rebuild
_TORCH_REBUILDS = frozenset({"torch.multiprocessing.reductions", "torch._utils", "torch._tensor", "torch.storage",
                             "torch.serialization"})
_CONVERTING = re.compile(r"device_tensor_from")
_LOADER_MESSAGES = frozenset({("torch.utils.data._utils.worker", "_ResumeIteration"),
                              ("torch.utils.data._utils.worker", "_IterableDatasetStopIteration"),
                              ("torch._utils", "ExceptionWrapper"), ("multiprocessing.resource_sharer", "DupFd")})
_COPYREG = frozenset({"_reconstructor", "__newobj__", "__newobj_ex__"})
_CONTAINERS = frozenset({"OrderedDict", "defaultdict", "deque", "Counter", "ChainMap"})
# what an unpickler calls on a class it built: its construction (REDUCE, NEWOBJ), its state (BUILD looks up
# __setstate__, sets slots by setattr), its items (APPENDS, SETITEMS, ADDITEMS), a key's hash, and a tensor subclass's
# torch hooks (a rebuild makes the subclass by as_subclass)
_PICKLE_CALLS = ("__new__", "__init__", "__post_init__", "__setstate__", "__getattr__", "__getattribute__",
                 "__setattr__", "__setitem__", "append", "extend", "add", "__hash__", "__eq__", "__torch_function__",
                 "__torch_dispatch__")
_UNPICKLED: list[str] = []
_OWN_CLASSES: set[str] = set()  # of those refused, the classes of the script's own (said so in the stop's message)
_SESSION_PID: list[int | None] = [None]  # the training process: set by start(), not at import (a fork server's)


def _looked_up(module: str, name: str) -> Any:
    """What an unpickler's lookup names, if its module is imported (None where it is not, or names nothing)."""
    return getattr(sys.modules.get(module), name, None)


def _generated(cls: type, function: Any) -> bool:
    """A namedtuple's __new__ or a dataclass's methods: code Python's own modules write for the class."""
    code = getattr(function, "__code__", None)
    if code is None or code.co_filename != "<string>":
        return False
    return (issubclass(cls, tuple) and hasattr(cls, "_fields")) or hasattr(cls, "__dataclass_fields__")


def _installed_code(function: Any) -> bool:
    """A Python function whose code lies in Python's installation or its packages (dataclasses' slot state, enum's)."""
    code = getattr(function, "__code__", None)
    return code is not None and code.co_filename.startswith("/") and _installed(os.path.realpath(code.co_filename))


def _plain_class(cls: type) -> bool:
    """A class of the script's whose every call pickle can make on it runs Python's or generated code only, and that
    holds no descriptor of its own (a property's setter runs as a dataclass's generated __init__ sets the field)."""
    if not _installed_class(type(cls)):
        return False  # a metaclass of the script's runs its __call__ when the class is called
    for owner in cls.__mro__:
        if _installed_class(owner):
            continue
        for value in vars(owner).values():
            if isinstance(value, property):
                if any(f is not None and not _installed_code(f) for f in (value.fset, value.fdel)):
                    return False  # a setter of the script's, run as a generated __init__ or a slot's state sets it
            elif hasattr(type(value), "__set__") and not _installed_class(type(value)):
                return False  # a descriptor of the script's own
    for hook in _PICKLE_CALLS:
        for owner in cls.__mro__:
            if hook in vars(owner):
                function = vars(owner)[hook]
                function = getattr(function, "__func__", function)  # a staticmethod's or classmethod's function
                if not _installed_class(owner) and function is not None and not _generated(cls, function) \
                        and not _installed_code(function):
                    return False  # the script's own code, or any callable it put there (a partial, an object)
                break
    return True


def _installed_class(cls: type) -> bool:
    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    if module is builtins or getattr(module, "__name__", None) in sys.builtin_module_names:
        return True  # compiled into the interpreter (_collections' tuplegetter: a namedtuple's fields)
    where = getattr(module, "__file__", None)
    return isinstance(where, str) and _installed(os.path.realpath(where))


def _unpickle_allowed(module: str, name: str) -> bool:
    """Whether an unpickler in the training process may look up ``name`` in ``module``: an exact list, for a dotted
    name walks from an allowed module to anything it imported (protocol 4: ``copyreg``'s ``__builtins__.get``)."""
    if "." in name:
        return False
    root = module.split(".", 1)[0]
    found = _looked_up(module, name)
    if (module, name) in _LOADER_MESSAGES:
        return True
    if isinstance(found, type) and issubclass(found, BaseException):
        return _installed_class(found) or _plain_class(found)  # a worker's error, reraised by the loader
    if root == "builtins":
        return module == "builtins" and name in _PLAIN_BUILTINS
    if root == "numpy":
        return name in _NUMPY_REBUILDS or module == "numpy.dtypes" and isinstance(found, type)
    if root == "copyreg":
        return module == "copyreg" and name in _COPYREG
    if root == "multiprocessing":
        return module == "multiprocessing.reduction" and bool(_REBUILD_NAME.match(name)) and name != "_rebuild_partial"
    if root == "collections":
        return module == "collections" and name in _CONTAINERS
    if root == "torch":
        if module in _TORCH_REBUILDS and _REBUILD_NAME.match(name) and not _CONVERTING.search(name):
            return True
        if module == "torch" and isinstance(found, (torch.dtype, torch.layout, torch.memory_format)):
            return True
        return module in ("torch", "torch.storage", "torch.nn.parameter") and isinstance(found, type) and issubclass(
            found, (torch.Tensor, torch.Size, torch.device, torch.storage.UntypedStorage, torch.storage.TypedStorage))
    if not isinstance(found, type):
        return False  # a function, a method or an object of the script's, or of another library, is called
    if _installed_class(found):
        return False  # another library's class: its constructor computes where no step shows it
    return _plain_class(found)  # the script's own class (a batch as a namedtuple or a dataclass)


def _note_unpickled(args: tuple) -> None:
    """A lookup by an unpickler in the training process while the window or the tail is open, in the harness's fetch
    or on a DataLoader's pin-memory thread (it unpickles the workers' batches ahead of the fetch; named for its loop).
    Other threads unpickle other things: Inductor's compile thread, a compile's results."""
    session = _CURRENT
    if session is None or os.getpid() != _SESSION_PID[0] or len(args) < 2 or len(_UNPICKLED) >= MADE_KEPT \
            or not (session._window_open or session._tail_open) \
            or not (in_harness_fetch() or "_pin_memory_loop" in threading.current_thread().name):
        return
    module, name = str(args[0]), str(args[1])
    if not _unpickle_allowed(module, name):
        _UNPICKLED.append(f"{module}.{name}")
        if isinstance(found := _looked_up(module, name), type) and not _installed_class(found):
            _OWN_CLASSES.add(f"{module}.{name}")


# A value read by whether an op failed. On a CPU an op checks some of its arguments' values as it runs (an index
# within its bounds: index_select, gather, embedding; a class target: nll_loss) and raises when one is not, so each
# call caught is one bit of a tensor's value in Python, with no op that reads one and no frame a trace tells from
# honest work (red team 48's oracle_06 read every value the lab's helpers need by binary search over bounds checks,
# caught under another name or by contextlib.suppress). In a CPU run that counts host reads, the stepping thread runs
# its window under a tracer (sys.settrace's hook; torch.profiler's Python tracer uses sys.setprofile's) that notes
# every such error a call or a subscript raised, not a raise statement, in a step that is not a logging step, on
# threads started in the window too. A thread started before it is not followed.
#
# A warning is the same bit by another road: an op warns on some values and not others (torch._saturate_weight_to_fp16
# warns when a value is beyond float16's range: red team 55's warnbits_01 read values by bisecting over scaled copies).
# Python's warning machinery hands the script that bit in one of two ways: as an error (a filter "error"), noted as
# above (a Warning among the kinds), or by showing the warning, which runs warnings._showwarnmsg (a record=True
# catch_warnings, a showwarning of the script's own and the default display all pass through it). The tracer notes each
# warning shown in a step that is not a logging step, where the code that issued it ran. An honest step shows none: a
# warning is shown once per place unless a filter says "always", and the first is shown in the warm-up. The names that
# would take the display out of that path (the script's own _showwarnmsg, a registry read) are the scan's
# (checker.base.scan.WARNING_MACHINERY), and the harness holds the warnings module to the one it imported.
_OP_ERROR_TYPES = (IndexError, ValueError, RuntimeError, Warning)
_SHOW_WARNING = getattr(warnings, "_showwarnmsg", None)
_SHOW_WARNING_CODE = getattr(_SHOW_WARNING, "__code__", None)
_RAISING = frozenset(dis.opmap[name] for name in ("RAISE_VARARGS", "RERAISE") if name in dis.opmap)
_OP_ERRORS: list[str] = []
# the standard library raises and catches these kinds as its own control flow (a queue's feeder thread popping an
# empty deque, re compiling a pattern, an import): an error that starts in those modules' code is not an op's. Only
# those: the rest of the standard library calls what a script hands it (functools.singledispatch's wrapper calls an
# op, asyncio's handles run one and pass its error to a handler), so an op's error can start in its frames too (red
# team 51's stdlib_raise_01 read each bit through singledispatch). Honest CPU runs of chapters 01, 02, 06, 07 and 09
# (solutions and labs, session 70) started no error in the standard library in a window step.
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
_STDLIB_CONTROL_FLOW = tuple(_STDLIB + part for part in (
    "re/", "sre_compile.py", "sre_parse.py", "importlib/", "multiprocessing/queues.py",
    "multiprocessing/connection.py", "queue.py", "threading.py"))
# the window's step and logging interval as the harness set them, out of the session's public attributes, which a
# script can set (session.log_every = 1 would excuse every step)
_WINDOW_STEP: list[int | None] = [None]
_WINDOW_LOG_EVERY: list[int | None] = [None]
_SETTING_TRACE = threading.local()  # the harness's own sys.settrace calls, told from a script's by the audit event
_TRACE_REPLACED: list[str] = []


def _watch_op_errors(frame: types.FrameType, event: str, arg: Any) -> Callable:
    if event == "call":
        frame.f_trace_lines = False  # no line events: the tracer costs one call per frame entered and left
        if frame.f_code is _SHOW_WARNING_CODE:
            try:
                _note_warning_shown(frame)
            except Exception:  # noqa: BLE001 - a tracer never fails the code it watches
                pass
    elif event == "exception":
        try:
            _note_op_error(frame, arg)
        except Exception:  # noqa: BLE001 - a tracer never fails the code it watches
            pass
    return _watch_op_errors


def _in_logging_step() -> bool:
    """Whether the window's step, as the harness set it, is a logging step (which may read values)."""
    step, every = _WINDOW_STEP[0], _WINDOW_LOG_EVERY[0]
    return step is not None and bool(every) and (step + 1) % every == 0


def _note_op_error(frame: types.FrameType, arg: tuple) -> None:
    """Note an op's error once, in the frame it started in; or, when it started in the standard library's own control
    flow, in the first frame outside it that it passes through (the script's: a waiter it planted in a Condition)."""
    session = _CURRENT
    kind, _, where = arg
    if session is None or not session._window_open or not issubclass(kind, _OP_ERROR_TYPES) or where is None \
            or where.tb_frame is not frame or len(_OP_ERRORS) >= MADE_KEPT:
        return
    if _control_flow(frame):
        return  # the standard library's own control flow, unless the error leaves it (below)
    origin, inner = where, []
    while origin.tb_next is not None:
        origin = origin.tb_next
        inner.append(origin.tb_frame)
    if not all(_control_flow(f) for f in inner):
        return  # passing through from a frame further in, where it was noted (or was no op's)
    code = origin.tb_frame.f_code.co_code
    if 0 <= origin.tb_lasti < len(code) and code[origin.tb_lasti] in _RAISING:
        return  # a raise statement: code's own error, not an op's
    if _in_logging_step():
        return  # a logging step may read values
    _OP_ERRORS.append(f"{frame.f_code.co_filename}:{frame.f_lineno} ({kind.__name__})")


def _note_swallowed(args: tuple) -> None:
    """Note an error the interpreter swallowed in a window step that is not a logging step: one no frame raised into,
    so the tracer above never sees it. A finalizer, a weakref's or the garbage collector's callback that fails is
    handed to sys.unraisablehook from C, and the audit event that announces it is raised whatever the hook is (the
    script's own, a list's append, or the default one writing to a sys.stderr of the script's). An op called there
    (a finalizer that is functools.partial(torch.index_select, ...) at an index set from a tensor) fails on some
    values and not others: each call one bit of a value, read with no op that reads one and no Python frame (red team
    59's delbits_06, _07, _01). Noted by its kind and the type of the object it was raised in, never by its repr (a
    repr of a tensor reads it)."""
    session, unraisable = _CURRENT, args[1] if len(args) > 1 else None
    if session is None or not session._counts_views or not session._window_open or unraisable is None \
            or len(_OP_ERRORS) >= MADE_KEPT:
        return
    kind = getattr(unraisable, "exc_type", None)
    if not isinstance(kind, type) or not issubclass(kind, _OP_ERROR_TYPES):
        return
    if _in_logging_step():
        return  # a logging step may read values
    _OP_ERRORS.append(f"an error swallowed by the interpreter ({kind.__name__} in a "
                      f"{type(getattr(unraisable, 'object', None)).__name__}, handed to sys.unraisablehook)")


def _note_warning_shown(frame: types.FrameType) -> None:
    """Note a warning shown in a window step that is not a logging step, at the frame that issued it."""
    session, issued = _CURRENT, frame.f_back
    if session is None or not session._window_open or issued is None or len(_OP_ERRORS) >= MADE_KEPT:
        return
    if _in_logging_step():
        return  # a logging step may read values
    message = frame.f_locals.get("msg")
    kind = getattr(getattr(message, "category", None), "__name__", "Warning")
    _OP_ERRORS.append(f"{issued.f_code.co_filename}:{issued.f_lineno} ({kind} shown)")


def warnings_replaced() -> list[str]:
    """What of Python's warning machinery the script replaced: the module the interpreter shows warnings through, or
    its display function (a C callable there shows a warning with no Python frame the tracer sees)."""
    replaced = []
    if sys.modules.get("warnings") is not warnings:
        replaced.append("sys.modules['warnings']")
    if warnings.__dict__.get("_showwarnmsg") is not _SHOW_WARNING:
        replaced.append("warnings._showwarnmsg")
    return replaced


def _control_flow(frame: types.FrameType) -> bool:
    filename = frame.f_code.co_filename
    return filename.startswith("<frozen ") or "site-packages" not in filename \
        and os.path.realpath(filename).startswith(_STDLIB_CONTROL_FLOW)


def _trace_op_errors(on: bool) -> None:
    """The window's tracer on (every frame of the stepping thread, those already running too) or off."""
    frame = sys._getframe(1) if on else None
    while frame is not None:
        frame.f_trace, frame.f_trace_lines = _watch_op_errors, False
        frame = frame.f_back
    _SETTING_TRACE.on = True
    try:
        sys.settrace(_watch_op_errors if on else None)
    finally:
        _SETTING_TRACE.on = False
    threading.settrace(_watch_op_errors if on else None)


def op_errors() -> list[str]:
    """Where the errors ops raised in the window's steps were caught: file:line (its kind), how many times there."""
    return [f"{where} x{n}" if n > 1 else where for where, n in Counter(_OP_ERRORS).items()]


def loaded_refused() -> list[str]:
    """The files the run loaded code from that the scan refuses, each with its first finding."""
    return list(_LOADED_REFUSED)


def _count_raw_reads(event: str, args: tuple) -> None:
    if event in CODE_EVENTS:
        try:
            if event == "compile" and len(args) > 1:
                _scan_loaded(args[1], args[0])
                _note_generated(args[1], args[0])
                _note_code_named(args[1])
            elif event == "code.__new__" and len(args) > 1:
                _note_code_named(args[1])
            elif event in ("exec", "function.__new__") and args:
                if event == "exec" and issubclass(type(args[0]), types.CodeType):
                    _scan_loaded(args[0].co_filename)
                _note_code(args[0])
            elif event == "object.__setattr__" and len(args) > 2 and args[1] == "__code__":
                _note_code(args[2])
        except Exception:  # noqa: BLE001 - an audit hook never fails the operation it watches
            pass
    elif event == "sys.settrace":
        try:  # a thread started in the window sets the harness's own tracer on itself: only the window's thread counts
            session = _CURRENT
            if session is not None and session._counts_views and session._window_open \
                    and threading.get_ident() == session._window_thread and not getattr(_SETTING_TRACE, "on", False) \
                    and len(_TRACE_REPLACED) < MADE_KEPT:
                _TRACE_REPLACED.append(threading.current_thread().name)
        except Exception:  # noqa: BLE001 - an audit hook never fails the operation it watches
            pass
    elif event == "sys.unraisablehook":
        try:
            _note_swallowed(args)
        except Exception:  # noqa: BLE001 - an audit hook never fails the operation it watches
            pass
    elif event == "pickle.find_class":
        try:
            _note_unpickled(args)
        except Exception:  # noqa: BLE001 - an audit hook never fails the operation it watches
            pass
    elif event in RAW_MEMORY_EVENTS:
        session = _CURRENT
        if session is not None and session._watches_memory and session._window_open:
            _RAW_READS[0] += 1
    elif event in ("ctypes.dlsym", "ctypes.call_function") and len(_SWITCH_CALLS) < MADE_KEPT:
        try:
            named = [os.fsdecode(a) for a in (args[-1] if event == "ctypes.call_function" else args[1:])
                     if isinstance(a, (str, bytes))] if args else []
            if any(_NATIVE_SWITCH.search(name) for name in named):
                _SWITCH_CALLS.append(f"ctypes {named[0][:60]}")
        except Exception:  # noqa: BLE001 - an audit hook never fails the operation it watches
            pass
    elif event == "ctypes.dlopen" and args and isinstance(args[0], (str, bytes, os.PathLike)) \
            and len(_OPENED) < MADE_KEPT:
        _OPENED.append(os.fsdecode(args[0]))
    elif event == "open" and args and isinstance(args[0], (str, bytes)) and len(_MEMORY_FILES) < MADE_KEPT:
        kind = _opens_process_file(os.fsdecode(args[0]))
        if kind == "memory" or kind == "accounting" and sys._getframe(1).f_code is not _HARNESS_SCHED:
            _MEMORY_FILES.append(os.fsdecode(args[0]))  # not the harness's own blocked-time reads


sys.addaudithook(_count_raw_reads)

# Where native code comes from in an honest run: Python's installation and its packages (torch's libraries, numpy's)
# and the system's library folders. Taken at import, before the script runs.
_INSTALLED = tuple(sorted({os.path.realpath(place) for place in (
    sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages())}
    | {"/usr", "/lib", "/lib32", "/lib64", "/opt", "/etc", "/snap", "/nix"}))


def _installed(real: str) -> bool:
    """Whether a file (its real path) lies in Python's installation, its packages or the system's folders."""
    return any(real.startswith(place + os.sep) for place in _INSTALLED)


def native_code_of_its_own() -> list[str]:
    """The native code this process mapped from anywhere but Python's installation, its packages and the system's
    libraries: code the script built or brought (a C extension, a library for ctypes). On a CPU such code reads a
    tensor's memory with no op, call or audit event any count sees (red team 25: the lab's reads through a C
    extension's PyObject_CallMethod). Judged by what the memory map holds now as executable, whatever its file's
    name (red team 26: a library named reader.bin; a memfd's "/memfd:..."), and by every path ctypes opened, since a
    library can be closed before this looks. The kernels torch.compile builds are torch's own, in its store, where
    their sources are the ones Inductor generated in this run (_inductors_kernel)."""
    paths: set[str] = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) == 6 and "x" in fields[1]:
                    paths.add(fields[5].strip())
    except OSError:
        pass
    # a name without a slash is looked up only in the system's folders and the process's own search path (set
    # before it started); one with a slash is that file
    paths.update(name for name in _OPENED if "/" in name)
    compiled = _compiled_kernels_folder()
    found = []
    for path in sorted(paths):
        if not path.startswith("/"):  # [vdso], [vsyscall], anonymous memory (the JIT kernels of oneDNN)
            continue
        real = path if path.startswith("/memfd:") else os.path.realpath(path.removesuffix(" (deleted)"))
        if _installed(real):
            continue
        if compiled is not None and real.startswith(compiled + os.sep) and _inductors_kernel(real):
            continue
        found.append(real)
    return found


def kernels_folder_now() -> str | None:
    """torch.compile's store of built kernels as the environment names it now (its default where none is set)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
        return os.path.realpath(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir())
    except Exception:  # noqa: BLE001 - an inductor that cannot say: nothing is exempt
        return None


def _compiled_kernels_folder() -> str | None:
    """torch.compile's store of built kernels: under the grader, as the environment named it before the script ran
    (a script that points TORCHINDUCTOR_CACHE_DIR at its own folder moves Inductor's store, not this one)."""
    return LAUNCH.kernels_folder if LAUNCH is not None else kernels_folder_now()


# The C++ sources of the kernels Inductor generated in this run, as its generated modules hold them (each kernel's
# source is a string literal there, handed to async_compile.cpp_pybinding), noted as each module is compiled to run.
# A library in torch.compile's store is Inductor's kernel only where its source file beside it holds one of them:
# Inductor's code cache builds any C++ it is given there, and a library written there by hand lies in the same place
# (red team 49's cache_cext_04, own_so_in_cache_04: a block's ops and a step's reads in native code of the script's).
_GENERATED_KERNELS: list[str] = []


def _note_generated(filename: Any, source: Any) -> None:
    """Keep the C++ sources a module Inductor generated in torch.compile's store holds (``source`` where the compile
    event gave it, else the file's text), and count their loop nests (every module, however many were kept)."""
    if LAUNCH is None:  # a script run on its own: no grader reads what native code it mapped
        return
    folder = _compiled_kernels_folder()
    if folder is None or not isinstance(filename, (str, bytes)):
        return
    real = os.path.realpath(os.fsdecode(filename))
    if not real.startswith(folder + os.sep) or not real.endswith(".py"):
        return
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = bytes(source).decode("utf-8", errors="replace")
    if isinstance(source, str):
        tree = ast.parse(source)
    elif isinstance(source, ast.AST):
        tree = source
    else:
        tree = ast.parse(Path(real).read_text(errors="replace"))
    kernels = [node.value for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and 'extern "C"' in node.value]
    _LOOP_NESTS[real] = sum(loop_nests(kernel) for kernel in kernels)
    _GENERATED_KERNELS.extend(kernels[:max(MADE_KEPT - len(_GENERATED_KERNELS), 0)])
    _note_fusion_as_compiled()


# The outermost loops of the C++ kernels of every module Inductor generated in the run, by the module's file: on a CPU
# each is a pass over memory, as each of its kernels is on a GPU. A graph compiled with its fusion undone (by any
# route: a setting, a function, a builtin put in Inductor's place) makes one per op; torch.compile's own fusion few.
_LOOP_NESTS: dict[str, int] = {}
_FOR = re.compile(r"(?<![A-Za-z0-9_])for\s*\(")


def loop_nests(cpp: str) -> int:
    """How many for-loops of C++ source lie inside no other loop's body: a kernel's passes over memory."""
    stack, count, at, end = [], 0, 0, len(cpp)
    while at < end:
        char = cpp[at]
        if cpp.startswith("//", at):
            newline = cpp.find("\n", at)
            at = end if newline < 0 else newline
        elif char in "\"'":  # a literal: skipped to its closing quote
            at += 1
            while at < end and cpp[at] != char:
                at += 2 if cpp[at] == "\\" else 1
            at += 1
        elif char == "f" and (found := _FOR.match(cpp, at)):
            count += "loop" not in stack
            depth, at = 1, found.end()
            while at < end and depth:  # past the loop's header
                depth += {"(": 1, ")": -1}.get(cpp[at], 0)
                at += 1
            while at < end and cpp[at].isspace():
                at += 1
            if at < end and cpp[at] == "{":
                stack.append("loop")
                at += 1
        else:
            if char == "{":
                stack.append("block")
            elif char == "}" and stack:
                stack.pop()
            at += 1
    return count


def _note_fusion_as_compiled() -> None:
    """Inductor's fusion as it stood while it made (or loaded) a graph's code, in a run that counts a step's ops on a
    CPU: a fusion setting changed only around the compiling step and put back before the next guard looked (Inductor's
    own closure patcher: red team 61's closurepatch_04/05), or Inductor's code replaced (its scheduler's can_fuse:
    unfuse_meth_04/05), is noted here, where it shapes the code, whatever route changed it."""
    session = _CURRENT
    if session is None or not session._counts_crossings or len(_FUSION_CHANGED) >= MADE_KEPT:
        return
    changed = [f"{what.removeprefix('torch._inductor.')} as Inductor compiled" for what in fusion_changed()
               if what not in _FUSION_CHANGED]
    changed += [what for what in inductor_code_replaced() if what not in _FUSION_CHANGED]
    _FUSION_CHANGED.extend(changed[:MADE_KEPT - len(_FUSION_CHANGED)])


def _foreign_code(value: Any) -> str | None:
    """The file of the script's own code ``value`` runs, where it is a function (or wraps one) from outside Python's
    installation, its packages (torch, sympy, ...) and the grader's checkout (``_trusted_roots``); else None. A
    function the script wrote set on one of Inductor's modules or classes is not Inductor's, and what Inductor
    generates with it is not what torch.compile makes."""
    for _ in range(4):  # staticmethod, classmethod, partial, a wrapper's __wrapped__: what it finally calls
        if isinstance(value, (staticmethod, classmethod, types.MethodType)):
            value = value.__func__
        elif isinstance(value, functools.partial):
            value = value.func
        elif isinstance(value, property):
            value = value.fget
        elif isinstance(value, types.FunctionType) and "__wrapped__" in value.__dict__:
            value = value.__dict__["__wrapped__"]
        else:
            break
    if not isinstance(value, types.FunctionType):
        # an instance of a class of the script's, set where a method was: what runs is its class's __call__
        call = type.__dict__["__dict__"].__get__(type(value)).get("__call__")
        if not isinstance(call, types.FunctionType):
            return None
        value = call
    name = value.__code__.co_filename
    if not name.startswith(os.sep):
        return None  # torch's own generated methods ("<string>": dataclasses'), frozen modules; the scan refuses eval
    return None if _known_library_file(name) else name


def _known_library_file(name: str) -> bool:
    """Whether a file lies under ``_trusted_roots`` (the real path, as ``_scan_loaded`` tells a file of the run's own)."""
    return _under_roots(_roots("trusted", _trusted_roots), name)


@functools.lru_cache(maxsize=4096)  # a walk over Inductor's code asks for the same few hundred files again and again
def _under_roots(roots: tuple[str, ...], name: str) -> bool:
    real = os.path.realpath(name)
    return any(real.startswith(root + os.sep) for root in roots)


def inductor_code_replaced() -> list[str]:
    """Inductor's functions and methods whose code is the script's: each module of torch._inductor loaded, and each
    class it defines, read through their own tables (no attribute lookup runs a script's descriptor)."""
    found: list[str] = []
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if not name.startswith("torch._inductor") or not isinstance(module, types.ModuleType):
            continue
        table = module.__dict__
        if not isinstance(table.get("__file__"), str) or not _known_library_file(table["__file__"]):
            continue  # a module of code Inductor generated (its compile store), not Inductor's own
        for attr, value in list(dict.items(table)):
            if isinstance(value, type):
                # every class a module of Inductor's names, its own or another's: a subclass of the script's put in
                # its place (red team 62's nofuse_sub_05: Scheduler and GraphLowering swapped) runs the script's code
                if id(value) in seen:
                    continue
                seen.add(id(value))
                for method, member in list(type.__dict__["__dict__"].__get__(value).items()):
                    if (where := _foreign_code(member)) is not None:
                        found.append(f"{name}.{attr}.{method} (code from {where})")
            elif (where := _foreign_code(value)) is not None:
                found.append(f"{name}.{attr} (code from {where})")
        if len(found) >= MADE_KEPT:
            break
    return found[:MADE_KEPT]


# What marks Inductor's C++ wrapper (torch.compile's cpp_wrapper, AOTInductor) in a library's source: the graph's
# own entry, and ATen called through AOTI's C shim (aoti_torch_cpu_nonzero, ...), which runs an op's CPU kernel around
# the dispatcher, where no op is recorded. A read made there (a data-dependent size: nonzero's) reaches Python with no
# op a CPU trace holds (red team 58's bareinductor_01, bareguard_06). Its kernels stay Inductor's own.
CPP_WRAPPER_MARKS = ("inductor_entry_impl", "aoti_torch_")


def _inductors_kernel(library: str) -> bool:
    """Whether a library in torch.compile's store was built from a kernel source Inductor generated in this run, and
    holds kernels only (no C++ wrapper of a graph: CPP_WRAPPER_MARKS)."""
    source = Path(library.removesuffix(".so") + ".cpp")
    try:
        text = source.read_text(errors="replace")
    except OSError:
        return False
    if any(mark in text for mark in CPP_WRAPPER_MARKS):
        return False
    return any(kernel in text for kernel in _GENERATED_KERNELS)


# The session model's weights are trained by this process, whose trace the grader reads. Weights in shared memory
# (a CPU tensor's storage moved there by share_memory_() or by sending it to another process; a CUDA tensor's memory
# handed to another process) can be trained by a loader worker, out of the trace's sight. The harness looks at every
# timed step; a CUDA tensor's export is seen where torch hands its memory over (the storage's _share_cuda_).
_EXPORTED_CUDA: set[int] = set()


def _watch_cuda_sharing() -> None:
    def wrap(original: Callable, name: str) -> Callable:
        def watched(storage, *args, **kwargs):
            _EXPORTED_CUDA.add(storage.data_ptr())
            return original(storage, *args, **kwargs)
        return watched

    _watch([(torch.UntypedStorage, "_share_cuda_")], wrap)


_watch_cuda_sharing()


# TorchScript: a second interpreter in the process, whose own ops (prim::tolist among them) read a tensor's values in
# C++ with no aten op and no Python frame a CPU trace could name (red team 37's jitlist_07). Every compiler and loader
# of TorchScript code is watched; in a chapter that counts host reads on a CPU, the step guard ends a run that used one
# (on a GPU each such read is a copy to the host and a sync the trace shows). torch itself compiles none while a lab
# runs.
TORCHSCRIPT_MAKERS = ("_jit_script_compile", "_jit_script_compile_overload", "_jit_script_class_compile",
                      "_jit_script_interface_compile", "_create_function_from_trace",
                      "_create_function_from_trace_with_dict", "_create_function_from_graph", "_create_module_with_type",
                      "import_ir_module", "import_ir_module_from_buffer", "_import_ir_module_from_package",
                      "_load_jit_module_from_bytes", "_load_jit_module_from_file", "parse_ir")
_TORCHSCRIPT: list[str] = []


def _watch_torchscript() -> None:
    def wrap(original: Callable, name: str) -> Callable:
        def watched(*args, **kwargs):
            if len(_TORCHSCRIPT) < MADE_KEPT:
                _TORCHSCRIPT.append(name)
            return original(*args, **kwargs)
        return watched

    _watch([(torch._C, name) for name in TORCHSCRIPT_MAKERS]
           + [(torch._C.CompilationUnit, "define"), (torch._C.CompilationUnit, "create_function"),
              (torch._C.ScriptModule, "_define")], wrap)


_watch_torchscript()


# A compiled graph's kernels record no op on a CPU, so chapters 04 and 05 count each compiled graph's call as one pass
# (checker.trace.analyses.counts): true of a graph compiled as torch.compile compiles by default, which fuses. Inductor
# told not to fuse runs every pass inside the same one call (red team 40's unfused_05: 141 loop nests a step in two
# graph calls, against 10 by default). What changes Inductor's fusion is noted: options given to torch.compile, a
# fusion setting patched (config.patch) by code outside torch's own or left changed when the window opens or closes;
# in a chapter that counts a step's ops on a CPU, the step guard ends such a run. A fusion setting is told by its name,
# by the words fusion settings are named with rather than a list of them (a list missed their CPU twins and the
# scheduler's hooks: red team 44's unlisted_unfuse_05). Not every setting: torch assigns some itself as it compiles
# (comprehensive_padding, inplace_buffers, ... on a first compile), which an honest run cannot help.
FUSION_SETTING = re.compile(r"fus|realize|custom_pass|pattern_matcher|combo_kernel|split_reduction|epilogue|"
                            r"max_pointwise_cat")
_FUSION_CHANGED: list[str] = []
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _watch_fusion_settings() -> None:
    from torch.utils._config_module import ConfigModule

    def wrap(original: Callable, name: str) -> Callable:
        if name == "compile":
            def compiled(*args, **kwargs):
                if kwargs.get("options") and len(_FUSION_CHANGED) < MADE_KEPT:
                    _FUSION_CHANGED.append("torch.compile(options=...)")
                return original(*args, **kwargs)
            return compiled

        def patched(self, arg1=None, arg2=None, **changes):
            named = set(changes) | (set(arg1) if isinstance(arg1, dict) else {arg1} if isinstance(arg1, str) else set())
            fusion = sorted(str(n) for n in named if FUSION_SETTING.search(str(n)))
            if fusion and not sys._getframe(1).f_code.co_filename.startswith(_TORCH_DIR) \
                    and len(_FUSION_CHANGED) < MADE_KEPT:
                _FUSION_CHANGED.append(f"config.patch({', '.join(fusion)[:80]})")
            return original(self, arg1, arg2, **changes)
        return patched

    _watch([(torch, "compile"), (ConfigModule, "patch")], wrap)


_watch_fusion_settings()


def fusion_changed() -> list[str]:
    """What changed Inductor's fusion in this run so far: the calls noted, and any fusion setting not at its default
    now (set by assignment)."""
    found = list(_FUSION_CHANGED)
    config = sys.modules.get("torch._inductor.config")
    if config is not None:
        try:
            changed = [name for name in config._config if FUSION_SETTING.search(name) and not config._is_default(name)]
        except (AttributeError, KeyError, TypeError):
            changed = ["(its settings could not be read)"]
        found += [f"torch._inductor.config.{name}" for name in sorted(changed)[:MADE_KEPT]]
    return found


def rpc_agent_running() -> bool:
    """Whether this process runs a torch.distributed.rpc agent (TensorPipe's, or any other set as the current one): a
    road between the ranks that no collective's count reads (red team 68's rpc_rounds_09). Looked at only where the
    script imported torch.distributed.rpc (DDP imports it too); no lab runs an agent."""
    api = sys.modules.get("torch.distributed.rpc.api")
    if api is None:
        return False
    try:
        return bool(api._is_current_rpc_agent_set())
    except Exception:  # an RPC build without the query: nothing to look at
        return False


def _stop(message: dict[str, Any], alone: str) -> None:
    """A step guard's finding: told to the grader, which ends the run; on its own, an error saying ``alone``."""
    channel = _channel()
    if channel is None:
        raise RuntimeError(alone)
    deliver(channel, message)


def model_tensors(model: torch.nn.Module, persistent: bool = False) -> list[tuple[str, torch.Tensor]]:
    """The model's parameters and buffers by name (the window's open and close), as ``state_dict`` names them; with
    ``persistent``, the buffers ``state_dict`` leaves out are left out too.

    A walk over each module's own tables (``_parameters``, ``_buffers``, ``_modules``), read through ``object`` and
    ``dict`` themselves: no method of the model runs. A script can override ``state_dict`` or ``named_parameters``
    on its model, or register hooks on them, and code run there after the last step's range has closed trains where
    no step's trace looks (red team 23 replayed the window's training in them)."""
    found: list[tuple[str, torch.Tensor]] = []

    def entries(table: Any) -> list:
        """A table's (name, value) pairs by dict's own code (a subclass's methods do not run); a name is a str."""
        pairs = dict.items(table) if issubclass(type(table), dict) else ()
        return [(str.__str__(name), value) for name, value in pairs if issubclass(type(name), str)]

    def walk(module: Any, prefix: str, path: frozenset) -> None:
        tables = object.__getattribute__(module, "__dict__")
        skipped = tables.get("_non_persistent_buffers_set") if persistent else None
        skipped = frozenset(set.__iter__(skipped)) if issubclass(type(skipped), set) else frozenset()
        for kind in ("_parameters", "_buffers"):
            for name, tensor in entries(tables.get(kind)):
                if tensor is not None and not (kind == "_buffers" and name in skipped):
                    found.append((prefix + name, tensor))
        for name, child in entries(tables.get("_modules")):
            if child is not None and id(child) not in path:  # a module that holds itself is walked once
                walk(child, prefix + name + ".", path | {id(child)})

    walk(model, "", frozenset({id(model)}))
    return found


def shared_weights(tensors: list[tuple[str, torch.Tensor]]) -> list[str]:
    """The names of those tensors another process can write: in shared memory, or handed over by CUDA."""
    shared = []
    for name, tensor in tensors:
        storage = tensor.untyped_storage()
        if storage.device.type == "cuda":
            if storage.data_ptr() in _EXPORTED_CUDA:
                shared.append(name)
        elif storage.device.type == "cpu" and storage.is_shared():
            shared.append(name)
    return shared


def _original(shown: str):
    """The object ``shown`` names on the export path as it was at import (the harness calls these, never what a
    lookup on an object finds now)."""
    return next(original for name, _owner, _attr, original in _EXPORT_PATH if name == shown)


def _export_owned(profiler, where: Path, compress: bool) -> bytes | None:
    """The trace ``profiler`` recorded, written into a folder this function made (a new name) and read back through a
    descriptor opened on a regular file there, never a link, a pipe or a folder put in place of its own; None when
    what the path names then is not that (a pipe at the trace's path hands the reader the writer's choice of bytes)."""
    folder = _original("tempfile.mkdtemp")(prefix=".trace-", dir=str(where))
    made = _original("os.lstat")(folder)
    path = os.path.join(folder, "trace.json")  # not .gz: the profiler writes it itself, no other file between
    try:
        _original("torch.profiler.profile.export_chrome_trace")(profiler, path)
        try:
            fd = _original("os.open")(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            there, now = _original("os.fstat")(fd), _original("os.lstat")(folder)
            if not stat.S_ISREG(there.st_mode) or not stat.S_ISDIR(now.st_mode) \
                    or (now.st_dev, now.st_ino) != (made.st_dev, made.st_ino):
                return None
            chunks = []
            while chunk := _original("os.read")(fd, 1 << 24):
                chunks.append(chunk)
        finally:
            _original("os.close")(fd)
        data = b"".join(chunks)
        return _original("gzip.compress")(data, 1) if compress else data
    finally:
        _original("shutil.rmtree")(folder, ignore_errors=True)


def _replaced_on_export_path(profiler) -> list[str]:
    """What of ``_EXPORT_PATH`` is no longer what it was, a profiler result that is not torch's own, and a method
    of the export path set on the profiler objects themselves (an instance attribute shadows its class's)."""
    replaced = [shown for shown, owner, name, original in _EXPORT_PATH if getattr(owner, name, None) is not original]
    names = {name for _shown, _owner, name, _original in _EXPORT_PATH}
    for shown, obj in (("the profiler", profiler), ("the profiler's profiler", getattr(profiler, "profiler", None))):
        shadowed = sorted(names & set(getattr(obj, "__dict__", {}) or {}))
        replaced += [f"{shown}'s own {name}" for name in shadowed]
    channel = _channel()
    if channel is not None and not _original("Channel.intact")(channel):
        replaced.append("the channel to the grader (its methods or its descriptor)")
    results = getattr(getattr(profiler, "profiler", None), "kineto_results", None)
    kind = getattr(torch._C._autograd, "_ProfilerResult", None)
    if results is not None and kind is not None and type(results) is not kind:
        replaced.append("the profiler's results")
    return replaced

HARNESS_KEYS = ("steps", "warmup", "log_every", "trace_steps", "seed", "trials", "timeout_s", "memory_mb",
                "traced_tail", "trace_window", "trace_warmup")


def current() -> "Session | None":
    """The session the last ``start()`` made in this process (the launcher reads it after the script)."""
    return _CURRENT


def _channel() -> Channel | None:
    return LAUNCH.channel if LAUNCH is not None else None


@contextmanager
def marked_range(name: str) -> Iterator[None]:
    """One NVTX range and one torch.profiler range with the same name."""
    if _push_range is not None:
        _push_range(name)
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        if _pop_range is not None:
            _pop_range()


def _batch_tensors(batch: Any) -> list:
    """The items of a batch, in order: a tensor's own, a tuple's or list's, a dict's values."""
    if isinstance(batch, dict):
        return list(batch.values())
    return list(batch) if isinstance(batch, (list, tuple)) else [batch]


# Freed memory as a carrier: a value copied into a scratch tensor that is then freed stays in the heap's chunk, and an
# uninitialized array (numpy's np.empty) that malloc hands the same chunk reads it back with no op and no call a trace
# counts (red team 56's freed_06, freed_07). glibc fills each chunk it frees with a byte of its own where M_PERTURB is
# set (and each it hands out with that byte's complement), so a freed chunk holds no value. Set by mallopt in the
# run's process, since a run forked from the fork server read MALLOC_PERTURB_ long before; its loader workers inherit
# it. Chunks large enough to be mapped of their own go back to the kernel on free and come back zeroed.
_M_PERTURB = -6  # malloc.h
_PERTURB_BYTE = 0xA5


def _scrub_freed_memory() -> bool:
    """glibc's freed chunks filled from now on (mallopt(M_PERTURB)); False where the C library has no mallopt."""
    import ctypes
    try:
        return bool(ctypes.CDLL(None).mallopt(_M_PERTURB, _PERTURB_BYTE))
    except (OSError, AttributeError):
        return False


def _private_batch(batch: Any, depth: int = 0) -> None:
    """Give every CPU tensor of a fetched batch whose memory is shared with another process (a loader worker's batch
    arrives in shared memory) memory of the training process's own, in place. A worker that kept its own reference to
    such a tensor would otherwise read what a step writes into it (a value, copied in, read there and handed back as a
    plain number in a later batch: red team 56's mailbox_07), or hand the step a slot to fill with samples the training
    process prepared, returned as the worker's batch (roundtrip_07, roundtrip_finish_03). A pinned batch (a GPU run's,
    pin_memory=True) is already a copy of the training process's own."""
    if isinstance(batch, torch.Tensor):
        if batch.device.type == "cpu" and batch.is_shared():
            with torch.no_grad():
                batch.set_(batch.clone())
    elif depth < 8 and isinstance(batch, (list, tuple)):
        for item in batch:
            _private_batch(item, depth + 1)
    elif depth < 8 and isinstance(batch, dict):
        for item in batch.values():
            _private_batch(item, depth + 1)


def _batch_size(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    for item in _batch_tensors(batch):
        if isinstance(item, torch.Tensor) and item.dim():
            return int(item.shape[0])
    raise TypeError("cannot count samples: a batch must be a tensor, or a tuple/list/dict holding one")


LOADER_SETTINGS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "batch_size")


def _loader_settings(source: Any) -> dict[str, Any] | None:
    """The settings of a DataLoader given to session.steps(), and whether a subclass redefines any of them."""
    if not isinstance(source, torch.utils.data.DataLoader):
        return None
    settings = {name: getattr(source, name) for name in LOADER_SETTINGS}
    settings["pin_memory"] = bool(settings["pin_memory"])
    settings["persistent_workers"] = bool(settings["persistent_workers"])
    subclasses = [cls for cls in type(source).__mro__ if issubclass(cls, torch.utils.data.DataLoader)
                  and cls is not torch.utils.data.DataLoader]
    settings["class"] = f"{type(source).__module__}.{type(source).__qualname__}"
    settings["redefined"] = sorted({name for cls in subclasses for name in vars(cls)
                                    if name in LOADER_SETTINGS or name in ("__getattribute__", "__getattr__")})
    # a subclass may wrap DataLoader's iteration in its own __iter__ (chapter 02's stretch solution does): whether the
    # batches came from this loader's own iterators is counted as they arrive (LoaderOrigin)
    return settings


class LoaderOrigin:
    """Which DataLoaders' iterators made the batches the steps fetched: torch's own iterator class records the loader
    that built it, and counts each batch it hands out while the harness fetches a step's batch (``fetching``). The
    batches must come from the loader whose settings were read, not from a second loader behind its ``__iter__``.
    Nor may a step take its batch anywhere else: a batch any DataLoader hands out while the steps run, outside the
    fetch, and an item read from the reported loader's dataset there (in this process), are counted too (red team
    35's shadow_loader_02 handed session.steps() a pinned loader and trained each step on a second, pageable loader's
    batch, fetched in the step's body)."""

    def __init__(self, source: Any):
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        self.source, self.made, self.fetching = source, {}, False  # made: id(loader) -> batches handed out
        self.elsewhere = self.items_elsewhere = 0
        self._cls, self._init, self._next = _BaseDataLoaderIter, _BaseDataLoaderIter.__init__, _BaseDataLoaderIter.__next__
        origin, init, fetch = self, self._init, self._next

        def counted_init(iterator, loader, *args, **kwargs):
            iterator.__dict__["_workbook_loader"] = id(loader)
            return init(iterator, loader, *args, **kwargs)

        def counted_next(iterator):
            batch = fetch(iterator)
            if origin.fetching:
                key = iterator.__dict__.get("_workbook_loader")
                if key is None and getattr(origin.source, "_iterator", None) is iterator:
                    key = id(origin.source)  # persistent workers started before session.steps(): the loader's own
                origin.made[key] = origin.made.get(key, 0) + 1
            else:
                origin.elsewhere += 1
            return batch

        _BaseDataLoaderIter.__init__, _BaseDataLoaderIter.__next__ = counted_init, counted_next
        # the reported loader's dataset, read in this process outside the fetch (a worker reads it in its own)
        self._dataset_cls = self._getitem = None
        dataset_cls = type(getattr(source, "dataset", None))
        getitem = dataset_cls.__dict__.get("__getitem__")
        if callable(getitem) and dataset_cls.__module__ != "builtins":
            def counted_getitem(dataset, *args, **kwargs):
                if not origin.fetching:
                    origin.items_elsewhere += 1
                return getitem(dataset, *args, **kwargs)

            try:
                dataset_cls.__getitem__ = counted_getitem
                self._dataset_cls, self._getitem = dataset_cls, getitem
            except (AttributeError, TypeError):  # a type that takes no new attributes
                pass

    @contextmanager
    def fetch(self):
        """Around the harness's fetch of a step's batch: the batches handed out meanwhile are counted."""
        self.fetching = True
        try:
            yield
        finally:
            self.fetching = False

    def close(self) -> None:
        self._cls.__init__, self._cls.__next__ = self._init, self._next
        if self._dataset_cls is not None:
            self._dataset_cls.__getitem__ = self._getitem

    def problems(self, fetched: int) -> list[str]:
        """What says the batches did not come from the reported loader's own iteration ([] when they did)."""
        others = sum(n for key, n in self.made.items() if key != id(self.source))
        mine = self.made.get(id(self.source), 0)
        found = []
        if others:
            found.append(f"batches from another DataLoader ({others} made by a loader whose settings were not read)")
        if mine < fetched:
            found.append(f"batches not made by its own iterators ({mine} of the {fetched} the steps fetched)")
        if self.elsewhere:
            found.append(f"batches outside session.steps()' fetch ({self.elsewhere} handed out by a DataLoader iterated "
                         "while the steps ran: a step trains on the batch it was handed)")
        if self.items_elsewhere:
            found.append(f"items of its dataset read outside session.steps()' fetch ({self.items_elsewhere} while the "
                         "steps ran: a step trains on the batch it was handed)")
        return found


_CAT = torch.cat  # as imported, before any script ran


class UpdateProbe:
    """The model's trainable tensors before every window step, and where each step's batch sits in its epoch
    (``probe_updates`` of the workload's settings): after the window the grader names a few steps, and gets the
    tensors around each. checker.grader.referee then holds the update each of those steps made against one
    optimizer step on that step's whole batch, computed afresh. A step that trained on part of its batch, on a
    smaller model or not at all made another update, whatever the weights' distance at the end allows.

    The copies stay on the device (one per window step: the model's size each) and are queued on the current
    stream like the script's own work, so they read no value back to the host inside the window."""

    def __init__(self, model: torch.nn.Module, source: KeyedEpochs | KeyedDraws, batch_size: int):
        # the trainable tensors by name, looked up afresh at every snapshot by the harness's own walk (model_tensors):
        # a script that puts other tensors in the model's tables trains those, and the snapshots are of what it trains
        # (tensors held since start() would be decoys it could keep on a fake path: red team 66's decoy_probe)
        self.model = model
        self.names = [name for name, p in model.named_parameters() if p.requires_grad]
        self.source, self.batch_size = source, batch_size
        self.flat: dict[int, torch.Tensor] = {}
        # the tensors as the window opened, before its head was redrawn from the window key: with the last warm-up
        # step's (flat[warmup - 1]), the momentum the window's first step started from, so that step is drawn too
        self.before_open: dict[int, torch.Tensor] = {}
        # step -> where its batch came from: (its epoch's salt, its batch's first position) from a sampler's epochs,
        # (its draw's seed,) from keyed draws
        self.places: dict[int, tuple[int, ...]] = {}

    def snapshot(self, step: int) -> None:
        """The trainable tensors as they are before ``step`` (after the last window step: ``step`` is the end), read
        with torch's own tensor methods (see state_bytes)."""
        self.flat[step] = self._flat()

    def snapshot_before_open(self, step: int) -> None:
        """The trainable tensors at the window's opening (``step``, its first), before the head is redrawn."""
        self.before_open[step] = self._flat()

    def _flat(self) -> torch.Tensor:
        found = dict(model_tensors(self.model))
        # a name no longer in the model: NaNs of no size, which the referee refuses (the weights fail to load anyway)
        tensors = [found.get(name) for name in self.names]
        if not all(isinstance(tensor, torch.Tensor) for tensor in tensors):
            return torch.full((0,), float("nan"))
        return _CAT([_TENSOR.to(_TENSOR.reshape(_TENSOR.detach(p), (-1,)), torch.float32) for p in tensors])

    def placed(self, step: int, in_epoch: int) -> None:
        """Step ``step`` fetched the ``in_epoch``-th batch of the sampler's epoch in progress (or the keyed draws'
        last batch)."""
        if isinstance(self.source, KeyedDraws):
            if self.source.last_seed is not None:
                self.places[step] = (int(self.source.last_seed),)
            return
        items = self.source.items
        if items:
            self.places[step] = (int(items[0][1]), in_epoch * self.batch_size)

    def payload(self, steps: list[int]) -> bytes:
        """The tensors before ``s - 1``, ``s`` and ``s + 1`` for each named step ``s``, and the steps' places."""
        wanted = sorted({k for s in steps for k in (s - 1, s, s + 1)} & set(self.flat))
        buffer = io.BytesIO()
        last = max(self.flat) if self.flat else None  # the window's close: the referee holds it to the weights sent
        torch.save({"snapshots": {k: self.flat[k].to("cpu") for k in wanted},
                    "last": None if last is None else self.flat[last].to("cpu"),
                    "before_open": {s: self.before_open[s].to("cpu") for s in steps if s in self.before_open},
                    "places": {s: list(self.places[s]) for s in steps if s in self.places}}, buffer)
        self.flat.clear()
        self.before_open.clear()
        return buffer.getvalue()


def _frozen_copy(dataset: Any) -> Any:
    """A deep copy of a workload's dataset, or the dataset itself where it cannot be copied."""
    import copy
    try:
        return copy.deepcopy(dataset)
    except Exception:  # noqa: BLE001 - a dataset that holds what cannot be copied is audited as it is
        return dataset


class Finished:
    """Whether the batches a DataLoader handed the timed steps were finished samples (``finished_batches`` of the
    workload's settings: how many window batches to keep). A loader can hand out raw images and their random draws
    and the step augment them by whatever ops it likes; the batch itself says which happened. The k-th batch of an
    epoch holds the items k*B .. (k+1)*B-1 of the workload's KeyedEpochs order, B the workload's batch size (never
    what the batch says of itself); it is finished when its first 4-D tensor is the workload's datasets' samples of
    those B items (the dataset's own, or its ``extras["uint8_dataset"]``), made by this harness after the window from
    the datasets' methods as they were built, before the script ran."""

    def __init__(self, workload: Workload, keep: int, batch_size: int):
        self.sampler = workload.extras.get("sampler")
        # copies made before the script runs: a script that changes the dataset's own state (its normalization set to
        # nothing, then normalizing in the step) changes what its workers make, not what these remake
        self.sources = [(_frozen_copy(ds), type(ds).__getitem__)
                        for ds in (workload.dataset, workload.extras.get("uint8_dataset")) if ds is not None]
        self.batch_size = batch_size
        self.keep, self.kept, self.in_epoch = keep, [], 0

    def new_epoch(self) -> None:
        self.in_epoch = 0

    def fetched(self, batch: Any, in_window: bool) -> None:
        """After each fetch: its place in the epoch; in the window, keep the batch's first 4-D tensor and its items,
        while fewer than ``keep`` are kept."""
        index, self.in_epoch = self.in_epoch, self.in_epoch + 1
        if not in_window or len(self.kept) >= self.keep:
            return
        images = next((t for t in _batch_tensors(batch) if isinstance(t, torch.Tensor) and t.dim() == 4), None)
        items = self.sampler.items[index * self.batch_size:(index + 1) * self.batch_size]
        if images is not None:  # a copy kept on the host; on a CPU a clone, not a copy to a device (queued_copies)
            images = _TENSOR.detach(images)
            images = _TENSOR.clone(images) if images.device.type == "cpu" else _TENSOR.to(images, "cpu")
        self.kept.append((images, items))

    def unfinished(self) -> int:
        """How many of the kept batches are not their items' finished samples."""
        bad = 0
        for images, items in self.kept:
            if images is None or not items or len(items) != len(images):
                bad += 1
                continue
            ok = False
            for dataset, get in self.sources:
                made = torch.stack([get(dataset, item)[0] for item in items])
                if made.shape == images.shape and made.dtype == images.dtype and torch.equal(made, images):
                    ok = True
                    break
            bad += not ok
        return bad


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--steps", type=int, default=None, help="steps to run (warm-up included)")
    parser.add_argument("--warmup", type=int, default=None, help="steps before the measured window")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a workload setting")
    args, _unknown = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    return args


def _coerce(value: str) -> Any:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)


# What the harness reads the trained weights with, after the last step's range has closed: torch's own tensor methods
# (its C type's, which no script can replace), torch.save as this module imported it, and no dispatch to Python
# (no __torch_function__ or __torch_dispatch__ mode or subclass, no garbage collector's callbacks, no signal handler)
# while it reads. What torch.save itself calls is held to what it was at import (replaced_read_path).
_TENSOR = torch._C.TensorBase
_SAVE = torch.save
WEIGHT_TYPES = (torch.Tensor, torch.nn.Parameter, getattr(torch.nn.parameter, "Buffer", torch.Tensor))


def _read_path() -> list[tuple[str, Any, str, Any]]:
    """Every function the weights' reading reaches through Python, as (shown name, owner, attribute, the object
    there now): the classes' methods (an attribute added later shadows torch's C method), the modules' callables."""
    import copyreg
    import pickle

    import torch._utils
    import torch.serialization
    import torch.storage

    found = [("torch.save", torch, "save", torch.save)]
    for shown, owner in (("torch.Tensor", torch.Tensor), ("torch.storage.TypedStorage", torch.storage.TypedStorage),
                         ("torch.storage.UntypedStorage", torch.storage.UntypedStorage)):
        found += [(f"{shown}.{name}", owner, name, value) for name, value in vars(owner).items() if callable(value)]
    for shown, module in (("torch.serialization", torch.serialization), ("torch._utils", torch._utils),
                          ("pickle", pickle), ("io", io)):
        found += [(f"{shown}.{name}", module, name, value) for name, value in vars(module).items()
                  if callable(value) and not name.startswith("__")]
    # the pickler asks copyreg's table first for each object's type: the types torch.save pickles here
    found += [(f"copyreg.dispatch_table[{kind.__name__}]", copyreg.dispatch_table, kind,
               copyreg.dispatch_table.get(kind)) for kind in _pickled_types()]
    return found


def _pickled_types() -> tuple[type, ...]:
    import collections

    import torch.storage

    return (dict, collections.OrderedDict, str, int, float, bool, tuple, list, type(None), torch.Tensor,
            torch.nn.Parameter, torch.storage.TypedStorage, torch.storage.UntypedStorage, torch.dtype, torch.device,
            torch.Size, torch.layout, torch.memory_format, *WEIGHT_TYPES)


def _read_tables() -> list[tuple[str, tuple]]:
    """The tables of functions torch.save calls on its way (as a tuple of what they hold): the storage location
    taggers it asks for each storage's device."""
    import torch.serialization

    return [("torch.serialization._package_registry", tuple(getattr(torch.serialization, "_package_registry", ())))]


def _read_codes() -> list[tuple[str, Any, Any]]:
    """(shown name, function, its code) for every Python function of the read path and its tables: a function
    object kept in place with another body (its __code__ set) runs the script's code where the harness reads."""
    functions = [(shown, value) for shown, _owner, _name, value in _READ_PATH]
    functions += [(f"{shown}[{index}]", part) for shown, held in _READ_TABLES for index, entry in enumerate(held)
                  for part in (entry if isinstance(entry, tuple) else (entry,))]
    codes = []
    for shown, value in functions:
        function = getattr(value, "__func__", value)  # a method's function
        if isinstance(function, types.FunctionType):
            codes.append((shown, function, function.__code__))
    return codes


_READ_PATH = _read_path()
_READ_TABLES = _read_tables()
_READ_CODES = _read_codes()
_READ_OWNERS = {id(owner): (shown.rsplit(".", 1)[0], owner) for shown, owner, _name, _value in _READ_PATH
                if isinstance(owner, type)}


def replaced_read_path() -> list[str]:
    """What of ``_READ_PATH`` is no longer what it was: a function replaced, or a method added to one of its classes
    (a Python attribute on torch.Tensor shadows the C method the harness's lookups would find)."""
    import copyreg

    replaced = []
    for shown, owner, name, original in _READ_PATH:
        now = (copyreg.dispatch_table if owner is copyreg.dispatch_table else vars(owner)).get(name)
        if now is not original:
            replaced.append(shown)
    known = {(id(owner), name) for _shown, owner, name, _value in _READ_PATH}
    for shown, owner in _READ_OWNERS.values():
        replaced += [f"{shown}.{name} (added)" for name, value in vars(owner).items()
                     if callable(value) and (id(owner), name) not in known]
    for (shown, held), (_shown, now) in zip(_READ_TABLES, _read_tables()):
        if len(held) != len(now) or any(a is not b for a, b in zip(held, now)):
            replaced.append(shown)
    replaced += [f"{shown} (its code)" for shown, function, code in _READ_CODES if function.__code__ is not code]
    return replaced


_HELD_SIGNALS = signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}


@contextmanager
def _script_paused() -> Iterator[None]:
    """None of the script's code runs from the harness's own calls: no collection by the garbage collector (so none of
    its finalizers), and the script's Python signal handlers replaced by one that only notes the signal, raised again
    at the end. (Blocking a signal in this thread is not enough: delivered to another thread, its Python handler runs
    here all the same; red team 69's sigdefer_09 ran a deferred evaluation from a timer's handler so.) Handlers can
    only be set from the main thread; elsewhere the collector alone waits."""
    collecting = gc.isenabled()
    gc.disable()
    noted: list[int] = []
    replaced: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for number in signal.valid_signals():
            try:
                handler = signal.getsignal(number)
                if callable(handler) and handler is not signal.default_int_handler:
                    signal.signal(number, lambda signum, frame: noted.append(signum))
                    replaced[number] = handler
            except (OSError, ValueError, TypeError):
                continue
    try:
        yield
    finally:
        for number, handler in replaced.items():
            signal.signal(number, handler)
        if collecting:
            gc.enable()
        for number in dict.fromkeys(noted):
            signal.raise_signal(number)


@contextmanager
def harness_only() -> Iterator[None]:
    """While the harness reads the model at the window's edges: none of the script's code runs (no torch function or
    dispatch in Python, no finalizer, no signal handler: signals wait for the end, blocked in this thread too)."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        with _script_paused(), torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
            yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextmanager
def script_held(under_grader: bool) -> Iterator[None]:
    """From the window's close until the harness hands the script back its code (under the grader): none of the
    script's code runs in the harness's time (its trace's export, its messages), whose CPU the grader does not charge
    to the script (_script_paused)."""
    with _script_paused() if under_grader else nullcontext():
        yield


def odd_weights(tensors: list[tuple[str, torch.Tensor]]) -> list[str]:
    """The names of those tensors that are not plain tensors (a subclass runs Python code whenever it is read)."""
    return [f"{name} ({type(tensor).__name__})" for name, tensor in tensors if type(tensor) not in WEIGHT_TYPES]


def state_bytes(model: torch.nn.Module) -> bytes:
    """The model's weights and buffers as torch.save bytes, on the CPU, named as ``state_dict`` names them (read
    under ``harness_only``, with torch's own methods: see model_tensors)."""
    with harness_only():
        state = {name: _TENSOR.to(_TENSOR.detach(tensor), "cpu", copy=True)
                 for name, tensor in model_tensors(model, persistent=True)}
    buffer = io.BytesIO()
    _SAVE(state, buffer)
    return buffer.getvalue()


def _stop_workers(source: Iterable, batches: Iterator) -> None:
    """Stop the worker processes of every DataLoader iterator still alive in this process once the steps are over:
    left running, they go on preparing the batches they were asked for ahead (``prefetch_factor`` each) and end
    with the script, CPU the grader would read as work after the window (``after_cpu_ns``) though no step asked for
    it. That is the iterator session.steps() drew from, and also one inside a generator or a prefetcher of the
    script's that steps() drew through (found among the live objects). A persistent loader forgets its iterator,
    so that iterating it again starts workers afresh."""
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    # each object's type's own __mro__, never isinstance: an object's __class__ can be a property of the script's
    # (code that would run here, after the window, where no CPU of the run's own process is read), and isinstance
    # is a C call the profiler, still recording, would log once per object
    iterators, loaders = {}, []
    for obj in [*gc.get_objects(), source, batches]:
        mro = type(obj).__mro__
        if _MultiProcessingDataLoaderIter in mro:
            iterators[id(obj)] = obj
        elif DataLoader in mro:
            loaders.append(obj)
    for iterator in iterators.values():
        if not getattr(iterator, "_workers", None) or getattr(iterator, "_shutdown", True):
            continue
        iterator._shutdown_workers()
        for loader in loaders:
            if getattr(loader, "_iterator", None) is iterator:
                loader._iterator = None


class Session:
    """One run of a chapter's workload on one device, with the timed window."""

    def __init__(self, chapter_id: str, device: str, cfg: dict[str, Any]):
        from checker.base.chapters import get_chapter, probe_updates

        self.chapter = get_chapter(chapter_id)
        self.device = torch.device(device)
        # a rank of a data-parallel job (torchrun's variables, or the grader's launcher): 0 of 1 otherwise
        self.rank, self.world_size, self.local_rank = world_from_env()
        self.cfg = cfg
        # every step steps() hands out; under a traced tail (the grader's --trace-tail N) its last N steps are traced
        # after the window. Only the harness knows where the window ends: the script sees one run of total_steps.
        self.total_steps = int(cfg["steps"])
        self.warmup = min(int(cfg.get("warmup", 0)), self.total_steps)
        tail = self._tail_steps()
        self._window_end = self.total_steps - tail
        if tail and self._window_end <= self.warmup:
            raise SystemExit(f"--steps {self.total_steps} with --trace-tail {tail}: no step is left "
                             f"for the timed window after the {self.warmup} warm-up steps")
        self.log_every = int(cfg.get("log_every", 0)) or None
        self.seed = int(cfg.get("seed", 0))
        torch.manual_seed(self.seed)
        _BUILDING[0] = True  # the workload's own numpy arrays are not the script's (_SCRIPT_ARRAYS)
        try:
            self.workload: Workload = load_workload_module(self.chapter.dir).build(cfg, self.device)
        finally:
            _BUILDING[0] = False
        self.model = self.workload.model
        self.loss_fn = self.workload.loss_fn
        self.batches = self.workload.batches
        self._own_source = self.workload.batches  # the harness's own hold on it, whatever the script rebinds
        self.dataset = self.workload.dataset
        self.extras = self.workload.extras
        self._head_rms = initial_rms(self.model)
        self._on_window = self.workload.on_window  # as built, before the script holds the workload
        self.steps_done = 0
        # what the window measured, for a script run on its own: set once every step has run. Under the grader the
        # harness reads no clock at all: every moment that counts is a message the grader stamps as it arrives, and
        # nothing in this process holds a time (a script that could read the harness's stamps, by any name, could
        # hand them back as its own measurement: chapter 00 grades one)
        self._keeps_time = _channel() is None
        self.samples = 0
        self.window_s: float | None = None
        self.warmup_s: float | None = None
        self.step_starts_ns: list[int] = []
        self._window_samples = 0
        self._window_s: float | None = None  # set when the window closes, on its own only
        self._window_stamps_ns: list[int] = []  # on its own only: under the grader, always empty
        self._window_closed = False
        self.trace_file: Path | None = None
        self._stepped = False
        self._profiler = None
        self.loader_settings: dict[str, Any] | None = None
        # a data-parallel chapter's samples (checker.base.ranks.LoggedSamples): which positions this rank read in
        # each timed step, as epoch * len(dataset) + position, for the grader to compare across ranks
        self._sample_log = self.dataset if isinstance(self.dataset, LoggedSamples) else None
        self._epoch = 0
        self._window_sample_ids: list[int] = []
        self._window_sample_counts: list[int] = []
        keep = int(cfg.get("finished_batches", 0))
        self._finished = Finished(self.workload, keep, int(cfg["batch_size"])) if keep and isinstance(self.extras.get("sampler"), KeyedEpochs) \
            else None
        # the source whose batches the update probe places: a sampler's epochs (chapter 07) or keyed draws (06)
        source = next((s for s in (self.extras.get("sampler"), self.workload.batches)
                       if isinstance(s, (KeyedEpochs, KeyedDraws))), None)
        self._probe = UpdateProbe(self.model, source, int(cfg["batch_size"])) \
            if probe_updates(cfg) > 0 and source is not None and _channel() is not None else None
        # a CPU run of a chapter that counts host reads: tensors made over Python buffers in the window are watched
        checks = {c.name for c in self.chapter.checks}
        self._counts_views = self.device.type == "cpu" and "host_syncs" in checks
        # a graded CPU run whose reads are counted or whose workers must prepare every sample: a loader worker's batch
        # is copied into the training process's own memory (_private_batch); elsewhere (a GPU run pins its batches, a
        # learner's own run under `workbook doctor`) the copy is a cost with nothing to guard
        self._private_batches = self.device.type == "cpu" and _channel() is not None \
            and bool({"host_syncs", "samples_in_workers"} & set(checks))
        if self._counts_views and _channel() is not None:
            _scrub_freed_memory()
        # a CPU run of a chapter that counts a step's ops: every tensor that crosses to numpy or DLPack in the window
        # (exported, or made over their memory) is counted, with what counts host reads: arithmetic done there
        # records no op, so the counts cannot see it (red team 28's hidden_chain_05 ran the slow script's passes in
        # numpy inside an autograd Function). No lab of these chapters needs numpy in a step.
        self._counts_crossings = self.device.type == "cpu" and bool(COUNTS_OPS & checks)
        self._made_beyond = 0
        # a CPU run of a chapter that bounds the stepping thread's blocked time (samples_in_workers' blocked_share):
        # the kernel's scheduler statistics are read around each fetch. Only there: the marks hold the clock, which
        # no other chapter's script may find in the harness (chapter 00 times its own steps)
        self._counts_blocked = self.device.type == "cpu" and any(
            "blocked_share" in c.options for c in self.chapter.checks)
        self._send({"type": "built"})

    @property
    def is_main(self) -> bool:
        """Rank 0: the one rank that should log, in a job of several."""
        return self.rank == 0

    @staticmethod
    def _send(message: dict[str, Any], payload: bytes | None = None) -> None:
        channel = _channel()
        if channel is not None:
            deliver(channel, message, payload)  # as the channel's module was imported: nothing looked up on the object

    # -- what scripts call -------------------------------------------------------------------------
    def is_log_step(self, step: int) -> bool:
        """True every ``log_every`` steps: reading values on the host there is allowed."""
        return self.log_every is not None and (step + 1) % self.log_every == 0

    def steps(self, source: Iterable) -> Iterator[tuple[int, Any]]:
        """Yield ``(step, batch)`` for the configured number of steps, timing the window."""
        if self._stepped:
            raise RuntimeError("session.steps() runs once per session")
        self._stepped = True
        self.loader_settings = _loader_settings(source)
        origin = LoaderOrigin(source) if self.loader_settings is not None else None
        fetched = in_epoch = 0
        batches = iter(source)
        for step in range(self.total_steps):
            if step == 0:
                if self._keeps_time:
                    self._t_first_step = time.perf_counter_ns()
                if self._traces_warmup:  # the warm-up's steps are judged for their work too (chapter 00 on a CPU)
                    self._start_profiler()
                self._send({"type": "first_step"})
            if step == self.warmup:
                self._open_window()
            if step == self._window_end:  # only with a traced tail: the window ends before the last steps
                self._close_window()
                self._open_tail()
            _WINDOW_STEP[0] = step
            if self._window_open or self._tail_open:
                self._send({"type": "step", "n": step})
                if self._window_open and self._step_acks:
                    _channel().receive()  # the grader has read this process's CPU: this step begins now
            if self._window_open and self._keeps_time:
                self._window_stamps_ns.append(time.perf_counter_ns())
            if self._probe is not None and (self._window_open or step == self.warmup - 1):
                self._probe.snapshot(step)  # (and before the last warm-up step: the window's first is drawn too)
            with marked_range(f"step {step}"):
                if self._window_open or self._tail_open:  # inside the step's range: whatever it runs is the step's
                    self._guard_step()
                if self._window_open and self._counts_blocked:
                    self._add_blocked()  # a fetch's own waits are the loader's, judged by data_wait
                with marked_range("data"), origin.fetch() if origin is not None else nullcontext(), \
                        harness_fetch():
                    try:
                        batch = next(batches)
                    except StopIteration:  # a new epoch
                        self._epoch += 1
                        in_epoch = 0
                        if self._finished is not None:
                            self._finished.new_epoch()
                        batches = iter(source)
                        try:
                            batch = next(batches)
                        except StopIteration:
                            raise RuntimeError(
                                "the batch source is empty or cannot be iterated twice; pass a re-iterable "
                                "(a list, a DataLoader) to session.steps()"
                            ) from None
                if self._private_batches:  # the step's own work, after the fetch: it copies, and computes nothing
                    _private_batch(batch)
                if self._window_open or self._tail_open:
                    check_fetched(batch, self._own_source)
                fetched += 1
                if self._window_open and self._counts_blocked:
                    self._add_blocked(fetch=True)
                if self._window_open and self._probe is not None:
                    self._probe.placed(step, in_epoch)
                in_epoch += 1
                if self._finished is not None:
                    self._finished.fetched(batch, in_window=self._window_open)
                if self._window_open:
                    self._window_samples += _batch_size(batch)
                self._log_samples()
                yield step, batch
            self.steps_done = step + 1
        if origin is not None:
            origin.close()
            self.loader_settings["not_its_batches"] = origin.problems(fetched)
        with script_held(_channel() is not None):
            if self._tail_open:
                self._close_tail()
                self._steps_over(source, batches)
            else:
                self._close_window(lambda: self._steps_over(source, batches))
            if self._keeps_time:
                self.samples, self.window_s, self.step_starts_ns = \
                    self._window_samples, self._window_s, list(self._window_stamps_ns)
            if _channel() is not None:  # the script's own code runs again from here: the grader reads its CPU
                self._send({"type": "resumed"})

    def _steps_over(self, source: Iterable, batches: Iterator) -> None:
        """The loader's workers stopped, then the grader told: from here what runs under the script but in another
        process is work after the window (RunResult.after_cpu_ns)."""
        _stop_workers(source, batches)
        if _channel() is not None:
            self._send({"type": "stopped"})

    def finish(self) -> dict[str, Any]:
        """Print and return what this process measured; under the grader, which measures for itself, nothing."""
        result = self.result()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()  # every rank reaches here: no collective is left waiting
        if _channel() is not None:
            print(f"{self.chapter.id}: {self.steps_done} steps run; the grader measures them")
        elif result["samples_per_s"] is None:
            print(f"{self.chapter.id}: the timed window did not complete ({self.steps_done}/{self.total_steps} steps)")
        else:
            print(
                f"{self.chapter.id} on {result['device_name']}: {result['samples']} samples in "
                f"{result['window_s']:.3f} s = {result['samples_per_s']:,.0f} samples/s "
                f"(steps {self.warmup}..{self._window_end - 1} timed)"
            )
        return result

    def report(self, name: str, value: float) -> None:
        """One number about this run for the grader (chapter 00's benchmark): a claim it checks against its
        own clock, never a measurement it believes."""
        if not isinstance(name, str) or not name.isidentifier() or len(name) > 64:
            raise ValueError("session.report(name, value): name must be a short identifier such as 'p50_ms'")
        self._send({"type": "report", "name": name, "value": float(value)})

    def _log_samples(self) -> None:
        """The positions this rank read since the last step began, kept for a timed step."""
        if self._sample_log is None:
            return
        read = self._sample_log.take()
        if self._window_open:
            base = self._epoch * len(self._sample_log)
            self._window_sample_ids.extend(base + position for position in read)
            self._window_sample_counts.append(len(read))

    # -- the timed window --------------------------------------------------------------------------
    _window_open = False
    _step_acks = False  # whether the grader answers each window step's message (set as the window opens)
    _window_tensors: list = []
    _window_thread: int | None = None  # the thread that opened the window (threading.get_ident)
    _counts_views = False
    _private_batches = False
    _counts_crossings = False
    _tail_open = False

    _counts_blocked = False
    # [ns blocked, ns in all] of the window's stepping thread outside its fetches, then the same inside them
    _blocked: list[int] | None = None
    _blocked_mark: tuple[int, int] | None = None

    @staticmethod
    def _sched_mark(_open=os.open, _read=os.read, _close=os.close, _now=time.monotonic_ns) -> tuple[int, int] | None:
        """(the clock, the calling thread's ns on a CPU or waiting for one), from the kernel's scheduler statistics
        (/proc/thread-self/schedstat); None where the kernel gives none. Bound at import: nothing the script
        replaces reads them."""
        try:
            fd = _open("/proc/thread-self/schedstat", os.O_RDONLY)
            try:
                fields = _read(fd, 256).split()
            finally:
                _close(fd)
            return _now(), int(fields[0]) + int(fields[1])
        except (OSError, ValueError, IndexError):
            return None

    def _add_blocked(self, fetch: bool = False) -> None:
        """Add the time since the last mark that the stepping thread spent blocked (neither on a CPU nor waiting for
        one: waiting on a lock, a pipe, a sleep) to the window's count: outside the fetches (its first two numbers)
        or, with ``fetch``, inside one (its last two). Training on a CPU blocks nowhere outside a fetch; a step that
        waits for another process's work there (a worker gated to load only when the step lets it: red team 34's
        serial_gate_03) does. Inside the fetches, every step's wait is counted, an epoch's first and a logging
        step's too, where a trace's data_wait leaves them out."""
        now = self._sched_mark()
        if now is None or self._blocked_mark is None or self._blocked is None:
            self._blocked = None
        else:
            wall, busy = now[0] - self._blocked_mark[0], now[1] - self._blocked_mark[1]
            at = 2 if fetch else 0
            self._blocked[at] += max(wall - busy, 0)
            self._blocked[at + 1] += max(wall, 0)
        self._blocked_mark = now

    @property
    def _watches_memory(self) -> bool:
        """Whether this run counts memory shared with Python objects: where host reads or a step's ops are counted."""
        return self._counts_views or self._counts_crossings

    @property
    def _traces_warmup(self) -> bool:
        """Whether a traced run records its warm-up steps too (``trace_warmup``): where a chapter judges what the warm-up
        trained (chapter 00 on a CPU, whose warm-up steps stand in for a GPU's cold start: trained some cheaper way,
        a benchmark that counts them would report steps as cheap as the timed ones)."""
        return (LAUNCH is not None and LAUNCH.trace == "torch" and not self._tail_steps()
                and bool(self.cfg.get("trace_warmup", False)) and self.warmup > 0)

    @staticmethod
    def _tail_steps() -> int:
        """Steps traced after the window (the grader's ``--trace-tail``): the window itself is then not traced."""
        return LAUNCH.trace_tail if LAUNCH is not None and LAUNCH.trace == "torch" else 0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _start_profiler(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        options: dict[str, Any] = {}
        try:  # record every thread's ops, not only this one's (work moved to a thread is still seen)
            options["experimental_config"] = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
        except (AttributeError, TypeError):  # pragma: no cover - older torch
            pass
        # a chapter whose traces must be recognized as one job's (08: the learner's traces show their work) records
        # each op's input shapes; the others leave them out (they cost host time per op)
        shapes = bool(self.cfg.get("record_shapes", False))
        self._profiler = torch.profiler.profile(activities=activities, with_stack=True, record_shapes=shapes, **options)
        self._profiler.__enter__()

    def _open_window(self) -> None:
        self._sync()
        if LAUNCH is not None and LAUNCH.trace == "torch" and not self._tail_steps() and self._profiler is None:
            self._start_profiler()  # before the window opens: starting the profiler is not the step's work
        if self.device.type == "cuda":
            torch.cuda.profiler.start()
        channel = _channel()
        if channel is not None:
            deliver(channel, {"type": "open"})
            answer = channel.receive()
            window_key = int(answer["window_key"])
            # a rank of a CPU job: the grader reads this process's CPU as each window step begins, and answers each
            # step's message once it has (checker.grader.runs: step_cpu), so the reading is the step's boundary
            self._step_acks = answer.get("step_acks") is True
        else:
            window_key = self.seed + 1  # on its own a run behaves as under the grader, with a known key
        # from here to the first step's range none of the script's code may run either: work done here would train
        # before any step's range opens (a callback of its own in the workload's place, a hook the model's methods
        # or a torch function mode would run): the head is found by the harness's own walk, the batch source keyed
        # through the callback the workload was built with, all under harness_only
        self._window_tensors = model_tensors(self.model)
        self._window_thread = threading.get_ident()
        with harness_only():
            if self._probe is not None:
                self._probe.snapshot_before_open(self.warmup)
            redraw_head(dict(self._window_tensors), window_key, self._head_rms)
            self._guard_step()
            if self._watches_memory:
                hold_numpy_views()
            if self._on_window is not None:
                self._on_window(window_key)
        self._window_open = True
        if self._counts_views:
            _WINDOW_LOG_EVERY[0] = self.log_every
            _trace_op_errors(True)
        if self._counts_blocked:
            self._blocked, self._blocked_mark = [0, 0, 0, 0], self._sched_mark()
        if self._keeps_time:
            self._t0 = time.perf_counter_ns()
            # warm-up: first-step costs (torch.compile, cudnn autotuning, allocator growth), outside the window
            self.warmup_s = (self._t0 - self._t_first_step) / 1e9

    def _guard_step(self, tensors: list[tuple[str, torch.Tensor]] | None = None) -> None:
        """Every timed step looks at the tensors the window opened with (microseconds); the window's open and close
        walk the model again, for a tensor put in one's place. And at the harness's own code (changed_harness)."""
        if named := named_like_own():
            _stop({"type": "named", "what": named[:5], "count": len(named)},
                  f"the script made code named like the grader's own ({', '.join(named[:3])}): a trace tells the "
                  "grader's code from the script's by the file its frames name")
        if refused := loaded_refused():
            _stop({"type": "loaded", "what": refused[:3], "count": len(refused)},
                  f"the script loaded code the scan refuses ({refused[0]})")
        if _UNPICKLED:
            own = any(name in _OWN_CLASSES for name in _UNPICKLED)
            _stop({"type": "unpickled", "what": sorted(set(_UNPICKLED))[:5], "count": len(_UNPICKLED)},
                  f"a batch from a loader worker was unpickled in the training process by calling "
                  f"{', '.join(sorted(set(_UNPICKLED))[:3])}: unpickling runs that code here, not in a worker; have "
                  "the workers send finished tensors (plain containers of them)"
                  + ("; a batch class of your own is rebuilt only if none of its code runs as it is: a namedtuple "
                     "of tensors is" if own else ""))
        if rpc_agent_running():
            _stop({"type": "rpc"}, "the script runs a torch.distributed.rpc agent: the ranks' exchanges are counted in "
                  "torch.distributed's collectives, and RPC carries tensors between them where no count looks")
        if self._counts_views and self._window_open and (sys.gettrace() is not _watch_op_errors or _TRACE_REPLACED):
            _stop({"type": "untraced"}, "the script replaced the harness's tracer (sys.settrace), which counts the "
                  "errors ops raise in a step")
        if self._counts_views and self._window_open and (replaced := warnings_replaced()):
            _stop({"type": "warnings", "what": replaced}, f"the script replaced Python's warning display "
                  f"({', '.join(replaced)}): a warning an op raises on some values is a bit of them, and the harness "
                  "counts the warnings shown in a step through the standard one")
        at_edge = tensors is not None or not (self._window_open or self._tail_open)  # the window's open or close
        if self._counts_crossings and at_edge and (changed := fusion_changed()):
            _stop({"type": "fusion", "what": changed[:5], "count": len(changed)},
                  f"the script changed how Inductor fuses ({', '.join(changed[:3])}): this chapter counts a compiled "
                  "graph's call as one pass, which holds for torch.compile's own fusion")
        if self._counts_views and _TORCHSCRIPT:
            _stop({"type": "interpreter", "what": sorted(set(_TORCHSCRIPT))[:5], "count": len(_TORCHSCRIPT)},
                  f"the script ran TorchScript ({', '.join(sorted(set(_TORCHSCRIPT))[:3])}): its interpreter reads a "
                  "tensor's values with no op a CPU trace records")
        if changed := changed_harness(self):
            _stop({"type": "harness", "what": changed[:5]},
                  f"the script changed the harness's session ({', '.join(changed[:3])}): the harness's own code marks, "
                  "times and traces the steps")
        if shared := shared_weights(self._window_tensors if tensors is None else tensors):
            _stop({"type": "shared", "what": shared[:5], "count": len(shared)},
                  f"{len(shared)} of the model's tensors ({', '.join(shared[:3])}) are in shared memory: another "
                  "process can train them where no trace looks; keep the model in this process")

    def _close_window(self, steps_over: Callable[[], None] | None = None) -> None:
        """End the window: its last reads, its messages (close, the samples, the weights), the trace. ``steps_over``:
        called once the weights are sent where no step comes after the window (it stops the loader's workers)."""
        # from here to the weights' send none of the script's code may run: the last step's range has closed, and
        # work done here would train where no step's trace looks (and before the grader has the weights)
        if self._counts_blocked:
            self._add_blocked()
            self._blocked_mark = None  # no clock reading is held past the window
        if replaced := replaced_read_path():
            _stop({"type": "reads", "what": replaced[:5], "count": len(replaced)},
                  f"the script replaced what the harness reads the trained weights with ({', '.join(replaced[:3])})")
        tensors = model_tensors(self.model)
        if odd := odd_weights(tensors):
            _stop({"type": "reads", "what": odd[:5], "count": len(odd)},
                  f"the model's weights include tensor subclasses ({', '.join(odd[:3])}): a subclass runs the "
                  "script's Python whenever the harness reads it")
        with harness_only():
            self._guard_step(tensors)
            self._sync()
            if self._probe is not None:
                self._probe.snapshot(self._window_end)
        if self._keeps_time:
            t1 = time.perf_counter_ns()
            self._window_stamps_ns.append(t1)
            self._window_s = (t1 - self._t0) / 1e9
        self._window_open = False
        self._window_closed = True
        if self._counts_views:
            _trace_op_errors(False)
        self._send({"type": "close", "blocked": self._blocked})
        if _channel() is not None and self._sample_log is not None:
            import numpy as np

            ids = np.asarray(self._window_sample_ids, dtype=np.int64).tobytes()
            self._send({"type": "samples", "counts": self._window_sample_counts}, ids)
        if _channel() is not None:
            # the window ends, on the grader's clock, when these bytes have arrived
            self._send({"type": "weights"}, state_bytes(self.model))
        if steps_over is not None:  # after the window's end on the grader's clock, before the trace's export
            steps_over()
        if self.device.type == "cuda":
            torch.cuda.profiler.stop()
        self._export_trace()
        if _channel() is not None and self._finished is not None:  # after the trace: none of this is traced
            self._send({"type": "finished", "checked": len(self._finished.kept),
                        "unfinished": self._finished.unfinished()})
        if _channel() is not None and self._watches_memory:
            made = written_made_over_buffers() + self._made_beyond + written_numpy_views() + _RAW_READS[0] \
                + len(_MEMORY_FILES) + len(_FILE_MEMORY) + _HELD_VIEWS[0] + _DLPACK_EXPORTS[0]
            _MADE_OVER_BUFFERS.clear()
            _RAW_READS[0] = 0
            self._send({"type": "views", "count": tensor_views() + made, "native": native_code_of_its_own()[:20],
                        "errors": op_errors()[:20], "error_count": len(_OP_ERRORS),
                        "loop_nests": sum(_LOOP_NESTS.values())})
        if self._probe is not None:  # after the trace too: the copies to the host are not the window's
            probe, self._probe = self._probe, None
            channel = _channel()
            deliver(channel, {"type": "probe"})
            steps = [int(s) for s in channel.receive().get("steps", [])]
            self._send({"type": "probed"}, probe.payload(steps))

    def _open_tail(self) -> None:
        """After the window (its weights sent): the traced steps of a run that is also timed. Starting the profiler
        here costs the window nothing."""
        self._start_profiler()
        self._send({"type": "tail"})
        self._tail_open = True

    def _close_tail(self) -> None:
        self._sync()
        self._tail_open = False
        self._send({"type": "tail_close"})
        self._export_trace()

    def _export_trace(self) -> None:
        if self._profiler is not None and _SWITCH_CALLS and _channel() is not None:
            # the grader ends the run: ops ran where the profiler was told not to record them
            self._profiler = None
            self._send({"type": "switched", "calls": len(_SWITCH_CALLS), "first": _SWITCH_CALLS[0]})
            return
        if self._profiler is not None:
            replaced = _replaced_on_export_path(self._profiler)
            if replaced and _channel() is not None:
                # the grader ends the run: the trace this process would write is not the one the profiler recorded
                self._profiler = None
                self._send({"type": "replaced", "what": replaced[:5]})
                return
            # torch's own methods, as they were at import: not what a lookup on this object finds now
            _original("torch.profiler.profile.__exit__")(self._profiler, None, None, None)
            out = LAUNCH.trace_out or Path(f"{self.chapter.id}.trace.json.gz")
            out.parent.mkdir(parents=True, exist_ok=True)
            if _channel() is None:
                _original("torch.profiler.profile.export_chrome_trace")(self._profiler, str(out))
                self.trace_file, self._profiler = out, None
                return
            # the trace goes to the grader as soon as it is written, before the script's code runs again: a file
            # rewritten later is not what the grader reads. Nor is it left for the script to read: on a GPU the
            # grader's truth about each step's time is this trace's device work (chapter 00's step_time_report)
            data = _export_owned(self._profiler, out.parent, compress=out.suffix == ".gz")
            # nor are the profiler's recorded events kept in this process (they are the trace's content)
            self._profiler.profiler, self._profiler = None, None
            if data is None:
                self._send({"type": "replaced", "what": ["the trace file, replaced while the profiler wrote it"]})
                return
            channel = _channel()
            deliver(channel, {"type": "trace"}, data)
            # and this process waits for the grader to have read it: the grader checks, as it reads the trace, that
            # this process still holds the pipe where the harness opened it, which a process that has exited cannot
            channel.receive()

    def result(self) -> dict[str, Any]:
        """What the run measured, as the script may read it (under the grader: nothing, see ``samples``)."""
        return self._report(self.samples, self.window_s, self.step_starts_ns)

    def _window_measured(self) -> dict[str, Any]:
        """What the window measured, for the launcher to tell the grader."""
        return self._report(self._window_samples, self._window_s, self._window_stamps_ns)

    def _report(self, samples: int, window_s: float | None, stamps: list[int]) -> dict[str, Any]:
        complete = window_s is not None and self.steps_done == self.total_steps
        step_ms = [(b - a) / 1e6 for a, b in zip(stamps, stamps[1:])]
        return {
            "chapter": self.chapter.id,
            "device": self.device.type,
            "device_name": torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "CPU",
            "steps_expected": self.total_steps,
            "steps_done": self.steps_done,
            "warmup": self.warmup,
            "samples": samples,
            "window_s": window_s,
            "warmup_s": self.warmup_s,
            "samples_per_s": samples / window_s if complete and window_s else None,
            "step_ms": step_ms,
            "trace_file": str(self.trace_file) if self.trace_file else None,
            "loader": self.loader_settings,
            "rank": self.rank,
            "world_size": self.world_size,
        }


_HARNESS_SCHED = Session._sched_mark.__code__


def _join_group(device: str) -> str:
    """In a job of several ranks, join the process group (gloo on a CPU, NCCL on GPUs) and take this rank's GPU;
    returns the device this rank trains on."""
    rank, world, local = world_from_env()
    if world == 1:
        return device
    import torch.distributed as dist

    if device == "cuda":
        if local >= torch.cuda.device_count():
            raise SystemExit(f"LOCAL_RANK={local}: this machine has {torch.cuda.device_count()} GPU(s); "
                             "start at most one rank per GPU")
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    if not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        kwargs = {"device_id": torch.device(device)} if backend == "nccl" else {}
        dist.init_process_group(backend, rank=rank, world_size=world, **kwargs)
    return device


def _one_rank_group(device: str) -> None:
    """A data-parallel chapter's script run as one rank (plain ``python train.py``, or the grader's one-rank run
    that scaling is measured against) gets a process group of one, held in this process: DistributedDataParallel
    and DistributedSampler work as they do on several ranks, and no collective waits for anyone."""
    import torch.distributed as dist

    if dist.is_initialized() or world_from_env()[1] > 1:
        return
    backend = "nccl" if device.startswith("cuda") else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


# The harness's own code, as it was defined: a script that puts its code where the harness calls (a property or
# method on the session's class, a method on the session itself) runs work between two steps' ranges, where no
# step's trace looks. Compared at every timed step.
_SESSION_CLASS = dict(vars(Session))


def changed_harness(session: Session) -> list[str]:
    """What the script changed of the session's code: its class, the class's attributes, or a method of the class
    shadowed on the session itself."""
    if type(session) is not Session:
        return [f"the session's class (now {type(session).__name__})"]
    now = vars(Session)
    changed = [name for name in set(now) | set(_SESSION_CLASS) if now.get(name) is not _SESSION_CLASS.get(name)]
    shadowed = [name for name in vars(session) if callable(_SESSION_CLASS.get(name))
                or isinstance(_SESSION_CLASS.get(name), property)]
    return sorted(changed + shadowed)


def start(chapter_id: str, argv: list[str] | None = None) -> Session:
    """Build the chapter's workload for this run (``--steps``, ``--device``, ``--set key=value``)."""
    global _CURRENT
    from checker.base.chapters import get_chapter, too_few_steps

    if LAUNCH is not None and LAUNCH.args is not None:
        asked = list(sys.argv[1:] if argv is None else argv)
        if asked != LAUNCH.args:
            print(f"workbook: under the grader, start() keeps the grader's settings ({' '.join(LAUNCH.args)}); the "
                  f"script's ({' '.join(asked) or 'none'}) are ignored", file=sys.stderr)
        args = _parse_args(LAUNCH.args)
    else:
        args = _parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this machine has no CUDA GPU that torch can use; try --device cpu")
    device = _join_group(device)
    cfg = get_chapter(chapter_id).config(device.split(":")[0])
    for item in args.set:
        key, _, value = item.partition("=")
        cfg[key] = _coerce(value)
    if args.steps is not None:
        cfg["steps"] = args.steps
    if args.warmup is not None:
        cfg["warmup"] = args.warmup
    if problem := too_few_steps(int(cfg["steps"]), int(cfg.get("warmup", 0)), device.split(":")[0]):
        raise SystemExit(problem + " (or a smaller --warmup)")
    if LAUNCH is not None and LAUNCH.seed is not None:
        cfg["seed"] = LAUNCH.seed  # the grader's seed for this run, whatever the command line said
    if int(cfg.get("world_size", 1)) > 1:
        _one_rank_group(device)
    _SESSION_PID[0] = os.getpid()
    _CURRENT = Session(chapter_id, device, cfg)
    return _CURRENT
