"""``python -m checker.launch``: the chapters' torch.profiler recipes run a script through this.

It is the candidate-side launcher (``checker.candidate.launch``), run on its own.
"""

from checker.candidate.launch import main

if __name__ == "__main__":
    raise SystemExit(main())
