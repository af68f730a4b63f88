"""The native runtime's own containers (templates/native/amp_native.h): the flat tag map against
std::map under random puts, takes and collisions, and the message buffer pool (blocks reused
per size class and thread, bounded, never leaking one message's rows into another's zeros)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from amp_hls import toolchain
from amp_hls.models import MODELS
from amp_hls.native.codegen import generate
from amp_hls.native.library import CXXFLAGS
from amp_hls.numerics import NumericConfig

pytestmark = pytest.mark.gxx

DRIVER = r"""
#include <cstdio>
#include <map>
#include <random>
#include <thread>
#include "amp_native.h"
using namespace amp;

static int failures = 0;
#define CHECK(c) do { if (!(c)) { std::printf("FAIL line %d: %s\n", __LINE__, #c); ++failures; } } while (0)

// random puts and takes of tags (few distinct keys and states: long probe runs), against std::map
static void flat_map_matches_std_map() {
  std::mt19937 rng(7);
  TagMap<int> m;
  std::map<std::pair<uint32_t, int>, int> ref;
  for (int op = 0; op < 200000; ++op) {
    Tag t;
    t.key = rng() % 97;
    t.n = 1;
    t.s[0] = uint16_t(rng() % 5);
    t.slot = rng();  // not part of the key
    const auto k = std::make_pair(t.key, int(t.s[0]));
    const size_t i = m.find(t);
    CHECK((i == m.NONE) == (ref.count(k) == 0));
    if (rng() % 2) {
      bool fresh;
      const size_t j = m.get(t, fresh);
      CHECK(fresh == (i == m.NONE));
      if (fresh) m.table[j].value = op, ref[k] = op;
    } else if (i != m.NONE) {
      CHECK(m.table[i].value == ref[k]);
      m.erase_at(i);
      ref.erase(k);
    }
    CHECK(m.size() == ref.size());
  }
  for (auto& [k, v] : ref) {
    Tag t;
    t.key = k.first;
    t.n = 1;
    t.s[0] = uint16_t(k.second);
    const size_t i = m.find(t);
    CHECK(i != m.NONE && m.table[i].value == v);
  }
}

static void pool_reuses_bounded_per_thread() {
  const int c = pool_class(1000 * sizeof(T));
  const size_t before = pool_lists.count[c];
  const T* first;
  {
    Buf a;
    a.resize(1000);
    for (auto& x : a) x = T(3);
    first = a.data();
  }
  CHECK(pool_lists.count[c] == before + 1);
  Buf b;
  b.assign(1000, T(0));  // the same block again, zeroed when zeros are asked for
  CHECK(b.data() == first);
  bool zero = true;
  for (auto x : b) zero &= x == T(0);
  CHECK(zero);
  CHECK(pool_lists.count[c] == before);
  // a block freed on another thread goes to that thread's list, not this one's
  Buf* moved = new Buf(std::move(b));
  std::thread([&] {
    delete moved;
    CHECK(pool_lists.count[c] == 1);
  }).join();
  CHECK(pool_lists.count[c] == before);
  // at most POOL_CLASS_BYTES of blocks kept a class
  std::vector<Buf> many(3 * (POOL_CLASS_BYTES >> (c + POOL_MIN_SHIFT)) + 3);
  for (auto& x : many) x.resize(1000);
  many.clear();
  CHECK((pool_lists.count[c] << (c + POOL_MIN_SHIFT)) <= POOL_CLASS_BYTES);
  CHECK(pool_lists.count[c] >= (POOL_CLASS_BYTES >> (c + POOL_MIN_SHIFT)) - 1);
}

int main() {
  flat_map_matches_std_map();
  pool_reuses_bounded_per_thread();
  std::printf("%s\n", failures ? "FAILED" : "OK");
  return failures ? 1 : 0;
}
"""


def test_flat_map_and_pool(tmp_path: Path) -> None:
    native = generate(MODELS["mlp"].build(), NumericConfig())
    (tmp_path / "amp_native.h").write_text(native.sources["amp_native.h"])
    (tmp_path / "driver.cpp").write_text(DRIVER)
    cxx = toolchain.require("g++", RuntimeError, "g++ missing")
    flags = [f for f in CXXFLAGS if f not in ("-shared", "-fPIC")]
    build = subprocess.run([cxx, *flags, "-pthread", f"-I{tmp_path}", "-o", str(tmp_path / "driver"),
                            str(tmp_path / "driver.cpp")], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    result = subprocess.run([str(tmp_path / "driver")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), result.stdout + result.stderr
