"""The Python API, one layer below the command line: every ``amp-hls`` command calls these
functions, with the same objects (tutorial: docs/your-model.md)::

    import amp_hls as amp

    spec = amp.load_model("examples/list_contains.py")   # or a zoo name, or a ModelSpec
    trainer = amp.train(spec, amp.training_config(spec, epochs=5), log="run.csv")
    print(amp.evaluate(trainer, spec.splits(0).test))
    print(amp.predict(trainer, spec.splits(0).test[:3]))
    project = amp.generate(spec, "build/my_list")         # HLS C++, RTL, board project
    print(amp.format_report(*amp.report(project.root, model=spec)))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from .codegen.boards import Board
from .codegen.estimate import Estimate
from .codegen.project import BoardProject
from .config import RunConfig
from .cycles.folding import FitError, Folding
from .cycles.report import RAISE_MAK, CycleReport, Measured
from .datasets import DATA_FORMATS, Example, Splits, load_dataset
from .design import DeviceOptions
from .distributed import DistributedOptions
from .errors import AmpHlsError
from .extras import require
from .ir import GraphCore, load, node_lanes
from .memories import LUTRAM_DEPTHS
from .models import MODELS, ModelSpec
from .models.loader import load_model_file
from .numerics import NumericConfig, Precision
from .runtime.infer import Prediction, Predictor
from .runtime.optim import OptimizerConfig
from .runtime.report import (
    EpochLog,
    TensorBoardLog,
    check_log_path,
    plot_history,
    require_tensorboard,
    write_json,
)
from .runtime.trainer import EpochRecord, Evaluation, TrainConfig, Trainer, TrainerBase

DEFAULT_BOARD = "pynq-z2"
T = TypeVar("T")
MODEL_SUFFIX = ".py"  # a model file (``model()`` returns a ModelSpec); a graph file is .json


# --- models and graphs ---------------------------------------------------------------------------


def load_model(model: str | Path | ModelSpec, *, data: str | Path | None = None,
               dataset_size: int | str | None = None, config: RunConfig | None = None) -> ModelSpec:
    """A zoo name, a model file (``.py``) or a ``ModelSpec``; with ``data`` (a data file in place
    of the model's data), ``dataset_size`` (an int, or ``"all"``: the size of a data set drawn
    from a larger one) and the per-node settings of ``config`` applied."""
    if isinstance(model, ModelSpec):
        spec = model
    elif str(model) in MODELS:
        spec = MODELS[str(model)]
    elif Path(model).suffix == MODEL_SUFFIX:
        spec = load_model_file(model)
    elif Path(model).suffix == ".json":
        raise AmpHlsError(f"{model}: a graph document says nothing of how an example feeds its sources; "
                          f"write a model file (path/to/model{MODEL_SUFFIX} whose model() returns a ModelSpec "
                          "built on the graph: amp_hls.ir.load(path) reads it; docs/your-model.md)")
    else:
        raise AmpHlsError(f"{str(model)!r} is neither a zoo model ({', '.join(MODELS)}) nor a model "
                          f"file (path/to/model{MODEL_SUFFIX}, docs/your-model.md)")
    if data is not None and dataset_size is not None:
        raise AmpHlsError("--dataset-size sizes the model's own data set, --data replaces it: give one")
    if data is not None:
        path = Path(data)
        if path.suffix not in DATA_FORMATS or not path.is_file():
            raise AmpHlsError(f"data file {path}: " + ("does not exist" if path.suffix in DATA_FORMATS else
                              f"unknown format {path.suffix or '(no suffix)'!r}; use {', '.join(DATA_FORMATS)}"))
        spec = spec.with_data(lambda seed: load_dataset(path, seed))
    if dataset_size is not None:
        spec = spec.with_dataset_size(_size(dataset_size))
    if config is not None and config.nodes:
        spec = spec.with_graph(config.apply(spec.build()))  # type: ignore[arg-type]
    return spec


def _size(value: int | str) -> int | None:
    if value == "all":
        return None
    try:
        size = int(value)
    except (TypeError, ValueError):
        raise AmpHlsError(f"--dataset-size must be a positive integer or 'all', got {value!r}") from None
    if size < 1:
        raise AmpHlsError(f"--dataset-size must be a positive integer or 'all', got {value!r}")
    return size


def resolve_graph(model: str | Path | ModelSpec | GraphCore) -> GraphCore:
    """A graph: given, a zoo model's, a model file's (``.py``) or a graph document (``.json``)."""
    if isinstance(model, GraphCore):
        return model
    if isinstance(model, ModelSpec) or str(model) in MODELS or Path(model).suffix == MODEL_SUFFIX:
        return load_model(model).build()
    if str(model).endswith(".json") or Path(model).exists():
        return load(model)
    raise AmpHlsError(f"{str(model)!r} is neither a model ({', '.join(MODELS)}, or a model file "
                      f"path/to/model{MODEL_SUFFIX}) nor a graph JSON file")


# --- training ------------------------------------------------------------------------------------


def training_config(spec: ModelSpec, *, config: RunConfig | None = None, mak: int | None = None,
                    muf: int | None = None, epochs: int | None = None, lr: float | None = None,
                    optimizer: str | None = None, clip: float | None = None, seed: int | None = None,
                    numerics: str | None = None, target: float | None = None, no_target: bool = False,
                    sync: bool = False, precision: dict[str, Precision] | None = None) -> TrainConfig:
    """The ``TrainConfig`` of a run: each setting given here, else in ``config``'s [training]
    (and [precision]), else the model's default, else TrainConfig's. ``clip`` 0 is off."""
    given = {"mak": mak, "muf": muf, "epochs": epochs, "lr": lr, "optimizer": optimizer, "clip": clip,
             "seed": seed, "numerics": numerics, "target": target}
    file = dict(config.training) if config is not None else {}
    base, optimizer_base = TrainConfig(), OptimizerConfig()  # the last word on every default

    def pick(key: str, fallback: Any) -> Any:
        if given[key] is not None:
            return given[key]
        return file.get(key, spec.defaults.get(key, fallback))

    return TrainConfig(
        mak=pick("mak", base.mak),
        muf=pick("muf", base.muf),
        optimizer=OptimizerConfig(pick("optimizer", optimizer_base.kind), lr=pick("lr", optimizer_base.lr),
                                  clip=pick("clip", optimizer_base.clip) or None),
        epochs=pick("epochs", base.epochs),
        seed=pick("seed", base.seed),
        numerics=pick("numerics", base.numerics),
        target=None if no_target else pick("target", spec.target),
        sync=sync,
        precision=dict(precision if precision is not None else (config.precision if config is not None else {})),
    )


def check_outputs(log: str | Path | None = None, tensorboard: str | Path | None = None,
                  plot: str | Path | None = None) -> None:
    """What the run's outputs need, checked before any long work: a log format, the extras."""
    if log is not None:
        check_log_path(log)
    if plot is not None:
        require("plot", "--plot")
    if tensorboard is not None:
        require_tensorboard()


