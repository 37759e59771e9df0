"""Rank 1 raises inside a `@record`-decorated main: torchrun's error file gets the exception."""

import os

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    rank = int(os.environ["RANK"])
    print(f"rank {rank} up", flush=True)
    if rank == 1:
        raise KeyError("missing-shard-7")


if __name__ == "__main__":
    main()
