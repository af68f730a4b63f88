"""Outputs never clobber (amp_hls/output.py): `generate -o DIR` writes only into a new or empty
directory or a project amp-hls wrote, overwrites a file only if amp-hls wrote it and nobody
changed it (else --force), deletes only its own unchanged files; every output path of a command
is checked before the work starts."""

from __future__ import annotations

import json
import os

import pytest

from amp_hls.cli import main
from amp_hls.output import RECORD


def _snapshot(root):
    """Every file under ``root`` (symlinks as their target's name) with its content."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path.relative_to(root))] = ("link", os.readlink(path))
        elif path.is_file():
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def _generate(capsys, out, *extra):
    code = main(["generate", *extra, "-o", str(out)])
    captured = capsys.readouterr()
    return code, captured.err


def test_a_new_directory_gets_the_project_and_a_record_of_every_file(tmp_path, capsys):
    out = tmp_path / "p"
    assert _generate(capsys, out, "mlp") == (0, "")
    record = json.loads((out / RECORD).read_text())
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} - {RECORD}
    assert set(record["files"]) == files and "manifest.json" in files and "kernels/k_fc0.cpp" in files
    assert not [p for p in out.iterdir() if p.name.startswith(".amp-hls-stage")]  # no staging left
    assert _generate(capsys, out, "mlp") == (0, "")  # its own, unchanged: regenerated in place


def test_regenerating_keeps_the_users_own_files_and_drops_only_stale_generated_ones(tmp_path, capsys):
    out = tmp_path / "p"
    assert _generate(capsys, out, "list-rnn")[0] == 0
    (out / "rtl" / "my_ip.sv").write_text("module my_ip; endmodule\n")  # the user's own
    (out / "notes.txt").write_text("mine")
    assert _generate(capsys, out, "mlp")[0] == 0  # another graph into the same project
    assert (out / "rtl" / "my_ip.sv").read_text() == "module my_ip; endmodule\n"
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "kernels" / "k_fc0.cpp").is_file()
    assert not (out / "kernels" / "k_rnn.cpp").exists()  # list-rnn's, unchanged: gone
    record = json.loads((out / RECORD).read_text())["files"]
    assert "rtl/my_ip.sv" not in record and "kernels/k_rnn.cpp" not in record


def test_a_file_the_user_changed_needs_force_and_is_left_intact_without(tmp_path, capsys):
    out = tmp_path / "p"
    assert _generate(capsys, out, "mlp")[0] == 0
    (out / "Makefile").write_text("# my own build\n")
    before = _snapshot(out)
    code, err = _generate(capsys, out, "mlp")
    assert code == 2 and err.count("\n") == 1
    assert "1 file(s) changed since amp-hls wrote them: Makefile; use --force" in err
    assert _snapshot(out) == before  # nothing written, nothing deleted
    assert _generate(capsys, out, "mlp", "--force")[0] == 0
    assert (out / "Makefile").read_text() != "# my own build\n"


def test_a_changed_stale_file_is_kept_even_with_force(tmp_path, capsys):
    out = tmp_path / "p"
    assert _generate(capsys, out, "list-rnn")[0] == 0
    (out / "kernels" / "k_rnn.cpp").write_text("// tuned by hand\n")
    assert _generate(capsys, out, "mlp")[0] == 2  # changed: refused
    assert _generate(capsys, out, "mlp", "--force")[0] == 0
    assert (out / "kernels" / "k_rnn.cpp").read_text() == "// tuned by hand\n"  # not amp-hls's any more


def test_a_users_file_under_a_generated_name_is_never_overwritten_silently(tmp_path, capsys):
    out = tmp_path / "p"
    assert _generate(capsys, out, "list-rnn")[0] == 0
    (out / "kernels" / "k_fc0.cpp").write_text("// mine, not amp-hls's\n")  # mlp generates this name
    before = _snapshot(out)
    code, err = _generate(capsys, out, "mlp")
    assert code == 2 and "would overwrite 1 file(s) it did not write" in err and "kernels/k_fc0.cpp" in err
    assert _snapshot(out) == before


@pytest.mark.parametrize("content", [None, "not json {", '{"schema": "something else"}', "\udcff"])
def test_a_non_empty_directory_that_is_no_project_of_ours_is_refused(tmp_path, capsys, content):
    out = tmp_path / "p"
    out.mkdir()
    (out / "Makefile").write_text("all:\n\techo mine\n")
    if content is not None:
        (out / "manifest.json").write_bytes(content.encode("utf-8", "surrogateescape"))
    before = _snapshot(out)
    code, err = _generate(capsys, out, "mlp")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{out} is not empty and" in err and "refusing to write into it" in err
    assert _snapshot(out) == before


def test_a_project_without_a_record_is_refused_and_force_never_deletes(tmp_path, capsys):
    out = tmp_path / "p"
    assert _generate(capsys, out, "mlp")[0] == 0
    (out / RECORD).unlink()  # as an amp-hls that kept no record left it
    (out / "rtl" / "extra.sv").write_text("// whose?\n")
    code, err = _generate(capsys, out, "mlp")
    assert code == 2 and "without a valid record of its files" in err
    assert _generate(capsys, out, "mlp", "--force")[0] == 0
    assert (out / "rtl" / "extra.sv").read_text() == "// whose?\n"


@pytest.mark.parametrize("where", ["", "file"])
def test_an_empty_or_file_output_is_an_error(tmp_path, capsys, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    if where == "file":
        (tmp_path / "file").write_text("x")
    code, err = _generate(capsys, where, "mlp")
    assert code == 2 and err.startswith("amp-hls: error: -o ") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if where == "" else ["file"])


def test_symlinks_in_a_project_are_never_followed(tmp_path, capsys):
    out, outside = tmp_path / "p", tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.cpp").write_text("keep me\n")
    assert _generate(capsys, out, "mlp")[0] == 0
    # a generated file replaced by a link to someone else's file: --force replaces the link itself
    (out / "kernels" / "k_fc0.cpp").unlink()
    (out / "kernels" / "k_fc0.cpp").symlink_to(outside / "precious.cpp")
    assert _generate(capsys, out, "mlp")[0] == 2
    assert _generate(capsys, out, "mlp", "--force")[0] == 0
    assert not (out / "kernels" / "k_fc0.cpp").is_symlink()
    assert (outside / "precious.cpp").read_text() == "keep me\n"
    # a generated directory replaced by a link elsewhere: refused, force or not
    for f in (out / "kernels").iterdir():
        f.unlink()
    (out / "kernels").rmdir()
    (out / "kernels").symlink_to(outside)
    code, err = _generate(capsys, out, "mlp", "--force")
    assert code == 2 and "kernels is not a plain directory" in err
    assert _snapshot(outside) == {"precious.cpp": b"keep me\n"}


@pytest.mark.parametrize("option", ["--json", "--plot", "--checkpoint"])
@pytest.mark.parametrize("where", ["dir", "under-a-file", "empty"])
def test_train_checks_its_output_paths_before_training(tmp_path, capsys, option, where):
    (tmp_path / "a-file").write_text("x")
    path = {"dir": tmp_path, "under-a-file": tmp_path / "a-file" / "out.x", "empty": ""}[where]
    code = main(["train", "mlp", "--epochs", "1", "--quiet", option, str(path)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"amp-hls: error: {option} ") and err.count("\n") == 1, err
    assert "training mlp" not in err  # refused before any work


def test_report_checks_its_json_path_before_measuring(tmp_path, capsys):
    out = tmp_path / "p"
    assert _generate(capsys, out, "mlp")[0] == 0
    code = main(["report", str(out), "--json", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 2 and f"--json {tmp_path} is a directory" in captured.err
    assert captured.out == ""  # no report printed: nothing was computed
