"""Chapter 08's workload: one training job built from three parts, each of which can be the wall.

Every mystery job is this same code: a batch source that prepares each sample on the CPU (a synthetic
sequence, "augmented" in numpy for a number of rounds), a model that runs a stack of small eager blocks (one
tensor op per line, as in chapter 04) and then a wide feed-forward layer (one large matrix multiply each way),
and AdamW updating one parameter at a time. A job's sizes come from its code (``cfg["job"]``), an integer the
learner's assignment names (labs/08_triage/assignment.toml); which part dominates the step depends on them,
and nothing in the job's files says which.

    python labs/08_triage/train.py --job a     # one of your assigned jobs

The sizes are drawn from the code with Python's random module: ``job_settings(code, device)``, sizes only. Which
wall a job was drawn to hit is the grader's to know (it draws the codes of a learner's assignment from a secret
it holds: checker.grader.assignment); it measures each job itself before it believes any answer about it, and
believes an answer's numbers only with the traces they were read from (``job_matmuls`` is how a trace is
recognized as one job's).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from checker.base.workloads import KeyedEpochs, Workload

NUM_CLASSES = 10
FEATURES = 32          # features per token of a sample

# Per device, three kinds of job: the range each size is drawn from (inclusive). rounds: numpy passes over each
# sample in the loader; tokens: sequence length; blocks/width: the small eager blocks; hidden: the wide layer.
# Which kind a code draws is the first draw of its random stream; which wall each kind hits is measured.
RANGES = {
    "cpu": (
        dict(batch=(8, 12), tokens=(8, 12), rounds=(120, 180), blocks=(1, 2), width=(32, 48), hidden=(64, 128)),
        dict(batch=(4, 6), tokens=(2, 3), rounds=(0, 1), blocks=(10, 14), width=(16, 24), hidden=(16, 32)),
        dict(batch=(8, 12), tokens=(48, 64), rounds=(0, 1), blocks=(1, 1), width=(256, 320), hidden=(1536, 2048)),
    ),
    "cuda": (
        dict(batch=(64, 96), tokens=(16, 24), rounds=(60, 90), blocks=(2, 3), width=(128, 192), hidden=(512, 768)),
        dict(batch=(32, 48), tokens=(4, 6), rounds=(0, 1), blocks=(24, 32), width=(64, 96), hidden=(64, 128)),
        dict(batch=(32, 48), tokens=(256, 320), rounds=(0, 1), blocks=(1, 1), width=(2048, 2560), hidden=(8192, 10240)),
    ),
}


def job_settings(code: int, device: str) -> dict:
    """The sizes of job ``code`` on ``device`` ('cpu' or 'cuda')."""
    rng = random.Random(int(code))
    kind = RANGES[device][rng.randrange(len(RANGES[device]))]
    return {name: rng.randint(low, high) for name, (low, high) in kind.items()}


def job_matmuls(code: int, device: str) -> frozenset:
    """The forward pass's matrix multiplies of job ``code`` on ``device``, (m, k, n) each: the stem, the blocks'
    layers, the wide layer both ways and the head, as a trace that records shapes shows them (``aten::addmm``)."""
    s = job_settings(code, device)
    rows = s["batch"] * s["tokens"]
    shapes = {(rows, FEATURES, s["width"]), (rows, s["width"], s["hidden"]), (rows, s["hidden"], s["width"]),
              (s["batch"], s["width"], NUM_CLASSES)}
    if s["blocks"]:
        shapes.add((rows, s["width"], s["width"]))
    return frozenset(shapes)


def assigned_code(job: str, root: Path | None = None) -> int:
    """A job letter's code from the learner's assignment file (labs/08_triage/assignment.toml)."""
    import tomllib

    from checker.base.paths import labs_dir

    path = (root or labs_dir() / "08_triage") / "assignment.toml"
    try:
        jobs = tomllib.loads(path.read_text()).get("jobs", {})
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise SystemExit(f"{path}: cannot read your assignment ({err}); `workbook assign 08` writes it") from None
    if job not in jobs:
        raise SystemExit(f"--job {job}: your assignment ({path}) has jobs {', '.join(sorted(jobs)) or 'none'}")
    return int(jobs[job])


def job_code(cfg: dict) -> int:
    """The job this run trains: ``--set job=CODE`` (how the grader runs it), else ``--job LETTER`` on the
    command line, looked up in the learner's assignment."""
    if "job" in cfg and str(cfg["job"]).lstrip("-").isdigit():
        return int(cfg["job"])
    letter = str(cfg.get("job", "a"))
    argv = sys.argv[1:]
    if "--job" in argv and argv.index("--job") + 1 < len(argv):
        letter = argv[argv.index("--job") + 1]
    return assigned_code(letter)