def trainer_for(model: str | Path | ModelSpec, config: TrainConfig | None = None, *, backend: str = "cpu",
                n_sync: int | None = None, cache_slots: int | None = None, project: Path | None = None,
                bitstream: Path | None = None, splits: Splits | None = None, resume: Path | None = None,
                epochs: int | None = None, threads: int | None = None) -> TrainerBase:
    """A trainer ready to ``fit``: ``cpu`` (the numpy runtime, whole graph), ``native`` (the same
    runtime compiled to C++, docs/native.md), or the device nodes on ``numpy-device``, ``csim``,
    ``rtlsim`` or ``pynq`` with the host as parameter server. Every example is checked first.
    ``resume`` continues a cpu or native checkpoint (the same format) with its own settings (only
    ``epochs`` may change them). ``threads``: the native backend's worker threads (default 1, the
    deterministic mode)."""
    spec = load_model(model)
    if threads is not None and backend != "native":
        raise AmpHlsError(f"threads={threads}: worker threads are for the native backend, not {backend}")
    if resume is not None:
        if backend not in ("cpu", "native"):
            raise AmpHlsError("--resume works with the cpu and native backends only")
        if config is not None:
            raise AmpHlsError("a resumed run keeps its checkpoint's settings: give no TrainConfig (epochs= extends it)")
        if backend == "native":
            from .native import NativeTrainer

            return NativeTrainer.resume(spec, Path(resume), splits=splits, epochs=epochs, threads=threads)
        return Trainer.resume(spec, Path(resume), splits=splits, epochs=epochs)
    config = config if config is not None else training_config(spec, epochs=epochs)
    if backend == "cpu":
        return Trainer(spec, config, splits)
    if backend == "native":
        from .native import NativeTrainer

        return NativeTrainer(spec, config, splits, **({"threads": threads} if threads is not None else {}))
    from .host.trainer import DeviceTrainer

    sync = {"n_sync": n_sync} if n_sync is not None else {}  # else DeviceTrainer's default
    return DeviceTrainer(spec, config, backend, splits=splits, project_dir=project, bitstream=bitstream,
                         cache_slots=cache_slots, **sync)


