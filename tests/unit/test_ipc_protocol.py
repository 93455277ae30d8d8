"""Diagnostics IPC: framing and reply parsing on synthetic bytes, and the client's transport
against a scripted fake runtime on a Unix socket (no .NET needed; fast).

Golden bytes below were captured from a .NET 10.0.12 runtime on this machine.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sosext.errors import SosError
from sosext.ipc import client as ipc_client
from sosext.ipc import processes as ipc_processes
from sosext.ipc import protocol as p
from sosext.ipc.protocol import IpcError

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ProcessInfo2 payload from `dotnet IpcDebuggee.dll` (pid 5351) on .NET 10.0.12.
GOLDEN_PROCESS_INFO2 = bytes.fromhex(
    "e714000000000000dcf297b6fec300498bc79e4de9f51d08410000002f007500730072002f0073006800610072"
    "0065002f0064006f0074006e00650074002f0064006f0074006e006500740020002f0074006d0070002f007300"
    "6f0073006500780074002d006900700063002d006500780070002f006f00750074002f00490070006300440065"
    "006200750067006700650065002e0064006c006c000000060000004c0069006e00750078000000040000007800"
    "3600340000000c00000049007000630044006500620075006700670065006500000008000000310030002e0030"
    "002e00310032000000"
)
GOLDEN_COMMAND_LINE = "/usr/share/dotnet/dotnet /tmp/sosext-ipc-exp/out/IpcDebuggee.dll"
# GenerateCoreDump3 error reply payload for a dump path in a missing directory.
GOLDEN_DUMP3_ERROR = struct.pack("<I", 0x80004005) + p.encode_string(
    "[createdump] Could not create output file '/nonexistent/dir/core': No such file or directory (2)\n"
    "[createdump] Failure took 209ms\n"
)


def reply(command_id: int, payload: bytes = b"", command_set: int = 0xFF) -> p.IpcMessage:
    return p.decode_message(p.encode_message(command_set, command_id, payload))


def error_reply(hresult: int, extra: bytes = b"") -> p.IpcMessage:
    return reply(0xFF, struct.pack("<I", hresult) + extra)


# --------------------------------------------------------------------------- header


def test_header_layout_matches_spec():
    data = p.encode_message(0x04, 0x04)
    assert data == b"DOTNET_IPC_V1\x00" + struct.pack("<HBBH", 20, 4, 4, 0)
    assert p.HEADER_SIZE == 20


def test_generic_ok_message_from_spec():
    ok = b"DOTNET_IPC_V1\x00" + bytes([20, 0, 0xFF, 0x00, 0, 0])
    msg = p.decode_message(ok)
    assert msg.is_ok and not msg.is_error and msg.payload == b""


@given(
    size=st.integers(20, 0xFFFF),
    command_set=st.integers(0, 0xFF),
    command_id=st.integers(0, 0xFF),
    reserved=st.integers(0, 0xFFFF),
)
@FUZZ
def test_header_round_trip(size, command_set, command_id, reserved):
    h = p.IpcHeader(size, command_set, command_id, reserved)
    assert p.decode_header(h.encode()) == h


@given(payload=st.binary(max_size=2000), command_set=st.integers(0, 0xFF), command_id=st.integers(0, 0xFF))
@FUZZ
def test_message_round_trip(payload, command_set, command_id):
    data = p.encode_message(command_set, command_id, payload)
    msg = p.decode_message(data)
    assert msg.header == p.IpcHeader(20 + len(payload), command_set, command_id)
    assert msg.payload == payload


def test_message_too_large():
    with pytest.raises(IpcError, match="too large"):
        p.encode_message(1, 3, b"x" * (0xFFFF - 19))
    assert len(p.encode_message(1, 3, b"x" * (0xFFFF - 20))) == 0xFFFF


@pytest.mark.parametrize(
    "data, match",
    [
        (b"", "truncated"),
        (b"DOTNET_IPC_V1\x00\x14\x00\xff", "truncated"),
        (b"DOTNET_IPC_V2\x00\x14\x00\xff\x00\x00\x00", "bad magic"),
        (b"DOTNET_IPC_V1\x00\x13\x00\xff\x00\x00\x00", "size 19"),
        (b"DOTNET_IPC_V1\x00\x18\x00\xff\x00\x00\x00\x00\x00", "truncated"),
        (b"DOTNET_IPC_V1\x00\x14\x00\xff\x00\x00\x00\x00", "unexpected bytes"),
    ],
)
def test_bad_headers(data, match):
    with pytest.raises(IpcError, match=match):
        p.decode_message(data)


# --------------------------------------------------------------------------- strings


def test_string_encoding_counts_the_nul():
    assert p.encode_string("abc") == struct.pack("<I", 4) + "abc\0".encode("utf-16-le")
    assert p.encode_string("") == struct.pack("<I", 1) + b"\0\0"
    assert p.encode_string(None) == struct.pack("<I", 0)
    # A character outside the BMP is two UTF-16 code units.
    assert p.encode_string("\U0001f600")[:4] == struct.pack("<I", 3)


def test_string_with_nul_rejected():
    with pytest.raises(IpcError):
        p.encode_string("a\0b")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=300))
@FUZZ
def test_string_round_trip(text):
    r = p.PayloadReader(p.encode_string(text) + b"tail")
    assert r.string() == text
    assert r.remaining == 4


def test_string_absent_and_malformed():
    assert p.PayloadReader(struct.pack("<I", 0)).string() is None
    with pytest.raises(IpcError, match="NUL-terminated"):
        p.PayloadReader(struct.pack("<I", 2) + "ab".encode("utf-16-le")).string("OS")
    with pytest.raises(IpcError, match="claims 100 characters"):
        p.PayloadReader(struct.pack("<I", 100) + b"\0\0").string()
    with pytest.raises(IpcError, match="truncated"):
        p.PayloadReader(b"\x01\x00").string()


def test_lone_surrogate_is_replaced_not_fatal():
    data = struct.pack("<I", 2) + b"\x00\xd8\x00\x00"  # U+D800 then NUL
    assert p.PayloadReader(data).string() == "\ufffd"


# --------------------------------------------------------------------------- replies


def test_check_reply_ok_and_errors():
    assert p.check_reply(reply(0x00, b"abc"), "x") == b"abc"
    with pytest.raises(p.UnknownCommandError) as exc:
        p.check_reply(error_reply(0x80131385), "ProcessInfo2")
    assert exc.value.hresult == 0x80131385
    with pytest.raises(IpcError, match=r"HRESULT 0x80131384 \(BAD_ENCODING\)") as exc:
        p.check_reply(error_reply(0x80131384), "x")
    assert exc.value.hresult == 0x80131384 and not isinstance(exc.value, p.UnknownCommandError)
    with pytest.raises(IpcError, match="malformed error reply"):
        p.check_reply(reply(0xFF, b"\x01\x02"), "x")
    with pytest.raises(IpcError, match="unexpected reply 0x04/0x00"):
        p.check_reply(reply(0x00, command_set=0x04), "x")


def test_ipc_error_is_a_one_line_sos_error():
    err = IpcError("first\nsecond\r\n  third")
    assert isinstance(err, SosError)
    assert str(err) == "first second third"


def test_golden_process_info2():
    info = p.parse_process_info2(GOLDEN_PROCESS_INFO2)
    assert info == p.ProcessInfo(
        pid=5351,
        runtime_cookie=uuid.UUID("b697f2dc-c3fe-4900-8bc7-9e4de9f51d08"),
        command_line=GOLDEN_COMMAND_LINE,
        os="Linux",
        arch="x64",
        managed_entrypoint="IpcDebuggee",
        clr_product_version="10.0.12",
    )
    # Round trip through our own encoder: the layout is exactly pid, GUID, 5 strings.
    rebuilt = (
        struct.pack("<Q", 5351)
        + info.runtime_cookie.bytes_le
        + b"".join(p.encode_string(s) for s in (GOLDEN_COMMAND_LINE, "Linux", "x64", "IpcDebuggee", "10.0.12"))
    )
    assert rebuilt == GOLDEN_PROCESS_INFO2


def test_golden_process_info_v1():
    # ProcessInfo (0x04/0x00) is ProcessInfo2 without the last two strings.
    v1 = GOLDEN_PROCESS_INFO2[: -(4 + 12 * 2) - (4 + 8 * 2)]
    info = p.parse_process_info(v1)
    assert info.pid == 5351 and info.command_line == GOLDEN_COMMAND_LINE and info.arch == "x64"
    assert info.managed_entrypoint is None and info.clr_product_version is None
    with pytest.raises(IpcError, match="trailing"):
        p.parse_process_info(GOLDEN_PROCESS_INFO2)  # v2 bytes are not a v1 reply
    with pytest.raises(IpcError, match="truncated"):
        p.parse_process_info2(v1)


def test_dump_replies():
    assert p.parse_dump_reply(reply(0x00, struct.pack("<I", 0)), 3) == p.DumpResult(0)
    assert p.parse_dump_reply(reply(0x00, struct.pack("<I", 0)), 3).ok
    r = p.parse_dump_reply(error_reply(0x80004005), 2)
    assert r == p.DumpResult(0x80004005) and not r.ok
    r = p.parse_dump_reply(reply(0xFF, GOLDEN_DUMP3_ERROR), 3)
    assert r.hresult == 0x80004005
    assert r.message.startswith("[createdump] Could not create output file '/nonexistent/dir/core'")
    # The same bytes to id 2 carry no message; a garbled message keeps the HRESULT.
    assert p.parse_dump_reply(reply(0xFF, GOLDEN_DUMP3_ERROR), 2).message is None
    garbled = struct.pack("<II", 0x80004005, 500) + b"\0\0"
    assert p.parse_dump_reply(reply(0xFF, garbled), 3) == p.DumpResult(0x80004005)
    for command_id in (1, 2, 3):
        with pytest.raises(p.UnknownCommandError):
            p.parse_dump_reply(error_reply(0x80131385), command_id)
    with pytest.raises(IpcError, match="truncated"):
        p.parse_dump_reply(reply(0x00, b"\0\0"), 3)


def test_dump_request_layout():
    data = p.dump_request(3, "/tmp/core", 2, 1)
    msg = p.decode_message(data)
    assert (msg.header.command_set, msg.header.command_id) == (1, 3)
    r = p.PayloadReader(msg.payload)
    assert (r.string(), r.u32(), r.u32()) == ("/tmp/core", 2, 1)
    r.end()
    with pytest.raises(IpcError):
        p.dump_request(3, "", 2, 0)


def test_hresult_text():
    assert p.hresult_text(0x80131385) == "0x80131385 (UNKNOWN_COMMAND)"
    assert p.hresult_text(-2147467259) == "0x80004005 (E_FAIL)"
    assert p.hresult_text(0x80001234) == "0x80001234"


# --------------------------------------------------------------------------- fuzzing

_PARSERS: list[Callable[[bytes], object]] = [
    p.decode_message,
    p.parse_process_info,
    p.parse_process_info2,
    lambda b: p.check_reply(p.decode_message(b), "x"),
    lambda b: p.parse_dump_reply(p.decode_message(b), 3),
    lambda b: p.parse_dump_reply(p.decode_message(b), 1),
    lambda b: p.parse_process_info2(p.check_reply(p.decode_message(b), "x")),
]


def _only_ipc_errors(data: bytes) -> None:
    for parse in _PARSERS:
        try:
            parse(data)
        except IpcError:
            pass


@given(st.binary(max_size=400))
@FUZZ
def test_fuzz_random_bytes(data):
    _only_ipc_errors(data)


@given(st.binary(max_size=300), st.sampled_from([0x00, 0xFF, 0x04]))
@FUZZ
def test_fuzz_random_payload_behind_valid_header(payload, command_id):
    _only_ipc_errors(p.encode_message(0xFF, command_id, payload))
    _only_ipc_errors(payload)


@given(st.data())
@FUZZ
def test_fuzz_truncated_and_corrupted_golden(data):
    full = p.encode_message(0xFF, 0x00, GOLDEN_PROCESS_INFO2)
    cut = data.draw(st.integers(0, len(full)))
    _only_ipc_errors(full[:cut])
    _only_ipc_errors(GOLDEN_PROCESS_INFO2[: max(0, cut - 20)])
    if cut < len(full):
        with pytest.raises(IpcError):
            p.decode_message(full[:cut])
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(full) - 1), st.integers(0, 255)), max_size=4))
    corrupted = bytearray(full)
    for pos, value in flips:
        corrupted[pos] = value
    _only_ipc_errors(bytes(corrupted))
    _only_ipc_errors(bytes(corrupted[20:]))


# --------------------------------------------------------------------------- dump names


def test_dump_name_expansion():
    expand = ipc_client._expand_dump_name
    assert expand("/d/core.%p", 42) == ("/d/core.42", False)
    assert expand("/d/core.%d.%%", 42) == ("/d/core.42.%", False)
    assert expand("/d/core%", 42) == ("/d/core", False)
    assert expand("/d/core.%h", 42) == (f"/d/core.{socket.gethostname()}", False)
    assert expand("/d/[x]/core.%t", 42) == ("/d/[[]x]/core.*", True)
    assert expand("/d/%e.%p", 7) == ("/d/*.7", True)
    with pytest.raises(IpcError, match="unsupported %u"):
        expand("/d/core.%u", 42)


# --------------------------------------------------------------------------- fake runtime

DEAD_PID = 4_194_305  # above PID_MAX_LIMIT: never a live pid


def _recv_message(conn: socket.socket) -> bytes:
    head = b""
    while len(head) < 20:
        chunk = conn.recv(20 - len(head))
        if not chunk:
            return head
        head += chunk
    size = struct.unpack_from("<H", head, 14)[0]
    body = b""
    while len(head) + len(body) < size:
        chunk = conn.recv(size - 20 - len(body))
        if not chunk:
            break
        body += chunk
    return head + body


class Hold(bytes):
    """Answer these bytes, then keep the connection open without closing it."""


class FakeRuntime:
    """Listens on ``dotnet-diagnostic-{pid}-{key}-socket``; connection N runs ``script[N]``.

    A script step gets the request bytes and returns the bytes to answer and close (None:
    answer nothing; :class:`Hold`: answer and keep the connection open until the test ends).
    """

    def __init__(self, directory: str, pid: int, script: list[Callable[[bytes], bytes | None]], key: int | None = None):
        self.key = ipc_client.process_start_time(pid) if key is None else key
        self.path = os.path.join(directory, f"dotnet-diagnostic-{pid}-{self.key}-socket")
        self.script = list(script)
        self.requests: list[bytes] = []
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self.sock.settimeout(0.05)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            conn.settimeout(5)
            request = _recv_message(conn)
            self.requests.append(request)
            step = self.script.pop(0) if self.script else (lambda req: None)
            answer = step(request)
            try:
                if answer:
                    conn.sendall(answer)
            except OSError:
                pass
            if answer is None or isinstance(answer, Hold):
                self._held.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        self._stop.set()
        self.thread.join(2)
        for conn in self._held:
            conn.close()
        self.sock.close()


@pytest.fixture
def ipcdir():
    d = tempfile.mkdtemp(prefix="sxipc")  # short: sun_path holds 108 bytes
    runtimes: list[FakeRuntime] = []

    def start(script, pid=None, key=None) -> FakeRuntime:
        rt = FakeRuntime(d, os.getpid() if pid is None else pid, script, key)
        runtimes.append(rt)
        return rt

    start.dir = d  # type: ignore[attr-defined]
    yield start
    for rt in runtimes:
        rt.close()
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)


def ok(payload: bytes = b"") -> Callable[[bytes], bytes]:
    return lambda req: p.encode_message(0xFF, 0x00, payload)


def err(hresult: int, extra: bytes = b"") -> Callable[[bytes], bytes]:
    return lambda req: p.encode_message(0xFF, 0xFF, struct.pack("<I", hresult) + extra)


def test_find_socket_errors(ipcdir):
    with pytest.raises(ipc_client.NoSuchProcessError, match=f"^no such process: {DEAD_PID}$"):
        ipc_client.find_socket(DEAD_PID, ipcdir.dir)
    with pytest.raises(ipc_client.NoSuchProcessError, match="no such process: 0"):
        ipc_client.find_socket(0, ipcdir.dir)
    with pytest.raises(
        ipc_client.NoDiagnosticsSocketError,
        match=f"^process {os.getpid()} has no diagnostics socket .*EnableDiagnostics=0\\)$",
    ):
        ipc_client.find_socket(os.getpid(), ipcdir.dir)


def test_bad_timeout_is_an_ipc_error(ipcdir):
    ipcdir([])
    with pytest.raises(IpcError, match="invalid timeout"):
        ipc_client.get_process_info(os.getpid(), tmpdir=ipcdir.dir, timeout=0)


def test_find_socket_prefers_the_start_time_key(ipcdir):
    start = ipc_client.process_start_time(os.getpid())
    assert start is not None and start > 0
    stale_newer = ipcdir([], key=start + 1000)
    live = ipcdir([], key=start)
    assert ipc_client.find_socket(os.getpid(), ipcdir.dir) == live.path
    live.close()
    os.unlink(live.path)
    assert ipc_client.find_socket(os.getpid(), ipcdir.dir) == stale_newer.path  # else the newest


def test_timeout_when_runtime_never_answers(ipcdir):
    ipcdir([lambda req: None])
    t0 = time.monotonic()
    with pytest.raises(IpcError, match=f"^timed out after 0.3 s waiting for process {os.getpid()}"):
        ipc_client.get_process_info(os.getpid(), tmpdir=ipcdir.dir, timeout=0.3)
    assert time.monotonic() - t0 < 3


def test_timeout_on_partial_reply(ipcdir):
    # Half a header, then silence: a timeout too, not a hang.
    ipcdir([lambda req: Hold(b"DOTNET_IPC")])
    with pytest.raises(IpcError, match=f"^timed out after 0.3 s waiting for process {os.getpid()}"):
        ipc_client.get_process_info(os.getpid(), tmpdir=ipcdir.dir, timeout=0.3)


@pytest.mark.parametrize(
    "answer, match",
    [
        (b"", "closed the diagnostics connection without replying"),
        (b"DOTNET_IPC_V1\x00", "in the middle of its reply"),
        (p.encode_message(0xFF, 0, b"abcd")[:-2], "in the middle of its reply"),
        (p.encode_message(0xFF, 0, b"abcd")[:20], "in the middle of its reply"),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "bad magic"),
        (p.encode_message(0xFF, 0x00, b"\x01\x02\x03"), "truncated ProcessInfo2 reply"),
        (p.encode_message(0xFF, 0xFF, struct.pack("<I", 0x80004005)), r"HRESULT 0x80004005 \(E_FAIL\)"),
    ],
)
def test_bad_answers_become_ipc_errors(ipcdir, answer, match):
    ipcdir([lambda req: answer])
    with pytest.raises(IpcError, match=match):
        ipc_client.get_process_info(os.getpid(), tmpdir=ipcdir.dir, timeout=2)


def test_stale_socket_without_listener(ipcdir):
    key = ipc_client.process_start_time(os.getpid())
    path = os.path.join(ipcdir.dir, f"dotnet-diagnostic-{os.getpid()}-{key}-socket")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()  # the file stays, nobody listens
    with pytest.raises(ipc_client.NotListeningError, match="does not accept diagnostics connections"):
        ipc_client.get_process_info(os.getpid(), tmpdir=ipcdir.dir, timeout=1)


def test_a_socket_older_than_the_process_is_an_earlier_process_s(ipcdir):
    """Pids are reused: a socket whose key (a start time) is older than the process's start was
    left by an earlier process with that pid (a CI run met one: `sleep` got the pid of a .NET
    process killed earlier), so the process has no diagnostics socket."""
    start = ipc_client.process_start_time(os.getpid())
    for key in (1, start - 1):
        path = os.path.join(ipcdir.dir, f"dotnet-diagnostic-{os.getpid()}-{key}-socket")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.close()
    with pytest.raises(ipc_client.NoDiagnosticsSocketError, match="has no diagnostics socket"):
        ipc_client.find_socket(os.getpid(), ipcdir.dir)


def test_process_info_falls_back_to_v1(ipcdir):
    v1 = GOLDEN_PROCESS_INFO2[: -(4 + 12 * 2) - (4 + 8 * 2)]
    rt = ipcdir([err(0x80131385), ok(v1)])
    info = ipc_client.get_process_info(os.getpid(), tmpdir=ipcdir.dir, timeout=2)
    assert info.command_line == GOLDEN_COMMAND_LINE and info.clr_product_version is None
    assert [r[14 + 2 + 0 : 14 + 2 + 2] for r in rt.requests] == [b"\x04\x04", b"\x04\x00"]
    assert all(len(r) == 20 for r in rt.requests)


def test_dump_falls_back_3_2_1(ipcdir, tmp_path):
    target = tmp_path / "core.%p"

    def write_ok(req: bytes) -> bytes:
        # Like createdump: write where the request says (sosext's private directory).
        asked = p.PayloadReader(p.decode_message(req).payload).string()
        Path(asked.replace("%p", str(os.getpid()))).write_bytes(b"\x7fELF" + bytes(60))
        return p.encode_message(0xFF, 0x00, struct.pack("<I", 0))

    rt = ipcdir([err(0x80131385), err(0x80131385), write_ok])
    got = ipc_client.collect_dump(os.getpid(), target, p.DumpType.FULL, diagnostics=True, tmpdir=ipcdir.dir, timeout=2)
    assert got == str(tmp_path / f"core.{os.getpid()}")
    decoded = [p.decode_message(r) for r in rt.requests]
    assert [(m.header.command_set, m.header.command_id) for m in decoded] == [(1, 3), (1, 2), (1, 1)]
    for m in decoded:
        r = p.PayloadReader(m.payload)
        asked, kind, flags = r.string(), r.u32(), r.u32()
        # createdump is sent a private directory next to the target, never the target itself.
        assert os.path.dirname(os.path.dirname(asked)) == str(tmp_path)
        assert os.path.basename(os.path.dirname(asked)).startswith(".sosext-dump-")
        assert (os.path.basename(asked), kind, flags) == ("core.%p", 4, 1)
    assert os.listdir(tmp_path) == [f"core.{os.getpid()}"]  # the private directory is gone


def test_dump_failure_message(ipcdir, tmp_path):
    ipcdir([err(0x80004005, GOLDEN_DUMP3_ERROR[4:])])
    with pytest.raises(IpcError) as exc:
        ipc_client.collect_dump(os.getpid(), tmp_path / "core", tmpdir=ipcdir.dir, timeout=2)
    msg = str(exc.value)
    assert "\n" not in msg and exc.value.hresult == 0x80004005
    assert msg.startswith(f"dump of process {os.getpid()} failed with HRESULT 0x80004005 (E_FAIL): Could not create")
    assert msg.endswith("; Failure took 209ms")


def test_dump_success_but_no_file(ipcdir, tmp_path):
    ipcdir([ok(struct.pack("<I", 0))])
    # The file sosext created for createdump stayed empty; with %t (no file made beforehand) none appeared.
    with pytest.raises(IpcError, match="reported a dump written, but it is empty"):
        ipc_client.collect_dump(os.getpid(), tmp_path / "core", tmpdir=ipcdir.dir, timeout=2)
    assert os.listdir(tmp_path) == []


def test_dump_success_but_no_file_with_time_pattern(ipcdir, tmp_path):
    ipcdir([ok(struct.pack("<I", 0))])
    with pytest.raises(IpcError, match="reported a dump written, but it left 0 files in "):
        ipc_client.collect_dump(os.getpid(), tmp_path / "core.%t", tmpdir=ipcdir.dir, timeout=2)
    assert os.listdir(tmp_path) == []


def test_dump_path_checks_happen_before_asking(ipcdir, tmp_path):
    rt = ipcdir([])
    pid = os.getpid()
    with pytest.raises(IpcError, match=f"^dump directory does not exist: {re.escape(str(tmp_path))}/nope$"):
        ipc_client.collect_dump(pid, tmp_path / "nope" / "core", tmpdir=ipcdir.dir)
    with pytest.raises(IpcError, match="^dump directory is not writable: /proc "):
        ipc_client.collect_dump(pid, "/proc/core.%p", tmpdir=ipcdir.dir)
    (tmp_path / "file").write_text("x")
    with pytest.raises(IpcError, match="not a directory"):
        ipc_client.collect_dump(pid, tmp_path / "file" / "core", tmpdir=ipcdir.dir)
    with pytest.raises(IpcError, match="is a directory"):
        ipc_client.collect_dump(pid, tmp_path, tmpdir=ipcdir.dir)
    with pytest.raises(IpcError, match="unsupported %u"):
        ipc_client.collect_dump(pid, tmp_path / "core.%u", tmpdir=ipcdir.dir)
    with pytest.raises(IpcError, match="invalid dump type"):
        ipc_client.collect_dump(pid, tmp_path / "core", 7, tmpdir=ipcdir.dir)
    with pytest.raises(IpcError, match=f"^no such process: {DEAD_PID}$"):
        ipc_client.collect_dump(DEAD_PID, tmp_path / "nope" / "core", tmpdir=ipcdir.dir)
    assert rt.requests == []
    assert sorted(os.listdir(tmp_path)) == ["file"]  # the writability probe left nothing behind


def test_list_processes_skips_stale_sockets(ipcdir):
    rt = ipcdir([ok(GOLDEN_PROCESS_INFO2)])
    # A dead pid's leftover socket, and a live pid whose socket nobody listens on.
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(os.path.join(ipcdir.dir, f"dotnet-diagnostic-{DEAD_PID}-5-socket"))
    dead.close()
    parent = os.getppid()
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(os.path.join(ipcdir.dir, f"dotnet-diagnostic-{parent}-5-socket"))
    silent.close()
    rows = ipc_processes.list_processes(ipcdir.dir, timeout=2)
    assert [r.pid for r in rows] == [os.getpid()]
    row = rows[0]
    assert row.runtime_version == "10.0.12" and row.managed_entrypoint == "IpcDebuggee"
    assert row.name == open(f"/proc/{os.getpid()}/comm").read().strip()
    assert row.command_line == open(f"/proc/{os.getpid()}/cmdline", "rb").read().rstrip(b"\0").replace(
        b"\0", b" "
    ).decode()
    assert row.socket_path == rt.path


def test_list_processes_keeps_a_silent_runtime(ipcdir):
    ipcdir([lambda req: None])
    t0 = time.monotonic()
    rows = ipc_processes.list_processes(ipcdir.dir, timeout=0.3)
    assert time.monotonic() - t0 < 3
    assert [(r.pid, r.runtime_version, r.info) for r in rows] == [(os.getpid(), None, None)]


def test_list_processes_empty_dir(ipcdir):
    assert ipc_processes.list_processes(ipcdir.dir) == []
    assert ipc_processes.list_processes(os.path.join(ipcdir.dir, "missing")) == []
