"""sosext next to the real SOS (dotnet-dump), command for command, on the same cores.

Each core gets a batch of SOS commands in rounds: the first round's commands take no argument;
the later rounds take their arguments from what SOS printed before (MethodTables from
`dumpheap -stat`, objects from `dumpheap -short -mt`, modules from `dumpdomain`, methods from
`dumpmt -md` …), so the batch follows the core. Every command runs once in dotnet-dump and once
in `sosext analyze` (tests/sosref.py), and its two outputs must be

  identical   after trailing whitespace, or
  listed      equal once the rewrites of a LISTED entry are applied to both: each entry names the
              docs/sos-users.md entry ("Where sosext and SOS differ") that says why,

else the pair fails; so does sosext failing where SOS answers. The cores: the `parity` scenario
under workstation and server GC with regions and with segments, and real programs
(tests/harness/realapps.py). A table commands x cores is printed and written to
<work dir>/sos-parity/table.md.

Commands are grouped by family (the command's name); one test per (core, family). Other command
families add probes to PROBES (round, producer) and entries to LISTED.
"""
from __future__ import annotations

import difflib
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import sosref
from harness import Debuggee, build_debuggee, work_dir

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[1] / "docs" / "sos-users.md"
DIFFER_SECTION = "## Where sosext and SOS differ"


# -- what a core's batch holds ----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Probe:
    """One command of a batch. `label` is its row in the table: the command with the kind of its
    argument in place of the argument ("dumpobj <string>"), the same on every core."""
    label: str
    command: str

    @property
    def family(self) -> str:
        return self.command.split()[0].lower()


@dataclass(repr=False)
class CoreRun:
    name: str
    core: Path
    truth: dict
    probes: list[Probe] = field(default_factory=list)
    sos: dict[str, sosref.Answer] = field(default_factory=dict)      # label -> SOS's answer
    ours: dict[str, sosref.Answer] = field(default_factory=dict)     # label -> sosext's answer

    def __repr__(self) -> str:
        return f"CoreRun({self.name})"

    def text(self, label: str) -> str:
        """SOS's output of an earlier probe ('' when it was not run or failed)."""
        a = self.sos.get(label)
        return a.text if a is not None and a.status == "ok" else ""


Producer = Callable[[CoreRun], list[Probe]]

HEX = r"[0-9a-fA-F]+"
STAT_ROW = re.compile(rf"^\s*({HEX})\s+([\d,]+)\s+([\d,]+)\s+(.+)$")


def stat_rows(text: str) -> list[tuple[str, int, int, str]]:
    """(MT, count, total size, name) of a dumpheap -stat table as SOS prints it."""
    rows = []
    for ln in text.splitlines():
        m = STAT_ROW.match(ln)
        if m:
            rows.append((m.group(1), int(m.group(2).replace(",", "")), int(m.group(3).replace(",", "")), m.group(4)))
    return rows


def pick_types(run: CoreRun) -> dict[str, tuple[str, str]]:
    """Kinds of type -> (MT, name), chosen from SOS's dumpheap -stat: one of each kind the heap has."""
    rows = stat_rows(run.text("dumpheap -stat"))
    kinds: dict[str, Callable[[str], bool]] = {
        "string": lambda n: n == "System.String",
        "object[]": lambda n: n == "System.Object[]",
        "char[]": lambda n: n == "System.Char[]",
        "int[]": lambda n: n == "System.Int32[]",
        "boxed int": lambda n: n == "System.Int32",
        "runtimetype": lambda n: n == "System.RuntimeType",
        "generic": lambda n: "<" in n and not n.endswith("]") and "+" not in n,
        "nested generic": lambda n: "<" in n and "+" in n and not n.endswith("]"),
        "struct[]": lambda n: n.endswith("Slot[]") or n.endswith("Value[]") or n.endswith("Entry[]"),
        "2d array": lambda n: n.endswith(",]"),
        "delegate": lambda n: n.startswith("System.Func<") or n.startswith("System.Action"),
        "thread": lambda n: n == "System.Threading.Thread",
        "exception": lambda n: n.endswith("Exception"),
        "dictionary": lambda n: n.startswith("System.Collections.Generic.Dictionary<") and "+" not in n,
        "free": lambda n: n == "Free",
    }
    chosen: dict[str, tuple[str, str]] = {}
    for kind, test in kinds.items():
        for mt, _count, _size, name in rows:
            if test(name):
                chosen[kind] = (mt, name)
                break
    return chosen


