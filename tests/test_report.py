"""`sosext report`: the HTML page is self-contained, headless Chromium renders it with no network,
and what it draws carries the debuggee's own numbers: per-type counts and bytes (the `heap`
scenario's truth, as dumpheap -stat prints them), retained bytes along dominator paths (the
`retained` scenario computes every object's retained size itself), and growth against a
baseline core (the bundled leaking service reports how many cache entries it added).

Chromium runs with its proxy pointed at a listener of ours: any fetch the page tried would
show up there as a request (a control page with an http image proves the listener sees it).
Chromium's own background requests (time, component updates, accounts: Google's hosts, the
same for an empty page) are told apart by host.
"""
from __future__ import annotations

import html
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

import drivers
from harness import Debuggee, build_debuggee
from sosext.clr.typesystem.typenames import csharp_name

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NS = "SosextDebuggee.Retained."
DOCS_PNG = drivers.REPO / "docs" / "report.png"


def sosext(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([drivers.PYTHON, "-m", "sosext", *args], cwd=cwd or drivers.REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(drivers.REPO)})


BROWSER_OWN = re.compile(r"(^|\.)(google\.com|googleapis\.com|gstatic\.com)$")


class ProxyTrap:
    """A TCP listener posing as Chromium's proxy: it notes the host of each request and
    serves nothing."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.hosts: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(10)
            try:
                line = conn.recv(1024).split(b"\r\n", 1)[0].decode(errors="replace")
            except OSError:
                line = ""
            conn.close()
            if not line:
                # Chromium opens spare (preconnect) sockets to its proxy and may close them
                # without a request: nothing was asked for (a CI run under load saw one).
                continue
            # "GET http://host/path HTTP/1.1" or "CONNECT host:443 HTTP/1.1"
            m = re.match(r"\S+ (?:\w+://)?([^/:\s]+)", line)
            self.hosts.append(m.group(1) if m else f"? {line!r}")

    @property
    def page_requests(self) -> list[str]:
        return [h for h in self.hosts if not BROWSER_OWN.search(h)]

    def close(self) -> None:
        self.sock.close()


def chromium(page: Path, tmp: Path, *extra: str, timeout: float = 180) -> tuple[str, list[str]]:
    """Run headless Chromium on ``page``; (stdout, hosts the page asked its proxy for). Killed
    by its process group if it overruns."""
    trap = ProxyTrap()
    profile = tmp / f"profile-{os.getpid()}-{len(list(tmp.iterdir()))}"
    cmd = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={profile}",
           f"--proxy-server=127.0.0.1:{trap.port}", "--proxy-bypass-list=<-loopback>", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--virtual-time-budget=10000", "--window-size=1400,1800", *extra, page.resolve().as_uri()]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium did not finish within {timeout} s")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # helpers it left behind, in its own group
        except ProcessLookupError:
            pass
        trap.close()
    assert proc.returncode == 0, f"chromium exited with {proc.returncode}"
    return out.decode(errors="replace"), trap.page_requests


_DOMS: dict[Path, tuple[str, list[str]]] = {}


def rendered(page: Path) -> tuple[str, list[str]]:
    """The DOM Chromium made of ``page`` (rendered once per page) and the hosts it asked for."""
    if page not in _DOMS:
        _DOMS[page] = chromium(page, page.parent, "--dump-dom")
    return _DOMS[page]


def need_chromium() -> None:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/setup.sh --test installs it)")


def section(dom: str, start_id: str) -> str:
    """The DOM from the element with id ``start_id`` to the next heading."""
    i = dom.index(f'id="{start_id}"')
    j = dom.find("<h2", i)
    return dom[i:j if j > 0 else len(dom)]


def slice_texts(dom: str, plot_id: str) -> list[str]:
    """What plotly drew in a plot's boxes: each box's text before formatting into lines."""
    return [html.unescape(x) for x in re.findall(r'data-unformatted="([^"]*)"', section(dom, plot_id))]


def table_rows(dom: str, table_id: str) -> list[list[str]]:
    """Each row of a table as its cells' data-v values (numbers) or texts."""
    body = section(dom, table_id)
    body = body[:body.index("</table>")]
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", body, flags=re.S)[1:]:
        cells = []
        for attrs, text in re.findall(r"<td([^>]*)>(.*?)</td>", tr, flags=re.S):
            v = re.search(r'data-v="([^"]*)"', attrs)
            cells.append(v.group(1) if v else html.unescape(re.sub("<[^>]+>", "", text)))
        rows.append(cells)
    return rows


