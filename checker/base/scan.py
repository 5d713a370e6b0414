"""A look at a candidate's source before it runs: scripts that inspect how they are measured are refused.

A lab trains a model; it never needs to ask whether a profiler is recording or switch it off, make up profiler
events, fork, replace PyTorch's own operators, walk the interpreter's frames up into the harness, reach into the
harness's internals (by attribute, by a string naming one, or by listing the session's attributes), read the
process's own memory map or environment for Nsight's injection libraries, or run
code it builds at run time. Each of those is how a script would behave
one way when observed and another way when not, so the grader refuses such a script (exit 2) and names the
line. This is a flag, not a proof: code can hide what it does from any scan. The verdict's real defences are
elsewhere (the grader's clock, the secrets, the referee; see docs/trust.md); where they cannot see, on
a CPU, where no speed is graded, the graded run is the traced run itself.

``WORKBOOK_SCAN=0`` turns the scan off (the red-team tests use it to show the other defences hold alone).
"""

from __future__ import annotations

import ast
import importlib.util
import io
import os
import re
import tokenize
from pathlib import Path

from checker.base.errors import WorkbookError

# attribute names: the profiler's state, the interpreter's frames and objects, the harness's insides
PROBE_ATTRIBUTES = {
    "_is_profiler_enabled": "asks whether torch.profiler is recording",
    "_profiler_enabled": "asks whether torch.profiler is recording",
    "_getframe": "walks the interpreter's frames",
    "currentframe": "walks the interpreter's frames",
    "getouterframes": "walks the interpreter's frames",
    "get_objects": "searches the interpreter's objects",
    "get_referrers": "searches the interpreter's objects",
    "LAUNCH": "reads how the harness was launched",
    "_CURRENT": "reaches into the harness",
    "_channel": "reaches into the harness's channel to the grader",
    "_send": "reaches into the harness's channel to the grader",
    "_open_window": "reaches into the harness's timed window",
    "_close_window": "reaches into the harness's timed window",
    # where the window ends and the traced tail begins is the harness's alone (checker.candidate.session)
    **{name: "reads where the harness's timed window ends" for name in (
        "_window_open", "_window_end", "_window_s", "_window_measured", "_window_samples", "_window_stamps_ns",
        "_window_sample_ids", "_window_sample_counts", "_window_closed", "_window_tensors", "_window_thread",
        "_tail_open", "_tail_steps", "_open_tail", "_close_tail")},
    "_enable_record_function": "switches PyTorch's op recording off",
    "_set_record_function_enabled": "switches PyTorch's op recording off",
    "_toggle_collection_dynamic": "pauses the profiler's collection",
    # a method called from C (operator.methodcaller) makes no call the Python tracer names: a read with no trace
    "methodcaller": "calls a method from C, where the Python tracer does not see the call",
    "redispatch": "runs an operator below the profiler's hook, which records no op for it",
    "redispatch_boxed": "runs an operator below the profiler's hook, which records no op for it",
    # one dispatch key's kernel called directly (an overload's _op_dk): no op is recorded (red team 36's below_hook_04)
    "_op_dk": "runs an operator below the profiler's hook, which records no op for it",
    "DispatchKey": "runs an operator below the profiler's hook, which records no op for it",
    "DispatchKeySet": "runs an operator below the profiler's hook, which records no op for it",
    "_RecordFunctionFast": "makes up profiler events",
    "setprofile": "switches the Python profiler off",
    "settrace": "switches the Python tracer off",
    # whether torch.profiler's Python tracer is on (its TraceContext while a trace records: red team 67)
    "getprofile": "asks whether the Python profiler is on", "gettrace": "asks whether the Python tracer is on",
    "f_trace": "switches the Python tracer off for a frame",
    "gi_frame": "reaches a generator's frame", "cr_frame": "reaches a coroutine's frame",
    "ag_frame": "reaches an async generator's frame",
    "fork": "forks the process, out of the profiler's sight",
    # a function's code object names the file and function a trace's Python frames show
    **{name: "rewrites where its code says it comes from" for name in (
        "__code__", "co_filename", "co_name", "co_qualname", "co_firstlineno", "CodeType")},
    # a watched function's own (the harness wraps some of torch's makers and exports): the original runs unwatched
    **{name: "reaches past a wrapper to the function it wraps" for name in (
        "__wrapped__", "__closure__", "cell_contents", "__kwdefaults__", "__defaults__")},
    "forkpty": "forks the process, out of the profiler's sight",
    # a pipe or device node where the harness writes a file hands its reader other bytes (a trace, a report)
    "mkfifo": "makes a named pipe", "mknod": "makes a named pipe or device node",
    # raw memory: a tensor's address read and dereferenced (ctypes by another road) makes no op or call a trace names
    "ctypeslib": "calls native code directly (ctypes, through numpy)",
    "_cdata": "reads a tensor's or storage's C address",
    "_workbook_loader": "reaches into the harness's count of which loader made the batches",
    # a batch's seed is the key and its number: who reads them predicts the next batches (checker.base.workloads)
    **{name: "reaches into the batch source's draws" for name in (
        "_draw_key", "_draws", "_draw_seed", "_keyed", "_HARNESS_FETCHING")},
    # a tensor's count of in-place writes tells the harness which tensors had values copied into them
    "_unsafe_set_version_counter": "resets a tensor's count of in-place writes",
    # chapter 00's warm-up steps are handed longer batches, a CPU's stand-in for a GPU's one-time costs; the step the
    # harness is at is its own (a source wrapped to move it would hand the warm-up the timed steps' batches)
    **{name: "changes the warm-up steps' batches, the stand-in for a GPU's first steps' costs" for name in (
        "_cold_pool", "_cold_steps", "_WINDOW_STEP", "_WINDOW_LOG_EVERY")},
    # a step run inside one operator's dispatch leaves one op where the step's are: the counts cannot see it
    # weights in shared memory are trained by whichever process holds them: a loader worker, out of the trace's sight
    **{name: "puts tensors in shared memory, where another process can train them out of the trace's sight" for name in (
        "share_memory", "share_memory_", "_share_cuda_", "_share_fd_cpu_", "_share_filename_cpu_")},
    # a storage rebuilt from another process's shared memory by its handle (a file name or descriptor a loader worker
    # sends as plain data) is memory shared with that worker, past the harness's copy of each fetched batch (red team
    # 56's mailbox_07 and roundtrip_07 relayed values and samples through a batch's own shared tensors)
    **{name: "maps another process's shared memory, where a worker reads what a step writes" for name in (
        "_new_shared_fd_cpu", "_new_shared_filename_cpu", "_new_using_fd_cpu", "_new_using_filename_cpu",
        "_new_shared_cuda", "rebuild_storage_fd", "rebuild_storage_filename", "rebuild_tensor")},
    "_make_wrapper_subclass": "makes a tensor whose operators run Python, where a trace's counts cannot see it",
    # autograd's saved-tensor hooks run inside the dispatch of whichever op saves a tensor for backward: code run
    # there (a backward pass, an optimizer's step, forward work) nests under that one op
    **{name: "runs code inside an operator's dispatch (autograd's saved-tensor hooks), where a trace's counts cannot "
             "see it" for name in ("saved_tensors_hooks", "_push_saved_tensors_default_hooks", "register_hooks",
                                   "save_on_cpu", "pack_hook", "unpack_hook")},
    "_ForceDispatchKeyGuard": "runs operators under another dispatch state, inside an operator",
    # Inductor's code cache builds and loads whatever C++ it is given, into torch.compile's store of kernels (red team
    # 49's cache_cext_04): torch.compile reaches it for a script, which never needs it by name (Inductor's config is
    # another matter: a learner may set it)
    **{name: "reaches Inductor's code cache (it builds any C++ it is given)" for name in (
        "codecache", "CppPythonBindingsCodeCache", "CppCodeCache", "PyCodeCache", "cpp_pybinding", "cpp_builder",
        "CppBuilder", "async_compile", "AsyncCompile", "cxx")},
}
DYNAMIC_CODE = {"exec": "runs code built at run time", "eval": "runs code built at run time",
                "compile": "compiles code at run time", "__import__": "imports modules by computed names"}
