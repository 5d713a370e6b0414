"""Does the harness see a model's weights handed to another process? (checker.candidate.session.shared_weights)

On a CUDA GPU: a small model's parameters before and after one of them is pickled for another process (the CUDA
IPC handle torch.multiprocessing makes), and a CPU model before and after share_memory(). Writes one JSON object
with the machine's GPU, driver, torch and date to the path given (default: stdout).

    python evidence/probes/cuda_share_probe.py $OUT/cuda_share_probe.json
"""

import datetime
import json
import subprocess
import sys
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing  # noqa: F401  (registers torch's reductions with ForkingPickler)

from checker.candidate.session import model_tensors, shared_weights


def main() -> None:
    rows: dict = {"date": datetime.date.today().isoformat(), "torch": torch.__version__,
                  "watched": bool(getattr(torch.UntypedStorage._share_cuda_, "_workbook_watched", False))}
    cpu = torch.nn.Linear(8, 8)
    rows["cpu_before"] = shared_weights(model_tensors(cpu))
    cpu.share_memory()
    rows["cpu_after_share_memory"] = shared_weights(model_tensors(cpu))
    if torch.cuda.is_available():
        rows["gpu"] = torch.cuda.get_device_name(0)
        rows["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True).stdout.strip()
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)).cuda()
        rows["cuda_before"] = shared_weights(model_tensors(model))
        handed = ForkingPickler.dumps(model[1].weight)  # as a spawned worker would receive it
        rows["cuda_pickled_bytes"] = len(handed)
        rows["cuda_after_one_pickled"] = shared_weights(model_tensors(model))
    text = json.dumps(rows, indent=1)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as out:
            out.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
