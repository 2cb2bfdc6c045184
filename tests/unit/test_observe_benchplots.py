"""bench/plots.py: every stored benchmark result draws its PNGs, each plot carries the subject and
every baseline its run measured, `common.publish` writes the plots beside the JSON, and the doc's
plots section lists what exists. Bad input: an unknown benchmark is a usage error, a result the
plotter cannot read raises (no silently missing plot)."""
from __future__ import annotations

import argparse
import json
import pathlib
import struct
from typing import Any

import pytest
from matplotlib.figure import Figure

from bench import common, plots

STORED = common.RESULTS


def stored(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((STORED / f"{name}.json").read_text())
    return data


def png_size(path: pathlib.Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def legend_labels(fig: Figure) -> list[set[str]]:
    legends = [ax.get_legend() for ax in fig.axes]
    return [{t.get_text() for t in legend.get_texts()} for legend in legends if legend is not None]


@pytest.mark.parametrize("name", sorted(plots.PLOTTERS))
def test_every_stored_result_draws_its_pngs(name: str, tmp_path: pathlib.Path) -> None:
    written = plots.render(name, stored(name), tmp_path)
    assert [p.name for p in written] == [f"{name}-{what}.png" for what in plots.OUTPUTS[name]]
    for path in written:
        width, height = png_size(path)
        assert width >= 600 and height >= 300


def test_kv_plot_draws_the_subject_against_both_raw_pairs() -> None:
    (_, fig), = plots.plot_kv(stored("kv"))
    get_labels, put_labels = legend_labels(fig)
    assert {"KV get (TCP)", "KV short-circuit get"} <= get_labels
    assert "KV put (TCP)" in put_labels
    for labels in (get_labels, put_labels):
        assert sum(label.startswith("raw pair") for label in labels) == 2   # host-default and Reno
    # x = object size: one point per size the run measured.
    sizes = [r["size_mib"] for r in stored("kv")["results"]]
    assert [float(t) for t in fig.axes[0].get_xticks()] == [float(s) for s in sizes]


def test_meta_plot_has_one_panel_per_engine_and_thread_count_with_the_floor() -> None:
    data = stored("meta")
    (_, fig), = plots.plot_meta(data)
    threads = data["results"][0]["concurrency"]
    assert data["postgresql"], "the stored run measured both engines"
    assert len(fig.axes) == 2 * len(threads)
    titles = [ax.get_title() for ax in fig.axes]
    assert [t.split(":")[0] for t in titles] == ["SQLite"] * len(threads) + ["PostgreSQL"] * len(threads)
    for labels in legend_labels(fig):
        assert set(plots.META_OPS) | {"RPC floor (GetMembership)"} == labels


def test_lmcache_plot_compares_every_way_the_run_measured() -> None:
    data = stored("lmcache")
    figures = dict(plots.plot_lmcache(data))
    ways = figures["ways"]
    for ax, network in zip(ways.axes, ("loopback", "veth"), strict=True):
        shown = {t.get_text() for t in ax.get_xticklabels()}
        measured = {plots.LMCACHE_NAMES[w] for w in data[network]["summary"]}
        assert shown == measured


def test_rendering_is_repeatable(tmp_path: pathlib.Path) -> None:
    first = plots.render("placement", stored("placement"), tmp_path / "a")
    second = plots.render("placement", stored("placement"), tmp_path / "b")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


def test_a_quick_run_gets_its_own_names(tmp_path: pathlib.Path) -> None:
    written = plots.render("meta", stored("meta"), tmp_path, quick=True)
    assert [p.name for p in written] == ["meta.quick-ops.png"]


def test_unknown_and_unreadable_results() -> None:
    assert plots.render("nosuchbench", {}, pathlib.Path("/nonexistent")) == []
    with pytest.raises(KeyError):
        plots.render("kv", {"results": [{"size_mib": 1}]}, pathlib.Path("/nonexistent"))
    with pytest.raises(SystemExit) as exit_info:
        plots.main(["nosuchbench"])
    assert exit_info.value.code == 2


def test_main_says_when_a_named_result_is_missing(tmp_path: pathlib.Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert plots.main(["--results", str(tmp_path), "kv"]) == 1
    assert "no " in capsys.readouterr().err
    (tmp_path / "meta.json").write_text((STORED / "meta.json").read_text())
    assert plots.main(["--results", str(tmp_path), "meta"]) == 0
    assert (tmp_path / "meta-ops.png").exists()


def test_publish_writes_the_plots_beside_the_json(tmp_path: pathlib.Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "REPO", tmp_path)
    monkeypatch.setattr(common, "RESULTS", tmp_path / "bench" / "results")
    args = argparse.Namespace(no_write=False, quick=True)     # quick: the doc is left alone
    common.publish("placement", args, stored("placement"), "body")
    results = tmp_path / "bench" / "results"
    assert sorted(p.name for p in results.iterdir()) == ["placement.quick-balance.png", "placement.quick.json"]


def test_doc_section_lists_the_plots_present(tmp_path: pathlib.Path) -> None:
    results = tmp_path / "bench" / "results"
    doc = tmp_path / "docs" / "benchmarks.md"
    doc.parent.mkdir(parents=True)
    doc.write_text("# Benchmarks\n\n<!-- bench:kv -->\nkv table\n<!-- /bench:kv -->\n")
    (results).mkdir(parents=True)
    (results / "meta.json").write_text((STORED / "meta.json").read_text())
    plots.render("meta", stored("meta"), results)
    plots.update_plots_doc(results, doc)
    text = doc.read_text()
    assert "![meta ops](../bench/results/meta-ops.png)" in text
    assert "kv-throughput" not in text                      # not drawn: not listed
    assert "kv table" in text                               # other sections stay
    assert f"run of {stored('meta')['machine']['date']}" in text
    assert "commit" not in text                             # commits stay in the JSON
