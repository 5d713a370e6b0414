"""What a chapter's workload.py builds, and the two secrets every graded run trains under.

This module is imported in two places: inside the candidate's process (by the harness, to build the
workload the script trains) and in the grader's referee (to rebuild the same model and check the weights
the candidate sent back). It holds no state of its own.

The secrets (see docs/trust.md):

* ``seed`` is drawn by the grader for each run and sent when the run starts: it sets the initial weights,
  the data and the held-out batch, so weights trained offline or in an earlier run are of no use;
* ``window_key`` is sent when the timed window opens, and not before. The harness then re-draws the
  model's last layer from it (:func:`redraw_head`), and batch sources that make their batches lazily draw
  the window's batches from it (:class:`KeyedOrder`'s order, :class:`KeyedDraws`' batches themselves, and
  :class:`KeyedEpochs` for a DataLoader's samples). The weights the grader gets back can only be right if
  the training that produced them ran after the window opened.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import nn
from torch.utils.data import Sampler


@dataclass
class Workload:
    """What a chapter's workload.py builds: everything the learner must not change."""

    model: torch.nn.Module
    loss_fn: Callable[..., torch.Tensor]
    eval_loss: Callable[[torch.nn.Module], float]
    batches: Iterable | None = None
    dataset: Any = None
    extras: dict[str, Any] = field(default_factory=dict)
    # called with the window key when the timed window opens: batch sources that draw lazily re-seed here
    on_window: Callable[[int], None] | None = None


def head_module(model: nn.Module) -> tuple[str, nn.Module]:
    """The model's last layer with a weight matrix (or kernel): the one the window key re-draws."""
    found = None
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.nn.Parameter) and weight.dim() >= 2:
            found = (name, module)
    if found is None:
        raise ValueError("the model has no layer with a weight matrix for the window key to re-draw")
    return found


def head_values(model: nn.Module, window_key: int, init_rms: dict[str, float]) -> dict[str, torch.Tensor]:
    """The values the window key gives the head, by state_dict key, on the CPU.

    The weight is drawn from the key and scaled to the RMS the weight had at initialization (a function of
    the run's seed alone, so the referee can recompute it); the bias, if any, is zero.
    """
    name, module = head_module(model)
    prefix = f"{name}." if name else ""
    shapes = {prefix + param_name: param.shape for param_name, param in module.named_parameters(recurse=False)}
    return drawn_head(shapes, window_key, init_rms)


def drawn_head(shapes: dict[str, torch.Size], window_key: int, init_rms: dict[str, float]) -> dict[str, torch.Tensor]:
    """head_values from the head's parameter names and shapes alone (in ``init_rms``'s order): a weight drawn from the
    key at its initial RMS, anything else zero."""
    generator = torch.Generator().manual_seed(int(window_key))
    values = {}
    for key in init_rms:
        if key.rpartition(".")[2] == "weight":
            values[key] = torch.randn(shapes[key], generator=generator, dtype=torch.float32) * init_rms[key]
        else:
            values[key] = torch.zeros(shapes[key], dtype=torch.float32)
    return values


def initial_rms(model: nn.Module) -> dict[str, float]:
    """RMS of each head parameter as built (call right after the workload is built)."""
    name, module = head_module(model)
    prefix = f"{name}." if name else ""
    return {prefix + n: float(p.detach().float().pow(2).mean().sqrt()) for n, p in module.named_parameters(recurse=False)}


@torch.no_grad()
def redraw_head(tensors: dict[str, torch.Tensor], window_key: int, init_rms: dict[str, float]) -> None:
    """Overwrite the head's parameters in place (compiled graphs and CUDA graphs keep pointing at them), found by
    name among ``tensors`` (the harness's own walk of the model: no method of the model runs)."""
    values = drawn_head({key: tensors[key].shape for key in init_rms}, window_key, init_rms)
    for key, value in values.items():
        tensors[key].copy_(value.to(tensors[key].dtype))