PROBE_STRINGS = {
    "nsys": "looks for Nsight Systems", "NSYS": "looks for Nsight Systems", "Nsight": "looks for Nsight tools",
    "INJECTION": "looks for a profiler's injection library", "ToolsInjection": "looks for a profiler's injection library",
    "LD_PRELOAD": "looks for preloaded (profiler) libraries",
    "/proc/": "reads a process's memory, memory map or status (its own by any name: /proc/self, /proc/<pid>)",
    "checker.candidate": "reaches into the harness", "workbook-": "looks for the grader's folders",
    # TorchScript's tolist as an operator, named in a string in any form ("aten::_tensor_to_list")
    "_tensor_to_list": "reads a tensor's values through an operator of TorchScript's registry, which no trace records",
}
PROBE_MODULES = {"checker.candidate": "imports the harness's internals", "inspect": "inspects the interpreter's frames",
                 "gc": "searches the interpreter's objects", "ctypes": "calls native code directly",
                 "_ctypes": "calls native code directly", "cffi": "calls native code directly",
                 "numpy.ctypeslib": "calls native code directly",
                 "operator.methodcaller": "calls a method from C, where the Python tracer does not see the call",
                 "importlib": "imports modules by computed names",
                 **{module: "reaches Inductor's code cache (it builds any C++ it is given)" for module in (
                     "torch._inductor.codecache", "torch._inductor.cpp_builder", "torch._inductor.async_compile")}}


