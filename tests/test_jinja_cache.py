"""The Jinja environment keeps compiled templates between processes, and never fails over it."""

from __future__ import annotations

import jinja2
import pytest

from amp_hls.codegen import jinja
from amp_hls.wire import wire_constants

WIRE = {"constants": wire_constants()}


@pytest.fixture
def fresh_environment(monkeypatch, tmp_path):
    """The environment rebuilt under a cache home of this test's own (and rebuilt again after)."""
    def at(home):
        monkeypatch.setenv("XDG_CACHE_HOME", str(home))
        jinja.environment.cache_clear()
        return jinja.environment()
    yield at
    jinja.environment.cache_clear()


def test_compiled_templates_are_kept_and_reused(fresh_environment, tmp_path, monkeypatch):
    env = fresh_environment(tmp_path / "cache")
    first = env.get_template("hls/amp_wire.h.j2").render(**WIRE)
    folder = jinja.bytecode_dir()
    assert folder.is_relative_to(tmp_path / "cache")
    kept = list(folder.iterdir())
    assert len(kept) == 1 and kept[0].stat().st_size > 0
    again = fresh_environment(tmp_path / "cache")  # as a second process would: from the cache
    monkeypatch.setattr(jinja2.Environment, "compile", lambda *a, **k: pytest.fail("compiled again"))
    assert again.get_template("hls/amp_wire.h.j2").render(**WIRE) == first
    assert list(folder.iterdir()) == kept


def test_an_unwritable_cache_is_no_cache(fresh_environment, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    env = fresh_environment(blocker)  # the cache home is a file: no folder can be made in it
    assert env.bytecode_cache is None
    assert env.get_template("hls/amp_wire.h.j2") is not None
