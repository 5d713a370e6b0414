"""Host syncs: the moments the CPU stops and waits for the GPU.

On a CUDA trace a host sync is a call to cudaStreamSynchronize, cudaDeviceSynchronize or
cudaEventSynchronize, a synchronous copy (cudaMemcpy and its non-Async kin), or a free that waits for the
device (cudaFree, cudaFreeHost: ``torch.cuda.empty_cache()`` handing cached blocks back), as torch.profiler and
nsys record them. PyTorch makes them for you in places: a blocking ``.to('cuda')`` from pageable memory
is a cudaMemcpyAsync followed by a cudaStreamSynchronize, and ``.item()`` is a device-to-host
cudaMemcpyAsync followed by a cudaStreamSynchronize. Driver-API syncs (cuStreamSynchronize, ...) count
only when no runtime call on the same thread holds them, so one sync is never counted twice.

A CPU-only trace has no CUDA calls, so there the syncs are the aten ops that would make one on a GPU
(checked with torch.profiler on the CPU, torch 2.14):

- ``aten::_local_scalar_dense``: every ``.item()``, ``float(t)``, ``int(t)``, ``bool(t)`` and so every
  ``if t.any():`` or ``if (t > 0):``, and ``f"{loss}"`` (through ``.item()``);
- ``aten::nonzero``: ``torch.nonzero``, and boolean-mask indexing ``x[mask]`` (also in its backward pass,
  when the masked tensor needs a gradient);
- ``aten::_unique2`` and its kin: ``torch.unique``, ``Tensor.unique``, ``torch.unique_consecutive``;
- ``aten::bincount`` (its result's length is the largest value, read) and ``aten::equal`` (a Python bool);
- ``aten::_pack_padded_sequence`` (its lengths, which a GPU run must copy to the host) and ``aten::tensor_split``
  given a tensor of indices (seen as one ``tensor_split`` holding another: the overload of Python ints inside).

``torch.repeat_interleave`` without ``output_size`` and ``masked_select`` reach
``aten::_local_scalar_dense`` on the CPU themselves.

Not every such op would sync on a GPU: reading a tensor that lives on the CPU there too costs no sync.
The one a training step always makes is the optimizer reading its step counter (see
``cpu_resident_reads``); those are left out.

``.tolist()``, ``.numpy()`` and ``.cpu()`` make no such op on the CPU (on CUDA each is a device-to-host copy and a
sync), and neither do the Python values read from them (a list's indices, a ``set``, ``repeat_interleave``'s
``output_size``), nor do ``apply_``, ``map_`` and ``map2_``, which hand each value to a Python function. Their calls
are in a trace recorded ``with_stack=True``, as the workbook records it: the Python
tracer names each C call, ``<built-in method tolist of Tensor object at 0x...>`` (a subclass's and an unbound
``torch.Tensor.tolist(x)`` alike; ``np.asarray(t)`` reaches ``numpy``; a storage's ``tolist`` is a Python frame of
torch/storage.py). Each such call counts as a sync (``python_reads``), unless the code that made it is the
grader's own data code (checker/base, a chapter's workload.py: reads of CPU-made data such as a keyed batch
order), found as the innermost frame holding the call that is not torch's, the standard library's, an installed
package's or the harness's step loop (which only runs what the script handed it).
``print(loss)`` formats the tensor with several ``.item()`` calls (each one counted). A tensor handed to another
library by DLPack (``np.from_dlpack(t)``, ``torch.utils.dlpack.to_dlpack``) is read there: its C call
(``_to_dlpack``) counts too.

What a CPU trace still cannot show: ``.to("cpu")`` and a ``copy_`` into a CPU tensor (one op whose devices the
trace does not record), and a ``.cpu()`` of a tensor that is on the CPU on a GPU run too (counted: no sync there).
A copy into a tensor whose memory a numpy array or a bytearray shares, read by indexing that object, makes no op or
call at all: the scan refuses such tensors in the chapters that count reads (checker.base.scan.ALIASING), and
the harness counts the numpy views of tensors a CPU run holds after its window (checker.candidate.session
.tensor_views), which host_syncs fails.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from checker.trace.analyses.calls import launch_rows, next_call_rows
from checker.trace.analyses.stack import FRAME, is_user_path, op_of, where_of
from checker.trace.intervals import innermost, points_within
from checker.trace.steps import rows_in_steps, step_ended_before

# cudaFree and cudaFreeHost wait for the whole device before they free (CUDA's implicit synchronization; the
# caching allocator calls them only to hand memory back: empty_cache(), or a failed allocation retried), red team
# 70's emptycache_06; cudaFreeAsync is queued and waits for nothing
RUNTIME_SYNCS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                           "cudaThreadSynchronize", "cudaFree", "cudaFreeHost"})
DRIVER_SYNCS = frozenset({"cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemFree", "cuMemFree_v2",
                          "cuMemFreeHost"})
# torch.unique and its kin size their result by the number of distinct values: on the CPU they call no op
# that reads a value, on a GPU they copy a count back and wait for it
UNIQUE_OPS = ("aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
              "aten::unique_dim_consecutive")
SYNC_COPY = re.compile(r"^cu(?:da)?Memcpy(?!.*Async)\w*$")
# ops whose result's size or value a GPU must hand to the host: bincount sizes its result by the largest value
# (it reads it), equal answers a Python bool; on the CPU their kernels read the values themselves, with no op
# that shows it
# (_pack_padded_sequence reads its lengths, which must be on the CPU: a GPU run copies them there)
# (_pad_packed_sequence reads its batch sizes, which must be on the CPU, and sizes its result by the first: a shape that
# hands a value to Python, red team 17's packed_shape_06)
# (_ctc_loss sizes its alpha table by the largest target length, read in C++, and `.shape` hands it to Python: red
# team 35's ctc_shape_06; linalg_lstsq's residuals are empty or not by the solution's rank)
READING_OPS = ("aten::bincount", "aten::equal", "aten::_pack_padded_sequence", "aten::_pad_packed_sequence",
               "aten::_ctc_loss", "aten::linalg_lstsq")
# the other ops PyTorch tags as sizing their result by values (Tag.dynamic_output_shape, data_dependent_output): each
# reads through an op listed above, run inside it on a CPU (aten::nonzero, aten::_local_scalar_dense), or reads
# nothing in the overload that does not (index given integer tensors, repeat_interleave given its output_size).
# tests/test_host_syncs_check.py holds every tagged op of the torch installed to one list or the other.
READ_BENEATH = ("aten::allclose", "aten::argwhere", "aten::index", "aten::is_nonzero", "aten::item",
                "aten::masked_select", "aten::one_hot", "aten::repeat_interleave")
# ops whose result's size is the number of distinct or nonzero values: a sparse tensor coalesced (its nnz then read
# as a size, `_nnz()`, no op) or made from a dense one; on a GPU each copies that count back and waits for it
# (the inner ops that do the work: `coalesce` and `to_sparse` call them, counted once)
SPARSE_SIZE_OPS = ("aten::_coalesce", "aten::_to_sparse", "aten::_to_sparse_csr", "aten::_to_sparse_csc",
                   "aten::_to_sparse_bsr", "aten::_to_sparse_bsc")
# a sparse tensor's members: the stored values and indices, whose length is its count of stored entries, and that
# count itself (`_nnz()`). A sparse result's count is computed from its inputs' values (a product of two CSR matrices,
# a sum), so reading it hands a value to Python with no op that reads one (red team 29's csr_nnz_reads_06: a value
# written as a column index, multiplied by a staircase matrix, read back as `_nnz()`); on a GPU each such result
# copies its count back and waits for it. No lab holds a sparse tensor: every access to one counts, wherever it is
# called from (an op inside another is counted too).
SPARSE_MEMBER_OPS = ("aten::_nnz", "aten::values", "aten::_values", "aten::indices", "aten::_indices",
                     "aten::crow_indices", "aten::col_indices", "aten::ccol_indices", "aten::row_indices")
# a nested tensor's ops: its sizes are a tensor's values (a nested tensor viewed over a buffer takes its sizes from a
# sizes tensor, read in C++ with no op that reads one), handed to Python by `.size(d)` (red team 33's
# nested_reads_07); on a GPU they are copied back first. No lab holds a nested tensor: every nested or jagged op counts
NESTED_OPS = re.compile(r"^aten::(?:_?nested_|_jagged_|_padded_dense_to_jagged)")
# what `Tensor.tolist()` runs first, before it reads the values (torch/csrc/utils/tensor_list.cpp): the conjugate bit
# resolved (then the negative bit, `aten::resolve_neg`), an op at the top level of a step, where no operator of a
# model or a loss calls it
TOLIST_OP = "aten::resolve_conj"
# ops that hand Python a number (int, float, bool) computed from a tensor argument's values: the schema says it, a
# number among what they return. Each reads the memory in C++ with no op that reads a value (fbgemm's weight quantizer
# returns its input's range as a scale and zero point: red team 55's fbgemm_read_01). Counted where no counted read
# runs inside them (the scalar casts read through `aten::item`, counted there once; `aten::is_nonzero`, `bool(t)`, is in
# READ_BENEATH: a test's trace showed it alone where numpy converted a tensor, and the read it makes is `aten::item`'s).
# tests/test_host_syncs_check.py holds every aten op of the torch installed that returns a number from a tensor to
# this list or to NUMBER_OF_METADATA.
NUMBER_READS = frozenset({"aten::Bool", "aten::Complex", "aten::ComplexImplicit", "aten::Float", "aten::FloatImplicit",
                          "aten::Int", "aten::IntImplicit", "aten::__contains__", "aten::_choose_qparams_per_tensor",
                          "aten::allclose", "aten::count", "aten::equal", "aten::fbgemm_linear_quantize_weight",
                          "aten::q_scale", "aten::q_zero_point",
                          "aten::_nested_tensor_from_mask_left_aligned", "aten::_nnz",
                          # a list of numbers: TorchScript's tolist (recorded as no op of its own: the scan refuses it)
                          "aten::ScalarImplicit", "aten::_tensor_to_list"})
# ...and those whose number is a tensor's metadata (sizes, strides, dtype, device, flags) or a kernel's choice made
# from it, which a tensor's values do not set
NUMBER_OF_METADATA = frozenset({
    "aten::_batch_norm_impl_index", "aten::_cslt_sparse_mm_search", "aten::_cudnn_attention_forward", "aten::_debug_has_internal_overlap",
    "aten::_dimI", "aten::_dimV", "aten::_efficient_attention_forward", "aten::_fused_sdp_choice",
    "aten::_has_compatible_shallow_copy_type", "aten::_has_same_storage_numel", "aten::_is_zerotensor",
    "aten::_nested_get_ragged_idx", "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_use_cudnn_ctc_loss", "aten::_use_miopen_ctc_loss", "aten::_version", "aten::cudnn_is_acceptable",
    "aten::dense_dim", "aten::dim", "aten::element_size", "aten::get_device", "aten::is_coalesced", "aten::is_complex",
    "aten::is_conj", "aten::is_contiguous", "aten::is_distributed", "aten::is_floating_point", "aten::is_inference",
    "aten::is_leaf", "aten::is_neg", "aten::is_non_overlapping_and_dense", "aten::is_pinned", "aten::is_same_size",
    "aten::is_set_to", "aten::is_signed", "aten::is_strides_like_format", "aten::len", "aten::numel",
    "aten::output_nr", "aten::q_per_channel_axis", "aten::result_type", "aten::retains_grad", "aten::sparse_dim",
    "aten::storage_offset", "aten::sym_is_contiguous", "aten::sym_numel", "aten::sym_storage_offset",
    "aten::size", "aten::stride", "aten::sym_size", "aten::sym_stride"})
CPU_SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::nonzero", *UNIQUE_OPS, *READING_OPS, *SPARSE_SIZE_OPS,
                          *SPARSE_MEMBER_OPS})
# ops that read a tensor argument's values only in one overload, told by the op they hold: tensor_split given a
# tensor of indices (it calls the overload of Python ints inside itself, one op nested in the other), not given ints;
# sparse_coo_tensor given no size (it reads its indices' largest values, aten::max inside it, to size the result,
# whose .shape then hands them to Python: red team 17's sparse_size_06), not given one
READING_OUTER_OPS = {"aten::tensor_split": "aten::tensor_split", "aten::sparse_coo_tensor": "aten::max"}
# torch.optim's helper that reads a step counter (or NAdam's mu_product, ASGD's eta and mu) as a number
OPTIMIZER_GET_VALUE = re.compile(r"(?:^|/)torch/optim/optimizer\.py\(\d+\): _get_value$")
# where torch.optim's own code calls it from: a step function of torch/optim (a script calling it is not excused)
OPTIMIZER_CODE = re.compile(r"(?:^|/)torch/optim/(?:\w+/)*\w+\.py\(\d+\): [\w<>]+$")  # <listcomp>, <genexpr> too
# the fused optimizer ops: their CPU kernels read the step and learning rate with .item(), their CUDA kernels
# read them on the GPU
FUSED_OPTIMIZER_OPS = re.compile(r"^aten::_fused_(?:adam|adamw|sgd|adagrad)_?$")
# optimizers whose step (not capturable, not fused) reads only such CPU scalars with .item()
CPU_SCALAR_OPTIMIZERS = re.compile(r"^Optimizer\.step#(?:Adam|AdamW|Adamax|NAdam|RAdam|Adagrad)\.step$")

# the process's own accounting, named as the Python tracer names a call of it
ACCOUNTING_CALL = re.compile(r"^<built-in function (getrusage|wait3|wait4)>$")
# a Tensor's values read into Python without an aten op that reads one (see the module docstring)
# (a tensor subclass is named by its own class, which the script names: whatever the receiver's type is called, each
# call counts. A subclass renamed "numpy.ndarray" once passed apply_ off as numpy's own method: red team 39's
# numpyname_06. A lab's step holds no numpy array, memoryview or array of its own to call these on.)
# (_tensor_to_list: TorchScript's tolist as an operator of the JIT's registry, called by its packet,
# torch.ops.aten._tensor_to_list, reads every value in C++ and records only a select per element: red team 60's
# opslist_*; the scan refuses the name)
PYTHON_READ = re.compile(r"^<built-in method (?:tolist|numpy|cpu|apply_|map_|map2_|_tensor_to_list) of [^<>]+ object"
                         r" at 0x[0-9a-fA-F]+>$|(?:^|/)torch/storage\.py\(\d+\): (?:tolist|cpu)$"
                         r"|^<built-in function _to_dlpack(?:_versioned)?>$"  # a tensor handed over by DLPack
                         # its memory's address (read by ctypes), or the tensor written out (torch.save to a buffer)
                         r"|^<built-in method data_ptr of (?!numpy\.)[^<>]+ object at 0x[0-9a-fA-F]+>$"
                         # a storage written to a file, or moved to shared memory for another process to read
                         r"|^<built-in method (?:_write_file|_share_filename_cpu_|_share_fd_cpu_) of [^<>]+ object"
                         r" at 0x[0-9a-fA-F]+>$"
                         r"|(?:^|/)torch/serialization\.py\(\d+\): save$"
                         # torch's C serializers: a tensor's bytes written into a buffer the script then reads
                         # (PyTorchFileWriter.write_record, torch._C._pickle_save, a scripted module saved to bytes)
                         r"|^<built-in method (?:write_record|_pickle_save|_save_jit_module(?:_to_bytes)?|"
                         r"_save_mobile_module(?:_to_bytes)?|_save_parameters|_gds_save_storage|save_to_buffer|"
                         r"_save_to_buffer_for_mobile|_save_for_mobile) of [^<>]+ object at 0x[0-9a-fA-F]+>$"
                         # a random generator's state handed to Python: its seed, or the state pickled. A tensor's
                         # bytes set as a generator's state come back as a Python int that way, with no op (red team
                         # 37's genpickle_07, by the pickling protocol; red team 21's by set_state): a training step
                         # never reads a generator's seed
                         r"|^<built-in method (?:initial_seed|__reduce__|__reduce_ex__) of torch\._C\.Generator"
                         r" object at 0x[0-9a-fA-F]+>$|(?:^|/)torch/random\.py\(\d+\): initial_seed$"
                         # the process's own accounting asked in a step: which page a write faulted on carries a
                         # value's bits to Python, with no op (red team 43's faultbits_01); a step needs none of it
                         r"|" + ACCOUNTING_CALL.pattern)
# the grader's own code that makes data in the candidate's process: checker/base (KeyedOrder's draw, ...) and a
# chapter's workload.py. The harness's step loop (checker/candidate) is looked through like a library: what it calls
# during a step is what the script handed it (a batch source, a DataLoader and its collate_fn)
GRADER_CODE = re.compile(r"(?:^|/)(?:checker/base/\w+\.py|chapters/[^/]+/workload\.py)\(\d+\): ")
DATA_RANGE = "data"  # the harness's range around fetching a batch (checker.trace.analyses.dataloader's too)
HARNESS_CODE = re.compile(r"(?:^|/)checker/[\w/]+\.py\(\d+\): ")

# the harness's range around the fetch of each step's batch (checker.candidate.session: `session.steps()`)
FETCH_RANGE = "data"

SYNC_COLUMNS = {"step": "Int64", "name": object, "start_ns": "int64", "dur_ns": "int64", "tid": "int64",
                "op": object, "where": object, "in_fetch": bool}


def is_sync_call(name: str) -> bool:
    return name in RUNTIME_SYNCS or name in DRIVER_SYNCS or bool(SYNC_COPY.match(name))


def has_cuda_calls(events: pd.DataFrame) -> bool:
    return bool((events["kind"] == "cuda_api").any())


def sync_rows(events: pd.DataFrame) -> np.ndarray:
    """Row numbers of the host syncs in the whole trace (by the rules in this module's docstring)."""
    names = events["name"]
    if has_cuda_calls(events):
        api = (events["kind"] == "cuda_api").to_numpy()
        sync_names = [n for n in names[api].unique() if is_sync_call(str(n))]
        rows = np.flatnonzero(api & names.isin(sync_names).to_numpy())
        driver = np.array([str(names.iat[r]).startswith("cu") and not str(names.iat[r]).startswith("cuda")
                           for r in rows], dtype=bool)
        if driver.any():
            rows = np.concatenate([rows[~driver], _outside_runtime(events, rows[driver], api)])
        return np.sort(np.concatenate([rows, _pageable_reads(events)]))
    rows = cpu_sync_op_rows(events)
    return np.sort(np.concatenate([rows[~cpu_resident_reads(events, rows)], python_reads(events)]))


def _pageable_reads(events: pd.DataFrame) -> np.ndarray:
    """The calls that launched a device-to-host copy into pageable memory with no sync call after them: such a copy
    returns only when it is done, and so when everything queued before it is (CUDA's rule for pageable memory), a
    sync whatever ``non_blocking`` said (``host.copy_(value, non_blocking=True)``, red team 70's d2h_queued_07). One
    followed by a sync call is counted there (a blocking ``.cpu()``)."""
    memcpy = ((events["kind"] == "memcpy") & (events["copy_kind"] == "DtoH")
              & (events["dst_kind"] == "pageable")).to_numpy()
    calls = launch_rows(events, np.flatnonzero(memcpy))
    calls = calls[calls >= 0]
    if not len(calls):
        return calls
    names = events["name"].to_numpy()
    following = next_call_rows(events, calls)
    synced = np.array([f >= 0 and is_sync_call(str(names[f])) for f in following], dtype=bool)
    return np.unique(calls[~synced])


def cpu_sync_op_rows(events: pd.DataFrame) -> np.ndarray:
    """Row numbers of the aten ops of a CPU trace that read a tensor's values (CPU_SYNC_OPS, NESTED_OPS, an op of
    NUMBER_READS holding no counted read, and an op of READING_OUTER_OPS holding its inner op), sorted."""
    ops = (events["kind"] == "cpu_op").to_numpy()
    names = events["name"]
    nested = [n for n in names[ops].unique() if NESTED_OPS.match(str(n))]
    rows = [np.flatnonzero(ops & names.isin([*CPU_SYNC_OPS, *nested]).to_numpy())]
    tids, starts, ends = (events[c].to_numpy() for c in ("tid", "start_ns", "end_ns"))
    # an op that returns a number read from a tensor, where no counted read runs inside it
    number = np.flatnonzero(ops & names.isin(NUMBER_READS - CPU_SYNC_OPS).to_numpy())
    if len(number):
        counted = np.concatenate(rows)
        holding = points_within(starts[number], ends[number], tids[number], starts[counted], tids[counted]) \
            if len(counted) else np.zeros(len(number), dtype=np.int64)
        rows.append(number[holding == 0])
    for outer_name, inner_name in READING_OUTER_OPS.items():
        outer = np.flatnonzero(ops & (names == outer_name).to_numpy())
        inner = np.flatnonzero(ops & (names == inner_name).to_numpy())
        if not len(outer) or not len(inner):
            continue
        # inner ops that start inside the outer one (a thread's ops nest), the outer one itself not counted
        inside = points_within(starts[outer], ends[outer], tids[outer], starts[inner], tids[inner])
        rows.append(outer[inside > (1 if outer_name == inner_name else 0)])
    return np.sort(np.concatenate(rows))


def python_reads(events: pd.DataFrame) -> np.ndarray:
    """Row numbers of the Python calls that read a tensor's values without an aten op that reads one (``tolist``,
    ``numpy``, ``cpu``: see the module docstring), whoever made them.

    None is excused by the code that made it: the grader's own data code reads no tensor's value in a run (its draws
    are Python's), so a read a frame of it makes was asked of it by the script (red team 39's launder_06 handed the
    harness's KeyedOrder its own tensors to read in the fetch, where the grader's reads had been excused). A read
    inside another read (a subclass's tolist() running the base class's) counts once."""
    kind = events["kind"].to_numpy()
    python = kind == "python"
    if not python.any():
        return np.zeros(0, dtype=np.int64)
    names = events["name"]
    read_names = [n for n in names[python].unique() if PYTHON_READ.search(str(n))]
    reads = np.flatnonzero(python & names.isin(read_names).to_numpy())
    # a `tolist` the tracer did not name (called from C: `operator.methodcaller("tolist")`, `map(Tensor.tolist, ...)`)
    # still runs TOLIST_OP first: one that no other op holds is a read (inside a named call, the
    # call is counted and the op dropped below, as a read inside another read)
    reads = np.sort(np.concatenate([reads, _unnamed_tolists(events)]))
    if not len(reads):
        return np.zeros(0, dtype=np.int64)
    starts, ends = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    pids, tids = events["pid"].to_numpy(), events["tid"].to_numpy()
    keep = np.ones(len(reads), dtype=bool)
    for key in set(zip(pids[reads].tolist(), tids[reads].tolist())):
        at = np.flatnonzero((pids[reads] == key[0]) & (tids[reads] == key[1]))
        mine = reads[at]
        for i, row in zip(at, mine):
            # inside another read: a subclass's tolist() runs the base class's within it
            keep[i] = not ((starts[mine] <= starts[row]) & (ends[mine] >= ends[row]) & (mine != row)).any()
    return reads[keep]


def _unnamed_tolists(events: pd.DataFrame) -> np.ndarray:
    """Row numbers of the ``aten::resolve_conj`` ops (TOLIST_OP) that no aten op of their thread holds: top-level, or
    held by an op of another namespace, whose Python ran them (an operator the script defined with a Python kernel,
    autograd's record of a backward node running a hook: red team 54's peekop_06 and hookread_07 read the steps'
    values there). An aten op that holds one runs it as its own part, and Python inside an aten op is judged by
    ``checker.grader.collect.hidden_work``."""
    ops = (events["kind"] == "cpu_op").to_numpy()
    first = ops & (events["name"] == TOLIST_OP).to_numpy()
    if not first.any():
        return np.zeros(0, dtype=np.int64)
    starts, ends = events["start_ns"].to_numpy(np.int64), events["end_ns"].to_numpy(np.int64)
    pids, tids = events["pid"].to_numpy(), events["tid"].to_numpy()
    names = events["name"]
    rows = np.flatnonzero(first)
    top = np.ones(len(rows), dtype=bool)
    for key in set(zip(pids[rows].tolist(), tids[rows].tolist())):
        pool = np.flatnonzero(ops & ~first & (pids == key[0]) & (tids == key[1]))
        pool = pool[np.lexsort((-ends[pool], starts[pool]))]  # by start, longer first: as innermost() wants
        mine = np.flatnonzero((pids[rows] == key[0]) & (tids[rows] == key[1]))
        if not len(pool):
            continue  # no other op on the thread: each is top-level
        holder = innermost(starts[rows[mine]], starts[pool], ends[pool])
        held = (holder >= 0) & (ends[pool[np.maximum(holder, 0)]] >= ends[rows[mine]])
        by_aten = np.array([str(names.iat[pool[h]]).startswith("aten::") for h in np.maximum(holder, 0)], dtype=bool)
        top[mine] = ~(held & by_aten)
    return rows[top].astype(np.int64)


def frame_origin(frame_name: str) -> str | None:
    """A Python frame's code: "grader" (checker/base, a chapter's workload.py), "user", "library" (the harness too),
    or None (a C call)."""
    if GRADER_CODE.search(frame_name):
        return "grader"
    if HARNESS_CODE.search(frame_name):
        return "library"
    match = FRAME.match(frame_name)
    if not match:
        return None
    return "user" if is_user_path(match.group("path")) else "library"


def shown_name(name: str) -> str:
    """A sync's name as a person reads it: a Python read as ``Tensor.tolist()`` (its object's address left out)."""
    serializer = re.match(r"^<built-in method (write_record|_pickle_save|_save\w*|save_to_buffer) of ", name)
    if PYTHON_READ.search(name) and ("data_ptr" in name or "serialization.py" in name or "_to_dlpack" in name
                                     or serializer):
        what = ("Tensor.data_ptr()" if "data_ptr" in name else "torch.save()" if "serialization.py" in name
                else f"torch's C serializer {serializer.group(1)}()" if serializer else "a DLPack hand-over")
        return f"{what} (a tensor's memory read outside PyTorch's ops; on a GPU a device-to-host copy and a sync)"
    generator = re.match(r"^<built-in method (initial_seed|__reduce__|__reduce_ex__) of torch\._C\.Generator ", name)
    if generator or re.search(r"torch/random\.py\(\d+\): initial_seed$", name):
        return (f"Generator.{generator.group(1) if generator else 'initial_seed'}() (a random generator's state "
                "handed to Python, which a tensor's bytes can have set, with no op that reads them)")
    accounting = ACCOUNTING_CALL.match(name)
    if accounting:
        return (f"resource.{accounting.group(1)}() (the process's own accounting, whose counts a tensor's values can "
                "steer, with no op that reads them)")
    match = re.match(r"^<built-in method (\w+) of ", name) or re.search(r"torch/storage\.py\(\d+\): (\w+)$", name)
    if match and PYTHON_READ.search(name):
        owner = ("TypedStorage" if "storage.py" in name else "torch.ops.aten" if match.group(1) == "_tensor_to_list"
                 else "Tensor")
        return f"{owner}.{match.group(1)}() (no aten op on a CPU; a device-to-host copy and a sync on a GPU)"
    return name


def _called_by_optimizer(events: pd.DataFrame, frames: np.ndarray, python: np.ndarray) -> np.ndarray:
    """For ``_get_value`` frame rows, whether the frame that called it is torch.optim's own code (its caller's
    frame, the innermost Python frame on the thread that holds it): a script that imports ``_get_value`` to read
    its loss is not the optimizer reading its step counter."""
    out = np.zeros(len(frames), dtype=bool)
    names = events["name"].to_numpy()
    starts, ends = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    pids, tids = events["pid"].to_numpy(), events["tid"].to_numpy()
    threads: dict[tuple[int, int], np.ndarray] = {}
    for i, row in enumerate(frames):
        key = (int(pids[row]), int(tids[row]))
        if key not in threads:
            threads[key] = np.flatnonzero(python & (pids == key[0]) & (tids == key[1]))
        same = threads[key]
        holding = same[(starts[same] <= starts[row]) & (ends[same] >= ends[row]) & (same != row)]
        if len(holding):
            caller = holding[np.lexsort((-ends[holding], starts[holding]))[-1]]  # the latest start: innermost
            out[i] = bool(OPTIMIZER_CODE.search(str(names[caller]))) and not OPTIMIZER_GET_VALUE.search(str(names[caller]))
    return out


def cpu_resident_reads(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """For CPU sync-op rows, whether the op reads a scalar that is on the CPU on a GPU run too.

    torch.optim keeps each parameter's ``state["step"]`` as a CPU tensor unless the optimizer is
    ``capturable`` or ``fused`` (torch/optim/adam.py: ``torch.tensor(0.0, dtype=_get_scalar_dtype())`` when
    neither), precisely so that reading it costs no sync; the non-capturable, non-fused step functions read
    it with ``_get_value(step)``, which is ``step.item()``. So on a CPU trace an
    ``aten::_local_scalar_dense`` made inside ``torch/optim/optimizer.py: _get_value``, called from torch.optim's
    own code, is a read the same code makes of a CPU tensor on a GPU: no sync there, and none counted here. (The capturable and fused
    paths never call ``_get_value``; they keep the counter on the GPU and read it there.)

    ``fused=True`` optimizers run one op (``aten::_fused_adamw_``, ...). Its CPU kernel reads each step
    counter with ``.item()`` inside the op (an ``aten::_local_scalar_dense`` within it); its CUDA kernel
    takes the counters as GPU tensors and reads them on the GPU, with no sync. So a read inside a fused
    optimizer op is a CPU-only artefact, not counted either.

    The rule needs Python frames (``with_stack=True``, as the workbook records). Without any on the op's
    thread, the op's enclosing ``Optimizer.step#<name>.step`` range is used instead, for the optimizers
    whose step reads nothing else with ``.item()`` (Adam, AdamW, Adamax, NAdam, RAdam, Adagrad); a custom
    optimizer's reads still count, since they may be reads of GPU tensors.
    """
    out = np.zeros(len(rows), dtype=bool)
    if not len(rows):
        return out
    names = events["name"]
    scalar = (names.to_numpy()[rows] == "aten::_local_scalar_dense")
    if not scalar.any():
        return out
    kind = events["kind"].to_numpy()
    python = kind == "python"
    frame_names = [n for n in names[python].unique() if OPTIMIZER_GET_VALUE.search(str(n))] if python.any() else []
    range_names = [n for n in names[kind == "range"].unique() if CPU_SCALAR_OPTIMIZERS.match(str(n))]
    fused_names = [n for n in names[kind == "cpu_op"].unique() if FUSED_OPTIMIZER_OPS.match(str(n))]
    tids, pids = events["tid"].to_numpy(), events["pid"].to_numpy()
    starts, ends = events["start_ns"].to_numpy(), events["end_ns"].to_numpy()
    frames_on = set(zip(pids[python], tids[python])) if python.any() else set()
    rules = ((frame_names, python, True), (fused_names, kind == "cpu_op", True), (range_names, kind == "range", False))
    for holders_names, of_kind, always in rules:
        if not holders_names:
            continue
        holders = np.flatnonzero(names.isin(holders_names).to_numpy() & of_kind)
        if of_kind is python:
            holders = holders[_called_by_optimizer(events, holders, python)]
        for key, members in pd.Series(holders).groupby([pids[holders], tids[holders]]).indices.items():
            if not always and key in frames_on:
                continue  # this thread has Python frames: the precise rule above decides
            pool = holders[members]
            candidates = np.flatnonzero(scalar & (pids[rows] == key[0]) & (tids[rows] == key[1]))
            if not len(candidates):
                continue
            t = starts[rows[candidates]]
            # holders of one kind on one thread do not overlap: the innermost starting before t must hold it
            idx = np.searchsorted(starts[pool], t, side="right") - 1
            held = (idx >= 0) & (t < ends[pool][np.maximum(idx, 0)])
            out[candidates[held]] = True
    return out


def _outside_runtime(events: pd.DataFrame, rows: np.ndarray, api: np.ndarray) -> np.ndarray:
    """The driver calls among rows that no runtime (cuda*) call on the same thread holds."""
    runtime = api & events["name"].astype(str).str.startswith("cuda").to_numpy()
    keep = []
    tids, starts, ends = (events[c].to_numpy() for c in ("tid", "start_ns", "end_ns"))
    for row in rows:
        pool = np.flatnonzero(runtime & (tids == tids[row]))
        if innermost(np.array([starts[row]]), starts[pool], ends[pool])[0] < 0:
            keep.append(row)
    return np.array(keep, dtype=np.int64)


def in_fetch(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """For sync rows, whether the harness's ``data`` range on the same thread holds it: the read was made while
    ``session.steps()`` fetched the next batch, by the DataLoader, its sampler or the dataset (a DataLoader
    without persistent workers starts a new iterator each epoch, and draws its seed with ``.item()``), not by a
    line of the loop's body, though the line its Python frames lead to is the loop's ``for``."""
    out = np.zeros(len(rows), dtype=bool)
    kind, names = events["kind"].to_numpy(), events["name"].to_numpy()
    ranges = np.flatnonzero((kind == "range") & (names == FETCH_RANGE))
    if not len(ranges) or not len(rows):
        return out
    starts, ends, tids = (events[c].to_numpy() for c in ("start_ns", "end_ns", "tid"))
    for tid in np.unique(tids[rows]):
        pool = ranges[tids[ranges] == tid]
        pool = pool[np.lexsort((-ends[pool], starts[pool]))]  # by start, longer first: as innermost() wants
        mine = np.flatnonzero(tids[rows] == tid)
        out[mine] = innermost(starts[rows[mine]], starts[pool], ends[pool]) >= 0
    return out


def host_syncs(events: pd.DataFrame, in_steps: bool, exclude_steps=()) -> pd.DataFrame:
    """One row per host sync: step, name, start_ns, dur_ns, tid, op (the aten op around it), where, in_fetch
    (made while the harness fetched the step's batch: see in_fetch()).

    With in_steps, only syncs inside a (not excluded) step; else every sync in the trace.
    """
    rows = sync_rows(events)
    if in_steps:
        rows = rows_in_steps(events, rows, exclude_steps)
    if not len(rows):
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in SYNC_COLUMNS.items()})
    return _sync_frame(events, rows, events["step"].to_numpy()[rows]).astype(SYNC_COLUMNS)


def syncs_per_step(syncs: pd.DataFrame, steps: pd.DataFrame, exclude_steps=()) -> pd.DataFrame:
    """One row per step (steps without syncs too): step, host_syncs, sync_ns."""
    numbers = [int(s) for s in steps["step"] if int(s) not in {int(x) for x in exclude_steps}]
    counts = syncs.groupby("step").agg(host_syncs=("name", "size"), sync_ns=("dur_ns", "sum"))
    counts.index = counts.index.astype("int64")
    out = counts.reindex(numbers, fill_value=0).rename_axis("step").reset_index()
    return out.astype({"step": "int64", "host_syncs": "int64", "sync_ns": "int64"})


def sync_sources(syncs: pd.DataFrame) -> pd.DataFrame:
    """Syncs grouped by what made them: name, op, where, in_fetch, count, sync_ns; most frequent first."""
    if syncs.empty:
        return pd.DataFrame({"name": pd.Series(dtype=object), "op": pd.Series(dtype=object),
                             "where": pd.Series(dtype=object), "in_fetch": pd.Series(dtype=bool),
                             "count": pd.Series(dtype="int64"), "sync_ns": pd.Series(dtype="int64")})
    grouped = (syncs.groupby(["name", "op", "where", "in_fetch"], dropna=False, sort=False)
               .agg(count=("step", "size"), sync_ns=("dur_ns", "sum")).reset_index())
    grouped = grouped.sort_values(["count", "sync_ns"], ascending=False, kind="stable").reset_index(drop=True)
    for column in ("op", "where"):
        grouped[column] = grouped[column].astype(object).where(grouped[column].notna(), None)
    return grouped.astype({"count": "int64", "sync_ns": "int64", "in_fetch": bool})


WINDOW_SYNC_COLUMNS = dict(SYNC_COLUMNS, between="bool", optimizer_read="bool")  # SYNC_COLUMNS has in_fetch


def _sync_frame(events: pd.DataFrame, rows: np.ndarray, step, **more) -> pd.DataFrame:
    """One row per sync at ``rows`` of ``events``, in step ``step``: the columns every sync table shares, and ``more``."""
    sub = events.iloc[rows]
    return pd.DataFrame({
        "step": step,
        "name": [shown_name(n) for n in sub["name"].astype(str)],
        "start_ns": sub["start_ns"].to_numpy(),
        "dur_ns": (sub["end_ns"] - sub["start_ns"]).to_numpy(),
        "tid": sub["tid"].to_numpy(),
        "op": op_of(events, rows),
        "where": where_of(events, rows),
        "in_fetch": in_fetch(events, rows),
        **more,
    })


def window_syncs(events: pd.DataFrame, steps: pd.DataFrame, exclude_steps=()) -> pd.DataFrame:
    """Every host sync from the first step's start to the last step's end, the gaps between step ranges included.

    The step ranges are the harness's, pushed in the run's own process: a script can end one early or open the next
    late, so a sync made between two ranges is still a sync of the window. Such a sync gets the step whose range
    ended last before it, and ``between`` True. Only syncs inside an excluded step's range (a logging step) are
    left out. ``optimizer_read``: a CPU trace's read that ``cpu_resident_reads`` says torch.optim's own code makes
    of a CPU scalar; those are returned too (not left out), for a check to excuse by count, never wholesale.
    """
    if steps.empty:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in WINDOW_SYNC_COLUMNS.items()})
    if has_cuda_calls(events):
        rows = sync_rows(events)
        resident = np.zeros(len(rows), dtype=bool)
    else:
        rows = cpu_sync_op_rows(events)
        resident = cpu_resident_reads(events, rows)
        reads = python_reads(events)
        rows, resident = np.concatenate([rows, reads]), np.concatenate([resident, np.zeros(len(reads), dtype=bool)])
        order = np.argsort(rows, kind="stable")
        rows, resident = rows[order], resident[order]
    starts = events["start_ns"].to_numpy()
    lo, hi = int(steps["start_ns"].min()), int(steps["end_ns"].max())
    inside = (starts[rows] >= lo) & (starts[rows] <= hi)
    rows, resident = rows[inside], resident[inside]
    step = events["step"].to_numpy(dtype=np.int64, na_value=-1)[rows]
    between = step < 0
    if between.any():
        step[between] = step_ended_before(steps, starts[rows][between])
    keep = ~(np.isin(step, [int(s) for s in exclude_steps]) & ~between) if exclude_steps else np.ones(len(rows), bool)
    rows, resident, step, between = rows[keep], resident[keep], step[keep], between[keep]
    if not len(rows):
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in WINDOW_SYNC_COLUMNS.items()})
    frame = _sync_frame(events, rows, step, between=between, optimizer_read=resident)
    return frame.astype(WINDOW_SYNC_COLUMNS)
