"""loader_settings: the DataLoader the script gave to session.steps() is configured as the chapter requires.

Two kinds of evidence, and the check says which one each line rests on:

* what the grader saw itself: the worker processes. When the chapter asks for ``num_workers >= N``, at least
  N processes must be running under the candidate's process when the timed window closes; with
  ``persistent_workers = true``, N of those alive at the first step must still be alive then, in a run that
  crossed an epoch boundary (``epoch_batches`` of the workload), where a loader without persistent workers
  starts new ones;
* what the harness, inside the candidate's process, reported: the settings the loader was built with. A
  script can fake that report, so it only decides what the grader cannot see (``pin_memory`` on a CPU, which
  has nothing to pin; on a GPU, pageable_copies finds unpinned copies in the trace). A DataLoader subclass
  that redefines a setting is refused: its attribute need not be what it does.

chapter.toml gives the requirements per device as a table: a number is a minimum, anything else must be
equal, e.g. ``threshold.cuda = { num_workers = 4, persistent_workers = true, pin_memory = true }``.
"""

from __future__ import annotations

from typing import Any

from checker.checks import FAILED, PASSED, RUN, check, result


def unmet_settings(settings: dict[str, Any], required: dict[str, Any]) -> list[str]:
    """One line per requirement that ``settings`` does not meet."""
    unmet = []
    for key, wanted in required.items():
        value = settings.get(key)
        if isinstance(wanted, bool) or not isinstance(wanted, (int, float)):
            if value != wanted:
                unmet.append(f"{key}={value!r}; this chapter needs {key}={wanted!r}")
        elif value is None or value < wanted:
            unmet.append(f"{key}={value!r}; this chapter needs {key} >= {wanted!r}")
    return unmet


def workers_unseen(run, required: dict[str, Any], epoch_batches: int | None) -> list[str]:
    """What the grader's own view of the run's processes contradicts (see the module's docstring)."""
    wanted = required.get("num_workers")
    if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1:
        return []
    problems = []
    if len(run.workers_at_close) < wanted:
        problems.append(f"the grader saw {len(run.workers_at_close)} worker process(es) when the timed window "
                        f"closed; num_workers >= {wanted} means at least {wanted}")
    lasting = len(run.workers_at_first_step & run.workers_at_close)
    crossed = epoch_batches is not None and run.steps > epoch_batches
    if required.get("persistent_workers") is True and crossed and lasting < wanted:
        problems.append(f"{lasting} of the worker processes alive at the first step were still alive when the "
                        f"window closed, after the epoch boundary at step {epoch_batches}: persistent workers "
                        "outlive an epoch")
    fresh = len(run.workers_at_close - run.workers_at_first_step)
    if required.get("persistent_workers") is True and crossed and fresh:
        problems.append(f"{fresh} worker process(es) alive when the window closed started after the first step, "
                        f"across the epoch boundary at step {epoch_batches}: persistent workers are the same "
                        "processes from the first step to the last (an idle worker kept alive beside ones started "
                        "anew each epoch is not)")
    return problems


@check("loader_settings", needs=(RUN,), key="settings_unmet", fmt="{:g} unmet", data_wait_is_work=True)
def loader_settings(evidence, spec):
    """the DataLoader given to session.steps() is configured as the chapter requires"""
    required = dict(spec.threshold_for(evidence.device))
    timed = evidence.timed
    candidate = timed[0][1] if timed else evidence.candidate_run  # timed runs are longer: they cross epochs
    settings = candidate.raw.get("loader")
    if settings is None:
        return result(spec, FAILED, threshold=required, measured={"settings_unmet": len(required)}, evidence=[
            "session.steps() was not given a torch.utils.data.DataLoader, so its settings cannot be checked: "
            "build a DataLoader (or a subclass of it) and pass it to session.steps()"])
    unmet = unmet_settings(settings, required)
    if settings.get("not_its_batches"):
        unmet.append(f"{settings.get('class')} handed out {'; '.join(settings['not_its_batches'])}: the settings read "
                     "are not those of the loader that made the batches; iterate the DataLoader itself (a subclass "
                     "may wrap its own iteration, `super().__iter__()`)")
    if settings.get("redefined"):
        unmet.append(f"{settings.get('class')} redefines {', '.join(settings['redefined'])}: a DataLoader subclass "
                     "may report settings it does not use; keep DataLoader's own settings and iteration")
    epoch_batches = evidence.cfg.get("epoch_batches")
    # what the grader saw decides only what the reported settings claim to meet: a loader built with
    # num_workers=0 is one problem, not also "0 workers seen" and "0 of them lasting"
    claimed = {key: wanted for key, wanted in required.items() if not unmet_settings(settings, {key: wanted})}
    unmet += workers_unseen(candidate, claimed, int(epoch_batches) if epoch_batches else None)
    measured = {"settings_unmet": len(unmet), "loader": settings,
                "workers_seen": {"first_step": len(candidate.workers_at_first_step),
                                 "window_close": len(candidate.workers_at_close),
                                 "alive_throughout": len(candidate.workers_at_first_step & candidate.workers_at_close)}}
    # on a pass, what was checked; on a failure, only what is wrong (hints match on these lines)
    evidence = unmet or [f"DataLoader({', '.join(f'{k}={settings.get(k)!r}' for k in required)})"]
    return result(spec, FAILED if unmet else PASSED, measured=measured, threshold=required, evidence=evidence)