class Samples(Dataset):
    """A sequence per sample: its class's template plus noise, then ``rounds`` numpy passes (the CPU work a
    real pipeline spends decoding and augmenting). Indexed by (index, salt) from ``KeyedEpochs`` (checker.base.workloads)."""

    def __init__(self, templates: np.ndarray, length: int, tokens: int, rounds: int, seed: int):
        self.templates, self.length, self.tokens, self.rounds, self.seed = templates, length, tokens, rounds, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, item):
        index, salt = item if isinstance(item, tuple) else (item, self.seed)
        rng = np.random.default_rng([salt % 2**32, index])
        label = int(rng.integers(NUM_CLASSES))
        x = self.templates[label] + 1.5 * rng.standard_normal((self.tokens, FEATURES), dtype=np.float32)
        for _ in range(self.rounds):  # numpy: no aten op records it, as a JPEG decode records none
            x = 0.9 * x + 0.1 * np.tanh(np.roll(x, 1, axis=0))
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), label


class SmallBlock(nn.Module):
    """x + sigmoid(gate) * swish(linear(layer_norm(x))), one small op per line (chapter 04's block)."""

    def __init__(self, width: int):
        super().__init__()
        self.norm_weight = nn.Parameter(torch.ones(width))
        self.norm_bias = nn.Parameter(torch.zeros(width))
        self.fc = nn.Linear(width, width)
        self.gate = nn.Parameter(torch.full((width,), -1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        centered = x - mean
        variance = (centered * centered).mean(dim=-1, keepdim=True)
        h = centered * torch.rsqrt(variance + 1e-5)
        h = h * self.norm_weight + self.norm_bias
        h = self.fc(h)
        h = h * torch.sigmoid(h)
        return x + torch.sigmoid(self.gate) * h


class Job(nn.Module):
    """Per-token stem, the small blocks, one wide feed-forward layer, mean over tokens, the head."""

    def __init__(self, width: int, blocks: int, hidden: int):
        super().__init__()
        self.stem = nn.Linear(FEATURES, width)
        self.blocks = nn.Sequential(*[SmallBlock(width) for _ in range(blocks)])
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)
        self.head = nn.Linear(width, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.blocks(self.stem(x))
        h = h + self.down(F.gelu(self.up(h)))  # the wide layer: two large matrix multiplies
        return self.head(h.mean(dim=1))


def build(cfg: dict, device: torch.device) -> Workload:
    if device.type == "cpu":
        torch.set_num_threads(int(cfg.get("cpu_threads", 1)))
    else:
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 matmuls: the same numerics in every variant
    seed = int(cfg.get("seed", 0))
    settings = job_settings(job_code(cfg), device.type)
    generator = torch.Generator().manual_seed(seed)
    templates = torch.randn(NUM_CLASSES, 1, FEATURES, generator=generator).numpy()
    length = int(cfg["epoch_batches"]) * settings["batch"]
    dataset = Samples(templates, length, settings["tokens"], settings["rounds"], seed)
    eval_set = Samples(templates, int(cfg.get("eval_size", 64)), settings["tokens"], 0, seed + 7)
    eval_x = torch.stack([eval_set[(i, seed + 7)][0] for i in range(len(eval_set))]).to(device)
    eval_y = torch.tensor([eval_set[(i, seed + 7)][1] for i in range(len(eval_set))]).to(device)
    model = Job(settings["width"], settings["blocks"], settings["hidden"]).to(device)

    def eval_loss(trained: nn.Module) -> float:
        with torch.no_grad():
            return F.cross_entropy(trained(eval_x), eval_y).item()

    sampler = KeyedEpochs(len(dataset), seed + 1)
    return Workload(model=model, loss_fn=F.cross_entropy, eval_loss=eval_loss, dataset=dataset,
                    extras={"sampler": sampler, "batch_size": settings["batch"]},
                    on_window=sampler.set_key)
