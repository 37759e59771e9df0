"""The environment profiles envtool ships (`create NAME --profile P`): environments/P/environment.yml
in a checkout, envtool/_data/environments/P/ in a wheel."""

from __future__ import annotations

from pathlib import Path

from envtool.errors import UsageError

DEFAULT_PROFILE = "pytorch"


def profiles_dir() -> Path:
    """Shipped profiles: envtool/_data/environments in a wheel, else the repo's environments/."""
    from importlib import resources

    import envtool

    packaged = resources.files("envtool").joinpath("_data", "environments")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(envtool.__file__).resolve().parent.parent / "environments"


def read_profile(name: str) -> tuple[str, str]:
    """(text, path) of the profile's environment.yml; a name not shipped is a UsageError."""
    base = profiles_dir()
    path = base / name / "environment.yml"
    if not path.is_file():
        known = (
            sorted(p.name for p in base.iterdir() if (p / "environment.yml").is_file())
            if base.is_dir()
            else []
        )
        raise UsageError(
            f"--profile {name}: no such profile",
            f"use one of {', '.join(known) or '(none shipped)'}",
        )
    from envtool.adapters.files import ENV_FILE_LIMIT, read_text

    return read_text(path, ENV_FILE_LIMIT, what="environment file"), str(path)