def fit(trainer: TrainerBase, *, checkpoint: Path | None = None, log: str | Path | None = None,
        tensorboard: str | Path | None = None, plot: str | Path | None = None, summary: str | Path | None = None,
        on_epoch: Callable[[EpochRecord], None] | None = None,
        progress_factory: Callable[[int, int], Any] | None = None) -> dict[str, Any]:
    """Train to the epochs or the target, writing the epoch log (``.csv``/``.jsonl``) and the
    TensorBoard events as it goes, then the summary (JSON) and the plot; returns the summary.
    A run that lost or duplicated a message is an error, after its files are written."""
    check_outputs(log, tensorboard, plot)
    spec = trainer.entry
    writers: list[EpochLog | TensorBoardLog] = []
    try:
        if log is not None:
            writers.append(EpochLog(log, append=bool(trainer.history)))  # a resumed run continues its log
        if tensorboard is not None:
            writers.append(TensorBoardLog(tensorboard, spec.metric))

        def each(record: EpochRecord) -> None:
            for w in writers:
                w.write(record)
            if on_epoch is not None:
                on_epoch(record)

        trainer.fit(checkpoint=checkpoint, on_epoch=each, progress_factory=progress_factory)
    finally:
        for w in writers:
            w.close()
    doc = trainer.summary()
    if summary is not None:
        write_json(doc, summary)
    if plot is not None:
        unit = f" ({spec.metric_unit})" if spec.metric_unit else ""
        plot_history(trainer.history, plot, metric=spec.metric + unit, target=trainer.config.target,
                     title=f"{spec.name} ({doc['mode']}, {doc['backend']})")
    if not doc.get("conservation_ok", True):
        raise AmpHlsError(f"conservation check failed: {doc['conservation_problems']}")
    return doc


def train(model: str | Path | ModelSpec, config: TrainConfig | None = None, **options: Any) -> TrainerBase:
    """``trainer_for(model, config, ...)`` then ``fit(trainer, ...)``: the trained trainer.
    ``options`` are those two functions' keywords."""
    fit_keys = {"checkpoint", "log", "tensorboard", "plot", "summary", "on_epoch", "progress_factory"}
    fit_options = {k: v for k, v in options.items() if k in fit_keys}
    check_outputs(fit_options.get("log"), fit_options.get("tensorboard"), fit_options.get("plot"))
    trainer = trainer_for(model, config, **{k: v for k, v in options.items() if k not in fit_keys})
    fit(trainer, **fit_options)
    return trainer


def train_distributed(model: str | Path | ModelSpec, config: TrainConfig, options: DistributedOptions) -> int:
    """Distributed asynchronous SGD: run this under ``mpiexec -n N+1`` (rank 0 the parameter
    server, ranks 1..N workers on disjoint shards; docs/distributed.md)."""
    from .distributed import run_distributed

    return run_distributed(load_model(model), config, options)


# --- trained models ------------------------------------------------------------------------------


def predictor(trained: TrainerBase | Predictor) -> Predictor:
    """The trained parameters as a ``Predictor`` (forward only)."""
    if isinstance(trained, Predictor):
        return trained
    return Predictor(trained.entry, trained.parameters(), trained.numerics, trained.graph)  # type: ignore[attr-defined]


def load_predictor(model: str | Path | ModelSpec, checkpoint: str | Path) -> Predictor:
    """The parameters of a training checkpoint (``--checkpoint``), for ``evaluate``/``predict``."""
    return Predictor.from_checkpoint(load_model(model), checkpoint)


