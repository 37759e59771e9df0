"""The environment.yml model: parse conda spec strings and environment files, render them back.

Pure: functions take text and return models. Files are read by the commands. PyYAML is
imported lazily (inside the functions) so `envtool --help` never loads it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from envtool.core.shell_quote import printable
from envtool.errors import UsageError

# Bounds on what a spec may hold: a 5000-digit version is no version (int() refuses it, and
# echoing it back fills the screen). Real specs are < 100 characters, version parts < 20.
MAX_SPEC_CHARS = 1000
MAX_VERSION_PART = 64
MAX_PIP_CHARS = 4096  # a pip entry may carry a URL and --hash options
# PEP 508 distribution names (core/pip_lock checks lock entries with the same rule)
PIP_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
# a newline in an entry would become a second requirement line in the requirements file
_PIP_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

# A conda package name: letters, digits and . _ - (e.g. ruamel.yaml, cuda-version, _openmp_mutex).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_OPERATOR_START = "=<>!~"


@dataclass(frozen=True)
class CondaSpec:
    """One conda dependency as written: `[channel::]name[ version[ build]]`.

    `version` keeps the constraint text with conda's single `=` shorthand removed:
    `pytorch=1.12` -> "1.12" (conda reads it as 1.12.*), `pytorch==2.3.1` -> "==2.3.1",
    `pytorch>=2.0,<2.4` -> ">=2.0,<2.4". None when no version was given.
    """

    name: str
    version: str | None = None
    build: str | None = None
    channel: str | None = None
    raw: str = ""

    def render(self) -> str:
        """Back to a conda string: `channel::name=version=build`, or the space form when the
        version carries an operator (`pytorch >=2.0,<2.4 cuda*`)."""
        head = f"{self.channel}::{self.name}" if self.channel else self.name
        version = self.version
        if version is None and self.build is not None:
            version = "*"
        if version is None:
            return head
        has_operator = version[0] in _OPERATOR_START or "," in version or "|" in version
        if self.build is None:
            return head + version if has_operator else f"{head}={version}"
        if has_operator:
            return f"{head} {version} {self.build}"
        return f"{head}={version}={self.build}"


def parse_conda_spec(text: str) -> CondaSpec:
    """Split a conda spec string into (channel, name, version, build).

    Handles `pytorch::pytorch=1.12.*`, `nvidia::cuda-toolkit`, `pytorch==2.3.1`,
    `pytorch=2.3.1=py3.11_cuda12.1*`, `pytorch 2.3.1 cuda*`, `pytorch>=2.0,<2.4`,
    `python >= 3.8`, `pytorch[version='>=2', build='cuda*']`, trailing `# comments`.
    Raises ValueError on text that is not a spec (the caller adds file and line).
    """
    raw = text
    if len(text) > MAX_SPEC_CHARS:
        raise ValueError(
            f"not a conda spec: {_short(raw)} (longer than {MAX_SPEC_CHARS} characters)"
        )
    # YAML already drops " # comment"; a spec string passed directly may still carry one.
    s = re.split(r"\s#", text, maxsplit=1)[0].strip()
    if not s:
        raise ValueError(f"empty conda spec {_short(raw)}")
    channel = None
    if "::" in s:
        channel, _, s = s.partition("::")
        channel = channel.strip() or None
        s = s.strip()
    brackets: dict[str, str] = {}
    if "[" in s and s.endswith("]"):
        s, _, inner = s[:-1].partition("[")
        brackets = _parse_brackets(inner, raw)
        s = s.strip()
    m = _NAME.match(s)
    if not m:
        raise ValueError(f"not a conda spec: {_short(raw)} (expected a package name first)")
    name = m.group(0)
    rest = s[m.end() :].strip()
    version: str | None = None
    build: str | None = None
    if rest:
        if rest[0] == "=" and not rest.startswith("=="):
            # name=version[=build] shorthand
            parts = rest[1:].split("=")
            # "=1.2=build" -> ["1.2", "build"]; "==" inside is not valid in this form
            version = parts[0].strip() or None
            if len(parts) > 1:
                build = "=".join(parts[1:]).strip() or None
            if len(parts) > 2 or (version and " " in version):
                raise ValueError(f"not a conda spec: {_short(raw)}")
        else:
            tokens = _join_operator_tokens(rest.split())
            if len(tokens) > 2:
                raise ValueError(f"not a conda spec: {_short(raw)} (too many parts)")
            version = tokens[0]
            build = tokens[1] if len(tokens) > 1 else None
            # conda also reads `pytorch>=2.7.0=cuda12*` as version >=2.7.0, build cuda12*
            m_build = re.fullmatch(r"(.*?[^=<>!~,|])=([^=<>!~,|]+)", version)
            if m_build and build is None:
                version, build = m_build.group(1), m_build.group(2)
    version = brackets.get("version", version)
    build = brackets.get("build", build)
    channel = brackets.get("channel", channel)
    if version is not None and any(c.isspace() for c in version):
        raise ValueError(f"not a conda spec: {_short(raw)}")
    for text_part in (version, build):
        if text_part and any(len(p) > MAX_VERSION_PART for p in re.findall(r"\w+", text_part)):
            raise ValueError(
                f"not a conda spec: {_short(raw)} (a version or build part is longer than "
                f"{MAX_VERSION_PART} characters)"
            )
    return CondaSpec(name=name, version=version, build=build, channel=channel, raw=raw)


def _short(value: object, limit: int = 80) -> str:
    """A value echoed in an error: repr'd, control characters escaped, cut to `limit` characters
    (the file may hold megabytes on one line)."""
    text = repr(value)[: limit + 1]
    return printable(text if len(text) <= limit else text[: limit - 1] + "…")


def _pip_entry_problem(text: str) -> str | None:
    """Why a pip entry is refused before anything reads it further: too long, or a requirement
    whose version has a part no version has (5000 digits)."""
    if len(text) > MAX_PIP_CHARS:
        return f"longer than {MAX_PIP_CHARS} characters"
    if _PIP_CONTROL.search(text):
        return "holds a newline or control character (write one requirement per entry)"
    line = parse_pip_line(text)
    if line.name and not PIP_NAME.fullmatch(line.name):
        return f"{line.name!r} is not a valid pip package name (PEP 508)"
    if line.specifier and any(
        len(p) > MAX_VERSION_PART for p in re.findall(r"\w+", line.specifier)
    ):
        return f"a version part is longer than {MAX_VERSION_PART} characters"
    return None


def _join_operator_tokens(tokens: list[str]) -> list[str]:
    """`python >= 3.8` -> ['>=3.8']; `pytorch >=2.0, <2.4` -> ['>=2.0,<2.4']."""
    out: list[str] = []
    for tok in tokens:
        # glue a dangling operator or comma to what follows it
        if out and (out[-1][-1] in "=<>!~," or (tok[0] in ",|" and len(out) == 1)):
            out[-1] += tok
        else:
            out.append(tok)
    return out


def _parse_brackets(inner: str, raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in re.finditer(r"(\w+)\s*=\s*(?:'([^']*)'|\"([^\"]*)\"|([^,\]]*))", inner):
        key = m.group(1)
        value = next(g for g in m.groups()[1:] if g is not None).strip()
        out[key] = value
    if not out and inner.strip():
        raise ValueError(f"not a conda spec: {_short(raw)} (bad [key=value] part)")
    return out


@dataclass(frozen=True)
class PipLine:
    """One entry of an environment.yml `pip:` list.

    kind: "requirement" (`torch==2.1.0+cu121`), "option" (`--extra-index-url URL`, `-f URL`),
    or "other" (`-e .`, `-r file`, `git+https://…`, a path or URL).
    """

    kind: str
    raw: str
    name: str | None = None
    specifier: str | None = None  # "==2.1.0+cu121", ">=1.8,<2"
    option: str | None = None  # "--extra-index-url", "--find-links", "--index-url"
    value: str | None = None  # the option's argument

    @property
    def pinned_version(self) -> str | None:
        """'==2.1.0+cu121' -> '2.1.0+cu121'; None unless an exact == pin."""
        if self.specifier and re.fullmatch(r"===?[^,<>!=~]+", self.specifier):
            return self.specifier.lstrip("=").strip()
        return None


_PIP_OPTIONS = {
    "-f": "--find-links",
    "--find-links": "--find-links",
    "-i": "--index-url",
    "--index-url": "--index-url",
    "--extra-index-url": "--extra-index-url",
}
_PIP_REQ = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._\-]*)\s*(?:\[[^\]]*\])?\s*(?P<spec>[=<>!~][^;#]*)?\s*(?:;.*)?$"
)


def parse_pip_line(text: str) -> PipLine:
    """Classify one pip entry; never raises (anything unrecognised is kind "other")."""
    s = re.split(r"\s#", text, maxsplit=1)[0].strip()
    for flag, option in _PIP_OPTIONS.items():
        if s == flag or s.startswith(flag + " ") or s.startswith(flag + "="):
            value = s[len(flag) :].lstrip(" =").strip() or None
            return PipLine("option", text, option=option, value=value)
    if s.startswith("-") or "://" in s or s.startswith((".", "/")) or "@" in s.split(";")[0]:
        return PipLine("other", text)
    m = _PIP_REQ.match(s)
    if not m:
        return PipLine("other", text)
    spec = (m.group("spec") or "").replace(" ", "") or None
    return PipLine("requirement", text, name=m.group("name"), specifier=spec)


# Flags the pip section may carry besides _PIP_OPTIONS: they change where uv looks, never what
# it reads or runs.
_PIP_PLAIN_FLAGS = ("--no-index", "--offline")
_VCS = ("git+", "hg+", "svn+", "bzr+")
_PIP_DIRECT = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._\-]*)\s*(?:\[[^\]]*\])?\s*@\s*(?P<target>\S.*)$"
)


def pip_line_name(line: PipLine) -> str | None:
    """The project a pip entry installs: a requirement's name, or `name @ URL`'s."""
    if line.name:
        return line.name
    direct = _PIP_DIRECT.match(re.split(r"\s#", line.raw, maxsplit=1)[0].strip())
    return direct.group("name") if line.kind == "other" and direct else None


_BUILD_FIX = (
    "name a released version or a .whl instead, or install it into the environment after "
    "create: envtool run -n NAME -- pip install …"
)


def pip_lock_problem(line: PipLine) -> tuple[str, str] | None:
    """Why a pip entry cannot be locked without running code or reading a file envtool does not
    check, and the fix; None when it can. A lock is wheels only: an sdist, a VCS checkout, a
    local folder or `-e` is built by running its setup code (a cloned repo's environment.yml is
    data, not a program), and `-r`/`-c` pull in a file whose lines uv expands
    (`${GITHUB_TOKEN}`) and fetches."""
    s = re.split(r"\s#", line.raw, maxsplit=1)[0].strip()
    if line.kind != "other" or s in _PIP_PLAIN_FLAGS:
        return None
    wheels = "; envtool locks wheels only"
    if s.startswith("-"):
        flag = s.split(None, 1)[0].split("=", 1)[0]
        if flag in ("-e", "--editable"):
            reason = "an editable install is built by running the project's setup code"
            return reason + wheels, _BUILD_FIX
        if flag in ("-r", "--requirement", "-c", "--constraint"):
            reason = f"{flag} reads another file, which the lock would not record or check"
            return reason + wheels, "list the packages in the pip section itself"
        return (
            f"the pip option {flag} is not one envtool passes to uv (it passes --index-url, "
            "--extra-index-url, --find-links and --no-index)",
            "drop the line from the pip section",
        )
    direct = _PIP_DIRECT.match(s)  # `name @ URL`, else a bare URL or path
    target = (direct.group("target") if direct else s).split(";")[0].strip()
    if target.startswith(_VCS):
        return "a VCS checkout is built by running its setup code" + wheels, _BUILD_FIX
    if not re.split(r"[?#]", target, maxsplit=1)[0].endswith(".whl"):
        return "a source (not a .whl) is built by running its setup code" + wheels, _BUILD_FIX
    return None


def normalize_pip_name(name: str) -> str:
    """PEP 503: 'Torch_Vision' -> 'torch-vision'."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class EnvSpec:
    """A parsed environment.yml."""

    name: str | None
    channels: list[str] = field(default_factory=list)
    dependencies: list[CondaSpec] = field(default_factory=list)
    pip: list[str] = field(default_factory=list)
    variables: dict[str, str] = field(default_factory=dict)
    prefix: str | None = None
    source: str = "environment.yml"
    has_pip_section: bool = False
    # conda-lock's non-standard `platforms:` key (e.g. [linux-64, osx-arm64]); [] when absent
    platforms: list[str] = field(default_factory=list)

    def find(self, *names: str) -> list[CondaSpec]:
        """Conda dependencies with one of these names (in file order)."""
        wanted = set(names)
        return [d for d in self.dependencies if d.name in wanted]

    def pip_lines(self) -> list[PipLine]:
        return [parse_pip_line(p) for p in self.pip]