class KeyedOrder:
    """A re-iterable over a fixed list of batches: in order until the window opens, then in an order drawn
    from the window key, so no one can know the window's batches before it starts.

    Each pass yields ``len(batches)`` batches (one epoch); the draw continues across passes.
    """

    def __init__(self, batches: list):
        self.batches = batches
        self._generator: random.Random | None = None
        self._next = 0

    def __len__(self) -> int:
        return len(self.batches)

    def set_key(self, window_key: int) -> None:
        self._generator = random.Random(int(window_key))

    def __iter__(self) -> Iterator:
        for _ in range(len(self.batches)):
            if self._generator is None:
                index = self._next % len(self.batches)
                self._next += 1
            else:
                # drawn in Python: the grader's data code reads no tensor's value, so no read in a step is excused
                # as the grader's (a script once had this code read its own tensors for it: red team 39's launder_06)
                index = self._generator.randrange(len(self.batches))
            yield self.batches[index]


# While session.steps() fetches a step's batch: [fetching, the batch a keyed KeyedDraws drew in this fetch or None].
# Set by this module and the harness only (the scan refuses the name)
_HARNESS_FETCHING: list = [False, None]


@contextmanager
def harness_fetch():
    """While the harness fetches a step's batch (checker.candidate.session): KeyedDraws draws the window's only then,
    one per fetch."""
    _HARNESS_FETCHING[0], _HARNESS_FETCHING[1] = True, None
    try:
        yield
    finally:
        _HARNESS_FETCHING[0] = False


def in_harness_fetch() -> bool:
    """Whether the harness is fetching a step's batch now (``harness_fetch``)."""
    return bool(_HARNESS_FETCHING[0])


def check_fetched(batch, source) -> None:
    """After the harness's fetch of a window step's batch, where the workload's batches are a KeyedDraws (``source``,
    as the harness holds it): the fetch drew one batch from it and the step is handed that very batch. A source
    wrapped so that it hands a step a batch drawn in an earlier fetch (held back, the steps' batches trained late)
    would let a logging step read batches that later steps train (prefetch_logstep_06, red team 42)."""
    if isinstance(source, KeyedDraws) and (_HARNESS_FETCHING[1] is None or batch is not _HARNESS_FETCHING[1]):
        raise RuntimeError(NOT_THIS_FETCHS)


class KeyedDraws:
    """A re-iterable of batches each made fresh by ``make(generator)`` as a step fetches it: from the run's seed until
    the window opens, then from the window key. Each pass yields ``per_pass`` batches; the draws are numbered across
    passes.

    Unlike :class:`KeyedOrder`, no batch of the window exists before the window opens, so nothing a script computes
    from batches in set-up can be reused in a step. Each batch has a generator of its own, seeded when the step
    fetches it from the key and the batch's number (``_draw_seed``) and dropped after: no generator whose state runs
    on from one batch to the next is left to copy, so a script cannot replay the next batches' draws ahead of their
    steps (a logging step's excused reads spent on them: predicted_draws_06, red team 16). Once keyed, a batch is
    drawn only while ``session.steps()`` fetches a step's batch (``harness_fetch``), one per fetch, and the step is
    handed the batch its fetch drew (``check_fetched``), whatever wraps the source: a script that drew the next
    batches itself (or two in one fetch, or held one back for a later step), read them in a logging step and trained
    them in their steps would have the steps' batches without its steps' reads. ``make`` draws on ``device`` (a
    generator of that device), with queued ops only: the batch costs the step no wait for the device.
    """

    def __init__(self, make: Callable[[torch.Generator], Any], per_pass: int, seed: int, device: torch.device):
        self.make, self.per_pass, self.device = make, int(per_pass), torch.device(device)
        self._draw_key, self._draws = int(seed), 0
        self._keyed = False
        self.last_seed: int | None = None  # the seed of the batch last drawn once keyed (the update probe's place)

    def __len__(self) -> int:
        return self.per_pass

    def set_key(self, window_key: int) -> None:
        self._draw_key, self._draws, self._keyed = int(window_key), 0, True

    def _draw_seed(self) -> int:
        seed = self._draw_key * SALT_STRIDE + self._draws
        self._draws += 1
        return seed

    def __iter__(self) -> Iterator:
        for _ in range(self.per_pass):
            if self._keyed and not _HARNESS_FETCHING[0]:
                raise RuntimeError(DRAWN_OUTSIDE_FETCH)
            if self._keyed and _HARNESS_FETCHING[1] is not None:
                raise RuntimeError(DRAWN_TWICE)
            seed = self._draw_seed()
            batch = self.draw(seed)
            if self._keyed:  # an unkeyed source's draw leaves the fetch's record as it was
                _HARNESS_FETCHING[1] = batch
                self.last_seed = seed
            yield batch

    def draw(self, seed: int) -> Any:
        """The batch of draw ``seed``: the grader's referee makes a window step's batch again from it."""
        return self.make(torch.Generator(device=self.device).manual_seed(int(seed)))

    @staticmethod
    def is_window_draw(seed: int, window_key: int) -> bool:
        """Whether ``seed`` is one of the draws made from ``window_key`` (a window step's batch)."""
        return 0 <= int(seed) - int(window_key) * SALT_STRIDE < SALT_STRIDE


