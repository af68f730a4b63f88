"""The node catalogue (docs/contracts.md, IR): what each node kind is, its ports and its shape rules.

A node is a plain description: a name, a placement and the attributes of its kind. Ports are
numbered: inputs ``in0, in1, ...`` and outputs ``out0, out1, ...``. ``infer`` maps the specs of the
edges arriving at the inputs to the specs of the outputs and raises ``IRError`` naming the node and
port when they do not fit; the builder, the validator and every executor share it. What a node
*computes* lives in the numpy kernels (``amp_hls.kernels``), the golden reference of the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ..errors import IRError
from ..message import MAX_STATE_VALUE, MAX_STATE_WORDS, STATE_SPACE
from ..wire import Kind, elements_per_beat
from .limits import LIMITS

Placement = Literal["host", "device"]
DType = Literal["data", "index"]
PLACEMENTS = ("host", "device")
DTYPES = ("data", "index")


@dataclass(frozen=True)
class EdgeSpec:
    """What travels on an edge: ``width`` columns, at most ``max_rows`` rows, of ``dtype``.

    ``data`` payloads follow the numeric mode (float, or the data/grads precisions); ``index``
    payloads are small non-negative integers (class labels, adjacency lists) that are never scaled.
    """

    width: int
    max_rows: int = 1
    dtype: DType = "data"

    def __str__(self) -> str:
        suffix = "" if self.dtype == "data" else f" {self.dtype}"
        return f"{self.max_rows}x{self.width}{suffix}"


def in_port(i: int) -> str:
    return f"in{i}"


def out_port(i: int) -> str:
    return f"out{i}"


# --- state predicates and invertible state updates ------------------------------------------


def _is_int(value: object) -> bool:
    """A JSON integer (``bool`` is an ``int`` subclass in Python but not a state word)."""
    return isinstance(value, int) and not isinstance(value, bool)


COMPARISONS = {
    "lt": (lambda a, b: a < b, "<"),
    "le": (lambda a, b: a <= b, "<="),
    "eq": (lambda a, b: a == b, "=="),
    "ne": (lambda a, b: a != b, "!="),
    "gt": (lambda a, b: a > b, ">"),
    "ge": (lambda a, b: a >= b, ">="),
}


@dataclass(frozen=True)
class Predicate:
    """``state[index] <op> rhs`` where ``rhs`` is another state word or a constant.

    Build one with the ``S`` helper: ``S[0] < S[1]`` or ``S[0] == 3``.
    """

    index: int
    op: str
    rhs_state: int | None = None
    rhs_const: int | None = None

    def check(self, node: str) -> None:
        if not isinstance(self.op, str) or self.op not in COMPARISONS:
            raise IRError(f"unknown comparison {self.op!r}; use one of {sorted(COMPARISONS)}", node)
        if (self.rhs_state is None) == (self.rhs_const is None):
            raise IRError("a predicate compares with exactly one of a state word or a constant", node)
        for idx in (self.index,) if self.rhs_state is None else (self.index, self.rhs_state):
            if not _is_int(idx) or not 0 <= idx < MAX_STATE_WORDS:
                raise IRError(f"state index {idx!r} outside [0, {MAX_STATE_WORDS})", node)
        if self.rhs_const is not None and (
            not _is_int(self.rhs_const) or not 0 <= self.rhs_const <= MAX_STATE_VALUE
        ):
            raise IRError(f"constant {self.rhs_const!r} outside [0, {MAX_STATE_VALUE}]", node)

    def __call__(self, state: tuple[int, ...]) -> bool:
        rhs = state[self.rhs_state] if self.rhs_state is not None else self.rhs_const
        return COMPARISONS[self.op][0](state[self.index], rhs)

    def __str__(self) -> str:
        rhs = f"S[{self.rhs_state}]" if self.rhs_state is not None else str(self.rhs_const)
        return f"S[{self.index}] {COMPARISONS[self.op][1]} {rhs}"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


class _StateWord:
    def __init__(self, index: int):
        self.index = index

    def _cmp(self, op: str, other: _StateWord | int) -> Predicate:
        if isinstance(other, _StateWord):
            return Predicate(self.index, op, rhs_state=other.index)
        return Predicate(self.index, op, rhs_const=other)  # Predicate.check rejects non-integers

    def __lt__(self, o):  # type: ignore[no-untyped-def]
        return self._cmp("lt", o)

    def __le__(self, o):  # type: ignore[no-untyped-def]
        return self._cmp("le", o)

    def __gt__(self, o):  # type: ignore[no-untyped-def]
        return self._cmp("gt", o)

    def __ge__(self, o):  # type: ignore[no-untyped-def]
        return self._cmp("ge", o)

    def __eq__(self, o):  # type: ignore[no-untyped-def, override]
        return self._cmp("eq", o)

    def __ne__(self, o):  # type: ignore[no-untyped-def, override]
        return self._cmp("ne", o)

    __hash__ = None  # type: ignore[assignment]


class _StateWords:
    """``S[i]`` names state word ``i`` in a Cond predicate."""

    def __getitem__(self, index: int) -> _StateWord:
        return _StateWord(index)


S = _StateWords()

ISU_OPS = ("inc", "dec", "push", "pop", "parent", "child")


@dataclass(frozen=True)
class IsuOp:
    """One invertible state update.

    - ``inc i by`` / ``dec i by``: ``state[i] += by`` / ``-= by``.
    - ``push v``: append the constant ``v``; its inverse ``pop v`` removes it (and checks it).
    - ``parent i``: heap position ``p = state[i]`` moves to its parent ``(p - 1) // 2`` and
      pushes which child it was, ``(p - 1) % 2``; its inverse ``child i`` pops that bit and
      moves back down to ``2 * p + 1 + bit``.
    """

    op: str
    index: int = 0
    value: int = 1

    def check(self, node: str) -> None:
        if self.op not in ISU_OPS:
            raise IRError(f"unknown state update {self.op!r}; use one of {list(ISU_OPS)}", node)
        if not _is_int(self.index) or not 0 <= self.index < MAX_STATE_WORDS:
            raise IRError(f"state index {self.index!r} outside [0, {MAX_STATE_WORDS})", node)
        if not _is_int(self.value) or not 0 <= self.value <= MAX_STATE_VALUE:
            raise IRError(f"state value {self.value!r} outside [0, {MAX_STATE_VALUE}]", node)

    def inverse(self) -> IsuOp:
        return {
            "inc": IsuOp("dec", self.index, self.value),
            "dec": IsuOp("inc", self.index, self.value),
            "push": IsuOp("pop", 0, self.value),
            "pop": IsuOp("push", 0, self.value),
            "parent": IsuOp("child", self.index, 0),
            "child": IsuOp("parent", self.index, 0),
        }[self.op]

    def apply(self, state: tuple[int, ...]) -> tuple[int, ...]:
        """The new state; raises ``ValueError`` when the update leaves the 16-bit state space."""
        s = list(state)
        if self.op in ("inc", "dec", "parent", "child") and self.index >= len(s):
            raise ValueError(f"{self}: state {state} has no word {self.index}")
        if self.op == "inc":
            s[self.index] += self.value
        elif self.op == "dec":
            s[self.index] -= self.value
        elif self.op == "push":
            s.append(self.value)
        elif self.op == "pop":
            if not s or s[-1] != self.value:
                raise ValueError(f"{self}: state {state} does not end in {self.value}")
            s.pop()
        elif self.op == "parent":
            p = s[self.index]
            if p < 1:
                raise ValueError(f"{self}: position {p} is the root and has no parent")
            s[self.index] = (p - 1) // 2
            s.append((p - 1) % 2)
        elif self.op == "child":
            if len(s) < 2 or s[-1] not in (0, 1) or self.index >= len(s) - 1:
                raise ValueError(f"{self}: state {state} does not end in a child bit after word {self.index}")
            side = s.pop()
            s[self.index] = 2 * s[self.index] + 1 + side
        if len(s) > MAX_STATE_WORDS or any(not 0 <= w <= MAX_STATE_VALUE for w in s):
            raise ValueError(f"{self}: state {state} -> {tuple(s)} leaves the {STATE_SPACE}")
        return tuple(s)

    def __str__(self) -> str:
        if self.op in ("push", "pop"):
            return f"{self.op} {self.value}"
        if self.op == "parent":
            return f"parent S[{self.index}]"
        return f"{self.op} S[{self.index}] by {self.value}"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def inc(index: int = 0, by: int = 1) -> IsuOp:
    return IsuOp("inc", index, by)


def dec(index: int = 0, by: int = 1) -> IsuOp:
    return IsuOp("dec", index, by)


def push(value: int) -> IsuOp:
    return IsuOp("push", 0, value)


def pop(value: int) -> IsuOp:
    return IsuOp("pop", 0, value)


def parent(index: int = 0) -> IsuOp:
    return IsuOp("parent", index, 0)


# --- nodes ------------------------------------------------------------------------------------

NODE_KINDS: dict[str, type[Node]] = {}


@dataclass(kw_only=True, eq=False)
class Node:
    """Base of every node kind. Subclasses are dataclasses whose fields are the kind's attributes."""

    kind: ClassVar[str] = ""
    default_placement: ClassVar[Placement] = "device"
    differentiable: ClassVar[bool] = True  # carries gradients back to its inputs

    name: str
    placement: Placement | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            NODE_KINDS[cls.kind] = cls

    def __post_init__(self) -> None:
        if self.placement is None:
            self.placement = self.default_placement

    # ports ------------------------------------------------------------------------------------
    @property
    def n_inputs(self) -> int:
        return 1

    @property
    def n_outputs(self) -> int:
        return 1

    def input_names(self) -> list[str]:
        return [in_port(i) for i in range(self.n_inputs)]

    def output_names(self) -> list[str]:
        return [out_port(i) for i in range(self.n_outputs)]

    # shape rules --------------------------------------------------------------------------------
    def check_attrs(self) -> None:
        """Raise ``IRError`` if the attributes themselves are out of range."""

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        """Output specs from input specs; every input must be known except where noted."""
        return [self._require(ins, 0)]

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Trainable tensors of this node, by name (empty for most kinds)."""
        return {}

    # helpers -----------------------------------------------------------------------------------
    def error(self, message: str, port: str | None = None) -> IRError:
        return IRError(message, node=self.name, port=port)

    def _require(self, ins: Sequence[EdgeSpec | None], i: int, any_dtype: bool = False) -> EdgeSpec:
        """The spec at input ``i``; a data edge unless ``any_dtype`` (routing nodes pass indices)."""
        spec = ins[i]
        if spec is None:
            raise self.error("input is not connected", in_port(i))
        if not any_dtype and spec.dtype != "data":
            raise self.error(f"expects data, got an {spec.dtype} edge", in_port(i))
        return spec

    def _check_width(self, spec: EdgeSpec, width: int, i: int) -> None:
        if spec.width != width:
            raise self.error(f"width mismatch: expected {width}, got {spec.width}", in_port(i))

    def _check_positive(self, **values: int) -> None:
        for attr, value in values.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise self.error(f"{attr} must be a positive integer, got {value!r}")

    def attrs(self) -> dict[str, Any]:
        """The kind's attributes (everything but name and placement), JSON-ready."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("name", "placement") or (f.name == "lanes" and self.lanes == 1):  # type: ignore[attr-defined]
                continue  # lanes at 1 left out: a graph's JSON reads the same as before lanes were
            value = getattr(self, f.name)
            if isinstance(value, Predicate):
                value = value.to_json()
            elif isinstance(value, tuple):
                value = [v.to_json() if isinstance(v, IsuOp) else v for v in value]
            out[f.name] = value
        return out

    def describe(self) -> str:
        """A short human summary of the attributes, for ``Graph.summary``."""
        parts = []
        for key, value in self.attrs().items():
            if key == "predicate":
                value = str(getattr(self, key))
            elif key == "ops":
                value = "; ".join(str(op) for op in getattr(self, key))
            parts.append(f"{key}={value}")
        return ", ".join(parts)