def evaluate(trained: TrainerBase | Predictor, examples: Sequence[Example]) -> Evaluation:
    """Mean loss and the model's metric on ``examples`` (a native trainer evaluates on its own
    engine, leaving its keys as they were)."""
    if getattr(trained, "backend", None) == "native":
        return trained.evaluate(examples, keep_keys=True)  # type: ignore[call-arg]
    return predictor(trained).evaluate(examples)


def predict(trained: TrainerBase | Predictor, examples: Sequence[Example]) -> list[Prediction]:
    """What the model predicts for each example (no labels needed)."""
    return predictor(trained).predict(examples)


# --- hardware ------------------------------------------------------------------------------------


def device_options(config: RunConfig | None = None, *, muf: int | None = None,
                   cache_slots: int | None = None, dump_engine: bool | None = None,
                   lutram_depth: int | None = None) -> DeviceOptions:
    """A generated device's options: each given here, else in ``config`` (muf from [training], the
    tag tables and the dump engine from [device], the precision from [precision]), else
    DeviceOptions' defaults."""
    kwargs: dict[str, Any] = {} if lutram_depth is None else {"lutram_depth": lutram_depth}
    training = config.training if config is not None else {}
    device = config.device if config is not None else {}
    if dump_engine is not None or "dump_engine" in device:
        kwargs["dump_engine"] = bool(dump_engine if dump_engine is not None else device["dump_engine"])
    if muf is not None or "muf" in training:
        kwargs["muf"] = muf if muf is not None else training["muf"]
    if cache_slots is not None or "cache_slots" in device:
        kwargs["cache_slots"] = cache_slots if cache_slots is not None else device["cache_slots"]
    if config is not None and config.precision:
        kwargs["numerics"] = NumericConfig("fixed", **config.precision)  # type: ignore[arg-type]
    return DeviceOptions(**kwargs)


def generate(model: str | Path | ModelSpec | GraphCore, output: str | Path, *, board: str | None = None,
             options: DeviceOptions | None = None, config: RunConfig | None = None,
             force: bool = False, flow: str = "rtl", fold: bool | None = None,
             target_rate: float | None = None, parallelism: Mapping[str, int] | None = None,
             muf: int | None = None, folding: Folding | None = None) -> BoardProject:
    """Write the HLS C++, the RTL and the board project of a model's graph into ``output``: a new
    or empty directory, or a project amp-hls wrote (``force``: also over files a user changed;
    no file amp-hls did not write is ever deleted, amp_hls.output).

    With a board (``board`` or ``[device] board``) each Linear's parallelism and the dump period
    are chosen for it (folding; ``fold=False`` or ``[device] fold = false`` opts out, ``fold`` or
    ``target_rate`` asks for it on the default board; ``folding``: one chosen already), and the
    manifest records the choice. ``parallelism`` pins nodes; a design that does not fit the board
    (resource model) is then refused, folded or pinned (FitError)."""
    from .codegen.boards import load_board
    from .codegen.project import generate_project

    board_spec = load_board(board or (config.device.get("board") if config else None) or DEFAULT_BOARD)
    check_flow(flow, options, folding)
    graph = resolve_graph(model)  # a graph that breaks the IR fails before anything is written
    if config is not None:
        graph = config.apply(graph)
    check_lanes(flow, graph)
    options = options if options is not None else device_options(config)
    board_given = board is not None or (config is not None and "board" in config.device)
    if folding is None and folds(config, fold, target_rate, board_given):
        folding = fold_for(model, board_spec.name, options=options, config=config, target_rate=target_rate,
                           parallelism=parallelism, muf=muf, lutram_depth=0 if flow == "hls" else None,
                           lanes=flow != "hls")
    elif folding is None and parallelism:
        from .cycles.folding import check_fit

        graph = _pinned(graph, parallelism)
        check_fit(graph, board_spec, options)
    if folding is None:
        return generate_project(graph, output, board_spec, options, force=force, flow=flow)
    return _generate_folded(graph, output, board_spec, options, folding, force, flow)


