"""``amp-hls deploy PROJECT -o DIR``: the one folder to copy onto a PYNQ board (docs/board.md).

::

    DIR/
      <name>.bit, <name>.hwh   the bitstream and its hardware handoff, one basename (pynq.Overlay)
      manifest.json            what the driver reads: channels, what the bitstream fixes, DMA buffers
      graph.json               the model's graph
      amp-hls.toml             the run's settings, the bitstream's (numerics, muf, mak): `--config`
      amp_hls/                 amp-hls itself, its templates and hw files inside (nothing to install)
      run.py                   the entry point: `python3 run.py train [OPTIONS]` is
                               `amp-hls train MODEL --backend pynq --project DIR --config amp-hls.toml`
      requirements.txt         what amp-hls and the model's data need beyond the PYNQ image
      model/, data/            the model file and the data file, when given (--model, --data)
      README.md                the steps

Nothing here needs the board or pynq: the folder is checked complete (every file the steps
name exists) when it is written. What it cannot check -- the board, its PYNQ image, the
bitstream itself -- docs/board.md says.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import AmpHlsError
from ..ir import load
from ..resources import hw_dir, templates_dir
from .jinja import environment

PACKAGE = "amp_hls"
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the installed amp_hls
CONFIG = "amp-hls.toml"
ENTRY = "run.py"
REQUIREMENTS = "requirements.txt"


@dataclass(frozen=True)
class Deployment:
    root: Path
    files: tuple[str, ...]  # what was written, relative to root (top level)
    command: str  # what to run on the board


def _find_model(graph_doc: dict) -> str | None:
    """The zoo model whose graph the project's is."""
    from ..models import MODELS

    for name, spec in MODELS.items():
        try:
            if spec.build().to_json() == graph_doc:
                return name
        except AmpHlsError:
            continue
    return None


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_name(requirement: str) -> str:
    return _norm(re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0])


def _requirements(model: str, data: Path | None) -> list[str]:
    """amp-hls's own dependencies (its installed metadata, markers kept), and the distributions
    the model's data loader imports (found by loading it in a fresh interpreter) that no other of
    them brings along, each with the version it was run with here as a comment."""
    reqs: list[str] = []
    try:
        reqs += [r for r in importlib.metadata.requires("amp-hls") or [] if "extra ==" not in r]
    except importlib.metadata.PackageNotFoundError:
        reqs += ["numpy>=1.26,<3", "jinja2>=3.1", "tqdm>=4.60"]
    probe = (
        "import sys, json\n"
        "from amp_hls import api\n"
        "before = set(sys.modules)\n"
        f"spec = api.load_model({model!r}" + (f", data={str(data)!r}" if data else "") + ")\n"
        "spec.splits(0)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600,
                         cwd=PACKAGE_DIR.parent)
    if run.returncode != 0:
        raise AmpHlsError(f"the data of model {model!r} cannot be loaded here, so its requirements are unknown:\n"
                          f"{run.stderr.strip()[-2000:]}")
    owners = importlib.metadata.packages_distributions()
    mine = {_dist_name(r) for r in reqs} | {_norm("amp-hls")}
    found = {d for module in json.loads(run.stdout.strip().splitlines()[-1]) for d in owners.get(module, [])}
    found = {d for d in found if _norm(d) not in mine}
    brought = {_dist_name(r) for d in found for r in (importlib.metadata.requires(d) or []) if "extra ==" not in r}
    for dist in sorted(found, key=_norm):
        if _norm(dist) not in brought:
            reqs.append(f"{dist}  # {importlib.metadata.version(dist)} here")
    return reqs