def first_objects(text: str, n: int = 1) -> list[str]:
    """The first n addresses of a `dumpheap -short` listing."""
    return [ln.strip() for ln in text.splitlines() if re.fullmatch(HEX, ln.strip())][:n]


# -- round 1: no arguments ----------------------------------------------------------------------

def heap_round1(run: CoreRun) -> list[Probe]:
    fixed = [
        "dumpheap -stat", "dumpheap -stat -live", "dumpheap -stat -dead",
        "dumpheap -stat -min 1000", "dumpheap -stat -max 100", "dumpheap -stat -min 100 -max 1000",
        "dumpheap -stat -gen gen0", "dumpheap -stat -gen gen1", "dumpheap -stat -gen gen2",
        "dumpheap -stat -gen loh", "dumpheap -stat -gen poh",
        "dumpheap -strings", "dumpheap -thinlock", "dumpheap -type System.Collections.Concurrent -stat",
        "dumpheap -type Exception",
        "eeheap", "eeheap -gc", "eeheap -loader",
        "dumpdomain", "name2ee *!System.String", "name2ee System.Private.CoreLib.dll!System.String",
        "name2ee System.Private.CoreLib.dll!System.String.Concat",
        "finalizequeue", "syncblk", "gchandles", "gchandles -stat", "dumpruntimetypes", "verifyheap",
        "sizestats", "dumpgen gen2", "heapstat", "gcheapstat", "gcheapinfo",
    ]
    return [Probe(c, c) for c in fixed]


# -- round 2: MethodTables, modules, assemblies --------------------------------------------------

def heap_round2(run: CoreRun) -> list[Probe]:
    probes = []
    for kind, (mt, _name) in pick_types(run).items():
        probes += [Probe(f"dumpheap -short -mt <{kind}>", f"dumpheap -short -mt {mt}"),
                   Probe(f"dumpmt <{kind}>", f"dumpmt {mt}")]
        if kind != "free":
            probes += [Probe(f"dumpheap -mt <{kind}>", f"dumpheap -mt {mt}"),
                       Probe(f"dumpmt -md <{kind}>", f"dumpmt -md {mt}")]
    dd = run.text("dumpdomain")
    mods = re.findall(rf"^\s+({HEX})\s+/\S+$", dd, re.M)
    asms = re.findall(rf"^Assembly:\s+({HEX}) \[", dd, re.M)
    for i, m in enumerate(mods[:2]):
        probes.append(Probe(f"dumpmodule <module {i}>", f"dumpmodule {m}"))
        probes.append(Probe(f"dumpmodule -mt <module {i}>", f"dumpmodule -mt {m}"))
    for i, a in enumerate(asms[:2]):
        probes.append(Probe(f"dumpassembly <assembly {i}>", f"dumpassembly {a}"))
    return probes


# -- round 3: objects ---------------------------------------------------------------------------

def heap_round3(run: CoreRun) -> list[Probe]:
    probes = []
    for kind in pick_types(run):
        if kind == "free":
            continue
        objs = first_objects(run.text(f"dumpheap -short -mt <{kind}>"))
        for o in objs:
            probes += [Probe(f"dumpobj <{kind}>", f"dumpobj {o}"), Probe(f"do <{kind}>", f"do {o}"),
                       Probe(f"gcwhere <{kind}>", f"gcwhere {o}"), Probe(f"gcroot <{kind}>", f"gcroot {o}"),
                       Probe(f"objsize <{kind}>", f"objsize {o}"), Probe(f"listnearobj <{kind}>", f"listnearobj {o}"),
                       Probe(f"dumpobjgcrefs <{kind}>", f"dumpobjgcrefs {o}")]
            if kind.endswith("]") or kind == "2d array":
                probes.append(Probe(f"dumparray <{kind}>", f"dumparray {o}"))
    # EEClass as dumparray of a struct array names it.
    return probes


