"""The Verilator runtime's objects are compiled once and reused; the design's, and cocotb's main
(which includes the design's header), never are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from amp_hls import objcache, toolchain

# a stand-in compiler: writes its source's text and its flags to the output, counting its calls
FAKE_CXX = """#!{python}
import sys
from pathlib import Path
args = sys.argv[1:]
with open({calls!r}, "a") as f:
    f.write(args[-1] + "\\n")
if "fail" in args:
    sys.exit(3)
Path(args[args.index("-o") + 1]).write_text(Path(args[-1]).read_text() + " ".join(args[:-3]))
"""


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, Path]:
    calls = tmp_path / "calls.txt"
    cxx = tmp_path / "bin" / "fake-cxx"
    cxx.parent.mkdir()
    cxx.write_text(FAKE_CXX.format(python=sys.executable, calls=str(calls)))
    cxx.chmod(0o755)
    runtime = tmp_path / "include"
    runtime.mkdir()
    (runtime / "verilated.cpp").write_text("runtime v1\n")
    (runtime / "verilated.h").write_text("header v1\n")
    main = tmp_path / "cocotb"
    main.mkdir()
    (main / "verilator.cpp").write_text('#include "Vtop.h"\n')
    build = tmp_path / "build"
    build.mkdir()
    (build / "Vtop.cpp").write_text("design\n")
    return {"cxx": cxx, "calls": calls, "runtime": runtime, "build": build, "cache": tmp_path / "cache", "main": main}


def _compile(fake: dict[str, Path], source: str, out: str, *flags: str, cache: bool = True) -> int:
    env = {k: v for k, v in os.environ.items() if k not in (objcache.CACHE_ENV, objcache.SOURCES_ENV)}
    if cache:
        env[objcache.CACHE_ENV] = str(fake["cache"])
        env[objcache.SOURCES_ENV] = str(fake["runtime"])
    cmd = [sys.executable, "-I", objcache.__file__, str(fake["cxx"]), "-Os", *flags, f"-I{fake['runtime']}",
           "-c", "-o", out, source]
    return subprocess.run(cmd, cwd=fake["build"], env=env).returncode


def _calls(fake: dict[str, Path]) -> int:
    return len(fake["calls"].read_text().splitlines()) if fake["calls"].exists() else 0


def test_a_runtime_object_is_compiled_once_and_copied_after(fake):
    source = str(fake["runtime"] / "verilated.cpp")
    assert _compile(fake, source, "verilated.o") == 0
    first = (fake["build"] / "verilated.o").read_text()
    (fake["build"] / "verilated.o").unlink()
    assert _compile(fake, source, "verilated.o") == 0
    assert _calls(fake) == 1  # the second came from the cache
    assert (fake["build"] / "verilated.o").read_text() == first
    assert _compile(fake, source, "other_name.o") == 0 and _calls(fake) == 1  # the output's name is not in the key


def test_other_flags_a_changed_runtime_or_another_compiler_miss(fake):
    source = str(fake["runtime"] / "verilated.cpp")
    _compile(fake, source, "verilated.o")
    _compile(fake, source, "verilated.o", "-O2")
    assert _calls(fake) == 2
    (fake["runtime"] / "verilated.h").write_text("header v2, longer\n")  # a header beside it: another wheel
    _compile(fake, source, "verilated.o")
    assert _calls(fake) == 3
    fake["cxx"].write_text(fake["cxx"].read_text() + "\n# another build of the compiler\n")
    _compile(fake, source, "verilated.o")
    assert _calls(fake) == 4


def test_the_design_cocotbs_main_and_an_unset_cache_always_compile(fake):
    for source in (fake["build"] / "Vtop.cpp", fake["main"] / "verilator.cpp"):  # the main includes Vtop.h
        _compile(fake, str(source), "x.o")
        _compile(fake, str(source), "x.o")
    assert _calls(fake) == 4 and not fake["cache"].exists()
    source = str(fake["runtime"] / "verilated.cpp")
    _compile(fake, source, "verilated.o", cache=False)
    _compile(fake, source, "verilated.o", cache=False)
    assert _calls(fake) == 6 and not fake["cache"].exists()


def test_a_failed_compile_keeps_nothing_and_passes_its_status_on(fake):
    source = str(fake["runtime"] / "verilated.cpp")
    assert _compile(fake, source, "verilated.o", "fail") == 3
    assert not fake["cache"].exists() or not any(fake["cache"].iterdir())


def test_the_environment_points_verilator_at_the_script_and_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    env = toolchain.objcache_env()
    bin_dir = toolchain.verilator_bin()
    if bin_dir is None:
        assert env == {}
        return
    assert env[objcache.CACHE_ENV] == str(tmp_path / "amp-hls" / "verilator-objects")
    assert env["OBJCACHE"].split()[-1] == str(Path(objcache.__file__).resolve())
    assert Path(env[objcache.SOURCES_ENV]) == bin_dir.parent / "include"  # the wheel's runtime, nothing else
    assert (Path(env[objcache.SOURCES_ENV]) / "verilated.cpp").is_file()
