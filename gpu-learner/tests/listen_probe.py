"""One rank under torchrun (test_bound_torchrun.py): after a gloo all-reduce, rank 0 prints every listening TCP
socket of itself and of torchrun's agent (its parent), as `LISTEN <address>:<port>` lines in /proc/net's hex."""

import os
from pathlib import Path

import torch
import torch.distributed as dist


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def main() -> None:
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    if dist.get_rank() == 0:
        inodes = socket_inodes(os.getpid()) | socket_inodes(os.getppid())
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    print("LISTEN", fields[1], flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