def check_flow(flow: str, options: DeviceOptions | None, folding: Folding | None = None) -> None:
    """Refuse what only the rtl flow builds: the dump engine, memories moved to LUT-RAM."""
    if flow != "hls":
        return
    if options is not None and options.dump_engine:
        raise AmpHlsError("the dump engine is built into the RTL kernels only: generate it with --flow rtl "
                          "(the HLS kernels dump inline)")
    if (options is not None and options.lutram_depth) or (folding is not None and folding.lutram_depth):
        raise AmpHlsError("--lutram-depth places the RTL's memories only: generate it with --flow rtl (the hls "
                          "flow leaves its arrays to Vitis HLS)")


def check_lanes(flow: str, graph: GraphCore) -> None:
    """Refuse lanes (wire.py, Lanes) in the hls flow: its kernels read and write 64-bit beats."""
    laned = sorted(name for name, node in graph.nodes.items() if node_lanes(node) > 1)
    if flow == "hls" and laned:
        raise AmpHlsError(f"lanes are built into the RTL kernels only ({', '.join(laned)} have more than one): "
                          "generate with --flow rtl, or set their lanes to 1")


def _lutram_pin(lutram_depth: int | None, options: DeviceOptions) -> int | None:
    """The LUT-RAM depth a folding is pinned to: the one given, else the options' when not 0;
    None: the folding chooses (``_fastest_placement``)."""
    return lutram_depth if lutram_depth is not None else (options.lutram_depth or None)


def folds(config: RunConfig | None, fold: bool | None, target_rate: float | None, board_given: bool = False) -> bool:
    """Whether generate folds: ``fold`` when given, else ``[device] fold``, else whether a board
    was named (``--board``, ``[device] board``); a target rate asks for it."""
    if fold is False and target_rate is not None:
        raise AmpHlsError("--target-rate is a folding goal: drop --no-fold")
    if fold is None:
        fold = bool(config.device.get("fold", board_given)) if config is not None else board_given
    return fold or target_rate is not None or (config is not None and "target_rate" in config.device)


def _graph_and_pins(model: str | Path | ModelSpec | GraphCore, config: RunConfig | None,
                    parallelism: Mapping[str, int] | None) -> tuple[GraphCore, dict[str, int]]:
    """The model's graph with ``config`` applied, and the parallelism pinned by ``config``'s
    [nodes] and then ``parallelism``."""
    graph = resolve_graph(model)
    pinned = {n: a["parallelism"] for n, a in (config.nodes.items() if config is not None else ())
              if "parallelism" in a}
    pinned.update(parallelism or {})
    if config is not None:
        graph = config.apply(graph)
    return graph, pinned


def fitting_options(model: str | Path | ModelSpec | GraphCore, board: str, options: DeviceOptions, *,
                    config: RunConfig | None = None,
                    parallelism: Mapping[str, int] | None = None) -> tuple[DeviceOptions, int | None]:
    """``options`` (sized for a mak: ``host.settings``) with mak lowered to the largest whose tag
    tables let the design fit ``board`` (resource model, every Linear at its pinned or least
    parallelism), and the mak it was lowered from (None: it fits as it is). FitError, naming the
    resource, when not even one instance in flight fits."""
    from .codegen.boards import load_board
    from .cycles.folding import check_fit, largest_fitting_mak

    graph, pinned = _graph_and_pins(model, config, parallelism)
    board_spec = load_board(board)
    mak = options.max_in_flight
    fits = largest_fitting_mak(graph, board_spec, options, pinned)
    if fits == mak:
        return options, None
    per = options.cache_slots // mak  # type: ignore[operator]
    if fits < 1:  # the refusal at one instance in flight names the resource and what to lower
        check_fit(_pinned(graph, pinned), board_spec, dataclasses.replace(options, cache_slots=per, max_in_flight=1))
        raise AmpHlsError(f"graph {graph.name!r} does not fit {board_spec.name} even at mak 1")
    return dataclasses.replace(options, cache_slots=fits * per, max_in_flight=fits), mak


