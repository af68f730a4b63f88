"""Real QM9 molecules (the ``qm9`` extra: ``qm9pack`` data + RDKit) as typed graphs.

``qm9pack`` ships the full QM9 set (130,831 molecules) as three CSVs; we read them straight from
the installed package's folder (its own loader imports ``pkg_resources`` and pandas) and take
two columns: ``SMILES`` and ``HOMO_LUMO_gap_au`` (Hartree). The data is never copied into this
repository.

Graphs hold the **heavy atoms only** (C, N, O, F; at most 9 per molecule), with hydrogens folded
into a feature (count of attached H), which keeps the graphs small and fast; bonds become
directed edges both ways, typed single / double / triple / aromatic (RDKit's aromatic
perception). Node features (``QM9_FEATURES``): element one-hot (C, N, O, F), attached H count
one-hot (0..4), aromatic flag, formal charge, hybridisation one-hot (sp, sp2, sp3).

Target: the HOMO-LUMO gap in eV, normalised as ``(gap - QM9_GAP_MEAN_EV) / QM9_GAP_STD_EV``
with the mean and standard deviation of the *full* data set (fixed constants, so the reported
MAE is exactly ``normalised MAE * QM9_GAP_STD_EV`` eV whatever subset is drawn; a test checks
them against the CSVs).

Size: ``n`` molecules drawn at random from the whole set (default ``DEFAULT_SIZE``); ``n=None``,
or the environment variable ``AMP_HLS_QM9_SIZE=all``, loads everything (``AMP_HLS_QM9_SIZE=<int>``
sets the default size).
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import io
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import AmpHlsError
from .babi import GraphData
from .base import Example, Splits, split

HARTREE_EV = 27.211386245988  # CODATA 2018
QM9_GAP_MEAN_EV = 6.858493  # over all 130,831 molecules of qm9pack 1.0.3
QM9_GAP_STD_EV = 1.284164
DEFAULT_SIZE = 4000
SIZE_ENV = "AMP_HLS_QM9_SIZE"
PARTS = ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv")

ELEMENTS = ("C", "N", "O", "F")
QM9_EDGE_TYPES = ("single", "double", "triple", "aromatic")
QM9_FEATURES = len(ELEMENTS) + 5 + 1 + 1 + 3
QM9_MAX_NODES = 9  # heavy atoms
QM9_MAX_EDGES = 2 * 13  # directed, per bond type: at most 13 bonds of one type in QM9 (measured)
MISSING_EXTRA = "QM9 needs the qm9 extra (qm9pack and RDKit): pip install 'amp-hls[qm9]'"


def _data_dir() -> Path:
    """qm9pack's data folder, found without importing the package: its ``__init__`` imports
    ``pkg_resources``, which new setuptools no longer ship."""
    spec = importlib.util.find_spec("qm9pack")
    if spec is None or not spec.submodule_search_locations:
        raise AmpHlsError(MISSING_EXTRA)
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _require_extra() -> None:
    try:
        import rdkit  # noqa: F401
    except ImportError:
        raise AmpHlsError(MISSING_EXTRA) from None
    _data_dir()


@functools.lru_cache(maxsize=1)
def read_qm9_table() -> tuple[tuple[int, str, float], ...]:
    """Every molecule as ``(QM9 index, SMILES, gap in eV)``, in file order (read once, ~2 s)."""
    _require_extra()
    root = _data_dir()
    rows: list[tuple[int, str, float]] = []
    for part in PARTS:
        path, reader = root / part, None
        try:
            with path.open("rb") as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as f:
                reader = csv.reader(f)
                header = next(reader, [])
                try:
                    i_idx, i_smi, i_gap = (header.index(c) for c in ("Index", "SMILES", "HOMO_LUMO_gap_au"))
                except ValueError:
                    raise AmpHlsError(f"qm9pack's {part} lacks an expected column; header: {header[:20]}") from None
                for row in reader:
                    rows.append((int(row[i_idx]), row[i_smi], float(row[i_gap]) * HARTREE_EV))
        except OSError as exc:
            raise AmpHlsError(f"cannot read QM9 data {path}: {exc.strerror or exc}; reinstall the qm9 extra "
                              "(pip install --force-reinstall qm9pack)") from None
        except (UnicodeDecodeError, ValueError, IndexError, csv.Error) as exc:
            where = f" at line {reader.line_num}" if reader is not None else ""
            raise AmpHlsError(f"QM9 data {path} is damaged{where} ({type(exc).__name__}: {exc}); "
                              "reinstall the qm9 extra (pip install --force-reinstall qm9pack)") from None
    return tuple(rows)


def smiles_to_graph(smiles: str) -> tuple[np.ndarray, tuple[np.ndarray, ...]] | None:
    """Heavy-atom node features and typed edge lists from a SMILES; ``None`` if RDKit rejects it."""
    _require_extra()
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")  # QM9 has a few SMILES RDKit warns about; we skip failures
    mol = Chem.MolFromSmiles(smiles)
    if mol is None or mol.GetNumAtoms() == 0:
        return None
    hybrid = {Chem.HybridizationType.SP: 0, Chem.HybridizationType.SP2: 1, Chem.HybridizationType.SP3: 2}
    nodes = np.zeros((mol.GetNumAtoms(), QM9_FEATURES))
    for atom in mol.GetAtoms():
        i = atom.GetIdx()
        symbol = atom.GetSymbol()
        if symbol not in ELEMENTS:
            return None
        nodes[i, ELEMENTS.index(symbol)] = 1.0
        nodes[i, len(ELEMENTS) + min(atom.GetTotalNumHs(), 4)] = 1.0
        nodes[i, len(ELEMENTS) + 5] = float(atom.GetIsAromatic())
        nodes[i, len(ELEMENTS) + 6] = float(atom.GetFormalCharge())
        if atom.GetHybridization() in hybrid:
            nodes[i, len(ELEMENTS) + 7 + hybrid[atom.GetHybridization()]] = 1.0
    kinds = {Chem.BondType.SINGLE: 0, Chem.BondType.DOUBLE: 1, Chem.BondType.TRIPLE: 2,
             Chem.BondType.AROMATIC: 3}
    edges: list[list[tuple[int, int]]] = [[] for _ in QM9_EDGE_TYPES]
    for bond in mol.GetBonds():
        if bond.GetBondType() not in kinds:
            return None
        a, b = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        edges[kinds[bond.GetBondType()]] += [(a, b), (b, a)]
    return nodes, tuple(np.asarray(e, dtype=np.int64).reshape(-1, 2) for e in edges)


def default_size() -> int | None:
    """``DEFAULT_SIZE``, or what ``AMP_HLS_QM9_SIZE`` says (``all`` = the whole set)."""
    value = os.environ.get(SIZE_ENV, "").strip().lower()
    if not value:
        return DEFAULT_SIZE
    if value in ("all", "full"):
        return None
    try:
        size = int(value)
    except ValueError:
        raise AmpHlsError(f"{SIZE_ENV} must be a positive integer or 'all', got {value!r}") from None
    if size < 10:
        raise AmpHlsError(f"{SIZE_ENV} must be at least 10, got {size}")
    return size


def qm9_examples(rows: Sequence[tuple[int, str, float]]) -> list[Example]:
    """Graph examples (label = the QM9 index) for ``rows``; molecules RDKit rejects are skipped."""
    out = []
    for index, smiles, gap in rows:
        graph = smiles_to_graph(smiles)
        if graph is None:
            continue
        target = (gap - QM9_GAP_MEAN_EV) / QM9_GAP_STD_EV
        out.append(Example(GraphData(graph[0], graph[1], target=target, text=f"{smiles} gap {gap:.4f} eV"), index))
    return out


def load_qm9_splits(seed: int = 0, n: int | None | str = "default") -> Splits:
    """``n`` random molecules (``"default"``: ``default_size()``; ``None``: all), split 70/15/15."""
    size = default_size() if n == "default" else n
    table = read_qm9_table()
    if size is not None:
        if not isinstance(size, int) or size < 10:
            raise AmpHlsError(f"QM9 subset size must be an integer of at least 10, got {size!r}")
        pick = np.sort(np.random.default_rng(seed).choice(len(table), min(size, len(table)), replace=False))
        table = tuple(table[i] for i in pick)
    examples = qm9_examples(table)
    what = "all" if size is None else f"{len(examples)} random"
    return split("qm9-gap-heavy-atoms", examples, seed, description=(
        f"QM9 (qm9pack), {what} molecules as heavy-atom graphs (RDKit bond types), target the "
        f"HOMO-LUMO gap normalised by the full set's mean {QM9_GAP_MEAN_EV} eV / std {QM9_GAP_STD_EV} eV"))
