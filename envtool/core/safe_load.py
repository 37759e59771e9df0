"""Parsing untrusted YAML and JSON text: no aliases, no duplicate keys, bounded nesting.

Env files, locks and recordings come from other people's repositories. YAML aliases make a
359-byte file expand into gigabytes once walked (billion laughs) and a 3 KB `platforms: [*i]`
costs minutes; duplicate keys are silently "last wins" in PyYAML while rattler refuses the file;
a 100k-deep JSON array is a RecursionError. Every reader of outside data parses through here.
"""

from __future__ import annotations

import json
from typing import Any

from envtool.errors import UsageError

MAX_DEPTH = 64  # real env files, locks and recordings nest < 10 levels
# Python refuses int() of more than 4300 digits (sys.get_int_max_str_digits) with a ValueError;
# no real version, count or driver has more than a handful, so a long one is refused as data
MAX_INT_DIGITS = 100


def _loader_class() -> type:
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: real locks are 100k+ lines

    class StrictLoader(base):  # type: ignore[misc, valid-type]
        def construct_object(self, node: Any, deep: bool = False) -> Any:
            # a node met twice is an alias (`*x`): the composer hands back the anchored node
            if node in self.constructed_objects or node in self.recursive_objects:
                raise _Refused(node, "YAML aliases (*name) are not accepted")
            return super().construct_object(node, deep=deep)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[str] = set()
            for key_node, _ in node.value:
                key = key_node.value
                if not isinstance(key, str):  # a sequence or mapping node: no file has one
                    raise _Refused(key_node, "a list or mapping used as a key", "use a plain key")
                if key in seen:
                    raise _Refused(key_node, f"duplicate key {key!r}")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_int(self, node: Any) -> Any:
            digits = sum(c.isdigit() for c in str(node.value))
            if digits > MAX_INT_DIGITS:
                raise _Refused(node, f"an integer of {digits} digits", "quote it if it is text")
            return super().construct_yaml_int(node)

    StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
    return StrictLoader