def fold_fitting(model: str | Path | ModelSpec | GraphCore, board: str, options: DeviceOptions, *,
                 config: RunConfig | None = None, target_rate: float | None = None,
                 parallelism: Mapping[str, int] | None = None,
                 muf: int | None = None, lutram_depth: int | None = None, lanes: bool = True) -> tuple[Folding, DeviceOptions]:
    """``fold_for`` at ``options``' mak when its tag tables fit ``board``; else the mak is lowered
    (``fitting_options``) and traded against MACs: of the most that fit and fewer
    (``mak_candidates``), the fastest predicted folding (tag tables and MAC lanes share the board;
    fewer in flight leave room for more MACs but pay their round trip, the latency-priced pace),
    the larger mak on a tie within 5%. The folding records the mak it was lowered from, and the
    options returned the mak and where the memories go.

    ``lutram_depth`` pins where shallow memories go (amp_hls.memories; None: ``options``' when not
    0); None and 0 there: block RAM, unless block RAM stopped the folding or lowered the mak, when each of ``LUTRAM_DEPTHS`` is tried
    too (it frees block RAM for MACs and tag tables) and the fastest taken (the shallower limit,
    fewer LUTs, within ``LUTRAM_TIE``)."""
    lutram_depth = _lutram_pin(lutram_depth, options)

    def at(depth: int) -> tuple[Folding, DeviceOptions]:
        return _fold_fitting_at(model, board, dataclasses.replace(options, lutram_depth=depth), config=config,
                                target_rate=target_rate, parallelism=parallelism, muf=muf, lanes=lanes)

    if lutram_depth is not None:
        return at(lutram_depth)
    return _fastest_placement(at, lambda t: t[0], lambda f: "bram36" in (f.limit, f.mak_limit))


def _fastest_placement(at: Callable[[int], T], folding_of: Callable[[T], Folding], bounded: Callable[[Folding], bool]) -> T:
    """``at(0)`` (memories in block RAM), unless block RAM is what does not fit or what ``bounded``
    says stopped it: then also ``at`` each of ``LUTRAM_DEPTHS`` (memories of at most that many
    words in LUT-RAM), the fastest kept, the shallower limit (fewer LUTs) within ``LUTRAM_TIE``."""
    tried: list[T] = []
    try:
        tried.append(at(0))
    except FitError as exc:
        if exc.resource != "bram36":
            raise
        refused = exc
    if tried and not bounded(folding_of(tried[0])):
        return tried[0]
    for depth in LUTRAM_DEPTHS:
        try:
            tried.append(at(depth))
        except FitError:
            continue
    if not tried:
        raise refused
    best = max(folding_of(t).instances_per_s for t in tried)
    return next(t for t in tried if folding_of(t).instances_per_s >= LUTRAM_TIE * best)


def _fold_fitting_at(model: str | Path | ModelSpec | GraphCore, board: str, options: DeviceOptions, *,
                     config: RunConfig | None, target_rate: float | None,
                     parallelism: Mapping[str, int] | None, muf: int | None, lanes: bool) -> tuple[Folding, DeviceOptions]:
    """``fold_fitting`` with the memories where ``options`` put them."""
    depth = options.lutram_depth
    fitted, lowered = fitting_options(model, board, options, config=config, parallelism=parallelism)
    if lowered is None:
        return fold_for(model, board, options=options, config=config, target_rate=target_rate,
                        parallelism=parallelism, muf=muf, lutram_depth=depth, lanes=lanes), options
    per = options.cache_slots // lowered
    tried = []
    for mak in mak_candidates(fitted.max_in_flight or 1):  # the mak chosen on the MACs alone: lanes
        # for every candidate would cost a minute each on ggsnn-qm9, and come after the MACs anyway
        trial = dataclasses.replace(fitted, cache_slots=mak * per, max_in_flight=mak)
        tried.append((fold_for(model, board, options=trial, config=config, target_rate=target_rate,
                               parallelism=parallelism, muf=muf, lutram_depth=depth, lanes=False), trial))
    best = max(f.instances_per_s for f, _ in tried)
    folding, chosen = next((f, o) for f, o in tried if f.instances_per_s >= 0.95 * best)
    if lanes:
        folding = fold_for(model, board, options=chosen, config=config, target_rate=target_rate,
                           parallelism=parallelism, muf=muf, lutram_depth=depth, lanes=True)
    # "raise --mak" would mislead: every mak above the most that fit was refused for its tag tables
    bound = folding.bound.replace(RAISE_MAK, f"a larger mak does not fit {board} (its tag tables; "
                                             f"mak {lowered} was lowered to {fitted.max_in_flight})")
    return dataclasses.replace(folding, mak_lowered_from=lowered, bound=bound,
                               mak_limit=_mak_limit(model, board, fitted, per, config, parallelism)), chosen


