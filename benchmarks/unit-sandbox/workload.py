"""What vLLM does with the GPUs, in small: NCCL all-reduce across one process per GPU (two at most),
a CUDA tensor shared between processes (CUDA IPC, as vLLM's custom all-reduce; with 2 GPUs),
torch.compile (Triton JIT, gcc for the launcher), pinned host memory, POSIX shared memory and
setrlimit(NOFILE). Prints what worked per rank; exits non-zero when something did not."""

import os
import resource
import sys
import time
from multiprocessing import shared_memory

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29555")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    x = torch.ones(1 << 22, device="cuda") * (rank + 1)
    dist.all_reduce(x)
    ok = {"allreduce": x[0].item() == world * (world + 1) / 2}
    if world > 1 and rank == 0:
        q.put(torch.arange(10, device="cuda:0", dtype=torch.float32))
        time.sleep(3)
    elif world > 1:
        t = q.get()
        ok["cuda_ipc"] = float(t.sum().cpu()) == 45.0
    f = torch.compile(lambda a: (a * 2).sin().sum())
    want = 1024 * torch.sin(torch.tensor(2.0)).item()
    ok["compile"] = abs(float(f(torch.ones(1024, device="cuda"))) - want) < 1e-1
    p = torch.empty(1 << 24, pin_memory=True)
    ok["pinned"] = p.is_pinned()
    shm = shared_memory.SharedMemory(create=True, size=1 << 20)
    shm.close()
    shm.unlink()
    ok["shm"] = True
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    ok["setrlimit"] = True
    dist.barrier()
    dist.destroy_process_group()
    print(f"{os.environ.get('VARIANT')} rank {rank}: {ok}", flush=True)
    if not all(ok.values()):
        sys.exit(1)


if __name__ == "__main__":
    try:  # positive control: setuid (in @privileged) to one's own uid is refused under the filter
        os.setuid(os.getuid())
        print(f"{os.environ.get('VARIANT')} control: setuid(own uid) allowed", flush=True)
    except PermissionError:
        print(f"{os.environ.get('VARIANT')} control: setuid(own uid) refused (EPERM)", flush=True)
    q = mp.get_context("spawn").Queue()
    world = min(2, torch.cuda.device_count())
    mp.spawn(worker, args=(world, q), nprocs=world)