def _copy_package(dst: Path) -> None:
    """amp_hls with its data (templates, hw) under amp_hls/_data, as a wheel lays it out."""
    shutil.copytree(PACKAGE_DIR, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_data"))
    shutil.copytree(templates_dir(), dst / "_data" / "templates", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(hw_dir(), dst / "_data" / "hw", ignore=shutil.ignore_patterns("__pycache__"))


def deploy(project: str | Path, output: str | Path, model: str | None = None, data: str | Path | None = None) -> Deployment:
    """Write the board folder of ``project`` into ``output`` (new or empty)."""
    project, out = Path(project), Path(output)
    try:
        manifest = json.loads((project / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise AmpHlsError(f"{project} is not an amp-hls project (manifest.json: {exc})") from None
    entry = manifest.get("bitstream") if isinstance(manifest, dict) else None
    if not isinstance(entry, dict) or "bit" not in entry:
        raise AmpHlsError(f"{project} is not a board project: generate it with `amp-hls generate --board ...`")
    bit, hwh = project / entry["bit"], project / entry["hwh"]
    for f in (bit, hwh):
        if not f.is_file() or f.stat().st_size == 0:
            raise AmpHlsError(f"{project} has no {f.name}: build it first (make -C {project} bitstream)")
    graph = load(project / "graph.json")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise AmpHlsError(f"{out} exists and is not an empty directory: deploy into a new folder")
    model_file = Path(model) if model is not None and Path(model).suffix == ".py" else None
    if model_file is not None and not model_file.is_file():
        raise AmpHlsError(f"--model {model}: no such file")
    name = model if model is not None and model_file is None else _find_model(graph.to_json())
    if name is None and model_file is None:
        raise AmpHlsError(f"the graph of {project} ({graph.name!r}) is no zoo model's: give --model FILE")
    data_path = Path(data) if data is not None else None
    if data_path is not None and not data_path.is_file():
        raise AmpHlsError(f"--data {data}: no such file")
    requirements = _requirements(str(model_file) if model_file else name, data_path)  # before anything is written

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for f in (bit, hwh, project / "manifest.json", project / "graph.json"):
        shutil.copyfile(f, out / f.name)
        written.append(f.name)
    model_arg = name
    if model_file is not None:
        (out / "model").mkdir()
        shutil.copyfile(model_file, out / "model" / model_file.name)
        model_arg = f"model/{model_file.name}"
        written.append(model_arg)
    data_arg = None
    if data_path is not None:
        (out / "data").mkdir()
        shutil.copyfile(data_path, out / "data" / data_path.name)
        data_arg = f"data/{data_path.name}"
        written.append(data_arg)
    _copy_package(out / PACKAGE)
    written.append(f"{PACKAGE}/")
    numerics = manifest["numerics"]
    ctx = dict(
        name=entry["basename"], graph_name=graph.name, model=model_arg, data=data_arg, flow=entry.get("flow", "hls"),
        control=bool(entry.get("control")), board=manifest.get("board", {}), muf=manifest["muf"],
        mak=manifest.get("max_in_flight"), cache_slots=manifest["cache_slots"], numerics=numerics,
        precision={k: _q(numerics[k]) for k in ("data", "weights", "grads") if k in numerics},
        requirements=requirements, version=_version(),
        link=manifest.get("host_link", {}), config=CONFIG, entry=ENTRY,
        model_expr=f"str(HERE / {model_arg!r})" if model_file is not None else repr(model_arg),
    )
    env = environment()
    for filename, template in ((CONFIG, "deploy/amp-hls.toml.j2"), (ENTRY, "deploy/run.py.j2"),
                               (REQUIREMENTS, "deploy/requirements.txt.j2"), ("README.md", "deploy/README.md.j2")):
        (out / filename).write_text(env.get_template(template).render(**ctx))
        written.append(filename)
    (out / ENTRY).chmod(0o755)
    missing = [f for f in written if not (out / f.rstrip("/")).exists()]
    if missing:  # the steps name these files: a generator bug, never user input
        raise AmpHlsError(f"deploy wrote no {', '.join(missing)}")
    return Deployment(out, tuple(written), f"python3 {ENTRY} train")


def _version() -> str:
    try:
        return importlib.metadata.version("amp-hls")
    except importlib.metadata.PackageNotFoundError:
        return "(source checkout)"


def _q(doc: dict) -> str:
    """A precision as the run configuration writes it: Q<width>.<frac>."""
    width, frac = doc.get("width"), doc.get("frac")
    if not isinstance(width, int) or not isinstance(frac, int):
        raise AmpHlsError(f"manifest.json numerics {doc!r} are not width/frac")
    return f"Q{width}.{frac}"

