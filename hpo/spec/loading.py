"""Spec files: bytes → YAML → :class:`~hpo.spec.spec.Spec`, refusing before anything allocates.

A spec is a small UTF-8 text file. Binary files, directories, huge files, alias bombs, deep
nesting and duplicated keys are refused with one line that names the file and the key.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from hpo.errors import ConfigError
from hpo.files import JsonObject
from hpo.spec.params import ParamValue
from hpo.spec.sampling import SAMPLING_FIELDS
from hpo.spec.spec import SECTIONS, Spec, renamed_settings, spec_from_dict
from hpo.spec.typed import did_you_mean

MAX_SPEC_BYTES = 1 << 20  # a spec is a page of settings, not a data file
MAX_NODES = 50_000  # YAML nodes after expanding aliases (an alias bomb expands to billions)
MERGE_TAG = "tag:yaml.org,2002:merge"
OVERRIDE_SECTIONS = ("study", "data", "train", "sampling", "score", "sampler", "pruner")


def load_spec(path: str | Path, overrides: Sequence[str] = (), *, check_data: bool = True) -> Spec:
    """Read and validate a spec file; ``overrides`` are ``section.key=value`` (section ``train``
    when omitted), values parsed as YAML. Checks that the data the spec names exists here (unless
    ``check_data`` is false: a spec that only rebuilds a trained network)."""
    path = Path(path)
    try:
        raw = parse_yaml(read_text(path))
        if raw is None:
            raise ConfigError("spec", f"is empty; a spec needs at least a study section ({', '.join(SECTIONS)})")
        raw = apply_overrides(raw, overrides)
        spec = spec_from_dict(raw, file=str(path))
        for renamed in renamed_settings(raw):  # once it loads: a spec that fails says one line, its error
            print(f"note: {path}: {renamed} (read as the new name; rename it in the file)", file=sys.stderr)
        if check_data:
            check_environment(spec)
        return spec
    except ConfigError as err:
        raise err.in_file(str(path)) from None


def read_text(path: Path) -> str:
    if not path.exists():
        raise ConfigError("spec", "file not found; pass the path of a YAML spec such as search_spaces/digits.yaml")
    if path.is_dir():
        raise ConfigError("spec", "is a directory; pass a YAML file such as search_spaces/digits.yaml")
    size = path.stat().st_size
    if size > MAX_SPEC_BYTES:
        raise ConfigError("spec", f"is {size} bytes; a spec is a YAML file of at most {MAX_SPEC_BYTES} bytes")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError("spec", f"cannot be read ({err.strerror}); check its permissions") from None
    if b"\x00" in data:
        raise ConfigError("spec", "is a binary file, not YAML text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            "spec", f"is not UTF-8 text (byte {data[err.start]:#04x} at offset {err.start}); save it as UTF-8"
        ) from None


def parse_yaml(text: str) -> Any:
    """The document as plain values; its size after alias expansion is checked before building it."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_tree(node)
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError("spec", f"not valid YAML{line}: {getattr(err, 'problem', None) or err}") from None
    except RecursionError:
        raise ConfigError("spec", "is nested too deeply to be a spec") from None
    finally:
        loader.dispose()


def check_tree(root: Node) -> None:
    """Refuse duplicated keys (the second would silently win) and documents that aliases expand
    beyond MAX_NODES; sizes are memoised per node, so a bomb is measured without expanding it."""
    sizes: dict[int, int] = {}

    def size(node: Node, path: str) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = MAX_NODES + 1  # a node that reaches itself is too big
        total = 1
        if isinstance(node, MappingNode):
            seen: dict[str, int] = {}
            for key, value in node.value:
                name = str(key.value) if isinstance(key, ScalarNode) else "?"
                child = f"{path}.{name}" if path else name
                if key.tag != MERGE_TAG and name in seen:
                    raise ConfigError(
                        child,
                        f"appears twice (lines {seen[name] + 1} and {key.start_mark.line + 1}); the second would "
                        "silently replace the first: merge them",
                    )
                seen[name] = key.start_mark.line
                total += size(key, child) + size(value, child)
                if total > MAX_NODES:
                    break
        elif isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                total += size(item, f"{path}[{i}]")
                if total > MAX_NODES:
                    break
        if total > MAX_NODES:
            where = f" at {path}" if path else ""
            raise ConfigError("spec", f"expands to over {MAX_NODES} YAML values{where} (aliases?); a spec is small")
        sizes[id(node)] = total
        return total

    size(root, "")


def parse_overrides(overrides: Sequence[str]) -> dict[str, JsonObject]:
    """``section.key=value`` strings → {section: {key: value}}; section ``train`` when omitted."""
    out: dict[str, JsonObject] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError("--set", f"expected key=value, got {item!r}")
        section, _, name = key.rpartition(".")
        section = section or "train"
        if section not in OVERRIDE_SECTIONS:
            raise ConfigError(key, f"unknown section {section!r}{did_you_mean(section, OVERRIDE_SECTIONS)}")
        try:
            out.setdefault(section, {})[name] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"--set {key}", f"value {value!r} is not valid YAML") from None
    return out


def apply_overrides(raw: Any, overrides: Sequence[str]) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError("spec", f"the top level must be a mapping of sections ({', '.join(SECTIONS)})")
    raw = {k: dict(v) if isinstance(v, Mapping) else v for k, v in raw.items()}
    for section, values in parse_overrides(overrides).items():
        current = raw.get(section) or {}
        if not isinstance(current, Mapping):
            raise ConfigError(section, f"expected a mapping of settings, got {current!r}")
        raw[section] = {**current, **values}
    return raw


def set_fixed(raw: JsonObject, name: str, value: ParamValue) -> None:
    """Fix parameter ``name`` at ``value`` where it belongs in a plain spec (``Spec.to_dict``):
    a sampling setting, a network factory keyword (``network.NAME``) or a train setting."""
    if name in SAMPLING_FIELDS:
        section(raw, "sampling")[name] = value
    elif name.startswith("network."):
        network = section(section(raw, "train"), "network")
        network["kwargs"] = {**section(network, "kwargs", missing={}), name.split(".", 1)[1]: value}
    else:
        section(raw, "train")[name] = value


def section(raw: JsonObject, name: str, *, missing: JsonObject | None = None) -> JsonObject:
    """``raw[name]``, a mapping of a plain spec (``Spec.to_dict`` writes each as a dict); ``missing``
    where it is absent and one is given."""
    value = raw[name] if missing is None else raw.get(name, missing)
    assert isinstance(value, dict), f"{name} is not a mapping: {value!r}"
    return value


def check_environment(spec: Spec) -> None:
    """What a spec names on this machine must exist (a stored spec is not checked: workers on
    other hosts read their data from their own paths)."""
    if spec.data.source == "folder" and spec.data.path and not Path(spec.data.path).is_dir():
        raise ConfigError(
            "data.path",
            f"folder not found: {spec.data.path} (relative to {Path.cwd()}); put the images there or fix the path",
        )
