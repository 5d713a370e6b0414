"""How often a host thread asks the GPU whether it is done (cudaEventQuery, cudaStreamQuery) in each traced step.

    python scripts/count_polls.py FOLDER_OF_TORCH_TRACES > counts.txt

A loop that polls an event until the GPU is done waits for it as a sync does, yet no sync call is in the trace
(tests/redteam/gpu/poll_wait_01, junk_work_01). Honest pinned loading queries events too (the caching host
allocator recycles pinned blocks). One line per trace: the most and the median calls per (step, thread).
"""

import glob
import sys

from checker.trace import load


def main(folder: str) -> None:
    for path in sorted(glob.glob(folder + "/*.json.gz")):
        events = load(path).events
        api = events[events["kind"] == "cuda_api"]
        queries = api[api["name"].astype(str).str.contains("Query") & api["step"].notna()]
        per = queries.groupby(["step", "tid"]).size()
        most, median = (int(per.max()), float(per.median())) if len(per) else (0, 0.0)
        names = sorted(set(queries["name"].astype(str)))
        print(f"{path.rsplit('/', 1)[-1]}: query calls per (step, thread): most {most}, median {median:g}, names {names}")


if __name__ == "__main__":
    main(sys.argv[1])