def stat_table(text: str) -> dict[int, tuple[int, int]]:
    """dumpheap -stat's rows: MethodTable -> (count, bytes)."""
    out = {}
    for ln in text.splitlines():
        parts = ln.split(None, 3)
        if len(parts) == 4 and re.fullmatch(r"[0-9a-f]{8,16}", parts[0]):
            out[int(parts[0], 16)] = (int(parts[1].replace(",", "")), int(parts[2].replace(",", "")))
    return out


def check_self_contained(page: str) -> None:
    """The markup loads nothing: no script or stylesheet from elsewhere, no element or style
    pointing at a URL (scripts' own code is judged by the proxy trap: plotly.js holds URLs
    in strings it only uses when asked to, e.g. for geo plots)."""
    lower = page.lower()
    assert not re.search(r"<script[^>]*\bsrc\s*=", lower), "a script is loaded from elsewhere"
    assert lower.count("<script") == lower.count("</script>")
    lower = re.sub(r"<script>.*?</script>", "<script></script>", lower, flags=re.S)
    assert not re.search(r"<link\b", lower), "a stylesheet or other resource is linked"
    assert not re.search(r"""\b(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", lower), "an element points at the network"
    assert "@import" not in lower and not re.search(r"url\(\s*['\"]?(?:https?:)?//", lower)
    assert "default-src 'none'" in page  # and the page forbids itself any fetch


# -- the heap scenario: per-type numbers ------------------------------------------------------


@dataclass
class HeapCase:
    truth: dict
    page: Path
    stat: dict[int, tuple[int, int]]
    stat_total: str


@pytest.fixture(scope="module")
def heap_case(tmp_path_factory) -> HeapCase:
    drivers.require_dotnet_and_lldb()
    tmp = tmp_path_factory.mktemp("report-heap")
    with Debuggee("heap", dll=build_debuggee(), core_dir=tmp) as d:
        core = d.write_core("heap", tmp / "heap.core")
        truth = d.truth
    res = sosext("report", str(core), "-o", str(tmp / "heap.html"))
    assert res.returncode == 0, res.stderr
    stat = drivers.run_cli(["dumpheap -stat"], core=core)[0].text
    total = next(ln for ln in stat.splitlines() if ln.startswith("Total "))
    return HeapCase(truth, tmp / "heap.html", stat_table(stat), total)


def test_page_is_self_contained(heap_case: HeapCase) -> None:
    check_self_contained(heap_case.page.read_text(encoding="utf-8"))


def test_chromium_fetches_nothing_and_draws_both_plots(heap_case: HeapCase, tmp_path: Path) -> None:
    need_chromium()
    control = tmp_path / "control.html"
    control.write_text('<html><body><img src="http://sosext-test.invalid/x.png"></body></html>')
    _dom, seen = chromium(control, tmp_path, "--dump-dom")
    assert seen == ["sosext-test.invalid"], \
        f"the proxy trap saw {seen} for the control page: the no-network check would prove nothing"
    dom, seen = rendered(heap_case.page)
    assert seen == [], f"the report asked for {seen}"
    for plot in ("icicle", "treemap"):
        assert 'class="main-svg"' in section(dom, plot), f"plotly drew no {plot}"
        assert len(slice_texts(dom, plot)) >= 10, plot


def test_treemap_and_type_table_carry_the_truth(heap_case: HeapCase, tmp_path: Path) -> None:
    need_chromium()
    dom, _ = rendered(heap_case.page)
    # (names in C#'s spelling, as dumpheap and the report print them: no generic arity, no assembly)
    truth_types = {int(t["mt"], 16): (csharp_name(name), t["count"] + t["deadCount"],
                                      t["unalignedSize"] + t["deadUnalignedSize"])
                   for name, t in heap_case.truth["types"].items() if t["count"] + t["deadCount"]}
    rows = {int(r[1], 16): r for r in table_rows(dom, "types")}
    for mt, (name, count, size) in truth_types.items():
        row = rows[mt]
        assert (int(row[2]), int(row[3])) == (count, size), name
    # Every type in the table is what dumpheap -stat prints, and the summary's totals are its total line.
    assert {mt: (int(r[2]), int(r[3])) for mt, r in rows.items()} == heap_case.stat
    count, size = (int(x.replace(",", "")) for x in re.findall(r"Total ([\d,]+) objects, ([\d,]+) bytes",
                                                              heap_case.stat_total)[0])
    assert f"{count:,} objects, {size:,} bytes" in section(dom, "summary")
    # The treemap: each test type it draws says exactly the truth; the big ones must be drawn.
    drawn = {t.split("<br>")[0]: t for t in slice_texts(dom, "treemap")}
    big = sorted(truth_types.values(), key=lambda v: -v[2])[:4]
    for name, count, size in truth_types.values():
        if name in drawn:
            assert drawn[name] == f"{name}<br>{size:,} bytes<br>{count:,} objects"
    for name, _c, _s in big:
        assert name in drawn, f"{name} is not drawn in the treemap"
    assert not [r[0] for r in rows.values() if "`" in r[0]]


def test_summary_names_runtime_and_gc_mode(heap_case: HeapCase, tmp_path: Path) -> None:
    need_chromium()
    dom, _ = rendered(heap_case.page)
    summary = html.unescape(re.sub("<[^>]+>", " ", section(dom, "summary")))
    rt = heap_case.truth["runtime"]
    major_minor = ".".join(rt["version"].split(".")[:2])
    assert re.search(rf"Runtime\s+{re.escape(major_minor)}\.", summary)
    assert ("server" if rt["serverGC"] else "workstation") + " (" in summary


def test_screenshot(heap_case: HeapCase, tmp_path: Path) -> None:
    need_chromium()
    png = tmp_path / "report.png"
    chromium(heap_case.page, tmp_path, f"--screenshot={png}")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


# -- the retained scenario: dominator paths ---------------------------------------------------


@dataclass
class RetainedCase:
    truth: dict
    page: Path
    folded: str
    retained_stat: str
    lldb_folded: str | None
    gdb_folded: str | None


@pytest.fixture(scope="module")
def retained_case(tmp_path_factory) -> RetainedCase:
    drivers.require_dotnet_and_lldb()
    tmp = tmp_path_factory.mktemp("report-retained")
    with Debuggee("retained", gc="svr", gc_flavor="segments", dll=build_debuggee(), core_dir=tmp) as d:
        core = d.write_core("heap", tmp / "retained.core")
        truth = d.truth
        exe = str(d.executable)
    res = sosext("report", str(core), "-o", str(tmp / "retained.html"))
    assert res.returncode == 0, res.stderr
    folded = sosext("report", str(core), "--format", "folded")
    assert folded.returncode == 0, folded.stderr
    stat = drivers.run_cli(["dumpheap -stat -retained"], core=core)[0].text  # the whole heap: not streamed
    lldb = drivers.run_lldb(["report --format folded"], core=core, exe=exe)[0].text if drivers.LLDB else None
    gdb = drivers.run_gdb(["report --format folded"], core=core, exe=exe)[0].text if drivers.GDB else None
    return RetainedCase(truth, tmp / "retained.html", folded.stdout, stat, lldb, gdb)


def by_name(t: dict, name: str) -> dict:
    return next(o for o in t["objects"] if o["name"] == name)


def tops(truth: dict) -> dict[str, int]:
    """Type -> retained bytes of the scenario's objects at the top of their chains."""
    t = truth["retained"]
    out = {NS + "RetFinalHolder": t["finalizerOnly"]["holderRetained"]}
    for name in ("tree", "ring0", "key"):
        o = by_name(t, name)
        out[o["type"]] = o["retained"]
    return out


def test_icicle_draws_retained_bytes_along_dominator_paths(retained_case: RetainedCase, tmp_path: Path) -> None:
    need_chromium()
    check_self_contained(retained_case.page.read_text(encoding="utf-8"))
    dom, seen = rendered(retained_case.page)
    assert seen == []
    drawn = slice_texts(dom, "icicle")
    for name, retained in tops(retained_case.truth).items():
        assert f"{name}<br>{retained:,} bytes" in drawn, (name, [d for d in drawn if name in d])
    t = retained_case.truth["retained"]
    # below the tree: the shared subgraph belongs to the tree, not to either branch
    shared, left, right = by_name(t, "shared"), by_name(t, "left"), by_name(t, "right")
    assert f"{NS}RetShared<br>{shared['retained']:,} bytes" in drawn
    assert f"{NS}RetBranch<br>{left['retained'] + right['retained']:,} bytes" in drawn
    assert "strong handle" in " ".join(drawn) and "finalizer queue<br>" in " ".join(drawn)


def test_type_table_has_the_retained_column_of_dumpheap_stat_retained(retained_case: RetainedCase,
                                                                       tmp_path: Path) -> None:
    need_chromium()
    dom, _ = rendered(retained_case.page)
    rows = {r[0]: r for r in table_rows(dom, "types")}
    for name, retained in tops(retained_case.truth).items():
        assert int(rows[name][4]) == retained, name
    # dumpheap -stat -retained over the whole heap: every type's count, bytes and retained bytes
    lines = retained_case.retained_stat.splitlines()
    assert "RetainedSize" in lines[lines.index("Statistics:") + 1].split()
    printed = {}
    for ln in lines:
        parts = ln.split(None, 4)
        if len(parts) == 5 and re.fullmatch(r"[0-9a-f]{8,16}", parts[0]):
            printed[int(parts[0], 16)] = [int(x.replace(",", "")) for x in parts[1:4]]
    by_mt = {int(r[1], 16): [int(x) for x in r[2:5]] for r in table_rows(dom, "types")}
    assert len(printed) > 50 and by_mt == printed
    assert sum(1 for r in rows if r.startswith(NS)) >= 10


def test_summary_of_a_server_gc_core_with_segments(retained_case: RetainedCase) -> None:
    need_chromium()
    dom, _ = rendered(retained_case.page)
    summary = html.unescape(re.sub("<[^>]+>", " ", section(dom, "summary")))
    assert retained_case.truth["runtime"]["serverGC"]
    assert re.search(r"server \(\d+ heaps?, segments\)", summary), summary


def test_holders_table_shows_chains(retained_case: RetainedCase, tmp_path: Path) -> None:
    need_chromium()
    dom, _ = rendered(retained_case.page)
    rows = table_rows(dom, "holders")
    assert rows and all(int(a[2]) >= int(b[2]) for a, b in zip(rows, rows[1:])), "holders not largest first"


def test_folded_stacks_sum_to_the_truth(retained_case: RetainedCase) -> None:
    lines = retained_case.folded.splitlines()
    assert lines and all(re.fullmatch(r"[^;\n]+(;[^;\n]+)* \d+", ln) for ln in lines), lines[:5]
    stacks = [(ln.rsplit(" ", 1)[0].split(";"), int(ln.rsplit(" ", 1)[1])) for ln in lines]
    for name, retained in tops(retained_case.truth).items():
        under = [v for frames, v in stacks if name in frames]
        assert sum(under) == retained, name
    fin = [frames for frames, _v in stacks if NS + "RetFinalHolder" in frames]
    assert all(f[0] == "finalizer queue" for f in fin)


@pytest.mark.parametrize("host", ["lldb", "gdb"])
def test_report_is_a_debugger_command_too(retained_case: RetainedCase, host: str) -> None:
    text = retained_case.lldb_folded if host == "lldb" else retained_case.gdb_folded
    if text is None:
        pytest.skip(f"{host} is not installed")
    stacks = [ln for ln in text.splitlines() if re.fullmatch(r"[^;]+(;[^;]+)* \d+", ln)]
    assert stacks == retained_case.folded.splitlines()


def test_existing_file_is_not_overwritten(retained_case: RetainedCase, tmp_path: Path) -> None:
    target = tmp_path / "exists.html"
    target.write_text("keep me")
    core = next(retained_case.page.parent.glob("retained.core"))
    res = sosext("report", str(core), "-o", str(target))
    assert res.returncode == 1 and res.stderr.strip() == f"error: {target} exists; choose another name or add --force"
    assert target.read_text() == "keep me"


# -- a baseline: growth -------------------------------------------------------------------------


def command(app, line: str) -> dict:  # type: ignore[no-untyped-def]
    app.proc.stdin.write(line + "\n")
    app.proc.stdin.flush()
    return app._reply()


@pytest.fixture(scope="module")
def growth(tmp_path_factory):
    from test_leaks import Leaky, build_leaky, collect
    from harness.debuggee import dotnet_path
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: this test needs the .NET SDK to build the bundled service")
    tmp = tmp_path_factory.mktemp("report-growth")
    app = Leaky(build_leaky())
    try:
        before = app.leak(100)
        collect(app.started["pid"], tmp / "old.core")
        app.leak(2000)
        after = command(app, "customers 3000")  # a static list of customers
        after = command(app, "wrappers 60")  # wrappers behind strong handles nobody frees
        collect(app.started["pid"], tmp / "new.core")
    finally:
        app.stop()
    page = tmp / "growth.html"
    res = sosext("report", str(tmp / "new.core"), "--baseline", str(tmp / "old.core"), "-o", str(page))
    assert res.returncode == 0, res.stderr
    return page, before, after


def test_baseline_colours_growth_and_names_the_holder(growth, tmp_path: Path) -> None:
    need_chromium()
    page, before, after = growth
    check_self_contained(page.read_text(encoding="utf-8"))
    dom, seen = chromium(page, tmp_path, "--dump-dom", "--window-size=1400,3000")
    assert seen == []
    grown = after["cacheEntries"] - before["cacheEntries"]
    rows = {r[0]: r for r in table_rows(dom, "types")}
    entry = rows["LeakyService.CacheEntry"]
    # columns: type, MT, count, bytes, retained, count delta, bytes delta, retained delta
    assert int(entry[5]) == grown
    # the holder of the growth, as leaks names it: the worker's cache, retaining what the service says
    holders = table_rows(dom, "growing")
    assert holders, "no growing holder listed"
    first = holders[0]
    assert first[0].endswith(" LeakyService.MemoryCache"), first[0]
    assert int(first[1]) == after["cacheRetained"]
    assert int(first[2]) == after["cacheRetained"] - before["cacheRetained"]
    assert f"LeakyService.CacheEntry {after['cacheEntries']:,} (" in first[4]
    assert "LeakyService.CacheWarmupWorker" in first[6] and "static LeakyService.Program.s_worker" in first[5]
    # the other two leaks, named by their holders too
    customers = next(h for h in holders if h[0].endswith(" System.Collections.Generic.List<LeakyService.Customer>"))
    assert int(customers[1]) == after["customersRetained"]
    # (not its growth: the service counts the empty list's Array.Empty<Customer>() as the list's,
    # but that singleton is shared, so no list retains it)
    assert customers[5] == "static LeakyService.CustomerStore.s_customers (strong handle)"
    wrappers = next(h for h in holders if h[0].endswith(" LeakyService.DacWrapper"))
    assert wrappers[0].startswith(f"{after['wrappers']:,} × ")
    assert int(wrappers[1]) == after["wrappers"] * after["wrapperRetained"]
    assert wrappers[5] == "strong handle"
    assert "colorbar" in section(dom, "icicle")  # coloured by growth
    if os.environ.get("SOSEXT_UPDATE_DOCS_PNG"):
        chromium(page, tmp_path, f"--screenshot={DOCS_PNG}", "--window-size=1400,1010", "--hide-scrollbars")
