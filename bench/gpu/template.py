"""templates/generate.py as a module, the way the GPU scripts here drive its parts (run them
from the repo root: `python bench/gpu/NAME.py`)."""

import importlib.util
import sys
from types import ModuleType


def load_template(path: str = "templates/generate.py") -> ModuleType:
    """The generate template, imported without running its main (its argv set aside)."""
    sys.argv = ["gen"]
    spec = importlib.util.spec_from_file_location("gen", path)
    g = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(g)
    return g
