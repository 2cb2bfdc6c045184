"""bench/plots.py draws every series whole (issue 27): meta-ops' panels share one y scale that
reaches above every bar (the 8-thread series were cut off at ~1,280 ops/s), and kv-throughput's
legend entries are the baselines' names whole, wrapped, in a legend that lies inside the figure."""
from __future__ import annotations

import json
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg

from bench import common, plots


def stored(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((common.RESULTS / f"{name}.json").read_text())
    return data


def test_meta_panels_reach_above_every_bar() -> None:
    (_, fig), = plots.plot_meta(stored("meta"))
    for ax in fig.axes:
        top = ax.get_ylim()[1]
        highest = max(max(line.get_ydata()) for line in ax.get_lines() if len(line.get_ydata()))
        assert highest < top, (ax.get_title(), highest, top)
    assert len({ax.get_ylim() for ax in fig.axes}) == 1      # still one scale


def test_kv_legend_names_each_baseline_whole_inside_the_figure() -> None:
    data = stored("kv")
    (_, fig), = plots.plot_kv(data)
    FigureCanvasAgg(fig).draw()
    names = [text.split(" (")[0] for text in data["parameters"]["baselines"].values()]
    renderer = fig.canvas.get_renderer()   # type: ignore[attr-defined]
    figure_box = fig.bbox
    shown = []
    for ax in fig.axes:
        legend = ax.get_legend()
        box = legend.get_window_extent(renderer)
        assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1 and figure_box.y0 <= box.y0, box
        shown += [t.get_text().replace("\n", " ") for t in legend.get_texts()]
    assert set(names) <= set(shown), (names, shown)
