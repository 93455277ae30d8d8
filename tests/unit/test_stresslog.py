"""The stress log decoder on logs built here byte by byte the way the runtime writes them, the
printf it formats with, the GC history, and hypothesis: corrupt logs and formats never raise
or hang."""
from __future__ import annotations

import struct

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sosext.clr.threads import stresslog as sl

LOG = 0x10_0000
IMAGE = 0x40_0000           # "libcoreclr": where format strings live
IMAGE_SIZE = 2 << 20
GC_IMAGE = 0x90_0000        # a second module (the standalone GC)
GC_IMAGE_SIZE = 1 << 20


class Memory:
    """Sparse target memory: reads return what is mapped from the address on (maybe short)."""

    def __init__(self) -> None:
        self.blocks: dict[int, bytearray] = {}

    def put(self, addr: int, data: bytes) -> None:
        self.blocks[addr] = bytearray(data)

    def read(self, addr: int, size: int) -> bytes:
        for base, blk in self.blocks.items():
            if base <= addr < base + len(blk):
                return bytes(blk[addr - base:addr - base + size])
        return b""


class Names:
    def __init__(self, mem: Memory) -> None:
        self.mem = mem

    def string(self, address: int, wide: bool) -> str | None:
        raw = self.mem.read(address, 256)
        return raw.split(b"\0", 1)[0].decode("latin-1") if raw else None

    def type_name(self, mt: int) -> str | None:
        return {0x7000: "My.Type"}.get(mt)

    def method_name(self, md: int) -> str | None:
        return {0x8000: "My.Type.Run()"}.get(md)


class Writer:
    """Lays out a StressLog, its module table, format strings and threads' chunks."""

    def __init__(self) -> None:
        self.mem = Memory()
        self.image = bytearray(IMAGE_SIZE)
        self.gc_image = bytearray(GC_IMAGE_SIZE)
        self.strings: dict[str, int] = {}
        self.threads: list[int] = []
        self.next_free = 0x200_0000

    def fmt(self, text: str, gc: bool = False) -> int:
        """The cumulative format offset of ``text`` (placed in the first or the second module)."""
        key = ("gc:" if gc else "") + text
        if key not in self.strings:
            img = self.gc_image if gc else self.image
            at = 0x100 + 0x100 * len(self.strings)
            img[at:at + len(text) + 1] = text.encode() + b"\0"
            self.strings[key] = at + (IMAGE_SIZE if gc else 0)
        return self.strings[key]

    def alloc(self, size: int) -> int:
        a = self.next_free
        self.next_free += (size + 0xFFF) & ~0xFFF
        return a

    def thread(self, tid: int, messages: list[tuple[int, int, tuple[int, ...]]], chunks: int = 1,
               wrapped: bool = False) -> None:
        """``messages`` oldest first as (format offset, timestamp, args); written downwards from the
        end of the tail chunk on to ``prev``, as AdvanceWrite does."""
        addrs = [self.alloc(sl.CHUNK_BYTES) for _ in range(chunks)]
        bufs = [bytearray(sl.CHUNK_SIZE) for _ in range(chunks)]
        cur = chunks - 1  # the tail is written first
        pos = sl.CHUNK_SIZE
        for offset, ts, args in messages:
            size = sl.MSG_HEADER + 8 * len(args)
            if pos - size < 0:
                # As AdvWritePastBoundary: zero what is left at the start of the full chunk,
                # then write on from the end of the previous one (over its older messages).
                bufs[cur][:pos] = bytes(pos)
                cur = (cur - 1) % chunks
                pos = sl.CHUNK_SIZE
            pos -= size
            w0 = 0x1 | len(args) << 32 | (offset & ((1 << 26) - 1)) << 38
            w1 = offset >> 26 | ts << 13
            bufs[cur][pos:pos + size] = struct.pack(f"<QQ{len(args)}Q", w0, w1, *args)
        for i, (a, b) in enumerate(zip(addrs, bufs)):
            prev, nxt = addrs[(i - 1) % chunks], addrs[(i + 1) % chunks]
            self.mem.put(a, struct.pack("<QQ", prev, nxt) + bytes(b) + struct.pack("<II", sl.CHUNK_SIG, sl.CHUNK_SIG))
        t = self.alloc(80)
        raw = bytearray(80)
        struct.pack_into("<QQ", raw, 0, 0, tid)
        raw[18] = 1 if wrapped else 0
        struct.pack_into("<Q", raw, 24, addrs[cur] + sl.CHUNK_BUF + pos)
        struct.pack_into("<QQ", raw, 40, addrs[0], addrs[-1])
        struct.pack_into("<Q", raw, 64, addrs[cur])
        self.mem.put(t, bytes(raw))
        if self.threads:
            prev_raw = self.mem.blocks[self.threads[-1]]
            struct.pack_into("<Q", prev_raw, 0, t)
        self.threads.append(t)

    def finish(self) -> Memory:
        head = bytearray(80 + 16 * sl.MAX_MODULES)
        struct.pack_into("<IIIIi", head, 0, 0xFFFFFFFF, 6, 0x10000, 0x2000000, 3)
        struct.pack_into("<Q", head, 24, self.threads[0] if self.threads else 0)
        struct.pack_into("<QQQQ", head, 48, 1_000_000_000, 1_000, 133_000_000_000_000_000, IMAGE)
        struct.pack_into("<QQQQ", head, 80, IMAGE, IMAGE_SIZE, GC_IMAGE, GC_IMAGE_SIZE)
        self.mem.put(LOG, bytes(head))
        self.mem.put(IMAGE, bytes(self.image))
        self.mem.put(GC_IMAGE, bytes(self.gc_image))
        return self.mem