def _mak_limit(model: str | Path | ModelSpec | GraphCore, board: str, fitted: DeviceOptions, per: int,
               config: RunConfig | None, parallelism: Mapping[str, int] | None) -> str | None:
    """The resource that one more instance in flight than ``fitted``'s would take past the board
    (every Linear at its pinned or least parallelism): what lowered the mak."""
    from .codegen.boards import load_board
    from .cycles.folding import check_fit

    graph, pinned = _graph_and_pins(model, config, parallelism)
    mak = (fitted.max_in_flight or 0) + 1
    try:
        check_fit(_pinned(graph, pinned), load_board(board),
                  dataclasses.replace(fitted, cache_slots=mak * per, max_in_flight=mak))
    except FitError as exc:
        return exc.resource
    return None


LUTRAM_TIE = 0.98  # fold_for keeps memories in block RAM (or the shallower LUT-RAM limit) within 2% of the fastest
EVERY_MAK_UP_TO = 8  # fold_fitting tries every mak up to this, then halvings of the most that fit


def mak_candidates(most: int) -> list[int]:
    """The maks fold_fitting weighs, largest first: every one up to EVERY_MAK_UP_TO (at a few in
    flight each one more changes the pace most, and the memories it moves into URAM can leave
    fewer MACs), and ``most`` and its halvings."""
    halvings = {most >> k for k in range(most.bit_length())}
    return sorted(halvings | set(range(1, min(most, EVERY_MAK_UP_TO) + 1)), reverse=True)


def fold_for(model: str | Path | ModelSpec | GraphCore, board: str, *, options: DeviceOptions | None = None,
             config: RunConfig | None = None, target_rate: float | None = None,
             parallelism: Mapping[str, int] | None = None, muf: int | None = None,
             instances: int = 16, seed: int = 0, lutram_depth: int | None = None, lanes: bool = True) -> Folding:
    """Fold a model's graph for ``board`` (``cycles/folding.py``): the parallelism of each Linear
    (``parallelism`` and ``config``'s [nodes] pinned), the dump period (``muf`` pinned), priced on
    ``instances`` of the model's data (a static graph needs none). FitError when it cannot fit.

    ``lutram_depth`` pins where shallow memories go (amp_hls.memories; None: ``options``' when not
    0); None and 0 there: block RAM, unless block RAM is what stops the folding (or what does not fit), when each of ``LUTRAM_DEPTHS`` is
    tried too and the fastest folding taken (the shallower limit, fewer LUTs, within
    ``LUTRAM_TIE``). ``lanes`` False: the row-wise kernels keep the graph's lanes (the hls flow's)."""
    from .codegen.boards import load_board
    from .cycles.folding import fold, is_static
    from .cycles.report import sample_inputs

    graph, pinned = _graph_and_pins(model, config, parallelism)
    if config is not None:
        target_rate = target_rate if target_rate is not None else config.device.get("target_rate")
    options = options if options is not None else device_options(config)
    if is_static(graph):
        inputs = None
    else:
        spec = model if isinstance(model, ModelSpec) else (load_model(model) if not isinstance(model, GraphCore)
                                                           and Path(str(model)).suffix != ".json" else None)
        inputs = sample_inputs(graph, instances, seed, spec)
    board_spec = load_board(board)
    lutram_depth = _lutram_pin(lutram_depth, options)

    def at(depth: int) -> Folding:
        return fold(graph, board_spec, inputs, dataclasses.replace(options, lutram_depth=depth),
                    target_rate=target_rate, fixed=pinned, muf=muf, seed=seed, lanes=lanes)

    if lutram_depth is not None:
        return at(lutram_depth)
    return _fastest_placement(at, lambda f: f, lambda f: f.limit == "bram36")


def _pinned(graph: GraphCore, parallelism: Mapping[str, int]) -> GraphCore:
    """``graph`` with these nodes' parallelism, each checked (a device Linear, within the limit)."""
    from .cycles.folding import pin

    return pin(graph, parallelism)