def heap_round4(run: CoreRun) -> list[Probe]:
    probes = []
    for label, answer in sorted(run.sos.items()):
        if not label.startswith("dumpobj <") or answer.status != "ok":
            continue
        kind = label[len("dumpobj "):]
        # A value-type field: dumpvc <field MT> <its address>.
        for m in re.finditer(rf"^({HEX}) +{HEX} +{HEX} +\S+ +Yes +instance +({HEX}) ", answer.text, re.M):
            if len(m.group(2)) == 16:
                probes.append(Probe(f"dumpvc <field of {kind}>", f"dumpvc {m.group(1)} {m.group(2)}"))
                break
    for label, answer in sorted(run.sos.items()):
        m = re.search(rf"^EEClass:\s+({HEX})$", answer.text, re.M) if label.startswith("dumparray <") else None
        if m:
            probes.append(Probe(f"dumpclass <EEClass of {label[10:]}>", f"dumpclass {m.group(1)}"))
    return probes


# -- threads, stacks, code and the runtime (the code family) ------------------------------------

THREAD_ROW = re.compile(rf"^ *(\d+|XXXX) +\d+ +({HEX}) {HEX} .*$")
FRAME_IP = re.compile(r"^[0-9A-F]{16} ([0-9A-F]{16}) [A-Za-z_<]")  # a managed frame of clrstack


def code_round1(run: CoreRun) -> list[Probe]:
    fixed = [
        "clrthreads", "clrthreads -live", "threads", "clrstack", "clrstack -a", "clrstack -all", "dso",
        "eeversion", "threadpool", "threadpoolqueue", "timerinfo", "dumpasync", "dumpexceptions", "pe",
        "assemblies", "clrmodules", "clrmodules -v", "modules", "runtimes", "registers", "parallelstacks",
        "histinit", "histstats", "analyzeoom", "crashinfo", "syncblk -all", "threadstate 0x3021220",
        "threadpool -wi", "threadpool -stat", "clrstack -i", "clrstack -i -a", "sosstatus",
    ]
    return [Probe(c, c) for c in fixed]


def _thread_roles(text: str) -> dict[str, str]:
    """role -> SOS's thread number (DBG), from clrthreads: the first thread, the first with an
    exception, the first thread-pool worker."""
    roles: dict[str, str] = {}
    for ln in text.splitlines():
        m = THREAD_ROW.match(ln)
        if not m or m.group(1) == "XXXX":
            continue
        roles.setdefault("first thread", m.group(1))
        if re.search(r"\S+ [0-9a-f]{16}( \(nested exceptions\))?$", ln):
            roles.setdefault("thread with exception", m.group(1))
        if "(Threadpool Worker)" in ln:
            roles.setdefault("pool thread", m.group(1))
    return roles


