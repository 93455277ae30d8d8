"""SOS's commands about tasks and HTTP requests: taskstate (tks), dumphttp, dumprequests."""
from __future__ import annotations

from ..clr.features.http import http_requests, incoming_requests
from ..clr.features.tasks import task_state_flags, task_status
from ..errors import UsageError
from ..render.numbers import count, pointer
from ..render.output import Address
from ..render.table import Column, Integer, Pointer, Table, Text
from .base import Command, Option, Parsed, Positional, parse_address, parse_count, register
from .context import CommandContext

# -- taskstate ----------------------------------------------------------------------------------


@register
class TaskState(Command):
    names = ("taskstate", "tks", "TaskState")
    summary = "Display a Task's state (TaskStatus) from its address or from an m_stateFlags value."
    usage = "taskstate <address> | taskstate -v <value>"
    details = """\
Translates a Task's m_stateFlags into the TaskStatus the runtime would report: Created,
WaitingForActivation, WaitingToRun, Running, WaitingForChildrenToComplete, RanToCompletion,
Canceled or Faulted. Give the address of a Task (any object deriving from Task, such as an
async method's box), or the flags themselves with -v (decimal, or hex with 0x).
Unlike SOS, a task that was never started (no flag set) says Created instead of being
refused as no task. What SOS cannot take (no argument, no number, an address that holds no
Task, a value with no TaskStatus bit) it answers with a line, as SOS does ("Either a valid task
address or -v <state value> is expected...").

Examples:
  tks 7f3a1c000040
  tks -v 73728"""
    options = (Option("-v", "an m_stateFlags value (decimal, or hex with 0x)", parse_count, "value",
                      aliases=("--value",), dest="value"),)
    positionals = (Positional("address", "the Task's address"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        # What SOS cannot take it answers with a line (and an empty one), not as a failure.
        if args.value is None and args.address is None:
            return self._answer(ctx, "Missing Task reference address or state value...")
        if args.value is not None:
            flags = args.value
        else:
            try:
                address = parse_address(args.address)
            except UsageError:
                return self._answer(ctx, "Numeric value expected: either a task address or -v <state value>...")
            _where, flags = task_state_flags(ctx.runtime, address)
            if flags is None:
                return self._answer(ctx, "Either a valid task address or -v <state value> is expected...")
            ctx.out.field("address", Address(address))
        status = task_status(flags)
        if status is None:
            return self._answer(ctx, "Either a task address or a valid state is expected...")
        ctx.out.field("state_flags", flags)
        ctx.out.field("status", status, status)
        if not ctx.out.structured:
            ctx.out.line()

    @staticmethod
    def _answer(ctx: CommandContext, line: str) -> None:
        ctx.out.field("message", line, line)
        if not ctx.out.structured:
            ctx.out.line()


# -- dumphttp -----------------------------------------------------------------------------------


def _status_code(text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise UsageError(f"invalid status code: {text} (a decimal number such as 404)") from None


def _method_column() -> Column:
    return Text(6)


def _status_column() -> Column:
    return Column(10, True, count)


@register
class DumpHttp(Command):
    names = ("dumphttp", "DumpHttp")
    summary = "Display the HTTP requests an HttpClient made: method, URI and status code, or pending."
    usage = "dumphttp [--stats] [--pending | --completed] [--uri <text>] [--statuscode <code>] [--json]"
    details = """\
Every System.Net.Http.HttpRequestMessage on the heap, as SOS lists them: its address and
MethodTable, the method, the response's status code (empty while no response has come) and
the URI. Requests with a response come first, each group in heap order. --stats counts them
by method, status code and host instead. --pending shows only requests without a response,
--completed only those with one (both: all); --uri keeps URIs containing the text (any case),
--statuscode those with that status code.

Examples:
  dumphttp --stats
  dumphttp --completed
  dumphttp --statuscode 500 --uri weather"""
    options = (Option("--stats", "count the requests by method, status code and host"),
               Option("--pending", "only requests without a response"),
               Option("--completed", "only requests with a response"),
               Option("--uri", "only requests whose URI contains this text (any case)", str, "text"),
               Option("--statuscode", "only requests answered with this status code", _status_code, "code"),
               Option("--json", "print the result as JSON", dest="json"))

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        pending, completed = (False, False) if args.pending and args.completed else (args.pending, args.completed)
        wanted = [r for r in http_requests(ctx.runtime)
                  if (not pending and not completed or pending and r.status_code is None
                      or completed and r.status_code is not None)
                  and (args.uri is None or args.uri.lower() in r.uri.lower())
                  and (args.statuscode is None or r.status_code == args.statuscode)]
        out = ctx.out
        if args.stats:
            groups: dict[tuple[int | None, str, str], int] = {}
            for r in wanted:
                key = (r.status_code, r.method, r.host)
                groups[key] = groups.get(key, 0) + 1
            out.line("Statistics:")
            rows = out.table("stats", Table(Integer(), _method_column(), _status_column(), Text()),
                             ("count", "method", "status_code", "host"))
            rows.header("Count", "Method", "StatusCode", "Host")
            for (status, method, host), n in sorted(groups.items(), key=lambda kv: -kv[1]):  # stable
                rows.row(n, method, status, host)
        else:
            rows = out.table("requests", Table(Pointer(), Pointer(), _method_column(), _status_column(), Text()),
                             ("address", "method_table", "method", "status_code", "uri"))
            rows.header("Address", "MethodTable", "Method", "StatusCode", "Uri")
            for r in wanted:
                rows.row(r.address, r.method_table, r.method, r.status_code, r.uri,
                         data=(Address(r.address), Address(r.method_table), r.method, r.status_code, r.uri))
        out.field("total", len(wanted), f"Total {len(wanted)} requests")


# -- dumprequests -------------------------------------------------------------------------------


@register
class DumpRequests(Command):
    names = ("dumprequests", "DumpRequests")
    summary = "Display the ASP.NET Core requests in flight: method, scheme and URL."
    usage = "dumprequests [--json]"
    details = """\
Every Microsoft.AspNetCore.Http.DefaultHttpContext on the heap that still holds its server's
request (a finished one lets it go): the context's address, the request's method, scheme,
and path with query string, as Kestrel read them from the request line. Kestrel makes the
method's text only once something asked for it (routing with an HTTP-method constraint, or
the app itself); before that SOS prints no method and sosext names the method Kestrel parsed.

Example:
  dumprequests"""
    options = (Option("--json", "print the result as JSON", dest="json"),)

    def run(self, ctx: CommandContext, args: Parsed) -> None:
        found = incoming_requests(ctx.runtime)
        out = ctx.out
        keys = ("address", "method", "scheme", "url")
        if not found:
            out.table("requests", None, keys)
            out.field("total", 0, "No requests found")
            return
        table = Table(Column(0, False, pointer), Text(), Text(), Text())  # widths fitted as SOS fits them
        table.fit(0, (r.address for r in found), 7).fit(1, (r.method for r in found), 6)
        table.fit(2, (r.scheme for r in found), 6).fit(3, (r.url for r in found), 3)
        rows = out.table("requests", table, keys)
        rows.header("Address", "Method", "Scheme", "Url")
        for r in found:
            rows.row(r.address, r.method, r.scheme, r.url, data=(Address(r.address), r.method, r.scheme, r.url))
        out.field("total", len(found), f"Found {len(found)} active requests")