# In a chapter that counts host reads (host_syncs): a tensor over memory a Python object shares (a bytearray, a
# numpy array, a DLPack capsule) lets a value copied into it be read by indexing that object, with no op or call any
# trace records on a CPU (on a GPU the copy is a device-to-host copy and a sync, which the trace shows). Building
# such a tensor, or a raw view of memory, has no place in these labs.
ALIASING = {name: "makes a tensor share memory with a Python object, whose values are then read with no op a CPU "
                  "trace records" for name in (
                "frombuffer", "from_numpy", "from_dlpack", "to_dlpack", "__dlpack__", "asarray",
                "__array__", "__array_interface__", "__array_struct__", "__cuda_array_interface__", "from_file")}
ALIASING["memoryview"] = "reads raw memory through a memoryview, which no trace records"
# a storage built over any address (a Python buffer's, by array.array's buffer_info): a value copied in by the
# storage's own copy_ is read back from the buffer with no op (red team 38's arraybox_01)
ALIASING.update({name: "builds a storage over a Python object's memory, whose values are then read with no op a CPU "
                       "trace records" for name in ("_construct_storage_from_data_pointer", "buffer_info")})
# a tensor's address, dereferenced through ctypes by any road to it (torch.ctypes, numpy's), reads its values with no
# op or call a CPU trace names
ALIASING.update({name: "reads raw memory through a tensor's address, which no trace records" for name in (
    "ctypes", "data_ptr", "from_address", "string_at", "memmove", "addressof")})
# native code of the script's own, built or loaded at run time (a C extension, a library for ctypes), reads a tensor's
# memory on a CPU where no trace looks (red team 25); the harness also reports every shared object a run maps from
# where it writes (checker.candidate.session.native_code_of_its_own)
ALIASING.update({name: "builds or loads native code of its own, which reads values where no trace looks" for name in (
    "cpp_extension", "load_inline", "CDLL", "PyDLL", "cdll", "pydll", "LoadLibrary", "dlopen")})
# a sparse tensor's count of stored entries is computed from its inputs' values (a product of two CSR matrices, a
# coalesce) and reaches Python as a size (`_nnz()`, its values' length) with no op that reads a value (red teams 9, 17
# and 29); no lab holds a sparse tensor
ALIASING.update({name: "makes or reads a sparse tensor, whose count of stored entries hands values to Python as a "
                       "size" for name in (
    "sparse", "sparse_coo_tensor", "sparse_csr_tensor", "sparse_csc_tensor", "sparse_bsr_tensor", "sparse_bsc_tensor",
    "sparse_compressed_tensor", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "to_sparse",
    "to_sparse_coo", "to_sparse_csr", "to_sparse_csc", "to_sparse_bsr", "to_sparse_bsc", "_to_sparse", "sparse_mask",
    "_nnz", "crow_indices", "col_indices", "ccol_indices", "row_indices", "coalesce", "_coalesce")})
# a nested tensor's sizes are a tensor's values, read in C++ and handed to Python by `.size(d)` (red team 33); no lab
# holds a nested tensor
ALIASING.update({name: "makes a nested tensor, whose sizes hand a tensor's values to Python" for name in (
    "nested", "nested_tensor", "as_nested_tensor", "to_padded_tensor", "nested_to_padded_tensor", "is_nested",
    "_nested_view_from_buffer", "_nested_view_from_buffer_copy", "_nested_tensor_from_tensor_list",
    "_nested_tensor_from_mask", "_nested_from_padded", "_nested_view_from_jagged", "jagged")})
# torch's C serializers write a tensor's bytes into a buffer the script can read: a read of every value, no op
SERIALIZERS = {name: "writes a tensor's bytes through torch's C serializer, a read of its values no op records"
               for name in ("PyTorchFileWriter", "write_record", "_pickle_save", "_save_jit_module_to_bytes",
                            "_save_mobile_module_to_bytes", "save_to_buffer", "_save_to_buffer_for_mobile",
                            "_save_parameters", "_gds_save_storage")}
# a generator's state set from a tensor's bytes and read back (its seed) carries those bytes to Python with no op
SERIALIZERS.update({name: "sets a random generator's state from a tensor and reads it back, a read of its values no "
                          "op records" for name in ("set_state", "initial_seed", "set_rng_state", "get_state",
                                                    "graphsafe_set_state", "graphsafe_get_state", "clone_state")})