class _Arity(Node):
    """A node with a variable number of inputs or outputs (``arity``, at least 2)."""

    arity: int

    def check_attrs(self) -> None:
        self._check_positive(arity=self.arity)
        if not 2 <= self.arity <= LIMITS.max_arity:
            raise self.error(f"arity must be in [2, {LIMITS.max_arity}], got {self.arity}")
        super().check_attrs()


LANES = tuple(1 << i for i in range(LIMITS.max_lanes.bit_length()))  # the lanes a row-wise kernel takes


def node_lanes(node: Node) -> int:
    """A node's ``lanes`` (1 for the kinds that have none)."""
    return getattr(node, "lanes", 1)


@dataclass(kw_only=True, eq=False)
class _Laned(Node):
    """A row-wise kind whose hardware kernel may read and write ``lanes`` 64-bit beats a cycle
    (amp_hls.wire, Lanes): ``lanes`` times the elements per cycle, on wider streams inside the
    device. Like a Linear's ``parallelism`` it changes no result, only the hardware."""

    lanes: int = 1

    def check_attrs(self) -> None:
        if self.lanes not in LANES:
            raise self.error(f"lanes must be one of {', '.join(map(str, LANES))} (64-bit beats a cycle), got {self.lanes!r}")
        super().check_attrs()


