"""A loader worker cannot read what a training step writes into the batch it handed over (red team 56's mailbox_07).

A worker's batch arrives in shared memory. A worker that kept its own reference to a batch tensor would read what the
step writes into it and could hand the value back as a plain number in a later batch, a read no op of the training
process records. The harness gives every shared CPU tensor of a fetched batch memory of the training process's own
(checker.candidate.session._private_batch); here a worker reports, with each batch, the largest value it sees in the
tensors it kept.
"""

from __future__ import annotations

import time

import pytest
import torch
from torch.utils.data import DataLoader

from checker.candidate.session import _private_batch

MARK = 42.0
_kept: list[torch.Tensor] = []  # the worker's own references to the mailboxes it handed over


def _collate_keeping(items):
    time.sleep(0.05)  # the step before has written by now
    seen = max((float(t.max()) for t in _kept), default=0.0)
    mailbox = torch.zeros(2)
    _kept.append(mailbox)
    return {"index": torch.tensor(items), "mailbox": mailbox, "seen": torch.tensor(seen)}


def _seen_by_worker(private: bool) -> list[float]:
    loader = DataLoader(list(range(12)), batch_size=1, num_workers=1, collate_fn=_collate_keeping,
                        multiprocessing_context="fork", prefetch_factor=1)
    seen = []
    for batch in loader:
        if private:
            _private_batch(batch)
        batch["mailbox"].fill_(MARK)  # what a step could write: a loss, a count
        seen.append(float(batch["seen"]))
    return seen


@pytest.mark.parametrize("private", [False, True])
def test_a_worker_reads_a_steps_write_only_where_the_batch_stays_shared(private):
    seen = _seen_by_worker(private)
    if private:
        assert MARK not in seen, "a worker read what the training process wrote into a batch it handed over"
    else:  # the channel is real: without the harness's copy the worker reads it
        assert MARK in seen


def test_a_private_batch_keeps_its_values_and_nesting():
    images = torch.arange(12.0).reshape(3, 4).share_memory_()
    labels = torch.tensor([1, 2, 3]).share_memory_()
    pinned_like = torch.ones(2)  # not shared: left as it is
    batch = [{"images": images}, (labels, pinned_like)]
    before = pinned_like.data_ptr()
    _private_batch(batch)
    assert not images.is_shared() and not labels.is_shared()
    assert torch.equal(images, torch.arange(12.0).reshape(3, 4)) and torch.equal(labels, torch.tensor([1, 2, 3]))
    assert pinned_like.data_ptr() == before


_FREED_PROBE = """
import sys
import numpy as np
import torch
from checker.candidate.session import _scrub_freed_memory
if sys.argv[1] == "scrub":
    assert _scrub_freed_memory()
found = 0
for trial in range(20):
    marker = 1234.5 + trial
    scratch = [torch.full((4096,), marker) for _ in range(8)]  # 16 KiB chunks of the heap, freed below
    del scratch
    arrays = [np.empty(4096, np.float32) for _ in range(8)]
    found += any(bool((a == np.float32(marker)).any()) for a in arrays)
print(found)
"""


@pytest.mark.parametrize("scrub", [False, True])
def test_a_freed_tensor_leaves_no_value_for_an_uninitialized_array(scrub):
    """Red team 56's freed_06: a value copied into scratch tensors that are freed was read back from np.empty."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FREED_PROBE, "scrub" if scrub else "plain"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    found = int(done.stdout.split()[-1])
    if scrub:
        assert found == 0
    else:  # the channel is real on this machine's C library
        assert found > 0