def _generate_folded(graph: GraphCore, output: str | Path, board: Board, options: DeviceOptions,
                     folding: Folding, force: bool, flow: str) -> BoardProject:
    """``generate_project`` of the folded graph, the folding recorded in the manifest."""
    from .codegen.project import FLOWS, write_project
    from .cycles.folding import apply
    from .design import build_design
    from .output import check_output_dir

    check_output_dir(output, force)
    if flow not in FLOWS:
        raise AmpHlsError(f"unknown flow {flow!r}; flows: {', '.join(FLOWS)}")
    folded = apply(graph, folding)
    design = build_design(folded, dataclasses.replace(options, muf=folding.muf,
                                                      lutram_depth=folding.lutram_depth).on_board(board))
    hls = write_project(dataclasses.replace(design, folding=folding.to_json()), output, board, flow=flow, force=force)
    return BoardProject(hls, board, folded.name, flow)


def report(project: str | Path, *, board: str | None = None, instances: int = 16, seed: int = 0,
           model: str | Path | ModelSpec | None = None, measure: bool = True) -> tuple[CycleReport, Measured | str | None]:
    """The cycle report of a generated project, priced on ``instances`` of ``model`` (default: the
    zoo model of the project's graph), and the RTL simulation of them (or why there is none;
    None when ``measure`` is off)."""
    from .cycles import report as rep

    spec = load_model(model) if model is not None else None
    result = rep.project_report(project, board, instances, seed, spec)
    if not measure:
        return result, None
    why = rep.rtlsim_unavailable(project)
    return result, why or rep.measure_project(project, instances, seed, spec)


def format_report(result: CycleReport, measured: Measured | str | None = None) -> str:
    from .cycles import report as rep

    text = rep.format_report(result)
    return text if measured is None else f"{text}\n{rep.format_measured(result, measured)}"


def report_json(result: CycleReport, measured: Measured | str | None = None,
                streamed: Measured | None = None) -> dict[str, Any]:
    """The report as a JSON document: every field, what follows from them, and the measurements
    (the host in turns; ``streamed``, the host streaming)."""
    doc = result.to_json()
    if isinstance(measured, Measured):
        doc["measured"] = {**asdict(measured), "cycles_per_instance": measured.cycles_per_instance}
    else:
        doc["measured"] = None if measured is None else {"unavailable": measured}
    doc["measured_streaming"] = None if streamed is None else \
        {**asdict(streamed), "cycles_per_instance": streamed.cycles_per_instance}
    return doc


def testbench(project: str | Path, *, instances: int = 8, mak: Sequence[int] | None = None, seed: int = 0,
              model: str | Path | ModelSpec | None = None) -> list[Path]:
    """Write ``project/tb``: the cocotb bench of the project's RTL and the instances it runs
    (``model``'s first training examples; default: the zoo model of the graph, or random ones),
    a run per ``mak`` (default 1 and 3, within what the project's tag caches hold)."""
    from .sim.project_bench import write_testbench

    spec = load_model(model) if model is not None else None
    return write_testbench(project, instances=instances, mak=mak, seed=seed, model=spec)


def estimate(project: str | Path, *, board: str | None = None, timeout: float = 3600.0) -> tuple[Estimate, Board]:
    """Yosys' resource estimate of a project's RTL, and the board it is held against (default:
    the project's own)."""
    from .codegen import estimate as est
    from .codegen.project import project_rtl

    sources, top, generated_for = project_rtl(project)
    board_spec = est.resolve_board(board or generated_for or DEFAULT_BOARD)
    return est.estimate(sources, top, est.family(board_spec), timeout=timeout), board_spec


def estimate_json(result: Estimate, board: Board) -> dict[str, Any]:
    """The estimate as a JSON document: cells, resources and each resource against the board."""
    from .codegen.estimate import fit, misfits

    return {"top": result.top, "family": result.family, "board": board.name, "part": board.part,
            "cells": dict(result.cells), "resources": result.resources, "lutram": result.lutram,
            "unclassified": result.unclassified, "seconds": result.seconds, "cached": result.cached,
            "fit": [{**asdict(u), "fits": u.fits, "fraction": u.fraction} for u in fit(result, board)],
            "fits": not misfits(result, board), "misfits": misfits(result, board)}