@dataclass(kw_only=True, eq=False)
class Source(Node):
    """Host side: emits each instance's messages; a backward arrival completes them."""

    kind: ClassVar[str] = "source"
    default_placement: ClassVar[Placement] = "host"
    differentiable: ClassVar[bool] = False
    width: int
    max_rows: int = 1
    dtype: DType = "data"

    @property
    def n_inputs(self) -> int:
        return 0

    def check_attrs(self) -> None:
        self._check_positive(width=self.width, max_rows=self.max_rows)
        if self.width > LIMITS.max_width:
            raise self.error(f"width {self.width} beyond the maximum {LIMITS.max_width}")
        if self.max_rows > LIMITS.max_rows:
            raise self.error(f"max_rows {self.max_rows} beyond the maximum {LIMITS.max_rows}")
        if self.dtype not in DTYPES:
            raise self.error(f"dtype must be one of {DTYPES}, got {self.dtype!r}")

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        return [EdgeSpec(self.width, self.max_rows, self.dtype)]


@dataclass(kw_only=True, eq=False)
class Sink(Node):
    """Host side: collects forward outputs (inference); answers with a zero gradient in training."""

    kind: ClassVar[str] = "sink"
    default_placement: ClassVar[Placement] = "host"
    differentiable: ClassVar[bool] = False

    @property
    def n_outputs(self) -> int:
        return 0

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        self._require(ins, 0, any_dtype=True)
        return []