def code_round2(run: CoreRun) -> list[Probe]:
    probes = []
    for role, dbg in _thread_roles(run.text("clrthreads")).items():
        # setthread is silent; the commands after it act on that thread (one session, in order).
        probes += [Probe(f"setthread <{role}>", f"setthread {dbg}"),
                   Probe(f"clrstack -a <{role}>", "clrstack -a"), Probe(f"clrstack -f <{role}>", "clrstack -f"),
                   Probe(f"dso <{role}>", "dso"), Probe(f"pe <{role}>", "pe")]
    ips = list(dict.fromkeys(m.group(1) for m in map(FRAME_IP.match, run.text("clrstack -all").splitlines()) if m))
    for i, ip in enumerate(ips[:4]):
        probes.append(Probe(f"ip2md <frame {i}>", f"ip2md {ip}"))
    for i, md in enumerate(re.findall(rf"^MethodDesc:\s+({HEX})$",
                                      run.text("name2ee System.Private.CoreLib.dll!System.String.Concat"), re.M)[:1]):
        probes += [Probe(f"{c} <String.Concat>", f"{c} {md}") for c in ("dumpmd", "dumpil", "ehinfo", "gcinfo")]
    delegates = [mt for mt, _c, _s, name in stat_rows(run.text("dumpheap -stat"))
                 if re.match(r"System\.(Action|Func|Threading\.TimerCallback|EventHandler)\b", name)
                 and not name.endswith("]")]
    if delegates:
        probes.append(Probe("dumpheap -short -mt <a delegate type>", f"dumpheap -short -mt {delegates[-1]}"))
    exceptions = [ln.split()[0] for ln in run.text("dumpheap -type Exception").splitlines()
                  if re.fullmatch(rf"\s*{HEX}\s+{HEX}\s+[\d,]+\s*", ln)]
    for i, e in enumerate(exceptions[:3]):
        probes.append(Probe(f"pe <exception {i}>", f"pe {e}"))
    return probes


def code_round3(run: CoreRun) -> list[Probe]:
    probes = []
    for i in range(4):
        m = re.search(rf"^MethodDesc:\s+({HEX})$", run.text(f"ip2md <frame {i}>"), re.M)
        if m:
            probes += [Probe(f"{c} <method of frame {i}>", f"{c} {m.group(1)}") for c in ("dumpmd", "dumpil", "ehinfo", "gcinfo")]
    for label in sorted(run.sos):
        if not label.startswith("dumpmt -md <"):
            continue
        kind = label[len("dumpmt -md "):]
        for m in re.finditer(rf"^{HEX} ({HEX}) +(JIT|PreJIT|NONE) {HEX} (.+)$", run.text(label), re.M):
            probes.append(Probe(f"dumpmd <{m.group(2)} method of {kind}>", f"dumpmd {m.group(1)}"))
    for o in first_objects(run.text("dumpheap -short -mt <a delegate type>")):
        probes.append(Probe("dumpdelegate <delegate>", f"dumpdelegate {o}"))
    return probes


CODE_FAMILIES = {"clrthreads", "threads", "setthread", "clrstack", "dso", "eeversion", "threadpool",
                 "threadpoolqueue", "timerinfo", "dumpasync", "dumpexceptions", "pe", "assemblies", "clrmodules",
                 "modules", "runtimes", "registers", "parallelstacks", "histstats", "analyzeoom", "crashinfo",
                 "threadstate", "ip2md", "dumpmd", "dumpil", "ehinfo", "gcinfo", "dumpdelegate", "histinit",
                 "sosstatus"}


# Rounds in order; each producer sees the SOS answers of the rounds before it.
PROBES: list[list[Producer]] = [[heap_round1, code_round1], [heap_round2, code_round2],
                                [heap_round3, code_round3], [heap_round4]]


# -- listed differences ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Listed:
    """A difference docs/sos-users.md lists: for the probes whose label matches `labels` (and
    cores matching `cores`), SOS's and sosext's texts are compared after `sos` and `ours` rewrite them."""
    entry: str                     # the "### " title under "Where sosext and SOS differ"
    labels: str                    # regex on the probe's label
    sos: Callable[[str], str] = lambda t: t
    ours: Callable[[str], str] = lambda t: t
    cores: str = ".*"

    def applies(self, core: str, label: str) -> bool:
        return re.search(self.labels, label) is not None and re.fullmatch(self.cores, core) is not None


LISTED: list[Listed] = []


# -- comparison -----------------------------------------------------------------------------------

IDENTICAL, LISTED_DIFF, FAILS = "identical", "differs-listed", "fails"