# a thread started in the window runs where the Python tracer does not follow it, so a read made there by a call that
# dispatches no op (Tensor.apply_) leaves no trace (red team 39's threadapply_06); TensorBase reaches a tensor's methods
# past the ones the harness watches
SERIALIZERS.update({name: "starts a thread, where the Python tracer does not follow and a read leaves no trace"
                    for name in ("threading", "_thread", "Thread", "start_new_thread", "ThreadPool",
                                 "ThreadPoolExecutor", "to_thread", "run_in_executor")})
# a process of the script's own (a pool's, a Process's, a fork's) reads what the training process writes into memory
# they share, and hands back plain numbers, where no trace follows (red team 51's relay_pool_01, relay_pipe_01)
SERIALIZERS.update({name: "starts a process of its own, where no trace follows and a value written to memory it shares "
                          "is read with no op recorded" for name in (
                              "ProcessPoolExecutor", "Process", "Pool", "fork", "forkpty", "Manager", "Pipe",
                              "get_context", "start_processes", "spawn", "SharedMemory", "shared_memory")})
# ...as does a class's base or method resolution order (torch.Tensor.__base__ is TensorBase, whose numpy makes a view
# the harness does not hold: red team 63's mailbox_base_01, _06, _07)
SERIALIZERS.update({name: "reaches a tensor's methods past the ones the harness watches" for name in (
    "TensorBase", "_TensorBase", "__base__", "__bases__", "__mro__", "mro", "getmro", "__subclasses__")})
# TorchScript's interpreter reads a tensor's values in C++ (prim::tolist), with no op a CPU trace records and no frame
# the tracer names (red team 37's jitlist_07); torch.ops.prim reaches its ops
SERIALIZERS.update({name: "runs TorchScript, whose interpreter reads a tensor's values with no op a trace records"
                    for name in ("jit", "CompilationUnit", "ScriptFunction", "ScriptModule", "parse_ir", "prim",
                                 "_jit_script_compile", "_create_function_from_graph", "_create_function_from_trace",
                                 "import_ir_module", "import_ir_module_from_buffer", "_load_jit_module_from_bytes")})
# TorchScript's tolist is an aten operator of the JIT's registry too (aten::_tensor_to_list, under torch.ops.aten): it
# reads a tensor's values in C++ with no op of its own a trace records, only a select per element (red team 60's
# opslist_01, _06, _07, _09); the registry's own lookups reach any of its operators by a name in a string
SERIALIZERS.update({name: "reads a tensor's values through an operator of TorchScript's registry, which no trace records"
                    for name in ("_tensor_to_list", "_jit_get_operation", "_get_operation_overload",
                                 "_get_operation_for_overload_or_packet", "_jit_get_all_schemas", "_get_schema")})
# the pickling protocol reaches the same state (a generator's __setstate__ and __reduce__: red team 37's genpickle_07),
# and pickling carries any object's state to bytes: a training step pickles nothing
SERIALIZERS.update({name: "reaches an object's state through the pickling protocol, which carries a tensor's bytes "
                          "to Python with no op that reads them" for name in (
                              "__setstate__", "__getstate__", "__reduce__", "__reduce_ex__", "pickle", "_pickle",
                              "cPickle", "copyreg", "Pickler", "Unpickler", "marshal")})
# the process's own accounting (page faults, context switches) can be steered by a tensor's values and read back, a
# read no op records (red team 43's faultbits_01: one page written of two, chosen by a bit of the loss)
SERIALIZERS.update({name: "reads the process's own accounting, which a tensor's values can steer, a read no op "
                          "records" for name in ("resource", "getrusage", "RUSAGE_SELF", "RUSAGE_THREAD", "wait3",
                                                 "wait4", "minflt", "majflt", "ru_minflt", "ru_majflt")})
# an op's warning on some values is a bit of them: the harness counts warnings shown in a step through the standard
# display (checker.candidate.session), so a display of the script's own, the registry of warnings already shown and
# the filters' reset that clears it have no place in a lab (red team 55's warnbits_01)
SERIALIZERS.update({name: "reaches Python's warning machinery, where an op's warning on some values reads them with "
                          "no op a trace records" for name in (
                              "_showwarnmsg", "_showwarnmsg_impl", "__warningregistry__", "_filters_mutated",
                              "_warnings", "_onceregistry", "onceregistry")})
# In a chapter that counts what a job's ranks exchange (allreduce_rounds reads torch.distributed's collectives and the
# backend's runs of them): another road between the ranks carries a step's exchange where no count looks (red team 68's
# rpc_rounds_09 averaged every micro-batch's gradients through torch.distributed.rpc, one all-reduce left in sight). A
# lab's ranks talk through DDP and torch.distributed's collectives only (red team 69 linked them with
# multiprocessing.connection: caught only because its pickling read the gradients).
RANK_CHANNELS = {name: "talks between the ranks by a road other than torch.distributed's collectives, which the count "
                       "of a step's exchanges does not read" for name in (
                           "rpc", "init_rpc", "rpc_async", "rpc_sync", "remote", "RRef", "TensorPipeRpcBackendOptions",
                           "socket", "socketpair", "create_connection", "create_server", "TCPStore", "FileStore",
                           "HashStore", "PrefixStore", "Store", "store", "Listener", "Client", "connection")}
