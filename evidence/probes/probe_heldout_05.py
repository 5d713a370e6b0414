"""Chapter 05's held-out loss over many secrets: is a high one a property of the secret, or of the variant's numerics?

    python evidence/probes/probe_heldout_05.py --out probe.jsonl [--seeds 24] [--deadline-s 200] [--variants slow,solution]
    python evidence/probes/probe_heldout_05.py --summarize probe.jsonl [more.jsonl ...] [--env env.json] > summary.md
                                      [--lrs 0.001,0.0005] [--config cuda] [--set batch_size=2048]

For each (seed, window key), drawn as the grader draws them, trains chapter 05's model the way a graded run does
(the warm-up in order, then the head redrawn from the window key and the window's batches drawn from it, the
chapter's steps in all) once per variant, and evaluates the held-out loss as the referee does (fp32, eager, the
trained weights). Variants: ``slow`` (fp32 eager, the slow script), ``solution`` (bf16 autocast and torch.compile,
the reference solution), ``bf16`` (bf16 autocast in eager mode). One JSON line per run, with the training loss of
every step, so a run that ends out of line shows where it left the others, and each variant's weight distance from
the ``slow`` run of the same secret and learning rate (the referee's own measure, in units of how far training moved
the weights). ``--config cuda --set batch_size=2048`` runs the GPU's workload, smaller, on a CPU. Written for the question in
evidence/history/README.md (sessions 37-39): chapter 05's honest solution failed same_work when one run of a
pair ended at 0.10-0.13 against the usual 0.08.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from checker.base.chapters import get_chapter  # noqa: E402
from checker.base.workloads import initial_rms, load_workload_module, redraw_head  # noqa: E402
from checker.grader.referee import distance, reference_weights  # noqa: E402


def train(workload, model, variant: str, cfg: dict, window_key: int, device: torch.device) -> list[float]:
    rms = initial_rms(workload.model)
    optimizer = torch.optim.AdamW(workload.model.parameters(), lr=cfg["lr"], fused=device.type == "cuda")
    batches = iter(())
    losses = []
    for step in range(int(cfg["steps"])):
        if step == int(cfg["warmup"]):
            redraw_head(workload.model, window_key, rms)
            workload.on_window(window_key)
        try:
            inputs, targets = next(batches)
        except StopIteration:
            batches = iter(workload.batches)
            inputs, targets = next(batches)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=variant != "slow"):
            outputs = model(inputs)
        loss = workload.loss_fn(outputs, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return [round(float(v), 5) for v in torch.stack(losses).cpu()]


SPIKE = 1.10  # a step whose training loss is 10% over the lowest loss before it, after the window's first steps


def spikes(losses: list[float], warmup: int) -> int:
    """Steps of a run whose training loss rose 10% over the lowest before them (from 10 steps into the window)."""
    low, count = min(losses[warmup:warmup + 10]), 0
    for loss in losses[warmup + 10:]:
        count += loss > SPIKE * low
        low = min(low, loss)
    return count


def summarize(paths: list[str], env: dict | None) -> str:
    """One Markdown table: per file and learning rate, the held-out losses, the pairs' gaps and the spikes."""
    import statistics

    chapter = get_chapter("05")
    tolerance = next(c for c in chapter.checks if c.name == "same_work").options["rel_tolerance"]
    warmup = int(chapter.config("cuda")["warmup"])
    lines = []
    if env:
        where = (f"{env['gpu']}, driver {env['nvidia_smi'].split(', ')[1]}" if env.get("gpu")
                 else f"a CPU ({env.get('cpu_model')}, {env.get('cpu_count')} cores)")
        lines += [f"{where}, torch {env.get('torch')}, {env.get('date') or env.get('finished')}; "
                  "`evidence/probes/probe_heldout_05.py`, chapter 05's GPU workload, a fresh secret per row group. same_work's "
                  f"tolerance on the held-out loss: {tolerance:.0%}.", ""]
    lines += ["| rows | lr | runs | held-out loss: median (min-max) | other variant vs slow, same secret: median gap (max) "
              f"| pairs over {tolerance:.0%} | spike steps per run | weight distance: median (max) |",
              "|---|---|---|---|---|---|---|---|"]
    for path in paths:
        rows = [json.loads(line) for line in open(path)]
        # rows written before --lrs existed ran at the chapter's learning rate of the time, 0.001
        for lr in sorted({r.get("lr", 0.001) for r in rows}, reverse=True):
            group = [r for r in rows if r.get("lr", 0.001) == lr]
            pairs = {}
            for r in group:
                pairs.setdefault(r["seed"], {})[r["variant"]] = r
            gaps = [abs(r["eval_loss"] - p["slow"]["eval_loss"]) / p["slow"]["eval_loss"]
                    for p in pairs.values() if "slow" in p for name, r in p.items() if name != "slow"]
            held = [r["eval_loss"] for r in group]
            weights = [r["weight_distance"] for r in group if r["variant"] != "slow" and r.get("weight_distance") is not None]
            lines.append(
                f"| `{Path(path).name}` | {lr:g} | {len(group)} | {statistics.median(held):.4f} ({min(held):.4f}-{max(held):.4f}) "
                f"| {statistics.median(gaps):.1%} ({max(gaps):.1%}) | {sum(g > tolerance for g in gaps)} of {len(gaps)} "
                f"| {statistics.mean(spikes(r['losses'], warmup) for r in group):.2f} "
                f"| {f'{statistics.median(weights):.3f} ({max(weights):.3f})' if weights else 'not recorded'} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--summarize", nargs="+", metavar="JSONL", help="print the Markdown table of these files")
    parser.add_argument("--env", help="with --summarize: the env.json of the machine that wrote them")
    parser.add_argument("--seeds", type=int, default=24)
    parser.add_argument("--deadline-s", type=float, default=200.0)
    parser.add_argument("--variants", default="slow,solution")
    parser.add_argument("--lrs", default="", help="learning rates to try with each secret (default: the chapter's)")
    parser.add_argument("--config", default=None, help="the chapter's workload settings for this device kind "
                        "(default: the device's own)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one setting")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.summarize:
        print(summarize(args.summarize, json.load(open(args.env)) if args.env else None), end="")
        return 0
    if not args.out:
        parser.error("--out is needed to probe (or --summarize to read what a probe wrote)")
    device = torch.device(args.device)
    chapter = get_chapter("05")
    module = load_workload_module(chapter.dir)
    compiled = {}
    start = time.monotonic()
    with open(args.out, "a") as out:
        for index in range(args.seeds):
            if time.monotonic() - start > args.deadline_s:
                print(f"deadline: {index} secrets done", flush=True)
                break
            seed, window_key = secrets.randbelow(2**31 - 1) + 1, secrets.randbelow(2**31 - 1) + 1
            cfg = dict(chapter.config(args.config or device.type), seed=seed)
            for item in args.set:
                key, value = item.split("=", 1)
                cfg[key] = type(cfg[key])(value) if key in cfg else value
            torch.manual_seed(seed)
            workload = module.build(cfg, device)  # once per secret: every run of it starts from the same state
            initial = {k: v.detach().clone() for k, v in workload.model.state_dict().items()}
            eager = workload.model
            start_weights = reference_weights(eager, window_key, initial_rms(eager))
            for lr in [float(v) for v in args.lrs.split(",") if v] or [float(cfg["lr"])]:
                slow_weights = None
                for variant in args.variants.split(","):
                    workload.batches._next, workload.batches._generator = 0, None  # the order from its start
                    if variant == "solution":
                        # one compiled module for every run: each run's starting weights copied into it
                        if "model" not in compiled:
                            compiled["module"] = eager
                            compiled["model"] = torch.compile(eager)
                        workload.model, model = compiled["module"], compiled["model"]
                    else:
                        workload.model = model = eager
                    workload.model.load_state_dict(initial)
                    t0 = time.monotonic()
                    losses = train(workload, model, variant, dict(cfg, lr=lr), window_key, device)
                    workload.model.eval()
                    with torch.no_grad():
                        held_out = float(workload.eval_loss(workload.model))
                    workload.model.train()
                    weights = {k: v.detach().to("cpu", copy=True) for k, v in workload.model.state_dict().items()}
                    if variant == "slow":
                        slow_weights = weights
                    gap = distance(weights, slow_weights, start_weights) if slow_weights is not None else None
                    row = {"seed": seed, "window_key": window_key, "variant": variant, "lr": lr,
                           "eval_loss": round(held_out, 5), "train_s": round(time.monotonic() - t0, 2),
                           "weight_distance": None if gap is None else round(gap["relative"], 4),
                           "worst_layer": None if gap is None else round(gap["worst_tensor"], 4), "losses": losses}
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    print(f"{index:3d} {variant:9s} lr {lr:g} seed {seed:10d} held-out {held_out:.5f} "
                          f"last {losses[-1]:.4f} weights {row['weight_distance']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
