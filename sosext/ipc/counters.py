"""The runtime's System.Runtime counters over EventPipe (what ``dotnet-counters monitor`` shows).

Two sources, both read from the same kind of session:

* ``metrics`` (.NET 9+): provider ``System.Diagnostics.Metrics``, keyword 0x2
  (TimeSeriesValues), arguments ``SessionId=…;Metrics=System.Runtime;RefreshInterval=N;…``.
  The runtime's ``System.Runtime`` meter publishes one event per instrument and tag set per
  interval, between ``CollectionStart`` and ``CollectionStop``: ``CounterRateValuePublished``
  and ``UpDownCounterRateValuePublished`` carry ``value`` (the absolute observed value, e.g.
  ``dotnet.gc.collections`` per generation since start) and ``rate`` (its change over the
  interval, empty on the first); ``GaugeValuePublished`` carries ``lastValue``. Values are
  strings (invariant culture) in the payload.
* ``eventcounters`` (every .NET Core 3+ runtime): provider ``System.Runtime``, arguments
  ``EventCounterIntervalSec=N``; one ``EventCounters`` event per counter per interval whose
  payload struct holds ``Name``, ``DisplayName``, ``DisplayUnits`` and either ``Mean`` (a
  polled value, e.g. ``gc-heap-size`` in MB) or ``Increment`` (the change over the interval,
  e.g. ``gen-0-gc-count``): EventCounters never give a total since process start.

``auto`` picks ``metrics`` on runtimes 9 and later (ProcessInfo2's version), else
``eventcounters``.
"""
from __future__ import annotations

import queue
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator

from sosext.ipc.client import get_process_info
from sosext.ipc.eventpipe import EventPipeSession, Provider, process_gone
from sosext.ipc.nettrace import TraceEvent
from sosext.ipc.protocol import IpcError

__all__ = ["CounterSample", "CounterInterval", "choose_source", "monitor", "SOURCES"]

SOURCES = ("auto", "metrics", "eventcounters")
METRICS_PROVIDER = "System.Diagnostics.Metrics"
EVENTCOUNTERS_PROVIDER = "System.Runtime"
_METRICS_KEYWORD_TIMESERIES = 0x2
_VALUE_EVENTS = {"CounterRateValuePublished", "UpDownCounterRateValuePublished", "GaugeValuePublished"}
_REFUSALS = {"MultipleSessionsNotSupportedError", "MultipleSessionsConfiguredIncorrectlyError"}


@dataclass(frozen=True, slots=True)
class CounterSample:
    """One counter (and tag set) in one interval.

    ``value`` is the observed value (metrics: absolute; eventcounters: ``Mean``, or for an
    incrementing counter the ``Increment`` over the interval); ``rate`` is the change over
    the interval where the source gives one.
    """

    name: str
    tags: str
    unit: str
    value: float | None
    rate: float | None
    display: str = ""


@dataclass(frozen=True, slots=True)
class CounterInterval:
    time: float  # seconds since the epoch, when the interval was received
    source: str
    samples: tuple[CounterSample, ...]

    def get(self, name: str, tags: str = "") -> CounterSample | None:
        for s in self.samples:
            if s.name == name and s.tags == tags:
                return s
        return None


def choose_source(pid: int, source: str) -> str:
    if source not in SOURCES:
        raise IpcError(f"unknown counter source {source!r} (auto, metrics, eventcounters)")
    if source != "auto":
        return source
    version = get_process_info(pid).clr_product_version or ""
    try:
        major = int(version.split(".")[0])
    except ValueError:
        major = 0
    return "metrics" if major >= 9 else "eventcounters"


def _number(text: object) -> float | None:
    if isinstance(text, (int, float)):
        return float(text)
    if not isinstance(text, str) or not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _providers(source: str, interval: float, session_guid: str) -> list[Provider]:
    if source == "metrics":
        args = (f"SessionId={session_guid};Metrics=System.Runtime;RefreshInterval={interval:g};"
                "MaxTimeSeries=1000;MaxHistograms=10")
        return [Provider(METRICS_PROVIDER, _METRICS_KEYWORD_TIMESERIES, 5, args)]
    return [Provider(EVENTCOUNTERS_PROVIDER, 0xFFFFFFFF, 4, f"EventCounterIntervalSec={interval:g}")]


def _eventcounter_sample(ev: TraceEvent) -> tuple[CounterSample, object] | None:
    """The sample and its interval key (``IntervalSec``, the same float for every counter of
    one interval)."""
    payload = ev.decode()
    # The payload is one struct (TraceLogging wrapper) holding a "Payload" struct.
    body = next(iter(payload.values()), None) if len(payload) == 1 else payload
    if isinstance(body, dict) and "Payload" in body:
        body = body["Payload"]
    if not isinstance(body, dict) or "Name" not in body:
        return None
    if "Increment" in body:
        value, rate = _number(body.get("Increment")), None
    else:
        value, rate = _number(body.get("Mean")), None
    return (CounterSample(str(body["Name"]), "", str(body.get("DisplayUnits") or ""), value, rate,
                          str(body.get("DisplayName") or "")), body.get("IntervalSec"))


