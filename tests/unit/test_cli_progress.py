"""cli/progress.py: the one bar of the tools and benchmarks: drawn on a terminal, nothing in a pipe."""
from __future__ import annotations

import io
import threading

from bench import common
from curvine_py.cli.progress import progress_bar


def test_nothing_is_written_to_a_pipe() -> None:
    out = io.StringIO()     # isatty() is False: a pipe or a log
    with progress_bar("put f", 100, stream=out) as bar:
        bar.advance(60)
        bar.describe("put 1/2 files")
    assert not bar.drawn
    assert out.getvalue() == ""


def test_a_terminal_gets_the_description_and_the_amount() -> None:
    out = io.StringIO()
    with progress_bar("get model.bin", 4 << 20, stream=out, force=True) as bar:
        threads = [threading.Thread(target=bar.advance, args=(1 << 20,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        bar.describe("get 8/8 files")
    shown = out.getvalue()
    assert bar.drawn
    assert "get 8/8 files" in shown and "4.0/4.0 MiB" in shown


def test_counting_bar_shows_done_of_total() -> None:
    out = io.StringIO()
    with progress_bar("load", 7, unit="count", stream=out, force=True) as bar:
        for _ in range(7):
            bar.advance()
    assert "7/7" in out.getvalue()


def test_bench_pairs_alternate_and_count_every_run() -> None:
    order: list[str] = []
    result = common.paired(lambda: order.append("s") or 2.0, lambda: order.append("b") or 1.0, 3)
    assert order == ["b", "s", "s", "b", "b", "s"]
    assert result.ratio == 2.0
