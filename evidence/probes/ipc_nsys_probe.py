import os, subprocess
NSYS = '/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys'
def ipc():
    return {k: open(f'/proc/sysvipc/{k}').read().splitlines()[1:] for k in ('shm', 'sem', 'msg')}
code = 'import torch, os; torch.zeros(1, device="cuda"); print("ok", os.getpid(), flush=True)'
print('before', ipc(), flush=True)
r = subprocess.run([NSYS, 'profile', '-t', 'cuda,nvtx', '-o', '/tmp/x1', '--force-overwrite', 'true', 'python3', '-c', code], capture_output=True, text=True, timeout=120)
print('plain rc', r.returncode, r.stdout[-400:], r.stderr[-400:], flush=True)
print('after plain', ipc(), flush=True)
pid = os.fork()
if pid == 0:
    os.unshare(os.CLONE_NEWIPC | os.CLONE_NEWNS)
    r = subprocess.run([NSYS, 'profile', '-t', 'cuda,nvtx', '-o', '/tmp/x2', '--force-overwrite', 'true', 'python3', '-c', code], capture_output=True, text=True, timeout=120)
    print('ns rc', r.returncode, r.stdout[-400:], r.stderr[-600:], flush=True)
    print('inside ns after', ipc(), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print('after ns', ipc(), flush=True)
