"""PyTorch peers of the amp-hls zoo models, for the side-by-side benchmark (``bench/run.py``).

Each peer mirrors its IR graph exactly: the same Linear nodes (same names, shapes, bias or not),
activations, gates, concatenation orders and readout, so a forward pass on the same weights gives
the same loss (``tests/test_bench_torch.py`` checks it in float64 against the amp-hls Engine), and
training starts from the very weights the amp-hls Trainer starts from (copied from a fresh
``Engine`` with the same seed). Two ways to train it:

- ``eager``: what AMPNet compared against. One instance at a time, in a Python loop, with the
  control flow in Python (a loop over a list's tokens, recursion over a tree, one molecule's graph
  at a time); autograd per instance; gradients accumulated and an optimizer step every
  ``eager_every`` instances (see ``EAGER_EVERY``).
- ``batched``: what a PyTorch user would write today. Lists padded to the longest in the batch and
  masked; trees batched by level (all nodes of the same height in one call); graphs as a disjoint
  union with ``index_add`` scatter-adds, as PyG / DGL batch them.

Both use the amp-hls optimizer's settings: Adam (beta 0.9 / 0.999, eps 1e-8), the model's learning
rate, and each Linear's gradient clipped to L2 norm 5 on its own (amp-hls clips per parameter
node). The loss is each instance's summed loss (softmax cross-entropy, or half the squared error
for ``mse``), averaged over the instances of a step.

Favourable to PyTorch, on purpose: every instance is converted to tensors once, before timing
(amp-hls converts its instances to messages inside its timed loop).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from amp_hls.datasets import Example, Splits
from amp_hls.datasets.trees import VOCAB, WORD_INDEX, Tree
from amp_hls.errors import AmpHlsError
from amp_hls.kernels import ParamKernel
from amp_hls.models import ModelSpec
from amp_hls.models.ggsnn import ggsnn_steps
from amp_hls.numerics import FLOAT32, NumericConfig
from amp_hls.runtime.engine import Engine
from amp_hls.runtime.trainer import Evaluation, TrainConfig, TrainerBase

MODES = ("eager", "batched")
CLIP = 5.0  # per Linear, as amp-hls's OptimizerConfig.clip (per parameter node)

# Update schedules, chosen as the most favourable sensible setting for each PyTorch mode on this
# machine (bench/README.md gives the measurements behind them):
# eager: an optimizer step every 16 instances (= amp-hls's mak), gradients accumulated in
# between. Stepping after every instance costs an Adam step per instance and reaches the target
# later in wall time.
EAGER_EVERY = 16
# batched: minibatches of 16 (= amp-hls's mak and the amp_sync batch) at the model's learning rate.
BATCH = 16


def torch_dtype(numerics: NumericConfig) -> torch.dtype:
    return torch.float64 if numerics.float_dtype == "float64" else torch.float32


# --- the models ----------------------------------------------------------------------------------


class Peer(nn.Module):
    """A torch model mirroring one IR graph: ``linears`` maps IR Linear names to modules.

    Subclasses turn examples into tensors (``prepare``), run one prepared instance
    (``forward_one``, Python control flow) and a list of them at once (``forward_batch``);
    both return ``(per-instance losses, predictions)``.
    """

    metric = "accuracy"

    def __init__(self, linears: dict[str, nn.Linear]):
        super().__init__()
        self.linears = nn.ModuleDict(linears)

    def prepare(self, examples: Sequence[Example]) -> list[Any]:
        raise NotImplementedError

    def forward_one(self, inst: Any) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def forward_batch(self, insts: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def targets(self, insts: Sequence[Any]) -> torch.Tensor:
        raise NotImplementedError

    def load_from_engine(self, engine: Engine) -> None:
        """Copy every Linear's weights from an amp-hls engine (same names, same shapes)."""
        with torch.no_grad():
            for name, lin in self.linears.items():
                kernel = engine.kernels[name]
                assert isinstance(kernel, ParamKernel)
                lin.weight.copy_(torch.from_numpy(np.asarray(kernel.params["weight"])))
                if lin.bias is not None:
                    lin.bias.copy_(torch.from_numpy(np.asarray(kernel.params["bias"])))


