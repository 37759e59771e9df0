"""templates/generate.py as a module, the way the GPU scripts here drive its parts (run them
from the repo root: `python bench/gpu/NAME.py`)."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_template(path: str = "templates/generate.py") -> ModuleType:
    """The generate template, imported without running its main (its argv set aside). A
    --template that is no file is a one-line usage error (exit 2), not a traceback."""
    if not Path(path).is_file():
        print(f"{path}: no such template file (--template takes a copy of templates/generate.py)",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    sys.argv = ["gen"]
    spec = importlib.util.spec_from_file_location("gen", path)
    g = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(g)
    return g