def parse_environment_yml(text: str, source: str) -> EnvSpec:
    """environment.yml text -> EnvSpec. Raises UsageError naming `source`, the line and the fix."""
    import yaml

    from envtool.core.safe_load import YamlRefused, check_depth, strict_loader

    fix = "fix the YAML at that line (indent with spaces, one `- spec` per dependency)"
    # the strict loader (no aliases, no duplicate keys) keeps the composed nodes for line numbers:
    # a 359-byte alias bomb must not expand into gigabytes
    try:
        loader = strict_loader()(text)
        try:
            root = loader.get_single_node()
            data = loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
    except YamlRefused as exc:
        where = f"{source}:{exc.line}" if exc.line else source
        raise UsageError(
            f"{where}: {exc.reason}", exc.hint or "write the value out in full"
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        problem = exc.problem or exc.context or "malformed YAML"
        raise UsageError(f"{where}: malformed YAML: {problem}", fix) from None
    except yaml.YAMLError as exc:  # e.g. "expected a single document"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"{source}: malformed YAML: {first}", fix) from None
    except RecursionError:
        raise UsageError(f"{source}: nested too deeply", fix) from None
    check_depth(data, source, fix)

    if data is None:
        raise UsageError(f"{source}: the file is empty", "add at least a `dependencies:` list")
    if not isinstance(data, dict):
        raise UsageError(
            f"{source}:{_line(root)}: expected a mapping with name/channels/dependencies, "
            f"got {_kind(data)}",
            "start the file with `name: ...` and `dependencies:` keys",
        )

    lock = _lock_kind(data)
    if lock is not None:  # every key below is missing: it used to lock an empty request
        from envtool.core.shell_quote import quote_posix

        raise UsageError(
            f"{source} is a {lock}, not an environment.yml",
            f"install it: `envtool install NAME --lock {quote_posix(source)}`",
        )

    def where(key: str, index: int | None = None) -> str:
        return f"{source}:{_line(_child(root, key, index))}"

    name = data.get("name")
    if name is not None and not isinstance(name, (str, int, float)):
        raise UsageError(f"{where('name')}: `name` must be a string", "write `name: myenv`")
    channels = data.get("channels") or []
    if not isinstance(channels, list) or not all(isinstance(c, str) for c in channels):
        raise UsageError(
            f"{where('channels')}: `channels` must be a list of channel names",
            "write `channels:` followed by lines like `  - conda-forge`",
        )
    deps_raw = data.get("dependencies")
    if deps_raw is None:
        deps_raw = []
    if not isinstance(deps_raw, list):
        raise UsageError(
            f"{where('dependencies')}: `dependencies` must be a list, got {_kind(deps_raw)}",
            "write each dependency on its own line starting with `  - `",
        )
    deps: list[CondaSpec] = []
    pip: list[str] = []
    has_pip_section = False
    for i, item in enumerate(deps_raw):
        if isinstance(item, dict):
            if set(item) != {"pip"}:
                keys = ", ".join(sorted(map(str, item)))
                raise UsageError(
                    f"{where('dependencies', i)}: unexpected mapping ({keys}) in dependencies",
                    "only a nested `- pip:` list is allowed there",
                )
            entries = item["pip"] or []
            if not isinstance(entries, list) or not all(
                isinstance(e, (str, int, float)) for e in entries
            ):
                raise UsageError(
                    f"{where('dependencies', i)}: `pip:` must be a list of requirement strings",
                    "write `- pip:` followed by lines like `    - torch==2.3.1`",
                )
            has_pip_section = True
            for e in entries:
                problem = _pip_entry_problem(str(e))
                if problem:
                    raise UsageError(
                        f"{where('dependencies', i)}: pip entry {_short(str(e))}: {problem}",
                        "write a requirement like `torch==2.3.1`",
                    )
            pip.extend(str(e) for e in entries)
            continue
        if not isinstance(item, str):
            raise UsageError(
                f"{where('dependencies', i)}: dependency {_short(item)} is not a spec string",
                'quote it, e.g. `- "python=3.10"`',
            )
        try:
            deps.append(parse_conda_spec(item))
        except ValueError as exc:
            raise UsageError(
                f"{where('dependencies', i)}: {exc}",
                "use conda's form `name`, `name=1.2`, `name>=1.2,<2` or `channel::name=1.2`",
            ) from None
    variables = data.get("variables") or {}
    if not isinstance(variables, dict):
        raise UsageError(
            f"{where('variables')}: `variables` must be a mapping",
            "write `variables:` followed by lines like `  MY_VAR: value`",
        )
    prefix = data.get("prefix")
    platforms = data.get("platforms") or []
    if not isinstance(platforms, list):
        raise UsageError(
            f"{where('platforms')}: `platforms` must be a list",
            "write `platforms:` followed by lines like `  - linux-64`",
        )
    return EnvSpec(
        name=None if name is None else str(name),
        channels=list(channels),
        dependencies=deps,
        pip=pip,
        variables={str(k): "" if v is None else str(v) for k, v in variables.items()},
        prefix=None if prefix is None else str(prefix),
        source=source,
        has_pip_section=has_pip_section,
        platforms=[str(p) for p in platforms],
    )


def _lock_kind(data: dict[Any, Any]) -> str | None:
    """A lock file given where a request belongs: conda-lock's v1 (`metadata:` + `package:`) or
    rattler's (pixi.lock: `version:` + `environments:` + `packages:`)."""
    if "package" in data and "metadata" in data:
        return "conda-lock file"
    if {"version", "environments", "packages"} <= data.keys():
        return "pixi.lock"
    return None


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string"}.get(
        type(value), type(value).__name__
    )


