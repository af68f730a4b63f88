"""Data files (JSON lines, CSV, npz) read into examples and split; every defect names the file,
the line or example, and the field."""

from __future__ import annotations

import json

import numpy as np
import pytest

from amp_hls.datasets import NO_LABEL, load_dataset, load_examples
from amp_hls.errors import AmpHlsError


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_json_lines_hold_ragged_fields_and_split_by_the_seed(tmp_path):
    records = [{"tokens": list(range(i % 5 + 1)), "edges": [[0, 1]] * (i % 3), "label": i % 2} for i in range(40)]
    path = _jsonl(tmp_path / "lists.jsonl", records)
    splits = load_dataset(path, seed=3)
    assert (len(splits.train), len(splits.val), len(splits.test)) == (28, 6, 6)
    assert splits.name == "lists"
    every = [*splits.train, *splits.val, *splits.test]
    assert sorted(len(e.data["tokens"]) for e in every) == sorted(len(r["tokens"]) for r in records)
    first = load_examples(path)[1]  # file order, whatever the split
    assert first.label == 1 and first.data["tokens"].tolist() == [0, 1] and first.data["tokens"].dtype.kind == "i"
    assert first.data["edges"].shape == (1, 2) and load_examples(path)[0].data["edges"].shape == (0,)
    assert [e.label for e in load_dataset(path, seed=3).train] == [e.label for e in splits.train]  # deterministic
    assert [e.label for e in load_dataset(path, seed=4).train] != [e.label for e in splits.train]


def test_a_split_field_places_every_example(tmp_path):
    records = [{"x": [i, i], "label": 0, "split": s} for i, s in enumerate(["train"] * 5 + ["val"] * 2 + ["test"])]
    splits = load_dataset(_jsonl(tmp_path / "d.jsonl", records))
    assert [e.data["x"][0] for e in splits.train] == [0, 1, 2, 3, 4]
    assert [e.data["x"][0] for e in splits.val] == [5, 6] and len(splits.test) == 1


def test_csv_columns_make_the_features_field(tmp_path):
    path = tmp_path / "points.csv"
    path.write_text("x,y,label,split\n" + "".join(f"{i}.5,{-i},{i % 2},{'train' if i < 6 else 'val' if i < 8 else 'test'}\n"
                                                   for i in range(10)))
    splits = load_dataset(path)
    e = splits.train[1]
    assert e.label == 1 and e.data["features"].tolist() == [1.5, -1.0]
    no_label = tmp_path / "plain.csv"
    no_label.write_text("a,b\n1,2\n")
    (only,) = load_examples(no_label)
    assert only.label == NO_LABEL and only.data["features"].tolist() == [1.0, 2.0]


def test_npz_arrays_give_one_entry_per_example(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, x=np.arange(30.0).reshape(10, 3), label=np.arange(10) % 3,
             split=np.array(["train"] * 6 + ["val"] * 2 + ["test"] * 2))
    splits = load_dataset(path)
    assert splits.train[2].data["x"].tolist() == [6.0, 7.0, 8.0] and splits.train[2].label == 2
    assert len(splits.val) == 2 and set(splits.train[0].data) == {"x"}


@pytest.mark.parametrize(("name", "content", "match"), [
    ("d.txt", "", r"unknown format '\.txt'; use \.jsonl, \.csv, \.npz"),
    ("d.jsonl", '{"x": [1, 2]}\n{"x": [[1, 2], [3]]}\n', r"d\.jsonl line 2: field 'x' must be finite numbers"),
    ("d.jsonl", '{"x": 1}\nnot json\n', r"line 2: not JSON"),
    ("d.jsonl", '{"x": 1, "label": 1.5}\n', r"line 1: 'label' must be an integer class, got 1\.5"),
    ("d.jsonl", '{"x": "red"}\n', r"line 1: field 'x' must be finite numbers"),
    ("d.jsonl", '{"x": NaN}\n', r"line 1: field 'x' must be finite numbers"),
    ("d.jsonl", '{"x": 1, "split": "dev"}\n', r"line 1: 'split' must be one of train, val, test, got 'dev'"),
    ("d.jsonl", '[1, 2]\n', r"line 1: each line must be a JSON object"),
    ("d.csv", "a,label\n1,2\nx,3\n", r"d\.csv line 3: column 'a' is 'x', not a number"),
    ("d.csv", "a,b\n1\n", r"line 2: 1 values for 2 columns"),
    ("d.jsonl", "", r"holds no examples"),
])
def test_defects_name_the_file_line_and_field(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(AmpHlsError, match=match):
        load_dataset(path)


def test_splits_must_be_complete(tmp_path):
    with pytest.raises(AmpHlsError, match=r"example 1 has no 'split' while others do"):
        load_dataset(_jsonl(tmp_path / "a.jsonl", [{"x": 1, "split": "train"}, {"x": 2}]))
    with pytest.raises(AmpHlsError, match=r"no val or test examples among 3"):
        load_dataset(_jsonl(tmp_path / "b.jsonl", [{"x": i} for i in range(3)]))
    with pytest.raises(AmpHlsError, match=r"no test examples"):
        load_dataset(_jsonl(tmp_path / "c.jsonl", [{"x": 1, "split": "train"}, {"x": 2, "split": "val"}]))
    with pytest.raises(AmpHlsError, match="does not exist"):
        load_dataset(tmp_path / "missing.jsonl")
    bad = tmp_path / "uneven.npz"
    np.savez(bad, x=np.zeros((3, 2)), label=np.zeros(4, dtype=int))
    with pytest.raises(AmpHlsError, match=r"one entry per example .* x \(3\), label \(4\)"):
        load_dataset(bad)