OUTPUTS_PER_STEP = (2, 4)  # Q of a Linear above its input width (Linear.outputs_per_step)


@dataclass(kw_only=True, eq=False)
class Linear(Node):
    """``y = x W^T + b`` row-wise; backward ``dx = dy W``, ``dW += dy^T x``, ``db += sum(dy)``.

    ``parallelism`` is the MACs per cycle a hardware kernel instantiates. Up to ``row_lanes`` (the
    input width rounded up to whole beats) they walk one output's inputs; above it they take
    ``outputs_per_step`` whole rows of W at once, so the parallelism must then be 2 or 4 times
    ``row_lanes`` and that multiple must divide ``out_features`` (``outputs_per_step``).
    """

    kind: ClassVar[str] = "linear"
    in_features: int
    out_features: int
    bias: bool = True
    parallelism: int = 1

    def check_attrs(self) -> None:
        self._check_positive(
            in_features=self.in_features,
            out_features=self.out_features,
            parallelism=self.parallelism,
        )
        for attr in ("in_features", "out_features"):
            if getattr(self, attr) > LIMITS.max_width:
                raise self.error(f"{attr} {getattr(self, attr)} beyond the maximum {LIMITS.max_width}")
        if self.parallelism > LIMITS.max_parallelism:
            raise self.error(f"parallelism {self.parallelism} beyond the maximum {LIMITS.max_parallelism} "
                             "(MACs per cycle of its kernel)")
        if self.parallelism > self.row_lanes and self.outputs_per_step == 1:
            allowed = [q * self.row_lanes for q in OUTPUTS_PER_STEP if self.out_features % q == 0]
            raise self.error(
                f"parallelism {self.parallelism} is above the input width ({self.in_features}, {self.row_lanes} lanes "
                f"in whole beats): there it must be {' or '.join(map(str, OUTPUTS_PER_STEP))} whole rows of lanes "
                f"dividing out_features {self.out_features}"
                + (f" ({', '.join(map(str, allowed))})" if allowed else " (none does)"))
        if not isinstance(self.bias, bool):
            raise self.error(f"bias must be true or false, got {self.bias!r}")

    @property
    def row_lanes(self) -> int:
        """Lanes one input row takes: ``in_features`` rounded up to whole DATA beats, so rows side by
        side in a word each start on a beat (the kernel's packer places beats, never elements)."""
        epb = elements_per_beat(Kind.DATA)
        return -(-self.in_features // epb) * epb

    @property
    def outputs_per_step(self) -> int:
        """Q, the outputs one MAC step computes: 1 while the MACs walk one output's inputs
        (parallelism up to ``row_lanes``); Q when they hold Q rows of W side by side (parallelism
        Q x ``row_lanes``, Q in ``OUTPUTS_PER_STEP`` dividing ``out_features``), so the forward sums
        Q dot products a step, dx adds Q products into each input's accumulator, and dW updates Q
        rows of G. Q divides a DATA beat, so the Q gradients of a step lie in one beat of dy."""
        q, rest = divmod(self.parallelism, self.row_lanes)
        if self.parallelism > self.row_lanes and not rest and q in OUTPUTS_PER_STEP and self.out_features % q == 0:
            return q
        return 1

    @property
    def input_lanes(self) -> int:
        """Lanes of one word of cached input: the parallelism, or one whole row (``row_lanes``)
        when the MACs take several rows of W a step."""
        return self.row_lanes if self.outputs_per_step > 1 else self.parallelism

    @property
    def input_words(self) -> int:
        """Words of ``input_lanes`` one input row takes (the last may hold fewer lanes)."""
        return -(-self.in_features // self.input_lanes)

    @property
    def last_word_lanes(self) -> int:
        """Lanes of an input row's last word that hold data: what the RTL's unpacker emits of it,
        and what the cycle model counts the dx's last beats by."""
        return self.in_features - (self.input_words - 1) * self.input_lanes

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        x = self._require(ins, 0)
        self._check_width(x, self.in_features, 0)
        return [EdgeSpec(self.out_features, x.max_rows)]

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes: dict[str, tuple[int, ...]] = {"weight": (self.out_features, self.in_features)}
        if self.bias:
            shapes["bias"] = (self.out_features,)
        return shapes


ACTIVATIONS = ("relu", "tanh", "sigmoid")


@dataclass(kw_only=True, eq=False)
class Activation(_Laned):
    """Elementwise nonlinearity; fixed point uses the lookup tables of ``amp_hls.numerics``."""

    kind: ClassVar[str] = "activation"
    fn: str

    def check_attrs(self) -> None:
        if self.fn not in ACTIVATIONS:
            raise self.error(f"unknown activation {self.fn!r}; use one of {list(ACTIVATIONS)}")
        super().check_attrs()


@dataclass(kw_only=True, eq=False)
class _Join(_Arity, _Laned):
    """Waits for ``arity`` messages with equal tags, one per input, then combines them."""

    arity: int = 2

    def _all_inputs(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        return [self._require(ins, i) for i in range(self.arity)]

    @property
    def n_inputs(self) -> int:
        return self.arity

    def _same_rows(self, specs: list[EdgeSpec]) -> int:
        return max(s.max_rows for s in specs)


@dataclass(kw_only=True, eq=False)
class _Elementwise(_Join):
    """Equal-width inputs combined element by element."""

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        specs = self._all_inputs(ins)
        for i, s in enumerate(specs[1:], start=1):
            self._check_width(s, specs[0].width, i)
        return [EdgeSpec(specs[0].width, self._same_rows(specs))]


@dataclass(kw_only=True, eq=False)
class Add(_Elementwise):
    """Elementwise sum of ``arity`` equal-tag inputs; the gradient goes to each input."""

    kind: ClassVar[str] = "add"


@dataclass(kw_only=True, eq=False)
class Mul(_Elementwise):
    """Elementwise product of ``arity`` equal-tag inputs; each gradient is dy times the others."""

    kind: ClassVar[str] = "mul"


@dataclass(kw_only=True, eq=False)
class Concat(_Join):
    """Joins equal-tag inputs side by side (along width); backward splits the gradient."""

    kind: ClassVar[str] = "concat"

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        specs = self._all_inputs(ins)
        width = sum(s.width for s in specs)
        if width > LIMITS.max_width:
            raise self.error(f"concatenated width {width} beyond the maximum {LIMITS.max_width}")
        return [EdgeSpec(width, self._same_rows(specs))]


@dataclass(kw_only=True, eq=False)
class Split(_Laned):
    """Slices the width into ``sizes``; backward waits for every slice's gradient and joins them."""

    kind: ClassVar[str] = "split"
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.sizes, list):
            self.sizes = tuple(self.sizes)

    @property
    def n_outputs(self) -> int:
        return len(self.sizes)

    def check_attrs(self) -> None:
        if not isinstance(self.sizes, tuple) or not 2 <= len(self.sizes) <= LIMITS.max_arity:
            raise self.error(f"sizes must list 2 to {LIMITS.max_arity} widths, got {self.sizes!r}")
        for size in self.sizes:
            self._check_positive(size=size)
        super().check_attrs()

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        x = self._require(ins, 0)
        self._check_width(x, sum(self.sizes), 0)
        return [EdgeSpec(size, x.max_rows) for size in self.sizes]


@dataclass(kw_only=True, eq=False)
class Broadcast(_Arity, _Laned):
    """Copies its input to ``arity`` outputs; backward waits for every gradient and sums them."""

    kind: ClassVar[str] = "broadcast"
    arity: int = 2

    @property
    def n_outputs(self) -> int:
        return self.arity

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        x = self._require(ins, 0, any_dtype=True)
        return [x] * self.arity


@dataclass(kw_only=True, eq=False)
class Cond(Node):
    """Routes each message by a predicate on its state: ``out0`` when true, ``out1`` when false.

    The gradient comes back on the port the message left by and passes straight up.
    """

    kind: ClassVar[str] = "cond"
    predicate: Predicate

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.predicate, dict):
            self.predicate = Predicate(**self.predicate)

    @property
    def n_outputs(self) -> int:
        return 2

    def check_attrs(self) -> None:
        if not isinstance(self.predicate, Predicate):
            raise self.error(f"predicate must be a Predicate (e.g. S[0] < 5), got {self.predicate!r}")
        self.predicate.check(self.name)

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        x = self._require(ins, 0, any_dtype=True)
        return [x, x]


@dataclass(kw_only=True, eq=False)
class Phi(_Arity):
    """Merges ``arity`` inputs into one stream, remembering per tag which input each came from."""

    kind: ClassVar[str] = "phi"
    arity: int = 2

    @property
    def n_inputs(self) -> int:
        return self.arity

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        known = [(i, s) for i, s in enumerate(ins) if s is not None]
        if not known:
            raise self.error("no input is connected", in_port(0))
        first = known[0][1]
        for i, s in known[1:]:
            self._check_width(s, first.width, i)
            if s.dtype != first.dtype:
                raise self.error(f"dtype mismatch: expected {first.dtype}, got {s.dtype}", in_port(i))
        return [EdgeSpec(first.width, max(s.max_rows for _, s in known), first.dtype)]


@dataclass(kw_only=True, eq=False)
class Isu(Node):
    """Invertible state update: forward applies ``ops`` in order, backward their inverses reversed."""

    kind: ClassVar[str] = "isu"
    differentiable: ClassVar[bool] = True
    ops: tuple[IsuOp, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.ops, IsuOp):
            self.ops = (self.ops,)
        elif isinstance(self.ops, list):
            self.ops = tuple(IsuOp(**op) if isinstance(op, dict) else op for op in self.ops)

    def check_attrs(self) -> None:
        if not isinstance(self.ops, tuple) or not self.ops:
            raise self.error("needs at least one state update (e.g. inc(0))")
        for op in self.ops:
            if not isinstance(op, IsuOp):
                raise self.error(f"state updates must be IsuOp, got {op!r}")
            op.check(self.name)

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        return [self._require(ins, 0, any_dtype=True)]


@dataclass(kw_only=True, eq=False)
class Ungroup(_Laned):
    """One message per row; row ``i`` of ``n`` gets ``(i, n)`` pushed onto its state."""

    kind: ClassVar[str] = "ungroup"

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        x = self._require(ins, 0, any_dtype=True)
        return [EdgeSpec(x.width, 1, x.dtype)]


@dataclass(kw_only=True, eq=False)
class Group(_Laned):
    """Gathers single-row messages whose state ends in ``(i, n)`` into one ``n``-row message."""

    kind: ClassVar[str] = "group"
    max_rows: int

    def check_attrs(self) -> None:
        self._check_positive(max_rows=self.max_rows)
        if self.max_rows > LIMITS.max_rows:
            raise self.error(f"max_rows {self.max_rows} beyond the maximum {LIMITS.max_rows}")
        super().check_attrs()

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        x = self._require(ins, 0, any_dtype=True)
        if x.max_rows != 1:
            raise self.error(f"groups single-row messages, got up to {x.max_rows} rows", in_port(0))
        return [EdgeSpec(x.width, self.max_rows, x.dtype)]


@dataclass(kw_only=True, eq=False)
class Aggregate(_Laned):
    """Graph message passing: ``out_i = sum over edges (j -> i) of x_j``.

    ``in0`` carries node states (rows = nodes); ``in1`` the instance's edges as index rows
    ``(src, dst)``. Backward sends the transposed aggregation to ``in0`` and zeros to ``in1``.
    """

    kind: ClassVar[str] = "aggregate"

    @property
    def n_inputs(self) -> int:
        return 2

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        x = self._require(ins, 0)
        edges = self._require(ins, 1, any_dtype=True)
        if edges.dtype != "index" or edges.width != 2:
            raise self.error(f"expects index rows (src, dst) of width 2, got {edges}", in_port(1))
        return [x]


@dataclass(kw_only=True, eq=False)
class RowSum(_Laned):
    """Readout: sums the rows into one; backward copies the gradient to every row."""

    kind: ClassVar[str] = "rowsum"

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        x = self._require(ins, 0)
        return [EdgeSpec(x.width, 1)]


LOSSES = ("mse", "softmax_ce")


@dataclass(kw_only=True, eq=False)
class Loss(Node):
    """Joins a prediction (``in0``) with its target (``in1``) and emits the backward message.

    ``mse``: ``0.5 * sum((p - t)^2)``, target data of the prediction's shape. ``softmax_ce``:
    cross-entropy of ``softmax(p)`` per row, target an index column of class labels.
    The target receives a zero gradient, so every edge sees one backward per forward.
    """

    kind: ClassVar[str] = "loss"
    default_placement: ClassVar[Placement] = "host"
    fn: str

    @property
    def n_inputs(self) -> int:
        return 2

    @property
    def n_outputs(self) -> int:
        return 0

    def check_attrs(self) -> None:
        if self.fn not in LOSSES:
            raise self.error(f"unknown loss {self.fn!r}; use one of {list(LOSSES)}")

    def infer(self, ins: Sequence[EdgeSpec | None]) -> list[EdgeSpec]:
        pred = self._require(ins, 0)
        target = self._require(ins, 1, any_dtype=True)
        if self.fn == "mse":
            if target.dtype != "data":
                raise self.error("mse expects a data target", in_port(1))
            self._check_width(target, pred.width, 1)
        elif target.dtype != "index" or target.width != 1:
            raise self.error(f"softmax_ce expects an index target of width 1, got {target}", in_port(1))
        return []