# In a chapter that counts a step's ops on a CPU (passes over memory, launches): arithmetic done in numpy runs no op
# the count can see, so the fix the chapter teaches (fewer, fused passes) is bought by moving passes out of PyTorch
OUTSIDE_TORCH = "computes outside PyTorch (numpy), where the chapter's count of a step's ops cannot see the work"
ARRAY_LIBRARIES = frozenset({"pandas", "scipy", "numba", "numexpr", "jax", "cupy", "dask", "xarray", "polars",
                             "pyarrow", "sklearn", "cython", "Cython"})
NUMPY_ROADS = frozenset({"np", "from_dlpack", "to_dlpack", "__dlpack__", "_to_dlpack", "_from_dlpack"})
# An operator's error message can carry a tensor's value (an out-of-bounds index names the index): caught and read,
# it is a read of that value that no op or copy records. A lab's step has no error to catch and read.
CAUGHT_ERROR = "reads a caught error's message or arguments, which can carry a tensor's value where no trace looks"
# whether an op raised at all is one bit of a value (an index past the bounds or not): catching the errors an
# operator raises is refused, whatever the handler then does
OPERATOR_ERRORS = {"IndexError", "RuntimeError", "ValueError", "TypeError", "LookupError", "ArithmeticError",
                   "Exception", "BaseException", "AcceleratorError", "OutOfMemoryError", "NotImplementedError",
                   # an op's warning turned into an error by a filter ("error")
                   "Warning", "UserWarning", "RuntimeWarning"}
CAUGHT_OPERATOR_ERROR = "catches the error an operator raises, whose raising alone tells a tensor's value where no trace looks"
ERROR_READERS = {"exc_info", "exception", "__traceback__", "__context__", "__cause__", "format_exc", "print_exc",
                 "format_exception", "TracebackException"}

# a name in a string reaches what the attribute would (getattr(session, "_window_stamps_ns"), vars(session)[...]):
# a string that names a private one of them (or is exactly one of the others) is the same probe
PRIVATE_NAME = re.compile(r"\b_?[A-Za-z_]\w*\b")
# a name computed at run time ("ctyp" + "es") hides what it reaches from every rule above: an attribute picked by a
# computed name, a module looked up in sys.modules, an object's namespace read as a dict (red team 26 reached ctypes
# and dlclose so). A lab names what it uses.
COMPUTED_NAMES = {"getattr": "picks an attribute by a name computed at run time",
                  "setattr": "sets an attribute by a name computed at run time",
                  "hasattr": "looks for an attribute by a name computed at run time",
                  "delattr": "deletes an attribute by a name computed at run time"}
NAMESPACES = {"__dict__": "reads an object's namespace as a dict, where names are computed at run time",
              "vars": "reads an object's namespace as a dict, where names are computed at run time",
              "globals": "reads the module's namespace as a dict, where names are computed at run time",
              "__builtins__": "reaches the builtins by a computed name",
              "__getattribute__": "picks an attribute by a name computed at run time",
              "attrgetter": "picks an attribute by a name computed at run time",
              # string.Formatter's field lookup walks a dotted name in a string ("0._enable_record_function")
              "get_field": "picks an attribute by a name computed at run time (string.Formatter)",
              "modules": "looks up a loaded module by name (sys.modules)",
              # an object reached from a dotted name in a string ("torch.UntypedStorage.from_file": red team 34)
              "locate": "resolves an object from a dotted name at run time (pydoc.locate)",
              "resolve_name": "resolves an object from a dotted name at run time (pkgutil.resolve_name)",
              "import_module": "imports a module by a name computed at run time"}
# In a chapter that counts host reads or a step's ops: another program started from the script (a compiler building
# native code that then reads values or runs a step's ops where no trace looks; red teams 25 and 26 ran gcc, red team
# 49 g++ into torch.compile's store)
PROGRAMS = {name: "starts another program (a compiler, a shell), which a lab that counts host reads or ops never needs"
            for name in ("subprocess", "system", "popen", "posix_spawn", "posix_spawnp", "spawnv", "spawnve",
                         "spawnl", "spawnle", "spawnlp", "spawnvp", "execv", "execve", "execvp", "execl", "execlp")}