def judge(core: str, label: str, sos: sosref.Answer, ours: sosref.Answer) -> tuple[str, list[str]]:
    """(verdict, the LISTED entries used) for one pair."""
    if ours.status == "error" and sos.status == "ok":
        return FAILS, []
    a, b = sos.normalised, ours.normalised
    if a == b:
        return IDENTICAL, []
    used = []
    for entry in LISTED:
        if entry.applies(core, label):
            a, b = sosref.normalise(entry.sos(a)), sosref.normalise(entry.ours(b))
            used.append(entry.entry)
            if a == b:
                return LISTED_DIFF, used
    return FAILS, used


# The code family's listed differences (threads, stacks, code, the runtime).

def _drop_lines(pattern: str) -> Callable[[str], str]:
    rx = re.compile(pattern)
    return lambda t: "\n".join(ln for ln in t.splitlines() if not rx.search(ln))


def _mask(pattern: str, repl: str) -> Callable[[str], str]:
    rx = re.compile(pattern, re.M)
    return lambda t: rx.sub(repl, t)


def _il_operand_types(text: str) -> str:
    """An IL line's operand type cut to SOS's 24 characters after its assembly ([...]) prefix."""
    out = []
    for ln in text.splitlines():
        i, j = ln.find("]"), ln.rfind("::")
        if re.match(r"^\s*IL_[0-9a-f]{4}: ", ln) and 0 <= i < j:
            ln = ln[:i + 1] + ln[i + 1:j][:24] + ln[j:]
        out.append(ln)
    return "\n".join(out)


def _il_without_blocks(text: str) -> str:
    """dumpil's instructions without the .try/.catch/.finally structure and its indentation."""
    keep = [ln.strip() for ln in text.splitlines()
            if not re.fullmatch(r"\s*(\.try|\.catch|\.finally|\.filter|\.fault|\{|\} // end \.\w+)\s*", ln)]
    return "\n".join(keep)


def _signed_byte_as_sos(text: str) -> str:
    """ldc.i4.s's operand unsigned, and a short branch's backward target 0x100 further on, as
    SOS reads the signed byte."""
    text = re.sub(r"(ldc\.i4\.s) -(\d+)$", lambda m: f"{m.group(1)} {256 - int(m.group(2))}", text, flags=re.M)

    def branch(m: re.Match) -> str:
        at, target = int(m.group(2), 16), int(m.group(3), 16)
        return f"{m.group(1)}{target + 0x100 if target < at else target:04x}"
    return re.sub(r"^(\s*IL_([0-9a-f]{4}): [a-z.]+\.s IL_)([0-9a-f]{4})$", branch, text, flags=re.M)


def _module_paths(text: str) -> str:
    """The files a modules listing names, once each, sorted; not the dynamic loader (which SOS
    leaves out although the process maps it)."""
    return "\n".join(sorted({m.group(1) for m in re.finditer(r"^[0-9A-Fa-f]{16} [0-9A-Fa-f]{8} (/.+)$", text, re.M)
                             if "/ld-linux" not in m.group(1)}))


