"""A copy of a --compile-cache's tile picks (gemv-tiles.json) with one product's tile replaced,
so two templates, or two tiles of one product, are timed on otherwise the same picks: a start
on the copy times nothing and runs exactly these (round 28).

    python bench/gpu/set_pick.py /tmp/ci /tmp/ci-q8 --shape 6144x2048 --tile 8x1024x4x0

--shape is the product's weight (out x in: qkv 6144x2048 at 1.3B); --tile one of the
template's candidates for it (a fourth element 0: x read by tl.load). Anything else is a
usage error (exit 2): a tile the template does not know would be timed again at start, and
the pair would not be what it says.
"""

import argparse
import sys
from pathlib import Path

from template import load_template


def parse_ints(text: str, what: str, ap: argparse.ArgumentParser) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        ap.error(f"{what} {text!r}: numbers joined by x (6144x2048, 8x1024x4x0)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", type=Path, help="a --compile-cache a start tuned into")
    ap.add_argument("dst", type=Path, help="the cache to write the copy into (made if absent)")
    ap.add_argument("--shape", required=True, help="the product's weight, out x in: 6144x2048")
    ap.add_argument("--tile", required=True, help="its tile: 8x1024x4 or 8x1024x4x0")
    ap.add_argument("--template", default="templates/generate.py")
    a = ap.parse_args()
    shape, tile = parse_ints(a.shape, "--shape", ap), parse_ints(a.tile, "--tile", ap)
    g = load_template(a.template)
    path = a.src / g.TILE_PICKS_FILE
    stamp, picks = g.read_tile_picks_file(path)  # read as a start reads it (bounded, no links)
    if not picks:
        ap.error(f"{path}: no tile picks there (run the template with --compile-cache {a.src})")
    keys = [k for k in picks if tuple(k[:2]) == shape]
    if len(keys) != 1:
        shapes = ", ".join(f"{k[0]}x{k[1]}" for k in picks)
        ap.error(f"--shape {a.shape}: {len(keys)} products of that shape in {path} ({shapes})")
    key = keys[0]
    if tile not in g.gemv_candidates(key):
        known = ", ".join("x".join(map(str, t)) for t in g.gemv_candidates(key))
        ap.error(f"--tile {a.tile}: not a candidate of {a.shape} ({known})")
    before, picks[key] = picks[key], tile
    g.write_tile_picks(a.dst / g.TILE_PICKS_FILE, picks, stamp)
    if g.read_tile_picks(a.dst / g.TILE_PICKS_FILE, stamp) != picks:
        sys.exit(f"{a.dst}: the picks could not be written there")
    print(f"{a.shape}: {before} -> {tile}; {len(picks) - 1} other picks as in {path}")


if __name__ == "__main__":
    main()
