"""loader_settings: the DataLoader the script gave to session.steps() is configured as the chapter requires.

The harness records the loader's settings when the script passes a ``torch.utils.data.DataLoader`` to
``session.steps()`` (``raw["loader"]`` of a run). The check compares what was *requested*: a CPU-only machine
cannot pin memory, but ``pin_memory=True`` is still what the script asked for, and what it will get on a GPU.

chapter.toml gives the requirements per device as a table: a number is a minimum, anything else must be
equal, e.g. ``threshold.cuda = { num_workers = 4, persistent_workers = true, pin_memory = true }``.
"""

from __future__ import annotations

from typing import Any

from checker.checks import FAILED, PASSED, check, result


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


@check("loader_settings", key="settings_unmet", fmt="{:g} unmet")
def loader_settings(ev, spec):
    required = dict(spec.threshold_for(ev.device))
    candidate = ev.candidate_run()
    settings = candidate.raw.get("loader")
    if settings is None:
        return result(spec, FAILED, threshold=required, measured={"settings_unmet": len(required)}, evidence=[
            "session.steps() was not given a torch.utils.data.DataLoader, so its settings cannot be checked: "
            "build a DataLoader (or a subclass of it) and pass it to session.steps()"])
    unmet = unmet_settings(settings, required)
    measured = {"settings_unmet": len(unmet), "loader": settings}
    # on a pass, what was checked; on a failure, only what is wrong (hints match on these lines)
    evidence = unmet or [f"DataLoader({', '.join(f'{k}={settings.get(k)!r}' for k in required)})"]
    return result(spec, FAILED if unmet else PASSED, measured=measured, threshold=required, evidence=evidence)
