"""One configuration file for a run: TOML, one validated schema, read by ``amp-hls train`` and
``amp-hls generate`` alike (``--config FILE``), and by ``amp_hls.train`` / ``amp_hls.generate``.

::

    [training]            # the run (options given on the command line win)
    mak = 16              # instances in flight
    muf = 8               # gradients per update; on a device, per GRADS dump (generate too)
    lr = 3e-3
    numerics = "fixed"

    [precision]           # fixed point, one per tensor class (every kernel shares it)
    data = "Q16.10"
    weights = "Q16.12"
    grads = "Q16.12"

    [device]              # the generated device
    board = "pynq-z2"
    cache_slots = 64
    fold = true           # generate folds for the board (cycles/folding.py); target_rate = 5e5 aims lower

    [nodes.fc0]           # one node, like hls4ml's per-layer configuration
    parallelism = 4       # MACs per cycle of a linear node's kernel (folding)
    [nodes.act0]
    lanes = 2             # 64-bit beats a cycle of a row-wise node's kernel (folding; the rtl flow)

Every key is checked against ``SCHEMA`` (type and range); an unknown section or key, a bad value,
a node the graph lacks, or a setting a node cannot take is an ``AmpHlsError`` naming the file
and the key. Per-node precision is refused, not ignored: the numpy kernels, the C++ and the RTL
use one precision per tensor class (``numerics.NumericConfig``), set in ``[precision]``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import AmpHlsError, NumericsError
from .ir import NODE_KINDS, GraphCore, graph_from_json
from .numerics import Precision
from .runtime.optim import OPTIMIZERS

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli backport (a dependency there, pyproject.toml)
    import tomli as tomllib

Check = Callable[[Any], "str | None"]
_PRECISION = re.compile(r"Q([0-9]+)\.([0-9]+)\Z")


def _positive(v: Any) -> str | None:
    return None if v >= 1 else f"must be at least 1, got {v}"


def _non_negative(v: Any) -> str | None:
    return None if v >= 0 else f"must be at least 0, got {v}"


def _positive_finite(v: Any) -> str | None:
    return None if v > 0 and math.isfinite(v) else f"must be a positive finite number, got {v}"


def _finite(v: Any) -> str | None:
    return None if math.isfinite(v) else f"must be a finite number, got {v}"


def _one_of(*choices: str) -> Check:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}, got {v!r}"


def _precision(v: Any) -> str | None:
    match = _PRECISION.match(v)
    if not match:
        return f"must be a fixed-point format like \"Q16.10\" (width 16, 10 fraction bits), got {v!r}"
    try:
        Precision(int(match.group(1)), int(match.group(2)))
    except NumericsError as exc:
        return str(exc)
    return None


def _board(v: Any) -> str | None:
    from .codegen.boards import known_boards

    known = known_boards()
    return None if v in known else f"unknown board {v!r}; known boards: {', '.join(known)}"


@dataclass(frozen=True)
class Key:
    """One setting: the TOML types it takes, what else it must satisfy, and what it means."""

    types: tuple[type, ...]
    check: Check | None
    help: str


INT, NUMBER, STRING, BOOL = (int,), (int, float), (str,), (bool,)
SCHEMA: dict[str, dict[str, Key]] = {
    "training": {
        "mak": Key(INT, _positive, "instances in flight (max active keys)"),
        "muf": Key(INT, _positive, "gradients per update (cpu); backward messages per GRADS dump (device, generate)"),
        "epochs": Key(INT, _positive, "most epochs"),
        "lr": Key(NUMBER, _positive_finite, "learning rate"),
        "optimizer": Key(STRING, _one_of(*OPTIMIZERS), "sgd, momentum or adam"),
        "clip": Key(NUMBER, _non_negative, "per-node gradient norm clip (0: off)"),
        "seed": Key(INT, _non_negative, "seeds data, weights and scheduling order"),
        "target": Key(NUMBER, _finite, "stop at this validation metric"),
        "numerics": Key(STRING, _one_of("float", "fixed"), "float or fixed"),
        "n_sync": Key(INT, _positive, "device backends and --distributed: dumps per node between weight pushes"),
    },
    "precision": {
        name: Key(STRING, _precision, f"fixed-point format of the {what}, e.g. \"Q16.10\"")
        for name, what in (("data", "forward payloads"), ("weights", "parameters"), ("grads", "backward payloads"))
    },
    "device": {
        "board": Key(STRING, _board, "the board a project is generated for"),
        "cache_slots": Key(INT, _positive, "tag-table entries per caching kernel (>= mak x messages per instance)"),
        "fold": Key(BOOL, None, "generate chooses each Linear's parallelism and the GRADS period for the board"),
        "dump_engine": Key(BOOL, None, "rtl flow: each Linear's GRADS dump streams out of a copy, beside its MACs"),
        "target_rate": Key(NUMBER, _positive_finite, "generate folds no further than this many instances/s"),
    },
}
NODE_KEYS: dict[str, Key] = {
    "parallelism": Key(INT, _positive, "MACs per cycle of a linear node's kernel"),
    "lanes": Key(INT, _positive, "64-bit beats a cycle of a row-wise node's kernel (1, 2, 4 or 8; the rtl flow)"),
}
# settings hls4ml has per layer that this design fixes for the whole model: refused, and why
REFUSED_NODE_KEYS = {
    "precision": "per-node precision is not supported: the numpy kernels, the generated C++ and the RTL "
                 "use one precision per tensor class for the whole model; set [precision] data/weights/grads",
}


@dataclass(frozen=True)
class RunConfig:
    """A validated configuration file (``load_config``); empty sections mean "not set"."""

    source: str = "<config>"  # the file, for messages
    training: Mapping[str, Any] = field(default_factory=dict)
    precision: Mapping[str, Precision] = field(default_factory=dict)
    device: Mapping[str, Any] = field(default_factory=dict)
    nodes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def apply(self, graph: GraphCore) -> GraphCore:
        """``graph`` with the per-node settings, each checked against the graph (a new graph,
        validated; ``graph`` itself when there are none)."""
        if not self.nodes:
            return graph
        doc = graph.to_json()
        by_name = {n["name"]: n for n in doc["nodes"]}
        for name, settings in self.nodes.items():
            if name not in by_name:
                raise AmpHlsError(f"{self.source}: [nodes.{name}]: graph {graph.name!r} has no node {name!r} "
                                  f"(its nodes: {', '.join(by_name)})")
            kind = by_name[name]["kind"]
            for key, value in settings.items():
                if key == "parallelism" and kind != "linear":
                    raise AmpHlsError(f"{self.source}: [nodes.{name}] parallelism: node {name!r} is of kind {kind}; "
                                      "only linear nodes have a parallelism")
                if key == "lanes" and "lanes" not in {f.name for f in dataclasses.fields(NODE_KINDS[kind])}:
                    laned = sorted(k for k, c in NODE_KINDS.items() if any(f.name == "lanes" for f in dataclasses.fields(c)))
                    raise AmpHlsError(f"{self.source}: [nodes.{name}] lanes: node {name!r} is of kind {kind}; "
                                      f"only row-wise nodes have lanes ({', '.join(laned)})")
                by_name[name]["attrs"][key] = value
        return graph_from_json(doc)


def load_config(path: str | Path) -> RunConfig:
    """Read and validate the TOML file ``path``."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AmpHlsError(f"config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise AmpHlsError(f"config file {path}: not valid TOML: {exc}") from None
    return config_from_dict(doc, str(path))


