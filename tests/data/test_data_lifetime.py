"""HeldBatches (harness/data/dali.py) without a GPU: a zero-copy batch stays referenced until an event
recorded after its work was queued has completed, from a fixed pool of events; the host waits only when
every slot is in flight."""

from __future__ import annotations

import gc
import weakref

from harness.data.dali import HeldBatches


class Batch:
    pass


class FakeEvent:
    """An event whose completion the test decides."""

    def __init__(self) -> None:
        self.done, self.waited = False, 0

    def record(self) -> None:
        self.done = False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.waited += 1
        self.done = True


def test_a_batch_lives_until_the_gpu_is_done_with_it():
    events: list[FakeEvent] = []
    held = HeldBatches(lambda: events.append(FakeEvent()) or events[-1], depth=4)
    first = Batch()
    alive = weakref.ref(first)
    held.hand_over(first)
    del first
    held.hand_over(Batch())  # the first batch's work is queued now: it is held behind an event
    gc.collect()
    assert alive() is not None and held.num_held == 1
    held.hand_over(Batch())
    gc.collect()
    assert alive() is not None  # its event has not completed
    for event in events:
        event.done = True
    held.hand_over(Batch())
    gc.collect()
    assert alive() is None and held.num_held == 1  # released; the batch before this one is held now
    assert len(events) == 4 and not any(e.waited for e in events)  # a fixed pool, no waiting


def test_the_host_waits_for_the_oldest_only_when_every_slot_is_in_flight():
    events: list[FakeEvent] = []
    held = HeldBatches(lambda: events.append(FakeEvent()) or events[-1], depth=2)
    for _ in range(3):
        held.hand_over(Batch())
    assert sum(e.waited for e in events) == 0 and held.num_held == 2
    held.hand_over(Batch())
    assert sum(e.waited for e in events) == 1 and held.num_held == 2 and len(events) == 2


def test_release_waits_for_every_held_batch():
    events: list[FakeEvent] = []
    held = HeldBatches(lambda: events.append(FakeEvent()) or events[-1], depth=4)
    for _ in range(3):
        held.hand_over(Batch())
    held.release()
    assert sorted(e.waited for e in events) == [0, 0, 1, 1] and held.num_held == 0  # two held, two free
