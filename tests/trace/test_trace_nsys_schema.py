"""nsys exports are read through their own enum tables, whatever numbers a version gives the enums.

The database here is small and hand-made, with the table and enum shapes of a real export (Nsight
Systems 2025.3) but with the enum ids shuffled: a reader that hard-coded copyKind 1 = HtoD or srcKind 0 =
pageable would get it wrong. The exact-count tests on real exports are in test_trace_recorded.py.
"""

from __future__ import annotations

import sqlite3

import pytest

from checker.trace import load

GLOBAL_TID = (1 << 48) | (4242 << 24) | 4242  # nsys packs (host, pid, tid) into one number
GLOBAL_PID = (1 << 48) | (4242 << 24)


def build(path, memcpy_ids: dict, mem_ids: dict, nvtx_ids: dict, registered_names: bool) -> None:
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
        CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
        CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
            eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
            returnValue INTEGER NOT NULL, callchainId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER,
            globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER,
            globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, srcKind INTEGER, dstKind INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
            rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
            textId INTEGER, domainId INTEGER);
    """)
    strings = {1: "cudaMemcpyAsync_v3020", 2: "cudaStreamSynchronize_v3020", 3: "cudaLaunchKernel_v7000",
               4: "void add_kernel<float>(float*)", 5: "add_kernel", 6: "step 0", 7: "step 1"}
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", strings.items())
    db.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)",
                   [(i, f"CUDA_MEMCPY_KIND_{k}", k) for k, i in memcpy_ids.items()])
    db.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)",
                   [(i, f"CUDA_MEMOPR_MEMORY_KIND_{k}", k.title()) for k, i in mem_ids.items()])
    db.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)", [(i, k, k) for k, i in nvtx_ids.items()])
    corr = 100
    for step in range(2):
        t0 = 1_000_000 * (step + 1)
        text, text_id = (None, 6 + step) if registered_names else (f"step {step}", None)
        db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES (?, ?, ?, ?, ?, ?)",
                   (t0, t0 + 900_000, nvtx_ids["NvtxPushPopRange"], text, GLOBAL_TID, text_id))
        calls = [(t0 + 10_000, t0 + 60_000, 1), (t0 + 60_000, t0 + 200_000, 2), (t0 + 300_000, t0 + 305_000, 3)]
        for start, end, name in calls:
            corr += 1
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0, NULL)",
                       (start, end, GLOBAL_TID, corr, name))
            if name == 1:
                db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 1, 7, ?, ?, 4096, ?, ?, ?)",
                           (start + 20_000, start + 50_000, corr, GLOBAL_PID, memcpy_ids["HTOD"],
                            mem_ids["PAGEABLE"], mem_ids["DEVICE"]))
            if name == 3:
                db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, ?, 4, 5)",
                           (start + 10_000, start + 400_000, corr, GLOBAL_PID))
    db.commit()
    db.close()


STANDARD = ({"HTOD": 1, "DTOH": 2, "DTOD": 8}, {"PAGEABLE": 0, "PINNED": 1, "DEVICE": 2},
            {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60})
SHUFFLED = ({"HTOD": 8, "DTOH": 1, "DTOD": 2}, {"PAGEABLE": 2, "PINNED": 0, "DEVICE": 1},
            {"NvtxPushPopRange": 60, "NvtxStartEndRange": 59})


@pytest.mark.parametrize("ids", [STANDARD, SHUFFLED], ids=["standard-ids", "shuffled-ids"])
@pytest.mark.parametrize("registered", [False, True], ids=["nvtx-text", "nvtx-registered-string"])
def test_enums_are_joined_not_hard_coded(tmp_path, ids, registered):
    path = tmp_path / "export.sqlite"
    build(path, *ids, registered_names=registered)
    trace = load(path)
    assert trace.format == "nsys"
    assert trace.get_steps()["name"].tolist() == ["step 0", "step 1"]
    syncs = trace.get_host_syncs()
    assert syncs["name"].tolist() == ["cudaStreamSynchronize"] * 2  # version suffix stripped
    assert syncs["step"].tolist() == [0, 1]
    copies = trace.get_copies()
    assert copies["name"].tolist() == ["Memcpy HtoD (Pageable -> Device)"] * 2
    assert copies[["copy_kind", "src_kind", "dst_kind"]].drop_duplicates().values.tolist() == [["HtoD", "pageable", "device"]]
    assert copies["step"].tolist() == [0, 1]
    events = trace.events
    assert set(events.loc[events["kind"] == "cuda_api", "name"].astype(str)) == {
        "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaLaunchKernel"}
    assert events.loc[events["kind"] == "kernel", "pid"].unique().tolist() == [4242]
    assert events.loc[events["kind"] == "cuda_api", "tid"].unique().tolist() == [4242]
    summary = trace.summary()
    assert summary["pageable_h2d_copies"] == 2 and summary["pageable_h2d_bytes"] == 8192
    assert summary["kernels_per_step"] == 1.0 and summary["launches_per_step"] == 1.0