def decoded(mem: Memory) -> list[tuple[str | None, sl.StressMessage]]:
    return list(sl.StressLog(mem.read, LOG).messages())


def test_threads_merge_newest_first_with_their_formats() -> None:
    w = Writer()
    a, b = w.fmt("a %d\n"), w.fmt("b %p\n", gc=True)
    w.thread(0x11, [(a, 1_100, (1,)), (a, 1_300, (3,))])
    w.thread(0x22, [(b, 1_200, (2,)), (b, 1_400, (4,))])
    got = decoded(w.finish())
    assert [(f, m.thread_id, m.timestamp, m.args) for f, m in got] == [
        ("b %p\n", 0x22, 1_400, (4,)), ("a %d\n", 0x11, 1_300, (3,)),
        ("b %p\n", 0x22, 1_200, (2,)), ("a %d\n", 0x11, 1_100, (1,))]
    log = sl.StressLog(w.mem.read, LOG)
    assert log.header.seconds(1_400) == 400 / 1e9
    assert log.present and len(log.threads) == 2


def test_a_wrapped_thread_reads_back_through_its_older_chunk() -> None:
    w = Writer()
    f = w.fmt("m %d\n")
    per_chunk = sl.CHUNK_SIZE // (sl.MSG_HEADER + 8)
    msgs = [(f, 1_000 + i, (i,)) for i in range(per_chunk + 10)]
    w.thread(1, msgs, chunks=2)
    got = [m.args[0] for _f, m in decoded(w.finish())]
    assert got == list(range(per_chunk + 9, -1, -1))


def test_after_wrapping_the_oldest_survivors_are_read_up_to_a_message_short_of_the_writer() -> None:
    w = Writer()
    f = w.fmt("m %d %d %d\n")
    size = sl.MSG_HEADER + 3 * 8
    per_chunk = sl.CHUNK_SIZE // size          # 819 messages, 8 bytes left at each chunk's start
    total = 2 * per_chunk + 100                # the tail chunk is written again: 100 overwritten
    w.thread(1, [(f, 1_000 + i, (i, 0, 0)) for i in range(total)], chunks=2, wrapped=True)
    got = [m.args[0] for _f, m in decoded(w.finish())]
    # Newest first through both chunks, then the previous lap's messages in the chunk being
    # written, stopping a whole message (StressMsg::maxMsgSize) short of where writing is.
    slack = sl.CHUNK_SIZE - per_chunk * size
    writer_at = slack + (per_chunk - 1 - 99) * size     # the newest message replaced message 99
    oldest = next(j for j in range(per_chunk) if slack + (per_chunk - 1 - j) * size < writer_at - sl.MAX_MSG)
    assert got == list(range(total - 1, oldest - 1, -1))
    assert oldest == 113  # by hand: 8 + (818 - j) * 40 < 8 + 719 * 40 - 520 from j = 113 on


def test_no_thread_logs_means_no_log() -> None:
    w = Writer()
    log = sl.StressLog(w.finish().read, LOG)
    assert not log.present and list(log.messages()) == []