_ONE_PER_FETCH = ("the window's batches are drawn one per step, as session.steps() fetches it; pass the batch source "
                  "to session.steps() and train the batch it yields")
DRAWN_OUTSIDE_FETCH = f"a batch of the timed window was drawn outside session.steps()'s fetch: {_ONE_PER_FETCH}"
DRAWN_TWICE = f"two batches of the timed window were drawn in one step's fetch: {_ONE_PER_FETCH}"
NOT_THIS_FETCHS = f"a step of the timed window was handed a batch other than the one its fetch drew: {_ONE_PER_FETCH}"


SALT_STRIDE = 1_000_003  # an epoch's salt: (seed or window key) * SALT_STRIDE + the epoch's number


class KeyedEpochs(Sampler):
    """A DataLoader sampler: a new shuffle every epoch, drawn when the epoch starts from (seed, epoch), and from
    (window key, epoch) for the epochs that start after the timed window opened: the same order in every variant,
    however far ahead a DataLoader's workers fetch, and no one can know the window's later epochs before it opens.

    Each index comes with its epoch's salt, ``(index, salt)``, which the dataset draws the sample's random choices
    from (a crop, a flip, noise): the samples of those later epochs cannot be made before the window opens either.
    """

    def __init__(self, size: int, seed: int):
        self.size, self.seed, self.key, self.epoch = size, seed, None, 0
        self.items: list[tuple[int, int]] = []  # the epoch in progress, in order (checker.candidate.session.Finished)

    def set_key(self, window_key: int) -> None:
        self.key = window_key

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        salt = (self.seed if self.key is None else self.key) * SALT_STRIDE + self.epoch
        self.epoch += 1
        self.items = self.epoch_items(salt)
        return iter(self.items)

    def epoch_items(self, salt: int) -> list[tuple[int, int]]:
        """The epoch of this salt, in order."""
        order = list(range(self.size))
        random.Random(salt).shuffle(order)  # in Python: the grader's data code reads no tensor's value
        return [(index, salt) for index in order]

    def is_salt(self, salt: int, window_key: int, epochs: int = 100_000) -> bool:
        """Whether ``salt`` is one of this sampler's epochs' (from its seed, or from ``window_key``)."""
        return any(0 <= salt - base * SALT_STRIDE < epochs for base in (self.seed, window_key))


def load_workload_module(chapter_dir: Path):
    """A chapter's workload.py, imported once per process under a stable name."""
    path = chapter_dir / "workload.py"
    name = f"workbook_workload_{chapter_dir.name}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its classes can then be pickled (DataLoader workers started by fork need no more)
    spec.loader.exec_module(module)
    return module
