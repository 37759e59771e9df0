"""A copy of a --compile-cache's tile picks (gemv-tiles.json) with one product's tile replaced,
so two templates, or two tiles of one product, are timed on otherwise the same picks: a start
on the copy times nothing and runs exactly these (round 28).

    python bench/gpu/set_pick.py /tmp/ci /tmp/ci-q8 --shape 6144x2048 --tile 8x1024x4x0
    python bench/gpu/set_pick.py /tmp/ci /tmp/ci-sel --form 1

--shape is the product's weight (out x in: qkv 6144x2048 at 1.3B); --tile one of the
template's candidates for it (a fourth element 0: x read by tl.load). --form sets attention's
form (ATTN_SELECT: 1 puts this step's key and value into its tiles). Anything else is a
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
    ap.add_argument("--shape", help="the product's weight, out x in: 6144x2048")
    ap.add_argument("--tile", help="its tile: 8x1024x4 or 8x1024x4x0")
    ap.add_argument("--form", type=int, choices=(0, 1), help="attention's form (ATTN_SELECT)")
    ap.add_argument("--template", default="templates/generate.py")
    a = ap.parse_args()
    if (a.shape is None) != (a.tile is None) or (a.shape is None and a.form is None):
        ap.error("give --shape and --tile, or --form, or all three")
    g = load_template(a.template)
    path = a.src / g.TILE_PICKS_FILE
    stamp, picks = g.read_tile_picks_file(path)  # read as a start reads it (bounded, no links)
    if not picks:
        ap.error(f"{path}: no tile picks there (run the template with --compile-cache {a.src})")
    said, forms = [], [k for k in picks if k[:1] == ("attention",)]  # the rest: products
    if a.form is not None:
        if len(forms) != 1:
            ap.error(f"--form: {len(forms)} attention entries in {path} (an older template's?)")
        said.append(f"attention: {picks[forms[0]]} -> ({a.form},)")
        picks[forms[0]] = (a.form,)
    if a.shape is not None:
        said.append(set_tile(ap, a, g, path, picks, [k for k in picks if k not in forms]))
    g.write_tile_picks(a.dst / g.TILE_PICKS_FILE, picks, stamp)
    if g.read_tile_picks(a.dst / g.TILE_PICKS_FILE, stamp) != picks:
        sys.exit(f"{a.dst}: the picks could not be written there")
    print(f"{'; '.join(said)}; the other picks as in {path}")


def set_tile(
    ap: argparse.ArgumentParser, a: argparse.Namespace, g, path: Path, picks: dict, products: list
) -> str:
    """Replace --shape's tile in picks (one of products) by --tile (a usage error unless both
    are the template's)."""
    shapes = ["x".join(map(str, k[:2])) for k in products]  # out x in, as --shape is written
    keys = [k for k, s in zip(products, shapes, strict=True) if s == a.shape.lower()]
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
    return f"{a.shape}: {before} -> {tile}"


if __name__ == "__main__":
    main()