# reflection over the session object itself: every attribute at once, or one picked by a computed name
REFLECTION = {"vars": "lists the harness's attributes", "dir": "lists the harness's attributes",
              "getattr": "reads a harness attribute by a computed name",
              "setattr": "sets a harness attribute by a computed name",
              "hasattr": "looks for a harness attribute by a computed name"}


def _probe_in_string(text: str) -> str | None:
    """The PROBE_ATTRIBUTES name a string constant names, or None."""
    if text.strip() in PROBE_ATTRIBUTES:
        return text.strip()
    for word in PRIVATE_NAME.findall(text):
        if word in PROBE_ATTRIBUTES and (word.startswith("_") or word.isupper()):
            return word
    return None


def _session_names(tree: ast.AST) -> set[str]:
    """Names bound to the session: ``x = start(...)`` or ``current()``, and plain aliases of those."""
    names: set[str] = set()
    assigns = [node for node in ast.walk(tree) if isinstance(node, ast.Assign) and len(node.targets) == 1
               and isinstance(node.targets[0], ast.Name)]
    for _ in range(3):  # aliases of aliases
        for node in assigns:
            value = node.value
            called = value.func if isinstance(value, ast.Call) else None
            called_name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", None)
            if called_name in ("start", "current") or (isinstance(value, ast.Name) and value.id in names):
                names.add(node.targets[0].id)
    return names


def _reflects_on_session(node: ast.AST, session: set[str]) -> str | None:
    """What a node does when it reflects over the session object, or None."""
    if isinstance(node, ast.Attribute) and node.attr == "__dict__" and isinstance(node.value, ast.Name) \
            and node.value.id in session:
        return f"lists the harness's attributes ({node.value.id}.__dict__)"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REFLECTION and node.args \
            and isinstance(node.args[0], ast.Name) and node.args[0].id in session:
        computed = len(node.args) > 1 and not isinstance(node.args[1], ast.Constant)
        if node.func.id in ("vars", "dir") or computed:
            return f"{REFLECTION[node.func.id]} ({node.func.id}({node.args[0].id}, ...))"
    return None


# torch.library's calls that define or register an operator by its qualified name ("aten::add", "aten::my_step")
REGISTERS = frozenset({"define", "impl", "custom_op", "register_kernel", "register_fake", "register_autograd",
                       "register_torch_dispatch", "register_vmap", "triton_op", "impl_abstract"})


def _computed_name(node: ast.AST, called: set[int]) -> str | None:
    """What a node does when it reaches something by a name computed at run time, or None: getattr and its kin
    called with a name that is not a string written out, or passed along uncalled; an object's namespace read as a
    dict; sys.modules. A method named ``modules`` called (``model.modules()``) is the model's own."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in COMPUTED_NAMES:
        if len(node.args) < 2 or not (isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            return f"{COMPUTED_NAMES[node.func.id]} ({node.func.id}(..., {ast.unparse(node.args[1])[:30] if len(node.args) > 1 else ''}))"
    elif isinstance(node, ast.Name) and node.id in COMPUTED_NAMES and id(node) not in called:
        return f"{COMPUTED_NAMES[node.id]} ({node.id}, passed along)"
    elif isinstance(node, ast.Attribute) and node.attr in NAMESPACES \
            and not (node.attr == "modules" and id(node) in called):
        return f"{NAMESPACES[node.attr]} (.{node.attr})"
    elif isinstance(node, ast.Attribute) and node.attr in COMPUTED_NAMES:
        return f"{COMPUTED_NAMES[node.attr]} (.{node.attr})"
    elif isinstance(node, ast.Name) and node.id in NAMESPACES and node.id != "modules":
        return f"{NAMESPACES[node.id]} ({node.id})"
    elif isinstance(node, ast.alias) and node.name.rsplit(".", 1)[-1] in NAMESPACES | COMPUTED_NAMES \
            and node.name.rsplit(".", 1)[-1] != "modules":
        return f"{(NAMESPACES | COMPUTED_NAMES)[node.name.rsplit('.', 1)[-1]]} (import {node.name})"
    return None


def _replaces_aten(node: ast.AST) -> bool:
    """A call Library("aten", ...), or torch.library.define/impl/custom_op... of an "aten::" name: a script that
    defines operators in PyTorch's own namespace or registers kernels for its operators."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    first = node.args[0]
    # "aten", or a name built at run time ("at" + "en"), which only hides which operators it replaces
    if name == "Library":
        return not (isinstance(first, ast.Constant) and first.value != "aten")
    if name in REGISTERS:
        return not (isinstance(first, ast.Constant) and isinstance(first.value, str)
                    and not first.value.strip().startswith("aten"))
    return False