CODE_LISTED: list[Listed] = [
    Listed("clrstack names the modules it has no PDB for", r"^(clrstack|ip2md|pe|printexception)\b",
           ours=_drop_lines(r"^No source lines for .*: no matching portable PDB found")),
    Listed("clrstack -f shows native frames in the CLI too", r"^clrstack -f",
           ours=_drop_lines(r"^[0-9A-F]{16} [0-9A-F]{16} [^(\[]+$")),
    Listed("timerinfo names a static callback", r"^timerinfo",
           sos=_mask(r" -> \S*$", " ->"), ours=_mask(r" -> \S*$", " ->")),
    Listed("registers shows the values the core holds", r"^registers",
           sos=_mask(r"^(eflags|r8|r9) = .*$", r"\1 ="), ours=_mask(r"^(eflags|r8|r9) = .*$", r"\1 =")),
    Listed("dumpil prints whole type names and nests clauses as the IL declares them", r"^dumpil",
           sos=lambda t: _il_without_blocks(re.sub(r" pImport is [0-9A-F]+$", "", t, flags=re.M)),
           ours=lambda t: _il_without_blocks(_signed_byte_as_sos(_il_operand_types(t)))),
    Listed("eeversion names sosext as the SOS version", r"^eeversion",
           sos=_mask(r"^SOS Version: .*$", "SOS Version:"), ours=_mask(r"^SOS Version: .*$", "SOS Version:")),
    Listed("runtimes says which DAC was trusted and why", r"^runtimes",
           sos=lambda t: "\n".join(t.splitlines()[:2]), ours=lambda t: "\n".join(t.splitlines()[:2])),
    Listed("modules lists every mapping of a file", r"^modules",
           sos=lambda t: _module_paths(t), ours=lambda t: _module_paths(t)),
    Listed("sosstatus reports sosext's own state", r"^sosstatus", sos=lambda t: "", ours=lambda t: ""),
    Listed("dumpasync lists continuations in the order they were registered", r"^dumpasync",
           sos=lambda t: "\n".join(sorted(t.splitlines())), ours=lambda t: "\n".join(sorted(t.splitlines()))),
    Listed("ehinfo names catch types of other modules", r"^ehinfo",
           ours=_mask(r"^(EHHandler \d+: TYPED catch\().+\)", r"\1)")),
    Listed("clrmodules -v names the assembly and its file version", r"^clrmodules -v",
           sos=_drop_lines(r"^    (AssemblyName|Version): "), ours=_drop_lines(r"^    (AssemblyName|Version): ")),
]
LISTED += CODE_LISTED


RESULTS: dict[str, dict[str, str]] = {}   # core -> label -> verdict


def write_table() -> str:
    cores = list(RESULTS)
    labels = sorted({lb for r in RESULTS.values() for lb in r})
    mark = {IDENTICAL: "identical", LISTED_DIFF: "differs (listed)", FAILS: "FAILS"}
    head = "| command | " + " | ".join(cores) + " |"
    lines = [head, "|" + "---|" * (len(cores) + 1)]
    for lb in labels:
        lines.append(f"| `{lb}` | " + " | ".join(mark.get(RESULTS[c].get(lb, ""), "-") for c in cores) + " |")
    total = []
    for c in cores:
        vs = list(RESULTS[c].values())
        same = sum(v == IDENTICAL for v in vs)
        total.append(f"{same}/{len(vs)} = {100 * same / max(1, len(vs)):.1f}% identical, "
                     f"{sum(v == LISTED_DIFF for v in vs)} listed, {sum(v == FAILS for v in vs)} fail")
    lines.append("| **identical** | " + " | ".join(total) + " |")
    text = "\n".join(lines) + "\n"
    out = work_dir() / "sos-parity"
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(text)
    return text


def run_core(name: str, core: Path, truth: dict) -> CoreRun:
    run = CoreRun(name, core, truth)
    for producers in PROBES:
        batch = [p for prod in producers for p in prod(run) if p.label not in run.sos]
        batch = list({p.label: p for p in batch}.values())
        if not batch:
            continue
        commands = [p.command for p in batch]
        for p, sos, ours in zip(batch, sosref.run_sos(core, commands), sosref.run_sosext(core, commands)):
            run.probes.append(p)
            run.sos[p.label], run.ours[p.label] = sos, ours
    RESULTS[name] = {p.label: judge(name, p.label, run.sos[p.label], run.ours[p.label])[0] for p in run.probes}
    write_diffs(run)
    return run