def _line(node: Any) -> int:
    """1-based line of a YAML node (1 when unknown)."""
    mark = getattr(node, "start_mark", None)
    return mark.line + 1 if mark is not None else 1


def _child(root: Any, key: str, index: int | None = None) -> Any:
    """The value node under `key` (or its `index`-th item) in a composed mapping node."""
    for key_node, value_node in getattr(root, "value", []):
        if getattr(key_node, "value", None) == key:
            if index is not None and isinstance(value_node.value, list):
                items = value_node.value
                if 0 <= index < len(items):
                    return items[index]
            return value_node
    return root


def _scalar(text: str) -> str:
    """A YAML scalar that reads back as exactly `text` (plain when safe, else double-quoted)."""
    import yaml

    try:
        if yaml.safe_load(f"- {text}") == [text]:
            return text
    except yaml.YAMLError:
        pass
    return json.dumps(text)  # JSON strings are valid YAML double-quoted scalars


def render_environment_yml(spec: EnvSpec) -> str:
    """EnvSpec -> environment.yml text in conda's usual layout. Deterministic for a given spec."""
    lines: list[str] = []
    if spec.name is not None:
        lines.append(f"name: {_scalar(spec.name)}")
    if spec.channels:
        lines.append("channels:")
        lines += [f"  - {_scalar(c)}" for c in spec.channels]
    lines.append("dependencies:" if (spec.dependencies or spec.pip) else "dependencies: []")
    lines += [f"  - {_scalar(d.render())}" for d in spec.dependencies]
    if spec.pip or spec.has_pip_section:
        lines.append("  - pip:")
        lines += [f"      - {_scalar(p)}" for p in spec.pip]
    if spec.variables:
        lines.append("variables:")
        lines += [f"  {_scalar(k)}: {_scalar(v)}" for k, v in spec.variables.items()]
    if spec.platforms:
        lines.append("platforms:")
        lines += [f"  - {_scalar(p)}" for p in spec.platforms]
    if spec.prefix is not None:
        lines.append(f"prefix: {_scalar(spec.prefix)}")
    return "\n".join(lines) + "\n"
