"""master/scrub.py with a fake data plane and a fake clock: each recorded copy on a live worker is
asked once, an EIO answer is a corrupt copy, found=false a missing one, an unreachable worker an
unchecked copy, a copy on a worker outside the live set is skipped; the pace keeps the verified
bytes within the rate; a page stops at its time budget with a cursor to go on from."""
from __future__ import annotations

from curvine_py.core.errors import Corrupt, CurvineError, Unavailable
from curvine_py.master.scrub import PAGE_BLOCKS, scrub_page
from curvine_py.master.store.replication import RecordedBlock
from curvine_py.master.types import WorkerInfo
from tests.faketime import FakeTime


class FakeCopier:
    def __init__(self, answers: dict[tuple[int, str], int | None | CurvineError]) -> None:
        self.answers = answers
        self.asked: list[tuple[int, str]] = []

    def verify(self, block_id: int, worker: WorkerInfo, checksum: int = 0) -> int | None:
        self.asked.append((block_id, worker.worker_id))
        answer = self.answers[(block_id, worker.worker_id)]
        if isinstance(answer, CurvineError):
            raise answer
        return answer




LIVE = {w: WorkerInfo(worker_id=w) for w in ("a", "b", "c")}


def test_each_copy_is_judged_by_its_answer() -> None:
    blocks = [RecordedBlock(1, 10, 100, ("a", "b")), RecordedBlock(2, 11, 100, ("a", "gone")),
              RecordedBlock(3, 12, 100, ("b", "c"))]
    copier = FakeCopier({(1, "a"): 100, (1, "b"): Corrupt("chunk 0 digest mismatch"), (2, "a"): None,
                         (3, "b"): Unavailable("connection refused"), (3, "c"): 100})
    t = FakeTime()
    page = scrub_page(copier, blocks, LIVE, after=0, rate=0, clock=t.clock, sleep=t.sleep)  # type: ignore[arg-type]
    assert copier.asked == [(1, "a"), (1, "b"), (2, "a"), (3, "b"), (3, "c")]
    assert (page.copies, page.bytes, page.skipped) == (2, 200, 1)
    assert [(c.block_id, c.worker_id, c.ino) for c in page.corrupt] == [(1, "b", 10)]
    assert [(c.block_id, c.worker_id) for c in page.missing] == [(2, "a")]
    assert len(page.errors) == 1 and "connection refused" in page.errors[0]
    assert page.done and page.next_after == 3 and t.slept == []


def test_the_pace_keeps_verified_bytes_within_the_rate() -> None:
    blocks = [RecordedBlock(i, i, 1000, ("a",)) for i in range(1, 5)]
    copier = FakeCopier({(i, "a"): 1000 for i in range(1, 5)})
    t = FakeTime()
    page = scrub_page(copier, blocks, LIVE, after=0, rate=1000, clock=t.clock, sleep=t.sleep)  # type: ignore[arg-type]
    assert page.copies == 4
    assert t.slept == [1.0, 1.0, 1.0], "each copy waits until the bytes before it fit 1000 bytes/s"


def test_a_page_stops_at_its_budget_and_says_where_to_go_on() -> None:
    blocks = [RecordedBlock(i, i, 1000, ("a",)) for i in range(1, PAGE_BLOCKS + 1)]
    copier = FakeCopier({(i, "a"): 1000 for i in range(1, PAGE_BLOCKS + 1)})
    t = FakeTime()
    page = scrub_page(copier, blocks, LIVE, after=0, rate=1000, budget_s=2.5, clock=t.clock,  # type: ignore[arg-type]
                      sleep=t.sleep)
    assert not page.done
    assert page.next_after == 4 and page.copies == 4, "the 5th copy would start after the 2.5 s budget"
