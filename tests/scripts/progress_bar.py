"""A rank drawing a progress bar the way tqdm does: `\r`-redraws on stderr with no newline,
MEGABYTES of them, then one plain line `rank R done` on each stream.

usage: progress_bar.py MEGABYTES
Stdlib only (no torch import)."""

import os
import sys


def main() -> None:
    total = int(float(sys.argv[1]) * 1024 * 1024)
    rank = os.environ.get("RANK", "?")
    bar = "\r[" + "#" * 60 + "] step {:>9}"
    written, step = 0, 0
    while written < total:
        chunk = "".join(bar.format(step + i) for i in range(1000))
        sys.stderr.write(chunk)
        written += len(chunk)
        step += 1000
    sys.stderr.write(f"\nrank {rank} done\n")
    sys.stderr.flush()
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
