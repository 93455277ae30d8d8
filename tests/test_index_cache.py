"""The heap index of a core is written once and reused by the next process; a damaged,
foreign or planted index file is detected and rebuilt, never believed."""
from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

import drivers

pytestmark = pytest.mark.slow

ITEM = "SosextDebuggee.HeapItemA"


@pytest.fixture(scope="module")
def core(tmp_path_factory) -> tuple[Path, list[str], dict]:
    """A with-heap core of the heap scenario, and commands whose output the cache must not change."""
    drivers.require_dotnet_and_lldb()
    from harness import Debuggee, build_debuggee
    tmp = tmp_path_factory.mktemp("ixcore")
    with Debuggee("heap", dll=build_debuggee(), core_dir=tmp) as d:
        path = d.write_core("heap", tmp / "heap.core")
        truth = d.truth
    item = truth["types"][ITEM]
    commands = ["dumpheap -stat", f"dumpheap -mt {item['mt']} -short", "gcheapstat"]
    return path, commands, item


def analyze(core, index_dir: Path | None, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("SOSEXT_NO_INDEX_CACHE", None)
    if index_dir is not None:
        env["SOSEXT_INDEX_DIR"] = str(index_dir)
    path, commands, _item = core
    args = [drivers.PYTHON, "-m", "sosext", "analyze", str(path), *extra] + sum((["-c", c] for c in commands), [])
    res = subprocess.run(args, cwd=drivers.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert res.returncode == 0, res.stderr
    return res


def index_file(index_dir: Path) -> Path:
    files = list(index_dir.glob("*.sxi"))
    assert len(files) == 1, files
    return files[0]


def trailer(path: Path) -> tuple[dict, int]:
    data = path.read_bytes()
    magic, offset, length = struct.unpack("<8sQQ", data[-24:])
    assert magic == b"SOSEXTIX"
    return json.loads(data[offset:offset + length]), offset


@pytest.fixture(scope="module")
def clean(core, tmp_path_factory) -> str:
    """The output without any cache (the reference every cached run must equal)."""
    _path, _commands, item = core
    out = analyze(core, None, "--no-index-cache").stdout
    short = [ln for ln in out.splitlines() if len(ln) == 12 and all(c in "0123456789abcdef" for c in ln)]
    assert sorted(f"0x{a}" for a in short) == sorted(item["addresses"])  # exactly the debuggee's objects
    return out


def test_first_process_writes_the_index_and_the_next_one_reuses_it(core, clean, tmp_path) -> None:
    ix = tmp_path / "ix"
    assert analyze(core, ix).stdout == clean
    f = index_file(ix)
    assert oct(f.stat().st_mode & 0o777) == oct(0o600) and oct(ix.stat().st_mode & 0o777) == oct(0o700)
    t, _ = trailer(f)
    assert t["identity"]["path"] == os.path.realpath(core[0]) and t["count"] > 0
    before = f.stat().st_mtime_ns
    res = analyze(core, ix)
    assert res.stdout == clean and "index" not in res.stderr
    assert f.stat().st_mtime_ns == before  # read, not rewritten
    assert list(ix.glob(".walk-*")) == []  # no temporary file left behind


def test_the_dominator_tree_is_kept_beside_the_index(core, clean, tmp_path) -> None:
    """The second process reads the dominators the first computed; a damaged file is noticed
    (one line), rebuilt, and gives the same answer."""
    ix = tmp_path / "ix"
    ask = ("-c", "dominators -top 5 --json", "-c", "dumpheap -stat -retained --json")
    reference = analyze(core, None, "--no-index-cache", *ask).stdout
    assert analyze(core, ix, *ask).stdout == reference
    files = list(ix.glob("*.dominators"))
    assert len(files) == 1 and oct(files[0].stat().st_mode & 0o777) == oct(0o600)
    before = files[0].stat().st_mtime_ns
    res = analyze(core, ix, *ask)
    assert res.stdout == reference and res.stderr == ""
    assert files[0].stat().st_mtime_ns == before  # read, not rewritten
    t, _ = trailer(files[0])
    with open(files[0], "r+b") as fh:  # an object made its own dominator
        fh.seek(4 * (t["count"] - 1))
        fh.write(struct.pack("<i", t["count"] - 1))
    res = analyze(core, ix, *ask)
    assert res.stdout == reference
    assert "dominators" in res.stderr and "not valid" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_dumpheap_stat_is_kept_beside_the_index(core, clean, tmp_path) -> None:
    """The second process answers dumpheap -stat from the kept table (without the index); a
    table whose numbers were changed is noticed (one line), rebuilt, and the answer is the same."""
    ix = tmp_path / "ix"
    ask = ("-c", "dumpheap -stat")
    reference = analyze(core, None, "--no-index-cache", *ask).stdout
    assert analyze(core, ix, *ask).stdout == reference
    files = list(ix.glob("*.stats"))
    assert len(files) == 1 and oct(files[0].stat().st_mode & 0o777) == oct(0o600)
    before = files[0].stat().st_mtime_ns
    res = analyze(core, ix, *ask)
    assert res.stdout == reference and res.stderr == ""
    assert files[0].stat().st_mtime_ns == before  # read, not rewritten
    for change in ("counts", "method_tables"):
        t, offset = trailer(files[0])
        t[change][0] += 8
        body = json.dumps(t).encode()
        with open(files[0], "r+b") as fh:
            fh.truncate(offset)
            fh.seek(offset)
            fh.write(body + struct.pack("<8sQQ", b"SOSEXTIX", offset, len(body)))
        res = analyze(core, ix, *ask)
        assert res.stdout == reference
        assert "statistics" in res.stderr and "not valid" in res.stderr and len(res.stderr.strip().splitlines()) == 1
        assert analyze(core, ix, *ask).stderr == ""  # rebuilt, and good


def test_no_index_cache_writes_nothing(core, clean, tmp_path) -> None:
    ix = tmp_path / "ix"
    assert analyze(core, ix, "--no-index-cache").stdout == clean
    assert not ix.exists() or list(ix.iterdir()) == []


def damage_type_id(f: Path) -> None:
    t, _ = trailer(f)
    with open(f, "r+b") as fh:
        fh.seek(t["columns"]["type_ids"] + 4 * (t["count"] // 2))
        fh.write(struct.pack("<I", 0xFFFFFF))


def damage_order(f: Path) -> None:
    t, _ = trailer(f)
    with open(f, "r+b") as fh:
        at = t["columns"]["addresses"] + 8 * (t["count"] // 2)
        fh.seek(at)
        a, b = struct.unpack("<QQ", fh.read(16))
        fh.seek(at)
        fh.write(struct.pack("<QQ", b, a))


def damage_method_table(f: Path) -> None:
    """Structurally valid, but the index names the wrong MethodTable for its objects."""
    t, offset = trailer(f)
    t["method_tables"] = [m + 8 for m in t["method_tables"]]
    body = json.dumps(t).encode()
    with open(f, "r+b") as fh:
        fh.truncate(offset)
        fh.seek(offset)
        fh.write(body + struct.pack("<8sQQ", b"SOSEXTIX", offset, len(body)))


def foreign(f: Path) -> None:
    t, offset = trailer(f)
    t["identity"]["size"] += 1
    body = json.dumps(t).encode()
    with open(f, "r+b") as fh:
        fh.truncate(offset)
        fh.seek(offset)
        fh.write(body + struct.pack("<8sQQ", b"SOSEXTIX", offset, len(body)))


@pytest.mark.parametrize("damage", [
    lambda f: os.truncate(f, f.stat().st_size - 100),
    lambda f: f.write_bytes(b"garbage" * 10),
    damage_type_id, damage_order, damage_method_table, foreign,
], ids=["truncated", "garbage", "type-id-out-of-range", "addresses-out-of-order", "wrong-methodtable", "foreign"])
def test_a_damaged_index_is_rebuilt_not_believed(core, clean, tmp_path, damage) -> None:
    ix = tmp_path / "ix"
    analyze(core, ix)
    f = index_file(ix)
    damage(f)
    res = analyze(core, ix)
    assert res.stdout == clean
    assert "is not valid" in res.stderr and "rebuilding it" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    res = analyze(core, ix)  # and the rebuilt one is good
    assert res.stdout == clean and res.stderr == ""


def test_a_symlink_in_place_of_the_index_is_not_followed(core, clean, tmp_path) -> None:
    ix = tmp_path / "ix"
    analyze(core, ix)
    f = index_file(ix)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    f.unlink()
    f.symlink_to(victim)
    assert analyze(core, ix).stdout == clean
    assert victim.read_bytes() == b"precious"
    assert not f.is_symlink() and f.is_file()


def test_a_directory_others_can_write_is_not_used(core, clean, tmp_path) -> None:
    ix = tmp_path / "shared"
    ix.mkdir()
    ix.chmod(0o777)
    res = analyze(core, ix)
    assert res.stdout == clean
    assert res.stderr.strip() == f"sosext: index cache off: {ix} is not a directory owned by you and writable only by you"
    assert list(ix.iterdir()) == []


def test_a_reader_that_goes_away_ends_the_output_quietly(core, tmp_path) -> None:
    """`sosext analyze CORE -c dumpheap | head -1`: no 'internal error', no traceback."""
    path, _commands, _item = core
    env = {**os.environ, "SOSEXT_INDEX_DIR": str(tmp_path / "ix")}
    p = subprocess.Popen([drivers.PYTHON, "-m", "sosext", "analyze", str(path), "-c", "dumpheap", "-c", "dumpheap -stat"],
                         cwd=drivers.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline()
    p.stdout.close()  # as `head -1` does once it has its line
    err = p.stderr.read().decode()
    p.wait(timeout=120)
    assert b"Address" in first
    assert err == ""


# -- bounded in bytes; a full disk; `sosext cache` ---------------------------------------------

def in_process(core, ix: Path, capsys, *extra: str) -> tuple[str, str]:
    """The CLI in this process (so that a test can inject faults), output and error text."""
    from sosext import cli
    from sosext.clr.heap import cachedir
    cachedir._noted_full = False
    path, commands, _item = core
    capsys.readouterr()
    assert cli.main(["analyze", str(path), "--index-dir", str(ix), *extra] + sum((["-c", c] for c in commands), [])) == 0
    got = capsys.readouterr()
    return got.out, got.err


def test_a_cap_smaller_than_the_cores_files_caches_nothing_and_says_so_once(core, clean, tmp_path) -> None:
    ix = tmp_path / "ix"
    res = analyze(core, ix, "--cache-max", "4K", "-c", f"gcroot {core[2]['addresses'][0]}")
    assert res.stdout.endswith(clean)
    assert res.stderr.strip().splitlines() == [
        "sosext: index not cached: this core's files are more than the cache's cap (4.0 KiB; SOSEXT_CACHE_MAX "
        "or --cache-max)"]
    assert [p for p in ix.iterdir() if not p.name.startswith(".")] == []


def test_a_full_disk_skips_the_cache_with_one_line(core, clean, tmp_path, monkeypatch, capsys) -> None:
    import errno
    import tempfile
    from sosext.clr.heap import cachedir
    ix = tmp_path / "ix"
    # Too little room for the index's columns (the walk writes them through a mapping).
    monkeypatch.setattr(cachedir, "free_bytes", lambda directory: 1 << 20)
    out, err = in_process(core, ix, capsys)
    assert out == clean
    assert len(err.strip().splitlines()) == 1 and err.startswith("sosext: index not cached: 1.0 MiB free, it may need ")
    assert list(ix.iterdir()) == []
    monkeypatch.undo()

    # Room by the numbers, but every file creation fails with ENOSPC (the disk filled meanwhile).
    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(tempfile, "mkstemp", full)
    out, err = in_process(core, ix, capsys, "-c", "dumpheap -stat -retained")
    assert out.endswith(clean)
    assert err == f"sosext: index not cached: no space left on device ({ix})\n"
    assert list(ix.iterdir()) == []


def test_cache_list_and_clear(core, clean, tmp_path) -> None:
    ix = tmp_path / "ix"
    analyze(core, ix)
    res = subprocess.run([drivers.PYTHON, "-m", "sosext", "cache", "list", "--index-dir", str(ix)], cwd=drivers.REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["size", "objects", "last", "used", "files", "core"]
    t, _ = trailer(index_file(ix))
    assert lines[1].endswith(os.path.realpath(core[0])) and f"{t['count']:,}" in lines[1].split()
    assert lines[2].startswith("1 entry, ") and lines[2].endswith(f"cap ({ix})")
    res = subprocess.run([drivers.PYTHON, "-m", "sosext", "cache", "clear", "--index-dir", str(ix)], cwd=drivers.REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert res.returncode == 0 and res.stdout.startswith("removed 1 entry, ") and not list(ix.glob("*.sxi"))


def test_cache_subcommand_bad_input_is_one_line(tmp_path: Path) -> None:
    """`sosext cache` with a wrong action, a core that is not there or a hostile name: one line,
    nothing removed that was not asked for, no raw escapes."""
    ix = tmp_path / "ix"
    ix.mkdir()

    def cache(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([drivers.PYTHON, "-m", "sosext", "cache", *args, "--index-dir", str(ix)],
                              cwd=drivers.REPO, text=True, capture_output=True, timeout=120)

    # bare `sosext cache` is `sosext cache list`
    assert cache().returncode == 0 and cache().stdout == cache("list").stdout != ""
    bad = cache("bogus")
    assert bad.returncode == 2 and "invalid choice: 'bogus'" in bad.stderr.splitlines()[-1]
    for name in ("/no/such/core", "core\x1b[31m"):
        res = cache("clear", name)
        assert res.returncode == 0 and "Traceback" not in res.stdout + res.stderr
        assert "\x1b" not in res.stdout + res.stderr
        assert res.stdout.splitlines()[-1].startswith("removed 0 entries, 0 B freed"), res.stdout