def findings(source: str, filename: str = "<script>", host_reads: bool = False, counts_ops: bool = False,
             counts_rounds: bool = False) -> list[str]:
    """'line N: what' for everything the scan refuses in ``source``; with ``host_reads`` (a chapter that counts
    host reads) also what makes a tensor share memory with a Python object (ALIASING), torch's C serializers, and
    catching an operator's error; with ``counts_ops`` (a chapter that counts a step's ops) numpy; with
    ``counts_rounds`` (a chapter that counts the ranks' exchanges) another road between the ranks (RANK_CHANNELS)."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError:
        return []  # the run reports syntax errors with their line and caret
    found: list[tuple[int, str]] = []
    texts = {id(node.value) for node in ast.walk(tree)  # docstrings and other bare strings say, they do not do
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    session = _session_names(tree)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if (what := _computed_name(node, called)) is not None:
            found.append((line, what))
        if (host_reads or counts_ops) and (name := _named(node)) in PROGRAMS and not isinstance(node, ast.Constant):
            found.append((line, f"{PROGRAMS[name]} ({name})"))
        if host_reads and (name := _aliasing(node)) is not None:
            found.append((line, f"{ALIASING[name]} ({name})"))
        if host_reads and (what := _reads_error(node)) is not None:
            found.append((line, f"{CAUGHT_ERROR} ({what})"))
        if host_reads and (what := _catches_operator_error(node)) is not None:
            found.append((line, f"{CAUGHT_OPERATOR_ERROR} ({what})"))
        if host_reads and (name := _named(node)) in SERIALIZERS:
            found.append((line, f"{SERIALIZERS[name]} ({name})"))
        # defining a pickling hook runs code of the script's where an object is unpickled: a DataLoader's batch, in
        # the training process's fetch (red team 37's unpickle_pyprep_07 finished the samples there)
        if host_reads and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in SERIALIZERS:
            found.append((line, f"{SERIALIZERS[node.name]} ({node.name})"))
        if counts_rounds and (name := _named(node)) in RANK_CHANNELS:
            found.append((line, f"{RANK_CHANNELS[name]} ({name})"))
        if counts_ops and (what := _uses_numpy(node)) is not None:
            found.append((line, f"{OUTSIDE_TORCH} ({what})"))
        if (reflection := _reflects_on_session(node, session)) is not None:
            found.append((line, reflection))
        if isinstance(node, ast.Attribute) and node.attr in PROBE_ATTRIBUTES:
            found.append((line, f"{PROBE_ATTRIBUTES[node.attr]} (.{node.attr})"))
        elif isinstance(node, ast.Name) and node.id in PROBE_ATTRIBUTES:
            found.append((line, f"{PROBE_ATTRIBUTES[node.id]} ({node.id})"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_CODE:
            found.append((line, f"{DYNAMIC_CODE[node.func.id]} ({node.func.id}(...))"))
        elif _replaces_aten(node):
            found.append((line, "replaces or adds to PyTorch's own operators (torch.library and the \"aten\" namespace)"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names]
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{n}" for n in names]
            for name in names:
                for module, what in PROBE_MODULES.items():
                    if name == module or name.startswith(module + "."):
                        found.append((line, f"{what} (import {name})"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in texts:
            if (name := _probe_in_string(node.value)) is not None:
                found.append((line, f"{PROBE_ATTRIBUTES[name]} ({node.value[:40]!r})"))
                continue
            for text, what in PROBE_STRINGS.items():
                if text in node.value:
                    found.append((line, f"{what} ({node.value[:40]!r})"))
                    break
    return [f"line {line}: {what}" for line, what in sorted(set(found))]


def _reads_error(node: ast.AST) -> str | None:
    """What a node does with a caught error: an ``except ... as name`` whose body uses the name, an error's
    attribute or a traceback helper (ERROR_READERS), or the traceback module imported; None otherwise."""
    if isinstance(node, ast.ExceptHandler) and node.name:
        if any(isinstance(inner, ast.Name) and inner.id == node.name for stmt in node.body for inner in ast.walk(stmt)):
            return f"except ... as {node.name}"
    elif isinstance(node, ast.Attribute) and node.attr in ERROR_READERS:
        return f".{node.attr}"
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [alias.name for alias in node.names] + [getattr(node, "module", None) or ""]
        if any(name == "traceback" or name.startswith("traceback.") for name in names):
            return "import traceback"
    return None


DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:[.:][A-Za-z_]\w*)+")


def _named(node: ast.AST) -> str | None:
    """The name an attribute, a name or an imported name uses, or a string that is exactly a name."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.alias):
        return node.name.rsplit(".", 1)[-1]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value.strip()
        # a dotted name ("torch.UntypedStorage.from_file", pkgutil's "torch:UntypedStorage.from_file") names its last part
        return re.split(r"[.:]", text)[-1] if DOTTED_NAME.fullmatch(text) else text
    return None