class _Refused(Exception):
    def __init__(self, node: Any, reason: str, hint: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.hint = reason, hint
        mark = getattr(node, "start_mark", None)
        self.line = mark.line + 1 if mark is not None else None


_STRICT_SAFE_LOADER: type | None = None

# Raised by strict_loader()'s loader on an alias or a duplicate key (.reason, .line).
YamlRefused = _Refused


def strict_loader() -> type:
    """The loader parse_yaml uses, for a caller that needs the composed nodes (line numbers in
    its own errors); it raises YamlRefused. Check the value with check_depth afterwards."""
    global _STRICT_SAFE_LOADER
    if _STRICT_SAFE_LOADER is None:
        _STRICT_SAFE_LOADER = _loader_class()
    return _STRICT_SAFE_LOADER


def parse_yaml(data: str | bytes, source: str, hint: str = "fix the file") -> Any:
    """YAML from an untrusted file, refused with one line naming `source` when it uses aliases,
    repeats a key, nests deeper than MAX_DEPTH or does not parse."""
    import yaml

    value = _read_events(data)
    if value is not _OFF_PATH:  # the common case, decided on libyaml's events alone
        return value
    try:
        value = yaml.load(data, Loader=strict_loader())  # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        where = f" (line {exc.line})" if exc.line else ""
        raise UsageError(f"{source}: {exc.reason}{where}", exc.hint or hint) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UsageError(f"{source}: not valid YAML ({problem}{where})", hint) from None
    except RecursionError:
        raise UsageError(f"{source}: nested too deeply", hint) from None
    check_depth(value, source, hint)
    return value


_OFF_PATH = object()  # _read_events' answer for "not the common case: ask the loader"
_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"


def _read_events(data: str | bytes) -> Any:
    """What parse_yaml's loader returns, built from libyaml's event stream without composing
    nodes or running the Python constructor for every string (a 13,000-line lock: 0.1 s
    instead of 0.5 s). Only the common case is decided here: one document of plain maps,
    lists and scalars with untagged or standard tags, unique string keys, no anchors, within
    MAX_DEPTH. Anything else (an anchor or alias, a duplicate or non-string key, a merge key,
    a custom tag, a parse error, deeper nesting, no libyaml) returns _OFF_PATH, and the strict
    loader reads the text: it alone refuses, with its own message and line. Scalars other
    than strings are built by that loader's own constructors (its integer bound included)."""
    import yaml

    if not hasattr(yaml, "CSafeLoader"):
        return _OFF_PATH
    from yaml.events import (
        AliasEvent,
        DocumentEndEvent,
        DocumentStartEvent,
        MappingEndEvent,
        MappingStartEvent,
        ScalarEvent,
        SequenceEndEvent,
        SequenceStartEvent,
        StreamEndEvent,
        StreamStartEvent,
    )
    from yaml.nodes import ScalarNode

    loader = strict_loader()(data)
    resolved: dict[str, str] = {}  # a plain scalar's tag depends on its text alone
    constructors = loader.yaml_constructors
    # each open collection: [container, pending key or None, keys seen (a mapping) or None]
    stack: list[list[Any]] = []
    root: Any = None
    documents = 0
    try:
        while True:
            event = loader.get_event()
            kind = type(event)
            if kind is ScalarEvent:
                if event.anchor is not None or len(stack) > MAX_DEPTH:
                    return _OFF_PATH
                tag, text = event.tag, event.value
                if tag is None or tag == "!":
                    if event.implicit[0]:
                        tag = resolved.get(text)
                        if tag is None:
                            tag = resolved[text] = loader.resolve(ScalarNode, text, (True, False))
                    else:
                        tag = _STR
                if tag == _STR:
                    value: Any = text
                else:
                    build = constructors.get(tag)
                    if build is None:
                        return _OFF_PATH
                    value = build(
                        loader, ScalarNode(tag, text, event.start_mark, event.end_mark, event.style)
                    )
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                mapping = kind is MappingStartEvent
                if (
                    event.anchor is not None
                    or len(stack) > MAX_DEPTH
                    or (event.tag not in (None, "!", _MAP if mapping else _SEQ))
                ):
                    return _OFF_PATH
                if stack and stack[-1][2] is not None and stack[-1][1] is None:
                    return _OFF_PATH  # a mapping or list used as a key
                stack.append([{} if mapping else [], None, set() if mapping else None])
                continue
            elif kind is MappingEndEvent or kind is SequenceEndEvent:
                value = stack.pop()[0]
            elif kind is StreamStartEvent:
                continue
            elif kind is DocumentStartEvent:
                documents += 1
                if documents > 1:
                    return _OFF_PATH
                continue
            elif kind is DocumentEndEvent:
                continue
            elif kind is StreamEndEvent:
                return root
            else:  # an alias
                assert kind is AliasEvent
                return _OFF_PATH
            if not stack:
                root = value
                continue
            top = stack[-1]
            if top[2] is None:
                top[0].append(value)
            elif top[1] is None:  # a key: a string scalar, not seen before in this mapping
                if kind is not ScalarEvent or tag != _STR or text in top[2]:
                    return _OFF_PATH
                top[2].add(text)
                top[1] = (value,)
            else:
                top[0][top[1][0]] = value
                top[1] = None
    except Exception:  # a parse error, a refused or unbuildable scalar: the loader says why
        return _OFF_PATH
    finally:
        loader.dispose()


def parse_json(data: str | bytes, source: str, hint: str = "fix the file") -> Any:
    """JSON from an untrusted file: bounded nesting, duplicate keys refused, one-line errors."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise _Refused(None, f"duplicate key {key!r}")
            out[key] = value
        return out

    try:
        value = json.loads(data, object_pairs_hook=pairs)
    except _Refused as exc:
        raise UsageError(f"{source}: {exc.reason}", hint) from None
    except RecursionError:
        raise UsageError(f"{source}: nested too deeply", hint) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{source}: not valid JSON ({str(exc).splitlines()[0]})", hint) from None
    opening = ("[", "{") if isinstance(data, str) else (b"[", b"{")
    if data.count(opening[0]) + data.count(opening[1]) > MAX_DEPTH:  # type: ignore[arg-type]
        check_depth(value, source, hint)  # fewer brackets than the limit cannot nest past it
    return value


def check_depth(
    value: Any, source: str, hint: str = "fix the file", limit: int = MAX_DEPTH
) -> None:
    """Refuse data nested deeper than `limit` (iterative: a deep value must not blow the stack)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise UsageError(f"{source}: nested deeper than {limit} levels", hint)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