def _ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-row softmax cross-entropy: amp-hls's ``softmax_ce`` on one-row predictions."""
    return F.cross_entropy(logits, labels, reduction="none")


class ListRNNPeer(Peer):
    """``h = tanh(rnn([h; x_t]))`` over the tokens from ``h = 0``, then ``head(h)``, softmax CE."""

    def __init__(self, vocab: int = 10, hidden: int = 32, classes: int = 10, max_len: int = 20):
        super().__init__({"rnn": nn.Linear(hidden + vocab, hidden), "head": nn.Linear(hidden, classes)})
        self.vocab, self.hidden, self.max_len = vocab, hidden, max_len

    def prepare(self, examples: Sequence[Example]) -> list[Any]:
        dtype = self.linears["rnn"].weight.dtype
        eye = torch.eye(self.vocab, dtype=dtype)
        out = []
        for ex in examples:
            tokens = torch.as_tensor(np.asarray(ex.data), dtype=torch.long)
            padded = torch.zeros(self.max_len, self.vocab, dtype=dtype)
            padded[: len(tokens)] = eye[tokens]
            out.append((eye[tokens], torch.tensor([ex.label]), padded, len(tokens)))
        return out

    def forward_one(self, inst: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, label = inst[0], inst[1]
        rnn = self.linears["rnn"]
        h = x.new_zeros(1, self.hidden)
        for t in range(x.shape[0]):  # the loop is Python's: one instance, one token at a time
            h = torch.tanh(rnn(torch.cat([h, x[t : t + 1]], dim=1)))
        logits = self.linears["head"](h)
        return _ce(logits, label), logits

    def forward_batch(self, insts: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = torch.tensor([inst[3] for inst in insts])
        steps = int(lengths.max())
        x = torch.stack([inst[2][:steps] for inst in insts])  # (B, T, vocab), zero-padded
        mask = (torch.arange(steps)[None, :] < lengths[:, None]).unsqueeze(2)  # (B, T, 1)
        rnn = self.linears["rnn"]
        h = x.new_zeros(len(insts), self.hidden)
        for t in range(steps):  # a finished list keeps its state: masked, not computed away
            h = torch.where(mask[:, t], torch.tanh(rnn(torch.cat([h, x[:, t]], dim=1))), h)
        logits = self.linears["head"](h)
        return _ce(logits, self.targets(insts)), logits

    def targets(self, insts: Sequence[Any]) -> torch.Tensor:
        return torch.cat([inst[1] for inst in insts])


@dataclass(frozen=True)
class TreeArrays:
    """One tree, flattened for level batching: leaves first (left to right), then inner nodes
    in post-order, each with its two children (local indices) and its height."""

    words: np.ndarray  # (leaves,) vocabulary indices
    left: np.ndarray  # (nodes,) -1 for leaves
    right: np.ndarray
    height: np.ndarray  # 0 for leaves
    root: int


def flatten_tree(tree: Tree) -> TreeArrays:
    words: list[int] = []
    inner: list[tuple[Any, Any, int]] = []  # (left ref, right ref, height); refs: ("l", i) / ("n", i)

    def walk(t: Tree) -> tuple[tuple[str, int], int]:
        if isinstance(t, str):
            words.append(WORD_INDEX[t])
            return ("l", len(words) - 1), 0
        (lr, lh), (rr, rh) = walk(t[0]), walk(t[1])
        inner.append((lr, rr, 1 + max(lh, rh)))
        return ("n", len(inner) - 1), 1 + max(lh, rh)

    root_ref, _ = walk(tree)
    n_leaves = len(words)

    def index(ref: tuple[str, int]) -> int:
        return ref[1] if ref[0] == "l" else n_leaves + ref[1]

    n = n_leaves + len(inner)
    left, right, height = np.full(n, -1), np.full(n, -1), np.zeros(n, dtype=np.int64)
    for i, (lr, rr, h) in enumerate(inner):
        left[n_leaves + i], right[n_leaves + i], height[n_leaves + i] = index(lr), index(rr), h
    return TreeArrays(np.asarray(words, dtype=np.int64), left, right, height, index(root_ref))


class TreeRNNPeer(Peer):
    """Leaves ``tanh(embed(onehot))``, inner nodes ``tanh(compose([h_l; h_r]))``, ``head(root)``."""

    def __init__(self, vocab: int = len(VOCAB), hidden: int = 32, classes: int = 2):
        super().__init__({"embed": nn.Linear(vocab, hidden), "compose": nn.Linear(2 * hidden, hidden),
                          "head": nn.Linear(hidden, classes)})
        self.vocab = vocab

    def prepare(self, examples: Sequence[Example]) -> list[Any]:
        eye = torch.eye(self.vocab, dtype=self.linears["embed"].weight.dtype)
        rows = [eye[i : i + 1] for i in range(self.vocab)]  # one (1, vocab) one-hot row per word
        return [(ex.data, torch.tensor([ex.label]), flatten_tree(ex.data), rows) for ex in examples]

    def forward_one(self, inst: Any) -> tuple[torch.Tensor, torch.Tensor]:
        tree, label, _, rows = inst
        embed, compose = self.linears["embed"], self.linears["compose"]

        def encode(t: Tree) -> torch.Tensor:  # plain recursion, as a per-instance tree RNN is written
            if isinstance(t, str):
                return torch.tanh(embed(rows[WORD_INDEX[t]]))
            return torch.tanh(compose(torch.cat([encode(t[0]), encode(t[1])], dim=1)))

        logits = self.linears["head"](encode(tree))
        return _ce(logits, label), logits

    def forward_batch(self, insts: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """All trees at once, one level (height) at a time: leaves, then height 1, 2, ..."""
        arrays: list[TreeArrays] = [inst[2] for inst in insts]
        sizes = np.array([len(a.height) for a in arrays])
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        height = np.concatenate([a.height for a in arrays])
        left = np.concatenate([np.where(a.left >= 0, a.left + o, -1) for a, o in zip(arrays, offsets)])
        right = np.concatenate([np.where(a.right >= 0, a.right + o, -1) for a, o in zip(arrays, offsets)])
        roots = np.array([a.root for a in arrays]) + offsets
        order = np.argsort(height, kind="stable")  # leaves first, then by height
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        bounds = np.searchsorted(height[order], np.arange(int(height.max()) + 2))
        words = torch.from_numpy(np.concatenate([a.words for a in arrays]))
        # leaves come first in every tree, so leaf order in ``order`` = concatenated word order
        x = torch.zeros(len(words), self.vocab, dtype=self.linears["embed"].weight.dtype)
        x[torch.arange(len(words)), words] = 1.0
        states = torch.tanh(self.linears["embed"](x))
        compose = self.linears["compose"]
        for level in range(1, len(bounds) - 1):
            nodes = order[bounds[level] : bounds[level + 1]]
            lo = torch.from_numpy(rank[left[nodes]])
            hi = torch.from_numpy(rank[right[nodes]])
            new = torch.tanh(compose(torch.cat([states[lo], states[hi]], dim=1)))
            states = torch.cat([states, new])
        logits = self.linears["head"](states[torch.from_numpy(rank[roots])])
        return _ce(logits, self.targets(insts)), logits

    def targets(self, insts: Sequence[Any]) -> torch.Tensor:
        return torch.cat([inst[1] for inst in insts])


class GGSNNPeer(Peer):
    """The GGSNN of ``amp_hls.models.ggsnn`` (untied gates, shared step weights, gated sum
    readout, MLP head), on graphs with the same null node ``ggsnn_inputs`` appends."""

    def __init__(self, features: int, edge_types: int, outputs: int, loss: str = "mse",
                 hidden: int = 32, steps: int = 3, readout: int = 32):
        super().__init__({
            "embed": nn.Linear(features + 1, hidden),
            "prop_msg": nn.Linear(edge_types * hidden, hidden, bias=False),
            "prop_gates": nn.Linear(2 * hidden, 3 * hidden),
            "prop_cand": nn.Linear(2 * hidden, hidden),
            "readout_ij": nn.Linear(hidden, 2 * readout),
            "head1": nn.Linear(readout, readout),
            "head2": nn.Linear(readout, outputs),
        })
        self.hidden, self.steps, self.readout, self.edge_types = hidden, steps, readout, edge_types
        self.loss_fn = loss
        self.metric = "mae" if loss == "mse" else "accuracy"

    def prepare(self, examples: Sequence[Example]) -> list[Any]:
        dtype = self.linears["embed"].weight.dtype
        out = []
        for ex in examples:
            data = ex.data
            n, f = data.nodes.shape
            nodes = np.zeros((n + 1, f + 1))
            nodes[:n, :f] = data.nodes
            nodes[n, f] = 1.0  # the null node: its own flag, a self-loop of every type
            edges = [np.concatenate([np.asarray(e, dtype=np.int64).reshape(-1, 2), [[n, n]]])
                     for e in data.edges]
            target = [[data.target]] if self.loss_fn == "mse" else [ex.label]
            out.append((torch.tensor(nodes, dtype=dtype),
                        [(torch.from_numpy(e[:, 0].copy()), torch.from_numpy(e[:, 1].copy())) for e in edges],
                        torch.tensor(target, dtype=dtype if self.loss_fn == "mse" else torch.long),
                        nodes, edges))
        return out

    def _propagate(self, x: torch.Tensor, edges: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        L, H = self.linears, self.hidden
        h = torch.tanh(L["embed"](x))
        zeros = h.new_zeros(h.shape)
        for _ in range(self.steps):  # the same weights every step
            msgs = [zeros.index_add(0, dst, h[src]) for src, dst in edges]  # out[dst] += h[src]
            m = L["prop_msg"](torch.cat(msgs, dim=1))
            z, f, r = torch.sigmoid(L["prop_gates"](torch.cat([m, h], dim=1))).split(H, dim=1)
            c = torch.tanh(L["prop_cand"](torch.cat([m, r * h], dim=1)))
            h = f * h + z * c
        gate, value = self.linears["readout_ij"](h).split(self.readout, dim=1)
        return torch.sigmoid(gate) * torch.tanh(value)  # per node; summed per graph by the caller

    def _head(self, r: torch.Tensor) -> torch.Tensor:
        return self.linears["head2"](torch.tanh(self.linears["head1"](r)))

    def _loss(self, y: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if self.loss_fn == "mse":
            return 0.5 * ((y - t) ** 2).sum(dim=1)
        return _ce(y, t)

    def forward_one(self, inst: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, edges, target = inst[0], inst[1], inst[2]
        y = self._head(self._propagate(x, edges).sum(dim=0, keepdim=True))
        return self._loss(y, target), y

    def forward_batch(self, insts: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """A disjoint union: nodes stacked, edges offset, the readout summed per graph."""
        sizes = np.array([inst[3].shape[0] for inst in insts])
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        x = torch.cat([inst[0] for inst in insts])
        edges = []
        for k in range(self.edge_types):
            e = torch.from_numpy(np.concatenate([inst[4][k] + o for inst, o in zip(insts, offsets)]))
            edges.append((e[:, 0], e[:, 1]))
        graph = torch.from_numpy(np.repeat(np.arange(len(insts)), sizes))
        gated = self._propagate(x, edges)
        r = gated.new_zeros(len(insts), self.readout).index_add(0, graph, gated)
        y = self._head(r)
        return self._loss(y, self.targets(insts)), y

    def targets(self, insts: Sequence[Any]) -> torch.Tensor:
        return torch.cat([inst[2] for inst in insts])


def make_peer(entry: ModelSpec) -> Peer:
    """The torch peer of a zoo entry, with the graph's own sizes; ``AmpHlsError`` if it has none."""
    g = entry.build()
    if entry.name == "list-rnn":
        vocab = g.node("tokens").width
        return ListRNNPeer(vocab, g.node("h0").width, g.node("head").out_features,
                           g.node("tokens").max_rows)
    if entry.name == "tree-rnn":
        return TreeRNNPeer(g.node("embed").in_features, g.node("embed").out_features,
                           g.node("head").out_features)
    if entry.name.startswith("ggsnn-"):
        edge_types = sum(1 for n in g.nodes if n.startswith("edges"))
        loss = g.node("loss").fn
        return GGSNNPeer(g.node("nodes").width - 1, edge_types, g.node("head2").out_features, loss,
                         hidden=g.node("embed").out_features, steps=ggsnn_steps(g),
                         readout=g.node("head1").out_features)
    raise AmpHlsError(f"no PyTorch peer for model {entry.name!r}")


PEER_MODELS = ("list-rnn", "tree-rnn", "ggsnn-qm9", "ggsnn-babi15", "ggsnn-babi19")


# --- training ------------------------------------------------------------------------------------


class TorchTrainer(TrainerBase):
    """PyTorch in ``mode`` eager or batched, through amp-hls's own epoch loop (``TrainerBase.fit``):
    the same target, time-to-target (end of the first epoch whose validation metric reaches it),
    shuffling (the same permutation per epoch as ``Trainer``) and summary."""

    def __init__(self, entry: ModelSpec, config: TrainConfig, splits: Splits | None = None,
                 mode: str = "eager", numerics: NumericConfig = FLOAT32,
                 every: int = EAGER_EVERY, batch: int = BATCH):
        if mode not in MODES:
            raise AmpHlsError(f"unknown torch mode {mode!r}; use one of {', '.join(MODES)}")
        super().__init__(entry, config, splits)
        self.mode, self.every, self.batch = mode, every, batch
        self.backend = f"torch-{mode}"
        torch.manual_seed(config.seed)
        self.model = make_peer(entry).to(torch_dtype(numerics))
        self.model.load_from_engine(Engine(self.graph, numerics, seed=config.seed))  # Trainer's init
        opt = config.optimizer
        if opt.kind != "adam":
            raise AmpHlsError("the torch peers train with Adam only")
        self.clip = opt.clip
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=opt.lr,
                                          betas=(opt.beta1, opt.beta2), eps=opt.eps)
        self.rng = np.random.default_rng(config.seed + 2)  # Trainer's shuffling stream
        self.data = {"train": self.model.prepare(self.splits.train)}
        self._prepared: dict[int, list[Any]] = {}

    def _step(self) -> None:
        if self.clip is not None:
            for lin in self.model.linears.values():
                torch.nn.utils.clip_grad_norm_(lin.parameters(), self.clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def train_epoch(self, progress: Callable[[int], None] | None = None) -> tuple[float, float]:
        order = self.rng.permutation(len(self.splits.train))
        data = self.data["train"]
        insts = [data[i] for i in order]
        losses: list[torch.Tensor] = []
        preds: list[torch.Tensor] = []
        start = time.perf_counter()
        self.model.train()
        if self.mode == "eager":
            pending = 0
            for inst in insts:
                loss, pred = self.model.forward_one(inst)
                (loss.sum() / self.every).backward()
                losses.append(loss.detach())
                preds.append(pred.detach())
                pending += 1
                if pending == self.every:
                    self._step()
                    pending = 0
            if pending:  # the last partial group: its mean, as a short minibatch
                for p in self.model.parameters():
                    if p.grad is not None:
                        p.grad.mul_(self.every / pending)
                self._step()
        else:
            for lo in range(0, len(insts), self.batch):
                chunk = insts[lo : lo + self.batch]
                loss, pred = self.model.forward_batch(chunk)
                loss.mean().backward()
                self._step()
                losses.append(loss.detach())
                preds.append(pred.detach())
        self.train_s += time.perf_counter() - start
        self.instances += len(insts)
        self.epoch += 1
        if progress is not None:
            progress(len(insts))
        return self._score(torch.cat(losses), torch.cat(preds), self.model.targets(insts))

    def _score(self, losses: torch.Tensor, preds: torch.Tensor, targets: torch.Tensor) -> tuple[float, float]:
        loss = float(losses.mean())
        if self.entry.metric == "mae":
            return loss, float((preds - targets).abs().mean()) * self.entry.metric_scale
        return loss, float((preds.argmax(dim=1) == targets).double().mean())

    def evaluate(self, examples: Sequence[Example]) -> Evaluation:
        key = id(examples)
        if key not in self._prepared:
            self._prepared[key] = self.model.prepare(examples)
        insts = self._prepared[key]
        self.model.eval()
        losses, preds = [], []
        with torch.no_grad():
            for lo in range(0, len(insts), 512):
                loss, pred = self.model.forward_batch(insts[lo : lo + 512])
                losses.append(loss)
                preds.append(pred)
        loss, metric = self._score(torch.cat(losses), torch.cat(preds), self.model.targets(insts))
        return Evaluation(loss, metric, len(insts))

    def _details(self) -> dict[str, Any]:
        return {"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                "update_every": self.every if self.mode == "eager" else self.batch}