def _uses_numpy(node: ast.AST) -> str | None:
    """'import numpy', a tensor's .numpy() or from_numpy/__array__, or None."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [alias.name for alias in node.names] + [getattr(node, "module", None) or ""]
        if any(name == "numpy" or name.startswith("numpy.") for name in names):
            return "import numpy"
        # a library whose arrays are numpy's (pandas' `.values`: red team 32 reached the array type so)
        if (library := next((n for n in names if n.split(".")[0] in ARRAY_LIBRARIES), None)) is not None:
            return f"import {library}"
    elif (name := _named(node)) in ("numpy", "from_numpy", "__array__", "asarray") and not isinstance(node, ast.alias):
        return name
    # numpy by another name (a module that imports it: `from pandas.core.algorithms import np`), and a tensor handed
    # to it or taken back by DLPack (red team 28 ran chapter 05's chain in numpy inside an autograd Function so)
    elif name in NUMPY_ROADS:
        return name
    return None


def _catches_operator_error(node: ast.AST) -> str | None:
    """'except IndexError' (or a bare except, or a tuple holding one of OPERATOR_ERRORS), contextlib's
    'suppress(IndexError)' (red team 51's stdlib_raise_01), or None."""
    if isinstance(node, ast.Call) and _named(node.func) == "suppress":
        for kind in node.args:
            name = kind.attr if isinstance(kind, ast.Attribute) else getattr(kind, "id", None)
            if name in OPERATOR_ERRORS:
                return f"suppress({name})"
        return None
    if not isinstance(node, ast.ExceptHandler):
        return None
    if node.type is None:
        return "a bare except"
    caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
    for kind in caught:
        name = kind.attr if isinstance(kind, ast.Attribute) else getattr(kind, "id", None)
        if name is None or name in OPERATOR_ERRORS:
            return f"except {name or ast.unparse(kind)}"
    return None


def _aliasing(node: ast.AST) -> str | None:
    """The ALIASING name a node uses: an attribute, a name, an imported name, or a string naming exactly one."""
    name = _named(node)
    return name if name in ALIASING else None


# the checks that make a chapter's scan stricter: counting host reads, counting a step's ops, counting what the ranks
# of a job exchange
READS_CHECK = "host_syncs"
COUNTS_OPS = frozenset({"elementwise_kernels", "launches_per_step"})
ROUNDS_CHECK = "allreduce_rounds"


def scan_flags(check_names) -> dict[str, bool]:
    """What the scan looks for in a chapter with these checks: ``host_reads``, ``counts_ops`` and ``counts_rounds``
    (findings()'s)."""
    names = set(check_names)
    return {"host_reads": READS_CHECK in names, "counts_ops": bool(COUNTS_OPS & names),
            "counts_rounds": ROUNDS_CHECK in names}


def declared_encoding(data: bytes) -> str | None:
    """The source encoding a Python file declares (a coding cookie on its first two lines) where it is not UTF-8,
    else None. Python decodes the file with it; a grader that read the bytes as UTF-8 would read another program (red
    team 67's utf7rd_01: under "coding: utf-7", "+AAo-" is a newline, so a comment to a UTF-8 reader held statements)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as err:  # an unknown encoding, or one that disagrees with a byte-order mark
        return str(err).split(":")[-1].strip() or "unknown"
    return None if encoding in ("utf-8", "utf-8-sig") else encoding


def python_source(data: bytes) -> str:
    """The text Python compiles from a file's bytes: decoded with the encoding it declares (its coding cookie, else
    UTF-8), as the import system does (importlib.util.decode_source); undecodable bytes replaced."""
    try:
        return importlib.util.decode_source(data)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return data.decode("utf-8", errors="replace")


def refuse_probes(script: Path, shown: str, host_reads: bool = False, counts_ops: bool = False,
                  counts_rounds: bool = False) -> None:
    """Raise WorkbookError (exit 2) when the script inspects how it is measured, or, with ``host_reads``, reads
    values where no trace looks, or, with ``counts_ops``, computes in numpy (unless WORKBOOK_SCAN=0)."""
    if os.environ.get("WORKBOOK_SCAN") == "0":
        return
    try:
        data = script.read_bytes()
    except OSError as err:
        raise WorkbookError(f"{shown}: cannot be read ({err.strerror})") from None
    # (a declared encoding other than UTF-8 was refused before this, by checker.grader.precheck)
    found = findings(python_source(data), str(script), host_reads, counts_ops, counts_rounds)
    if found:
        raise WorkbookError(f"{shown} is refused: it inspects how it is measured or graded, or reads values where no "
                            f"trace looks, which a lab never needs to ({'; '.join(found[:3])}"
                            f"{'; ...' if len(found) > 3 else ''})")
