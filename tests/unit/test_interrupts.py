"""Ctrl-C in one place (sosext/interrupts.py): what every layer's check sees."""
from __future__ import annotations

import pytest

from sosext import interrupts
from sosext.clr import progress
from sosext.errors import Interrupted


@pytest.fixture(autouse=True)
def _clean():
    interrupts.clear()
    interrupts.set_poll(None)
    yield
    interrupts.clear()
    interrupts.set_poll(None)


def test_a_recorded_request_stands_until_the_next_command() -> None:
    assert not interrupts.requested()
    interrupts.request()  # e.g. a Ctrl-C swallowed inside a DAC callback
    assert interrupts.requested() and interrupts.recorded()
    with pytest.raises(Interrupted):
        progress.check_interrupt()
    with pytest.raises(Interrupted):  # still: later checks of the same command stop too
        progress.check_interrupt()
    interrupts.clear()  # hosts/common.execute, when the next command starts
    progress.check_interrupt()
    assert not interrupts.recorded()


def test_the_host_poll_is_asked_and_its_failure_is_no_interrupt() -> None:
    answers = iter([False, True])
    interrupts.set_poll(lambda: next(answers))
    assert not interrupts.requested()
    assert interrupts.requested()
    assert not interrupts.recorded()  # polled, not recorded: error reporting tells them apart

    def broken() -> bool:
        raise RuntimeError("host API hiccup")
    interrupts.set_poll(broken)
    assert not interrupts.requested()


def test_the_data_target_records_a_ctrl_c_it_cannot_raise() -> None:
    from sosext.dac.datatarget import E_FAIL, _guarded

    def callback() -> int:
        raise KeyboardInterrupt
    assert _guarded(callback)() == E_FAIL
    assert interrupts.recorded()


def test_a_background_thread_answers_only_to_its_own_cancel() -> None:
    """clr/roots/background.py's thread must neither take the user's Ctrl-C (the foreground's) nor
    call the host's poll (GDB's API belongs to its main thread)."""
    import threading
    polled: list[str] = []
    interrupts.set_poll(lambda: polled.append(threading.current_thread().name) or True)
    interrupts.request()
    cancelled = threading.Event()
    seen: list[str] = []

    def work() -> None:
        progress.run_in_background(cancelled)
        progress.check_interrupt()
        seen.append("ran on")
        cancelled.set()
        try:
            progress.check_interrupt()
        except Interrupted:
            seen.append("stopped")

    t = threading.Thread(target=work, name="bg")
    t.start()
    t.join()
    assert seen == ["ran on", "stopped"] and polled == []
    assert interrupts.recorded()  # still the foreground's to see
    with pytest.raises(Interrupted):
        progress.check_interrupt()
