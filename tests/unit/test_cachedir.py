"""The index cache directory is bounded in bytes (``clr/heap/cachedir.py``): whole entries go,
least recently used first, the one being written last."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from sosext.clr.heap import cachedir


def entry(directory: Path, key: str, sizes: dict[str, int], used: float) -> None:
    for suffix, size in sizes.items():
        p = directory / f"{key}.{suffix}"
        p.write_bytes(b"x" * size)  # real blocks, not a hole
        os.utime(p, (used, used))


def keys(directory: Path) -> list[str]:
    return [e.key for e in cachedir.entries(directory)]


def test_sizes_parse_with_binary_suffixes() -> None:
    assert cachedir.parse_size("4096") == 4096
    assert cachedir.parse_size("500M") == 500 << 20
    assert cachedir.parse_size("10G") == cachedir.parse_size("10GiB") == 10 << 30
    assert cachedir.parse_size("1.5k") == 1536
    for bad in ("", "ten", "-1G", "5X"):
        with pytest.raises(ValueError):
            cachedir.parse_size(bad)


def test_entries_group_a_cores_files_and_count_their_blocks(tmp_path: Path) -> None:
    entry(tmp_path, "aaa", {"sxi": 10_000, "graph": 20_000, "stats": 100}, 1000)
    entry(tmp_path, "bbb", {"sxi": 5_000}, 2000)
    (tmp_path / ".walk-1.tmp").write_bytes(b"y" * 100)  # a writer's temporary file: not an entry
    got = cachedir.entries(tmp_path)
    assert [e.key for e in got] == ["aaa", "bbb"]  # least recently used first
    assert [len(e.files) for e in got] == [3, 1]
    assert got[0].bytes >= 30_100 and got[0].index.name == "aaa.sxi"


def test_over_the_cap_the_least_recently_used_entries_go_whole(tmp_path: Path) -> None:
    for k, (key, used) in enumerate((("old", 1000), ("mid", 2000), ("new", 3000))):
        entry(tmp_path, key, {"sxi": 40_000, "reverse": 40_000}, used)
    one = cachedir.entries(tmp_path)[0].bytes
    removed = cachedir.enforce(tmp_path, keep="new", cap=2 * one)
    assert [e.key for e in removed] == ["old"] and keys(tmp_path) == ["mid", "new"]
    assert not list(tmp_path.glob("old.*"))
    # The entry being written goes last, even when it is the oldest...
    os.utime(tmp_path / "mid.sxi", (5000, 5000))
    removed = cachedir.enforce(tmp_path, keep="new", cap=one)
    assert [e.key for e in removed] == ["mid"] and keys(tmp_path) == ["new"]
    # ...and only when it alone is over the cap.
    assert [e.key for e in cachedir.enforce(tmp_path, keep="new", cap=one - 1)] == ["new"]
    assert keys(tmp_path) == []


def test_reading_an_entry_makes_it_recent_without_changing_when_it_was_written(tmp_path: Path) -> None:
    entry(tmp_path, "a", {"sxi": 100}, 1000)
    entry(tmp_path, "b", {"sxi": 100}, 2000)
    cachedir.touch(tmp_path / "a.sxi")
    assert keys(tmp_path) == ["b", "a"]
    assert (tmp_path / "a.sxi").stat().st_mtime == 1000


def test_the_cap_comes_from_the_setting_else_ten_gib_or_a_tenth_of_the_disk(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SOSEXT_CACHE_MAX", "3M")
    assert cachedir.cap_for(tmp_path) == 3 << 20
    monkeypatch.delenv("SOSEXT_CACHE_MAX")
    st = os.statvfs(tmp_path)
    assert cachedir.cap_for(tmp_path) == min(10 << 30, st.f_blocks * st.f_frsize // 10)


def test_a_full_disk_is_said_once(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cachedir, "_noted_full", False)
    cachedir.note_full(tmp_path, "index")
    cachedir.note_full(tmp_path, "graph")
    err = capsys.readouterr().err
    assert err == f"sosext: index not cached: no space left on device ({tmp_path})\n"
