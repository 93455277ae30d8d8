"""Which of a frame's GC slots the contracts reader reports at a code offset that is no safe
point: GcInfoDecoder::EnumerateLiveSlots' rule, which the DAC reader's answers follow."""
from sosext.contracts.stackrefs import _live_tracked
from sosext.formats.gcinfo import GcInfo


def _info(ranges: list[tuple[int, int]]) -> GcInfo:
    return GcInfo("x64", 2, False, 0, 0x40, safe_points=[0x20], interruptible_ranges=ranges,
                  live_at_safe_points=[[0]], lifetimes=[(0x8, 1, True), (0x18, 1, False)])


def test_a_partially_interruptible_method_reports_its_untracked_slots_anywhere():
    """A webapi thread stopped on KestrelConnection`1..ctor's first instruction: the DAC and
    SOS reported its untracked stack arguments (rbp+10, rbp+18, the caller's rbp then)."""
    assert _live_tracked(_info([]), 0) == []
    assert _live_tracked(_info([]), 0x20) == [0]


def test_a_fully_interruptible_method_reports_nothing_outside_its_ranges():
    """A frame stopped in a fully interruptible method's prolog (before its first range), as
    a webapi thread in DefaultPipeWriter.Complete was: no slot, untracked ones included."""
    info = _info([(0x4, 0x1c)])
    assert _live_tracked(info, 0) is None
    assert _live_tracked(info, 0x1c) is None
    assert _live_tracked(info, 0x10) == [1]
    assert _live_tracked(info, 0x20) == [0]
    assert _live_tracked(info, 0x20, aborted=True) is None
