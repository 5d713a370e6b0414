"""A real one-node Slurm cluster (slurmctld + slurmd, CPU only, munge auth), started without systemd.

Used by tests/test_grading_slurm.py, and runnable by hand::

    python3 tests/slurm_cluster.py up DIR      # prints `export SLURM_CONF=DIR/slurm.conf`
    python3 tests/slurm_cluster.py down DIR

It needs root and Debian's packages `slurm-wlm munge` (apt-get install -y slurm-wlm munge). Its own
slurm.conf, ports and state folder live in DIR, so it does not touch a cluster already configured in
/etc/slurm. Facts it rests on: /work/shared/notes/slurm-and-isolation-on-debian.md.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

NEEDED = ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "munged", "munge", "unmunge")


def why_unavailable() -> str | None:
    """None when a cluster can be started here, else the reason it cannot."""
    if os.geteuid() != 0:
        return "starting slurmctld and slurmd needs root"
    missing = [tool for tool in NEEDED if shutil.which(tool) is None
               and not Path(f"/usr/sbin/{tool}").exists()]
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): apt-get install -y slurm-wlm munge"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _munge_works() -> bool:
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        return cred.returncode == 0 and subprocess.run(["unmunge"], input=cred.stdout, capture_output=True,
                                                       timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def up(folder: Path, cpus: int | None = None) -> dict[str, str]:
    """Start munged (unless one answers), slurmctld and slurmd; wait for the node to be idle. Returns the
    environment clients need (SLURM_CONF)."""
    folder = Path(folder).resolve()
    for sub in ("state", "spool", "log"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    if not _munge_works():
        key = Path("/etc/munge/munge.key")
        if not key.exists() or key.stat().st_size == 0:
            subprocess.run(["mungekey", "-c", "-k", str(key)], check=True)
            shutil.chown(key, "munge", "munge")
            key.chmod(0o400)
        Path("/run/munge").mkdir(exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True)
        (folder / "started-munged").write_text("")
        for _ in range(50):
            if _munge_works():
                break
            time.sleep(0.1)
    host = socket.gethostname().split(".")[0]
    cpus = cpus or os.cpu_count() or 1
    memory_mb = int(int(next(line for line in open("/proc/meminfo") if line.startswith("MemTotal")).split()[1])
                    / 1024 * 0.5)
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        f"ClusterName=wb{os.getpid()}", f"SlurmctldHost={host}", "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "AuthType=auth/munge", "CredType=cred/munge", "MpiDefault=none", "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none", "SchedulerType=sched/backfill", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "ReturnToService=2", "SchedulerParameters=sched_interval=1",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldLogFile={folder}/log/slurmctld.log", f"SlurmdLogFile={folder}/log/slurmd.log",
        "SlurmctldDebug=info", "SlurmdDebug=info",
        f"NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName=grading Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""]))
    env = dict(os.environ, SLURM_CONF=str(conf))
    subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=env)
    subprocess.run(["slurmd", "-f", str(conf)], check=True, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env).stdout
        if "idle" in state:
            return {"SLURM_CONF": str(conf)}
        time.sleep(0.3)
    down(folder)
    raise RuntimeError(f"the Slurm node never became idle; see {folder}/log")


def down(folder: Path) -> None:
    folder = Path(folder).resolve()
    pids = []
    for name in ("slurmd.pid", "slurmctld.pid"):
        try:
            pids.append(int((folder / name).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    for pid in pids:
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    if (folder / "started-munged").exists():
        found = subprocess.run(["pgrep", "-u", "munge", "-x", "munged"], capture_output=True, text=True).stdout.split()
        for pid in found:
            try:
                os.kill(int(pid), 15)
            except ProcessLookupError:
                pass
        (folder / "started-munged").unlink()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("up", "down"):
        print(__doc__.strip().splitlines()[3:5], file=sys.stderr)
        raise SystemExit(2)
    if sys.argv[1] == "up":
        reason = why_unavailable()
        if reason:
            print(reason, file=sys.stderr)
            raise SystemExit(1)
        print(f"export SLURM_CONF={up(Path(sys.argv[2]))['SLURM_CONF']}")
    else:
        down(Path(sys.argv[2]))
