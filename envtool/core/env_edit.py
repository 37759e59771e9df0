"""Edit an environment.yml's conda dependency list as text, minimally: `envtool add` replaces the
line of a package already listed (or appends one after the last conda dependency), `envtool drop`
deletes the package's line. Every other line — comments, order, the pip section, variables — is
kept byte for byte. Pure: text in, text out.

Only a block list (`dependencies:` then `  - spec` lines) is edited in place; a flow list
(`dependencies: [a, b]`) or a file the edit would not read back as intended is rendered again
from its model (render_environment_yml: comments there are lost, and `edit_dependencies` says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envtool.core.spec import (
    CondaSpec,
    EnvSpec,
    _scalar,
    parse_conda_spec,
    parse_environment_yml,
    render_environment_yml,
)
from envtool.errors import UsageError


@dataclass(frozen=True)
class Edit:
    text: str  # the new environment.yml
    added: tuple[str, ...] = ()  # specs appended
    replaced: tuple[tuple[str, str], ...] = ()  # (old spec, new spec)
    dropped: tuple[str, ...] = ()  # specs removed
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.replaced or self.dropped)


def _dependency_items(text: str) -> tuple[Any, list[Any]] | None:
    """The composed `dependencies` sequence node and its items, or None when the file has no
    block list there (absent, empty, or flow style)."""
    from envtool.core.safe_load import strict_loader

    loader = strict_loader()(text)
    try:
        root = loader.get_single_node()
    finally:
        loader.dispose()
    for key, value in getattr(root, "value", []) or []:
        if getattr(key, "value", None) == "dependencies":
            if getattr(value, "tag", "").endswith(":seq") and not value.flow_style and value.value:
                return value, list(value.value)
            return None
    return None


def _names(spec: EnvSpec) -> list[str]:
    return [d.name for d in spec.dependencies]


def edit_dependencies(text: str, source: str, add: list[CondaSpec], drop: list[str]) -> Edit:
    """environment.yml text with `add` listed (replacing a spec of the same name) and `drop`'s
    names removed. Raises UsageError naming `source` for a name to drop that is not listed."""
    spec = parse_environment_yml(text, source)  # refuses what is not an environment file
    listed = set(_names(spec))
    for name in drop:
        if name not in listed:
            raise UsageError(
                f"{source}: {name!r} is not among the conda dependencies",
                f"listed: {', '.join(sorted(listed)) or 'none'}",
            )
    found = _dependency_items(text)
    if found is None:
        return _rendered(spec, add, drop, "the dependency list is not a block list")
    _, items = found
    lines = text.splitlines(keepends=True)
    # line index -> replacement text (None: delete); insertions after a line index
    replace_at: dict[int, str | None] = {}
    last_conda: Any = None
    first_other: Any = None
    by_name: dict[str, Any] = {}
    for item in items:
        if getattr(item, "tag", "").endswith(":str"):
            try:
                name = parse_conda_spec(item.value).name
            except ValueError:
                continue
            if item.start_mark.line != item.end_mark.line:
                return _rendered(spec, add, drop, f"the entry for {name} spans several lines")
            by_name.setdefault(name, item)
            last_conda = item
        elif first_other is None:
            first_other = item
    replaced, added, dropped = [], [], []
    for name in drop:
        item = by_name[name]
        replace_at[item.start_mark.line] = None
        dropped.append(item.value)
    new_lines: list[str] = []
    for s in add:
        item = by_name.get(s.name)
        if item is not None and item.start_mark.line not in replace_at:
            line = lines[item.start_mark.line]
            tail = line[item.end_mark.column :]  # a trailing comment and the newline
            replace_at[item.start_mark.line] = (
                line[: item.start_mark.column] + _scalar(s.raw) + tail
            )
            replaced.append((item.value, s.raw))
            continue
        anchor = last_conda or first_other
        prefix = lines[anchor.start_mark.line][: anchor.start_mark.column]  # "  - "
        new_lines.append(prefix + _scalar(s.raw) + "\n")
        added.append(s.raw)
    out: list[str] = []
    insert_after = last_conda.start_mark.line if last_conda is not None else None
    insert_before = first_other.start_mark.line if last_conda is None else None
    for i, line in enumerate(lines):
        if i == insert_before:
            out += new_lines
        if i in replace_at:
            if replace_at[i] is not None:
                out.append(replace_at[i])  # type: ignore[arg-type]
        else:
            out.append(line)
        if i == insert_after:
            if not line.endswith("\n"):
                out[-1] += "\n"
            out += new_lines
    edited = "".join(out)
    if not _reads_as(edited, source, spec, add, drop):
        return _rendered(spec, add, drop, "the edited file did not read back as intended")
    return Edit(edited, tuple(added), tuple(replaced), tuple(dropped))


def _expected(spec: EnvSpec, add: list[CondaSpec], drop: list[str]) -> list[CondaSpec]:
    deps = [d for d in spec.dependencies if d.name not in set(drop)]
    for s in add:
        at = next((i for i, d in enumerate(deps) if d.name == s.name), None)
        if at is None:
            deps.append(s)
        else:
            deps[at] = s
    # a name listed twice keeps its later entries; the edit replaces the first
    return deps


def _reads_as(text: str, source: str, spec: EnvSpec, add: list[CondaSpec], drop: list[str]) -> bool:
    try:
        again = parse_environment_yml(text, source)
    except UsageError:
        return False
    want = [(d.name, d.version, d.build, d.channel) for d in _expected(spec, add, drop)]
    got = [(d.name, d.version, d.build, d.channel) for d in again.dependencies]
    return want == got and again.pip == spec.pip and again.channels == spec.channels


def _rendered(spec: EnvSpec, add: list[CondaSpec], drop: list[str], why: str) -> Edit:
    old = {d.name: d for d in spec.dependencies}
    deps = _expected(spec, add, drop)
    new = EnvSpec(
        name=spec.name,
        channels=spec.channels,
        dependencies=deps,
        pip=spec.pip,
        variables=spec.variables,
        prefix=spec.prefix,
        source=spec.source,
        has_pip_section=spec.has_pip_section,
        platforms=spec.platforms,
    )
    return Edit(
        render_environment_yml(new),
        tuple(s.raw for s in add if s.name not in old),
        tuple((old[s.name].raw, s.raw) for s in add if s.name in old),
        tuple(old[n].raw for n in drop),
        (f"{spec.source}: {why}: the file was written again from its model (comments dropped)",),
    )
