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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", type=Path, help="a --compile-cache a start tuned into")
    ap.add_argument("dst", type=Path, help="the cache to write the copy into (made if absent)")
    ap.add_argument("--shape", required=True, help="the product's weight, out x in: 6144x2048")
    ap.add_argument("--tile", required=True, help="its tile: 8x1024x4 or 8x1024x4x0")
    ap.add_argument("--template", default="templates/generate.py")
    a = ap.parse_args()
    g = load_template(a.template)
    path = a.src / g.TILE_PICKS_FILE
    stamp, picks = g.read_tile_picks_file(path)  # read as a start reads it (bounded, no links)
    if not picks:
        ap.error(f"{path}: no tile picks there (run the template with --compile-cache {a.src})")
    shapes = ["x".join(map(str, k[:2])) for k in picks]  # out x in, as --shape is written
    keys = [k for k, s in zip(picks, shapes, strict=True) if s == a.shape.lower()]
    if len(keys) != 1:
        found = ", ".join(shapes)
        ap.error(f"--shape {a.shape}: {len(keys)} products of that shape in {path} ({found})")
    key = keys[0]
    try:  # the candidates' own tiles, named as --tile writes them
        known = {"x".join(map(str, c)): c for c in g.gemv_candidates(key)}
    except (IndexError, TypeError, ValueError, KeyError):  # a key no start of the template wrote
        ap.error(f"{path}: the {a.shape} entry is not a product of {a.template}")
    tile = known.get(a.tile.lower())
    if tile is None:
        ap.error(f"--tile {a.tile}: not a candidate of {a.shape} ({', '.join(known)})")
    before, picks[key] = picks[key], tile
    g.write_tile_picks(a.dst / g.TILE_PICKS_FILE, picks, stamp)
    if g.read_tile_picks(a.dst / g.TILE_PICKS_FILE, stamp) != picks:
        sys.exit(f"{a.dst}: the picks could not be written there")
    print(f"{a.shape}: {before} -> {tile}; {len(picks) - 1} other picks as in {path}")


if __name__ == "__main__":
    main()
