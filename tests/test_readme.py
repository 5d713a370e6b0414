"""README's quickstart is exactly two commands, and CI runs the second one."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quickstart_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_quickstart_is_two_commands():
    commands = quickstart_commands()
    assert len(commands) == 2, commands
    assert "check 01" in commands[0]


def test_ci_runs_the_readme_test_command():
    test_command = quickstart_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in [line.strip() for line in ci if not line.lstrip().startswith("#")]
