"""taskstate, dumphttp and dumprequests against the `http` debuggee, in every host.

The debuggee holds one Task in each TaskStatus (with its m_stateFlags and the status the
runtime reports), HttpClient requests to a Kestrel server in the same process on 127.0.0.1
(four answered with known status codes, two held by the server), and the server's two held
requests (their DefaultHttpContext, method, scheme, path and query). LLDB and GDB live and on a
heap core, and the CLI on the core, run one batch; every row must be the truth's.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

import drivers
from harness import Debuggee, build_debuggee
from test_parity import HOSTS, h, host  # noqa: F401 - host: the matrix's fixture

pytestmark = pytest.mark.slow


def commands_for(t: dict) -> list[str]:
    s = t["http"]
    cmds = [f"tks {task['address']}" for task in s["tasks"]]
    cmds += [f"tks -v {task['stateFlags']}" for task in s["tasks"]]
    cmds += ["tks", "tks zz", f"tks {s['notTask']}", "tks -v 1", "tks -v abc", "tks 10",
             f"taskstate {s['tasks'][0]['address']} --json", f"TaskState -v {hex(s['tasks'][-2]['stateFlags'])}",
             "dumphttp", "dumphttp --stats", "dumphttp --pending", "dumphttp --completed",
             "dumphttp --pending --completed", "dumphttp --statuscode 200", "dumphttp --uri HOLD/",
             "DumpHttp --statuscode 404 --uri status", "dumphttp --json", "dumphttp --stats --json",
             "dumphttp --statuscode x",
             "dumprequests", "DumpRequests --json"]
    return cmds


@dataclass
class Case:
    truth: dict
    outputs: dict[str, dict[str, drivers.Output]] = field(default_factory=dict)

    def out(self, host: str, command: str) -> drivers.Output:
        return self.outputs[host][command]

    @property
    def http(self) -> dict:
        return self.truth["http"]


@pytest.fixture(scope="module", params=[("wks", "regions"), ("svr", "segments")], ids=lambda p: "-".join(p))
def case(request, tmp_path_factory) -> Case:
    drivers.require_dotnet_and_lldb()
    tfm = request.config.getoption("--tfm")
    gc, flavor = request.param
    work = tmp_path_factory.mktemp(f"http-{gc}-{flavor}")
    with Debuggee("http", gc=gc, gc_flavor=flavor, tfm=tfm, dll=build_debuggee(tfm), core_dir=work) as d:
        c = Case(d.truth)
        cmds = commands_for(c.truth)
        outs = drivers.run_in_hosts(d, cmds, [x.replace("-core", "-heap") for x in HOSTS], work)
    c.outputs = {host.replace("-heap", "-core"): dict(zip(cmds, o)) for host, o in outs.items()}
    return c


def p12(text: str) -> str:
    return f"{h(text):012x}"


# -- taskstate ------------------------------------------------------------------------------------


def test_every_task_status_from_its_address_and_its_flags(case: Case, host: str) -> None:
    statuses = [task["status"] for task in case.http["tasks"]]
    assert statuses == ["Created", "WaitingForActivation", "WaitingToRun", "Running",
                        "WaitingForChildrenToComplete", "RanToCompletion", "Faulted", "Canceled",
                        "WaitingForActivation"]  # the scenario built each one; the last is an async method's box
    for task in case.http["tasks"]:
        for cmd in (f"tks {task['address']}", f"tks -v {task['stateFlags']}"):
            out = case.out(host, cmd)
            assert [ln for ln in out.lines if ln.strip()] == [task["status"]], (cmd, out.text)


def test_taskstate_json_and_hex_value(case: Case, host: str) -> None:
    first, last = case.http["tasks"][0], case.http["tasks"][-2]
    doc = json.loads(case.out(host, f"taskstate {first['address']} --json").text)
    assert (doc["command"], doc["address"], doc["state_flags"], doc["status"]) == \
        ("taskstate", first["address"], first["stateFlags"], first["status"])
    out = case.out(host, f"TaskState -v {hex(last['stateFlags'])}")
    assert [ln for ln in out.lines if ln.strip()] == [last["status"]]


def test_taskstate_bad_input(case: Case, host: str) -> None:
    """What SOS cannot take it answers with a line (dotnet-dump calls none of these a failure);
    only a -v value that is no number fails, in both."""
    s = case.http
    expect = {
        "tks": "Missing Task reference address or state value...",
        "tks zz": "Numeric value expected: either a task address or -v <state value>...",
        "tks -v 1": "Either a task address or a valid state is expected...",
        "tks 10": "Either a valid task address or -v <state value> is expected...",
        f"tks {s['notTask']}": "Either a valid task address or -v <state value> is expected...",
    }
    for cmd, line in expect.items():
        out = case.out(host, cmd)
        assert not out.errors and [ln for ln in out.lines if ln.strip()] == [line], (cmd, out.text)
    assert case.out(host, "tks -v abc").lines == ["error: invalid number: abc"]


# -- dumphttp -------------------------------------------------------------------------------------


def ordered(requests: list[dict]) -> list[dict]:
    """SOS's order: answered requests by their response's heap position, then pending ones by theirs."""
    done = sorted((r for r in requests if r["statusCode"] is not None), key=lambda r: h(r["response"]))
    return done + sorted((r for r in requests if r["statusCode"] is None), key=lambda r: h(r["address"]))


def row(r: dict, mt: str) -> str:
    status = "" if r["statusCode"] is None else f"{r['statusCode']:,}"
    return f"{p12(r['address']):>16} {p12(mt):>16} {r['method']:<6} {status:>10} {r['uri']}"


def table(case: Case, requests: list[dict]) -> list[str]:
    return (["         Address      MethodTable Method StatusCode Uri"]
            + [row(r, case.http["requestMt"]) for r in requests] + [f"Total {len(requests)} requests"])


def test_dumphttp_lists_every_request(case: Case, host: str) -> None:
    reqs = ordered(case.http["requests"])
    assert [r["statusCode"] for r in case.http["requests"]] == [200, 404, 500, 200, None, None]
    assert case.out(host, "dumphttp").lines == table(case, reqs)
    assert case.out(host, "dumphttp --pending --completed").lines == table(case, reqs)


def test_dumphttp_filters(case: Case, host: str) -> None:
    reqs = ordered(case.http["requests"])
    assert case.out(host, "dumphttp --pending").lines == table(case, [r for r in reqs if r["statusCode"] is None])
    assert case.out(host, "dumphttp --completed").lines == table(case, [r for r in reqs if r["statusCode"]])
    assert case.out(host, "dumphttp --statuscode 200").lines == table(case, [r for r in reqs if r["statusCode"] == 200])
    assert case.out(host, "dumphttp --uri HOLD/").lines == table(case, [r for r in reqs if "hold/" in r["uri"]])
    assert case.out(host, "DumpHttp --statuscode 404 --uri status").lines == \
        table(case, [r for r in reqs if r["statusCode"] == 404])
    assert case.out(host, "dumphttp --statuscode x").lines == [
        "error: invalid status code: x (a decimal number such as 404)"]


def test_dumphttp_stats(case: Case, host: str) -> None:
    groups: dict[tuple, int] = {}
    for r in ordered(case.http["requests"]):
        key = (r["statusCode"], r["method"], r["host"])
        groups[key] = groups.get(key, 0) + 1
    expect = ["Statistics:", "         Count Method StatusCode Host"]
    for (status, method, hostname), n in sorted(groups.items(), key=lambda kv: -kv[1]):
        expect.append(f"{n:>14,} {method:<6} {'' if status is None else status:>10} {hostname}")
    expect.append(f"Total {len(case.http['requests'])} requests")
    assert case.out(host, "dumphttp --stats").lines == expect
    doc = json.loads(case.out(host, "dumphttp --stats --json").text)
    assert [(s["count"], s["method"], s["status_code"], s["host"]) for s in doc["stats"]] == \
        [(n, m, st, hn) for (st, m, hn), n in sorted(groups.items(), key=lambda kv: -kv[1])]


def test_dumphttp_json(case: Case, host: str) -> None:
    doc = json.loads(case.out(host, "dumphttp --json").text)
    assert doc["total"] == len(case.http["requests"])
    assert doc["requests"] == [{"address": f"0x{h(r['address']):x}", "method_table": f"0x{h(case.http['requestMt']):x}",
                                "method": r["method"], "status_code": r["statusCode"], "uri": r["uri"]}
                               for r in ordered(case.http["requests"])]


# -- dumprequests ---------------------------------------------------------------------------------


def test_dumprequests_lists_the_requests_in_flight(case: Case, host: str) -> None:
    incoming = sorted(case.http["incoming"], key=lambda r: h(r["address"]))
    assert [(r["type"], r["method"], r["path"]) for r in case.http["incoming"]] == [
        ("Microsoft.AspNetCore.Http.DefaultHttpContext", "GET", "/hold/1"),
        ("Microsoft.AspNetCore.Http.DefaultHttpContext", "GET", "/hold/2")]
    cells = [(p12(r["address"]), r["method"], r["scheme"], r["path"] + r["query"]) for r in incoming]
    widths = [max([len(c[i]) for c in cells] + [m]) for i, m in enumerate((7, 6, 6, 3))]

    def line(*values: str) -> str:
        return " ".join(v.ljust(w) for v, w in zip(values, widths))

    expect = [line("Address", "Method", "Scheme", "Url")] + [line(*c) for c in cells] + \
        [f"Found {len(cells)} active requests"]
    assert [ln.rstrip() for ln in case.out(host, "dumprequests").lines] == [ln.rstrip() for ln in expect]
    doc = json.loads(case.out(host, "DumpRequests --json").text)
    assert (doc["command"], doc["total"]) == ("dumprequests", len(cells))
    assert [(r["address"], r["method"], r["scheme"], r["url"]) for r in doc["requests"]] == \
        [(f"0x{h(r['address']):x}", r["method"], r["scheme"], r["path"] + r["query"]) for r in incoming]


def test_a_heap_without_http_prints_the_empty_tables(debuggee_factory) -> None:
    d = debuggee_factory("heap")
    core = d.write_core("heap")
    outs = drivers.run_cli(["dumphttp", "dumphttp --stats", "dumprequests", "dumprequests --json"], core=core)
    assert outs[0].lines == ["         Address      MethodTable Method StatusCode Uri", "Total 0 requests"]
    assert outs[1].lines == ["Statistics:", "         Count Method StatusCode Host", "Total 0 requests"]
    assert outs[2].lines == ["No requests found"]
    doc = json.loads(outs[3].text)
    assert (doc["total"], doc["requests"]) == (0, [])