def monitor(pid: int, *, source: str = "auto", interval: float = 1.0, duration: float | None = None,
            stop_flag: Callable[[], bool] = lambda: False) -> Iterator[CounterInterval]:
    """Yield one :class:`CounterInterval` per interval until ``duration`` seconds have passed,
    ``stop_flag()`` is true, the generator is closed, or a Ctrl-C arrives; the session is then
    stopped with StopTracing, so none is left open in the target."""
    if not interval > 0 or interval > 86400:
        raise IpcError(f"invalid interval {interval!r} (seconds, > 0)")
    source = choose_source(pid, source)
    session_guid = str(uuid.uuid4())
    session = EventPipeSession(pid, _providers(source, interval, session_guid))
    events: queue.Queue[TraceEvent | BaseException | None] = queue.Queue()

    def pump() -> None:
        try:
            for ev in session.events():
                events.put(ev)
            events.put(None)
        except BaseException as exc:  # handed to the main thread, which reports it
            events.put(exc)

    reader = threading.Thread(target=pump, name=f"eventpipe-{pid}", daemon=True)
    reader.start()
    deadline = None if duration is None else time.monotonic() + duration
    current: dict[tuple[str, str], CounterSample] = {}
    group: list[object] = [None]  # the IntervalSec of the EventCounters in `current`
    full = [0]  # how many counters a complete EventCounters interval had
    stopping = False
    instruments = 0  # System.Runtime instruments the meter announced
    heard = False  # the metrics provider said anything for our session
    silence_limit = time.monotonic() + max(5.0, 2 * interval + 2)
    no_meter = IpcError(f"process {pid} publishes no System.Runtime metrics (the meter came with .NET 9; "
                        "before, the metrics event source may not even exist): use --source eventcounters")

    def flush(complete_only: bool = False) -> CounterInterval | None:
        if not current or (complete_only and len(current) < full[0]):
            return None
        full[0] = max(full[0], len(current))
        out = CounterInterval(time.time(), source, tuple(current.values()))
        current.clear()
        return out

    try:
        while True:
            if not stopping and ((deadline is not None and time.monotonic() >= deadline) or stop_flag()):
                stopping = True
                session.stop()
            try:
                item = events.get(timeout=0.2 if not stopping else 5.0)
            except queue.Empty:
                if stopping:
                    break  # the runtime did not close the stream in time; we close it
                if source == "metrics" and not heard and time.monotonic() > silence_limit:
                    raise no_meter
                # EventCounters come as a burst per interval: a quiet gap after a complete one ends it.
                if source == "eventcounters" and full[0] and (done := flush(complete_only=True)) is not None:
                    yield done
                continue
            if item is None:
                if source == "metrics" and not heard:
                    raise no_meter
                if not stopping:
                    if process_gone(pid):
                        raise IpcError(f"process {pid} exited during the session")
                    raise IpcError(f"process {pid} ended the EventPipe session")
                break
            if isinstance(item, BaseException):
                if stopping and isinstance(item, IpcError):
                    break
                raise item
            if stopping:
                continue
            ev = item
            if source == "metrics":
                if ev.provider != METRICS_PROVIDER:
                    continue
                heard = True
                name = ev.name
                if name == "CollectionStop":
                    if (done := flush()) is not None:
                        yield done
                    continue
                if name in _REFUSALS:
                    d = ev.decode()
                    if d.get("runningSessionId") == session_guid:
                        continue  # another client was refused; ours goes on
                    raise IpcError(f"process {pid} refused the metrics session: another tool (dotnet-counters, "
                                   "dotnet-monitor, an OpenTelemetry agent…) already has one; try --source eventcounters")
                if name == "Error":
                    d = ev.decode()
                    if d.get("sessionId") == session_guid:
                        detail = str(d.get("errorMessage") or "unknown error").strip().splitlines()
                        raise IpcError(f"process {pid}'s metrics session failed: {detail[0] if detail else '?'}")
                    continue
                if name == "BeginInstrumentReporting":
                    d = ev.decode()
                    if d.get("sessionId") == session_guid and d.get("meterName") == "System.Runtime":
                        instruments += 1
                    continue
                if name == "InitialInstrumentEnumerationComplete" and not instruments:
                    if ev.decode().get("sessionId") == session_guid:
                        raise no_meter
                    continue
                if name not in _VALUE_EVENTS:
                    continue
                d = ev.decode()
                if d.get("sessionId") != session_guid or d.get("meterName") != "System.Runtime":
                    continue
                value = _number(d.get("lastValue")) if name == "GaugeValuePublished" else _number(d.get("value"))
                rate = None if name == "GaugeValuePublished" else _number(d.get("rate"))
                s = CounterSample(str(d.get("instrumentName")), str(d.get("tags") or ""), str(d.get("unit") or ""),
                                  value, rate)
                current[(s.name, s.tags)] = s
            else:
                if ev.provider != EVENTCOUNTERS_PROVIDER or ev.name != "EventCounters":
                    continue
                found = _eventcounter_sample(ev)
                if found is None:
                    continue
                s, key = found
                if ((s.name, s.tags) in current or key != group[0]) and (done := flush()) is not None:
                    yield done
                group[0] = key
                current[(s.name, s.tags)] = s
        if source == "eventcounters" and (done := flush(complete_only=True)) is not None:
            yield done  # the last interval, unless the stop cut it short
    finally:
        try:
            session.close()
        finally:
            reader.join(timeout=5)