def config_from_dict(doc: Mapping[str, Any], source: str = "<config>") -> RunConfig:
    """Validate a parsed configuration (the TOML file's tables, or a dict written in Python)."""
    known = [*SCHEMA, "nodes"]
    for section, body in doc.items():
        if section not in known:
            raise AmpHlsError(f"{source}: unknown section [{section}]; known: {', '.join(known)}")
        if not isinstance(body, Mapping):
            raise AmpHlsError(f"{source}: [{section}] must be a table of settings")
    out: dict[str, dict[str, Any]] = {}
    for section, keys in SCHEMA.items():
        out[section] = {k: _value(source, f"[{section}] {k}", keys, k, v) for k, v in doc.get(section, {}).items()}
    nodes: dict[str, dict[str, Any]] = {}
    for name, settings in doc.get("nodes", {}).items():
        if not isinstance(settings, Mapping):
            raise AmpHlsError(f"{source}: [nodes.{name}] must be a table of settings, like parallelism = 4")
        for k in settings:
            if k in REFUSED_NODE_KEYS:
                raise AmpHlsError(f"{source}: [nodes.{name}] {k}: {REFUSED_NODE_KEYS[k]}")
        nodes[name] = {k: _value(source, f"[nodes.{name}] {k}", NODE_KEYS, k, v) for k, v in settings.items()}
    precision = {k: Precision(*map(int, _PRECISION.match(v).groups()))  # type: ignore[union-attr]
                 for k, v in out["precision"].items()}
    return RunConfig(source, out["training"], precision, out["device"], nodes)


def _value(source: str, where: str, keys: Mapping[str, Key], name: str, value: Any) -> Any:
    key = keys.get(name)
    if key is None:
        raise AmpHlsError(f"{source}: unknown key {where}; known: {', '.join(keys)}")
    if (isinstance(value, bool) and key.types != BOOL) or not isinstance(value, key.types):
        want = {INT: "an integer", NUMBER: "a number", STRING: "a string", BOOL: "true or false"}[key.types]
        raise AmpHlsError(f"{source}: {where}: must be {want}, got {value!r}")
    problem = key.check(value) if key.check is not None else None
    if problem:
        raise AmpHlsError(f"{source}: {where}: {problem}")
    return value
