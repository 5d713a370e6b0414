"""What a CPU trace says of the copies a step asked for (checker.checks.batch_copies, queued_copies): recorded here
with torch.profiler, as the harness records a run, so the arguments read are the profiler's own."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from checker.checks.batch_copies import blocking_moves, moves_by_step
from checker.trace.analysis import load

ROWS = 8


def _record(path) -> None:
    images, labels = torch.randn(ROWS, 3, 4, 4), torch.arange(ROWS)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        with record_function("step 1"):
            with record_function("data"):  # a collation's torch.tensor of Python numbers, inside the fetch
                torch.tensor(list(range(ROWS)))
            images.to("cpu", non_blocking=True)
            labels.to("cpu", non_blocking=True)
            (images.sum(dim=0) > 0).sum()  # an op's own conversion inside it: not asked for by the step
        with record_function("step 2"):
            images.to("cpu")  # blocking
            torch.tensor([0.5, 0.25, 0.125], device="cpu")  # a constant from Python numbers, smaller than the labels
        with record_function("step 3"):
            images[None].to("cpu")[0]  # a blocking copy of a reshaped batch
            torch.empty(ROWS, 3, 4, 4).copy_(images)  # copy_, not queued
            images.float()  # a dtype conversion keeps the device: no copy to one
    prof.export_chrome_trace(str(path))


def test_each_steps_copies_are_read_with_their_flags(tmp_path):
    path = tmp_path / "trace.json"
    _record(path)
    moves = moves_by_step(load(path))
    by_step = {int(step): group for step, group in moves.groupby("step")}
    first = by_step[1]
    assert sorted(first["key"]) == ["[8,3,4,4] float", "[8] long int"]  # the collation and the sum's own are not there
    assert first["queued"].all() and first["move"].all() and set(first["lead"]) == {ROWS}
    second = by_step[2]
    assert not second[second["key"] == "[8,3,4,4] float"]["queued"].any()
    constant = second[second["made"]]
    assert len(constant) == 1 and int(constant["elements"].iloc[0]) == 3
    third = by_step[3]
    assert "[1,8,3,4,4] float" in set(third["key"])  # the reshaped batch, its elements all there
    assert not third[third["move"]]["queued"].any()
    assert not third[~third["move"]].empty  # images.float(): recorded, not a move


def test_every_blocking_copy_counts_but_a_small_constant(tmp_path):
    path = tmp_path / "trace.json"
    _record(path)
    blocking = blocking_moves(moves_by_step(load(path)), ROWS)
    counts = blocking.groupby("step").size().to_dict()
    assert counts == {2: 1, 3: 2}, counts  # step 2's constant spared; step 3's reshaped copy and copy_ counted


_LIBRARY = []


def _to_host_op():
    """An operator of a namespace of the script's own (torch.library's define and impl, no Python redispatch) whose
    body copies its input to the host: red team 71's opcopy_01."""
    if not _LIBRARY:
        library = torch.library.Library("copiesasked", "DEF")
        library.define("to_host(Tensor x) -> Tensor")
        library.impl("to_host", lambda x: x.to("cpu") * 1, "CompositeExplicitAutograd")
        _LIBRARY.append(library)
    return torch.ops.copiesasked.to_host


def test_a_copy_inside_an_operator_of_the_scripts_own_is_the_steps(tmp_path):
    """Inside an op of torch's, a conversion is that op's own; inside an operator the script registered, the body is
    the script's code and its copy is one the step asked for. aten::_to_copy called directly is a copy too."""
    to_host = _to_host_op()

    class Landed(torch.autograd.Function):  # its backward is the script's Python, run inside autograd's record
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, grad):
            grad.to("cpu")
            return grad

    loss = torch.randn(())
    weight = torch.randn((), requires_grad=True)
    path = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        with record_function("step 1"):
            to_host(loss)
        with record_function("step 2"):
            torch.ops.aten._to_copy(loss, device="cpu", non_blocking=True)
        with record_function("step 3"):
            loss.to("cpu")  # one copy: the aten::_to_copy and aten::copy_ inside it are aten::to's own
        with record_function("step 4"):
            Landed.apply(weight * 2).backward()
    prof.export_chrome_trace(str(path))
    moves = moves_by_step(load(path))
    assert moves.groupby("step").size().to_dict() == {1: 1, 2: 1, 3: 1, 4: 1}
    assert moves["move"].all() and moves[moves["step"] == 2]["queued"].all()


def test_host_work_on_the_batch_between_its_fetch_and_its_copy_is_counted(tmp_path):
    """A clone (or a cast, or arithmetic) of the batch after the fetch and before its copy makes the copy's source a
    new tensor, in pageable memory on a GPU: red team 71's unpinned_02. Work after the copy, and ops inside the
    fetch, are not counted."""
    from checker.checks.batch_copies import batch_work_before_copy

    images, labels = torch.randn(ROWS, 3, 4, 4), torch.arange(ROWS)
    path = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        for step, made_again in ((1, False), (2, True), (3, False)):
            with record_function(f"step {step}"):
                with record_function("data"):
                    batch = images * 1  # the loader's own work, inside the fetch
                if made_again:
                    batch = batch.clone()
                    (labels + 0).to("cpu", non_blocking=True)
                else:
                    labels.to("cpu", non_blocking=True)
                batch.to("cpu", non_blocking=True)
                (batch * 2).sum()  # the step's work on the device, after the copy
    prof.export_chrome_trace(str(path))
    assert batch_work_before_copy(load(path), ROWS) == {1: 0, 2: 2, 3: 0}


def test_host_work_before_a_later_copy_of_the_batch_and_in_a_list_is_counted(tmp_path):
    """The labels copied first, then the images concatenated (a list's tensors are read too) or cloned before their
    own copy: red team 72's labelsfirst_02 and catlist_02. The model's work on the images already copied, before a
    late copy of the labels, is not counted (it reads no tensor of the labels' shape)."""
    from checker.checks.batch_copies import batch_work_before_copy

    images, labels = torch.randn(ROWS, 3, 4, 4), torch.arange(ROWS)
    weight = torch.randn(10, 48)
    path = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        with record_function("step 1"):
            labels.to("cpu", non_blocking=True)
            torch.cat([images]).to("cpu", non_blocking=True)
        with record_function("step 2"):
            labels.to("cpu", non_blocking=True)
            images.clone().to("cpu", non_blocking=True)
        with record_function("step 3"):
            moved = images.to("cpu", non_blocking=True)
            torch.nn.functional.linear(moved.flatten(1), weight)  # the model, on the copied images
            labels.to("cpu", non_blocking=True)
    prof.export_chrome_trace(str(path))
    assert batch_work_before_copy(load(path), ROWS) == {1: 1, 2: 1, 3: 0}


def test_the_functional_copy_is_a_copy(tmp_path):
    """torch.ops.aten.copy(dst, src) is copy_'s functional form: a copy the step asked for (red team 72's
    aten_copy_01), blocking unless asked otherwise."""
    loss = torch.randn(())
    path = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        with record_function("step 1"):
            torch.ops.aten.copy(torch.zeros(()), loss)
    prof.export_chrome_trace(str(path))
    moves = moves_by_step(load(path))
    assert len(moves) == 1 and moves["move"].all() and not moves["queued"].any()