def write_diffs(run: CoreRun) -> None:
    """<work dir>/sos-parity/<core>.diff: a unified diff (SOS -> sosext) of every pair not identical."""
    out = work_dir() / "sos-parity"
    out.mkdir(parents=True, exist_ok=True)
    chunks = []
    for p in run.probes:
        verdict = RESULTS[run.name][p.label]
        if verdict == IDENTICAL:
            continue
        a, b = run.sos[p.label], run.ours[p.label]
        diff = difflib.unified_diff(a.normalised.splitlines(), b.normalised.splitlines(),
                                    f"SOS ({a.status})", f"sosext ({b.status})", lineterm="", n=1)
        chunks.append(f"### {verdict}: {p.command}   [{p.label}]\n" + "\n".join(diff) + "\n")
    (out / f"{run.name}.diff").write_text("".join(chunks))


# -- the cores --------------------------------------------------------------------------------------

SCENARIO_CORES = {f"parity-{gc}-{flavor}": (gc, flavor)
                  for gc in ("wks", "svr") for flavor in ("regions", "segments")}
REAL_CORES = ["webapi", "msbuild", "vbcscompiler"]


@pytest.fixture(scope="module", autouse=True)
def table() -> Iterator[None]:
    yield
    if RESULTS:
        print("\nsosext vs SOS (dotnet-dump " + sosref.DOTNET_DUMP_VERSION + "):\n" + write_table())


@pytest.fixture(scope="module", params=[*SCENARIO_CORES, *REAL_CORES])
def core_run(request, tmp_path_factory) -> CoreRun:
    if sosref.dotnet_dump() is None:
        pytest.skip(f"dotnet-dump {sosref.DOTNET_DUMP_VERSION} is not installed (scripts/setup.sh --test)")
    if shutil.which("dotnet") is None:
        pytest.skip("dotnet is not on PATH: the cores need the .NET SDK")
    name = request.param
    if name in SCENARIO_CORES:
        gc, flavor = SCENARIO_CORES[name]
        tfm = request.config.getoption("--tfm")
        cores = tmp_path_factory.mktemp(f"sos-{name}")
        with Debuggee("parity", gc=gc, gc_flavor=flavor, tfm=tfm, dll=build_debuggee(tfm), core_dir=cores) as d:
            core = d.write_core("full", cores / f"{name}.core")
            truth = d.truth
        try:
            return run_core(name, core, truth)
        finally:
            core.unlink(missing_ok=True)
    from harness import realapps
    core = realapps.core(name)
    if core is None:
        pytest.skip(f"no core of the {name} app: {realapps.why_not(name)}")
    return run_core(name, core, {})


FAMILIES = sorted({p.label.split()[0].lower() for p in
                   heap_round1(CoreRun("", Path(), {}))} | {
    "dumpmt", "dumpmodule", "dumpassembly", "dumpobj", "do", "gcwhere", "gcroot", "objsize", "listnearobj",
    "dumpobjgcrefs", "dumparray", "dumpvc", "dumpclass"} | CODE_FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_sos(core_run: CoreRun, family: str) -> None:
    bad = []
    for p in core_run.probes:
        if p.family != family:
            continue
        verdict, used = judge(core_run.name, p.label, core_run.sos[p.label], core_run.ours[p.label])
        if verdict == FAILS:
            bad.append(f"--- {p.command}  [{p.label}] SOS {core_run.sos[p.label].status}, sosext "
                       f"{core_run.ours[p.label].status}; listed entries tried: {used or 'none'}\n"
                       f"SOS:\n{core_run.sos[p.label].text}\nsosext:\n{core_run.ours[p.label].text}")
    assert not bad, f"{len(bad)} of the {family} commands on {core_run.name} differ from SOS:\n" + "\n".join(bad)


def test_listed_entries_are_documented() -> None:
    text = DOCS.read_text()
    assert DIFFER_SECTION in text
    section = text.split(DIFFER_SECTION, 1)[1].split("\n## ", 1)[0]
    titles = set(re.findall(r"^### (.+)$", section, re.M))
    missing = sorted({e.entry for e in LISTED} - titles)
    assert not missing, f"LISTED entries with no '### ' entry in {DOCS.name}'s {DIFFER_SECTION!r}: {missing}"