def test_printf_and_the_stress_log_suffixes() -> None:
    mem = Memory()
    mem.put(0x5000, b"hello\0")
    names = Names(mem)
    cases = [
        ("%d|%i", (0xFFFFFFFF, 5), "-1|5"),
        ("%ld %lu", (2**64 - 2, 2**64 - 2), f"-2 {2**64 - 2}"),
        ("%x %X %#x %08x", (255, 255, 255, 255), "ff FF 0xff 000000ff"),
        ("[%5d][%-5d][%05d]", (42, 42, -42), "[   42][42   ][-0042]"),
        ("%p", (0x1234,), "0000000000001234"),
        ("MT = %pT", (0x7000,), "MT = 0000000000007000 (My.Type)"),
        ("MT = %pT", (0x7001,), "MT = 0000000000007001 Low Bit(s) Set (My.Type)"),
        ("MT = %pT", (0x7008,), "MT = 0000000000007008 (BAD MethodTable)"),
        ("md %pM!", (0x8000,), "md 0000000000008000 (My.Type.Run())!"),
        ("%s and %s", (0x5000, 0x9999), "hello and (#Could not read address of string#)"),
        ("100%% %d", (7,), "100% 7"),
        ("%d %d", (1,), "1 <missing>"),
        ("%.2f", (struct.unpack("<Q", struct.pack("<d", 2.5))[0],), "2.50"),
        ("%zu %I64x", (10, 0xABC), "10 abc"),
    ]
    for fmt, args, want in cases:
        assert sl.format_message(fmt, args, names) == want, fmt


def test_facility_names() -> None:
    assert sl.facility_name(0x80001) == "`GC`GCROOTS`"
    assert sl.facility_name(0xFFFFFFFF) == "`ALL`"
    assert sl.facility_name(0) == "`"


def test_gc_history_groups_messages_by_their_begingc() -> None:
    def m(*args: int) -> sl.StressMessage:
        return sl.StressMessage(1, 1, 1, 1, args)
    newest_first = [
        (sl.GC_END, m(9, 0, 1)), (sl.GC_ROOT, m(0x10, 0xA0, 0xB0, 0x7000)), (sl.GC_ROOT_PROMOTE, m(0x10, 0xA0, 0x7000)),
        (sl.GC_PLUG_MOVE, m(0xA0, 0xC0, 0x10)), (sl.GC_START, m(9, 0, 1)),
        (sl.GC_ROOT_PROMOTE, m(0x20, 0xA0, 0x7000)), (sl.GC_START, m(8, 1, 1)), ("other %d\n", m(1)),
        (sl.GC_ROOT, m(0x30, 1, 2, 3)),  # before any BEGINGC in the log: no record closes it
    ]
    recs = sl.gc_history(newest_first)
    assert [(r.gc_count, r.relocs, r.promotes, r.plugs) for r in recs] == [
        (9, [(0x10, 0xA0, 0xB0, 0x7000)], [(0x10, 0xA0, 0x7000)], [(0xA0, 0xC0, 0x10)]),
        (8, [], [(0x20, 0xA0, 0x7000)], []),
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=0, max_size=4096), st.integers(0, 80), st.integers(0, 2**64 - 1), st.booleans())
def test_corrupt_logs_never_raise_or_hang(noise: bytes, where: int, word: int, wrapped: bool) -> None:
    w = Writer()
    f = w.fmt("x %d %s %pT\n")
    w.thread(3, [(f, 1_000 + i, (i, 0x5000, 0x7000)) for i in range(50)], chunks=2, wrapped=wrapped)
    mem = w.finish()
    chunk = sorted(a for a in mem.blocks if a >= 0x200_0000)[0]
    blk = mem.blocks[chunk]
    at = (where * 409) % (len(blk) - len(noise) - 1) if len(noise) < len(blk) else 0
    blk[at:at + len(noise)] = noise
    thread = w.threads[0]
    struct.pack_into("<Q", mem.blocks[thread], 8 * (where % 9), word)
    try:
        log = sl.StressLog(mem.read, LOG)
    except ValueError:
        return
    for fmt, msg in log.messages():
        if fmt is not None:
            sl.format_message(fmt, msg.args, Names(mem))
    log.gc_history()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80), st.lists(st.integers(0, 2**64 - 1), max_size=8))
@example("%\u00b2:", [0])  # a width of a digit str.isdigit() takes and int() refuses
def test_any_format_formats(fmt: str, args: list[int]) -> None:
    assert isinstance(sl.format_message(fmt, tuple(args), Names(Memory())), str)
