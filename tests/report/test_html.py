"""The HTML report (`--html`) in a real headless browser: Debian's chromium driven by
Playwright (both installed by `make setup`; a missing one fails the tests, never skips them).

The page is opened from file:// with every other request aborted, and must have asked for
none; it logs no console error; the chart is drawn (plotly's SVG marks are in the DOM); and
every figure on the page equals the result JSON written by the same run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from paths import CAPTURES
from report.test_report import _mutate, sample_result
from smbwire.cli import cli
from smbwire.csvout import EDGE_COLUMNS, SERIES_COLUMNS, edge_rows, series_rows, to_csv
from smbwire.html import render_html

CHROMIUM = "/usr/bin/chromium"
TOPOLOGY = CAPTURES / "s2d-two-node.toml"
FIGURES = ("payload_bytes", "unique_bytes", "dup_ratio", "per_copy_duplicate_bytes",
           "repeated_content_bytes", "trivial_bytes", "sends")
STACKED = ("unique_bytes", "per_copy_duplicate_bytes", "repeated_content_bytes", "trivial_bytes")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: run `make setup`, which installs it")
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: run `make setup`, which installs Debian's chromium")
    with sync_playwright() as pw:
        # --no-sandbox: the tests run as root, where chromium refuses its sandbox.
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


class Page:
    """A page opened offline, with what it requested and logged."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.context = browser.new_context()
        self.requests: list[str] = []
        self.console: list[tuple[str, str]] = []

        def route(r: Any) -> None:
            if r.request.url.startswith("file://"):
                r.continue_()
            else:
                self.requests.append(r.request.url)
                r.abort()

        self.context.route("**/*", route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.console.append(("pageerror", str(e))))
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_load_state("load")

    def close(self) -> None:
        self.context.close()


def analyze(tmp_path: Path, capture: Path, *opts: Any) -> tuple[dict[str, Any], Path]:
    out, js = tmp_path / "report.html", tmp_path / "r.json"
    r = CliRunner().invoke(cli, ["analyze", str(capture), *map(str, opts), "--html", str(out), "--json", str(js), "-q"])
    assert r.exit_code == 0, r.output
    return json.loads(js.read_text()), out


def cell_values(page: Any, selector: str) -> list[dict[str, Any]]:
    return page.eval_on_selector_all(selector, """rows => rows.map(r => ({
        src: r.dataset.src, dst: r.dataset.dst, cls: r.dataset.class, total: r.dataset.total,
        cells: Object.fromEntries([...r.querySelectorAll('[data-key]')].map(c => [c.dataset.key, c.dataset.value])),
    }))""")


def num(text: str) -> Any:
    return None if text == "" else json.loads(text)


@pytest.mark.parametrize("capture,opts", [
    ("redirect4-1MiB.pcap", ("-t", TOPOLOGY, "--interval", "0.0005")),
    ("nested4-1MiB-mirrordup-retx-reorder.pcap", ("-t", TOPOLOGY, "--interval", "0.001")),
    ("read-nonowner-1MiB.pcap", ("--interval", "0.001")),
])
def test_page_works_offline_and_shows_the_json(tmp_path: Path, browser: Any, capture: str, opts: tuple) -> None:
    result, path = analyze(tmp_path, CAPTURES / capture, *opts)
    p = Page(browser, path)
    try:
        page = p.page
        page.wait_for_selector("#series-chart .main-svg", timeout=30_000)
        assert p.requests == [], "the page asked the network for something"
        assert [m for m in p.console if m[0] in ("error", "pageerror")] == []

        # The chart is drawn: one stacked fill per (edge, class) and part, each with a path.
        pairs = {(r["src"], r["dst"], r["class"]) for r in result["series"]["rows"]}
        fills = page.eval_on_selector_all("#series-chart g.scatterlayer g.trace path.js-fill",
                                          "ps => ps.filter(p => (p.getAttribute('d') || '').length > 10).length")
        assert fills >= len(pairs) > 0
        assert page.locator("#series-chart .legendtext").count() == len(STACKED)

        # The chart's data: per (edge, class) and part, the interval bytes sum to the edge's
        # figure, and each point's rate is its bytes over the interval.
        traces = page.evaluate("""() => document.getElementById('series-chart').data.map(
            t => ({meta: t.meta, x: t.x, y: Array.from(t.y), bytes: Array.from(t.customdata)}))""")
        step = result["series"]["interval_seconds"]
        edges = {(e["src"], e["dst"], e["class"]): e for e in result["edges"]}
        assert {tuple(t["meta"][:3]) for t in traces} == pairs
        for t in traces:
            src, dst, cls, field = t["meta"]
            assert sum(t["bytes"]) == edges[(src, dst, cls)][field], t["meta"]
            assert all(abs(y - b / step) <= 1e-9 * max(1.0, b / step) for y, b in zip(t["y"], t["bytes"]))
        assert {t["meta"][3] for t in traces} == set(STACKED)

        # The edge table and the headline: every figure equals the JSON.
        rows = cell_values(page, "#edges tbody tr")
        body = [r for r in rows if not r["total"]]
        assert [(r["src"], r["dst"], r["cls"]) for r in body] == [(e["src"], e["dst"], e["class"]) for e in result["edges"]]
        for r, e in zip(body, result["edges"]):
            assert {k: num(v) for k, v in r["cells"].items()} == {k: e[k] for k in FIGURES}
        (total,) = [r for r in rows if r["total"]]
        assert {k: num(v) for k, v in total["cells"].items()} == {k: result["totals"][k] for k in FIGURES}
        head = cell_values(page, "#headline tbody tr")
        assert [num(r["cells"]["dup_ratio"]) for r in head] == [e["dup_ratio"] for e in result["edges"]]
        amp = page.get_attribute("#amplification [data-key=amplification]", "data-value")
        assert num(amp) == result["totals"]["amplification"]

        # Top duplicated payloads: digest, figures, and the Wireshark filter of the last frames.
        dups = page.eval_on_selector_all("div.dup", """ds => ds.map(d => ({
            digest: d.dataset.digest,
            cells: Object.fromEntries([...d.querySelectorAll('h3 [data-key]')].map(c => [c.dataset.key, c.dataset.value])),
            sends: d.querySelectorAll('table.sends tbody tr').length,
            filters: [...d.querySelectorAll('code.filter')].map(c => c.textContent)}))""")
        assert [d["digest"] for d in dups] == [d["digest"] for d in result["top_duplicates"]]
        for got, want in zip(dups, result["top_duplicates"]):
            assert {k: num(v) for k, v in got["cells"].items()} == {
                "size": want["size"], "sends_total": want["sends_total"], "duplicate_bytes": want["duplicate_bytes"]}
            assert got["sends"] == len(want["sends"])
            frames = sorted({s["frames"][1] for s in want["sends"]})
            assert got["filters"] == ["frame.number in {" + ", ".join(map(str, frames)) + "}"]

        # Accounting: every category and the totals.
        acc = page.eval_on_selector_all("#accounting tbody tr[data-category]",
                                        "rs => rs.map(r => [r.dataset.category, r.querySelector('[data-value]').dataset.value])")
        assert {k: int(v) for k, v in acc} == result["accounting"]["categories"]
        assert num(page.get_attribute("#accounting [data-key=total_bytes]", "data-value")) == result["accounting"]["total_bytes"]
        assert num(page.get_attribute("#accounting [data-key=input_bytes]", "data-value")) == result["accounting"]["input_bytes"]

        # Warnings: the engine's sentences.
        warnings = page.eval_on_selector_all("#warnings li", "ls => ls.map(l => l.textContent)")
        for w in result["warnings"]:
            assert w in warnings
    finally:
        p.close()


def test_names_from_the_capture_are_escaped(tmp_path: Path, browser: Any) -> None:
    """A node name from a topology file that is HTML stays text: nothing runs, nothing is
    fetched, the name is shown as written."""
    evil = '<img src="http://example.invalid/x.png" onerror="window.pwned=1">'
    topo = tmp_path / "t.toml"
    # A TOML quoted key (JSON string escapes are TOML's basic-string escapes).
    topo.write_text(TOPOLOGY.read_text().replace("[nodes.owner]", f"[nodes.{json.dumps(evil)}]"))
    result, path = analyze(tmp_path, CAPTURES / "redirect4-1MiB.pcap", "-t", topo, "--interval", "0.001")
    assert any(e["src"] == evil for e in result["edges"])
    p = Page(browser, path)
    try:
        p.page.wait_for_selector("#series-chart .main-svg", timeout=30_000)
        assert p.requests == []
        assert p.page.evaluate("() => window.pwned") is None
        assert p.page.locator("img").count() == 0
        assert evil in p.page.inner_text("#edges")
    finally:
        p.close()


def test_a_result_without_payload_has_no_chart(tmp_path: Path, browser: Any) -> None:
    from paths import PUBLIC

    result, path = analyze(tmp_path, PUBLIC / "smb300-aes128ccm-wiki.pcap")
    assert result["series"]["rows"] == []
    p = Page(browser, path)
    try:
        assert p.requests == []
        assert [m for m in p.console if m[0] in ("error", "pageerror")] == []
        assert p.page.locator("#series-chart").count() == 0
        assert "nothing to chart" in p.page.inner_text("body")
        assert "encrypted SMB3" in p.page.inner_text("#warnings")
    finally:
        p.close()


# ------------------------------------------------------------------ rendering damaged results


def _with_series(r: dict[str, Any]) -> dict[str, Any]:
    rows = [{"t": 1738238400.0 + i, "src": e["src"], "dst": e["dst"], "class": e["class"],
             **{k: e.get(k, 0) for k in ("payload_bytes", "nontrivial_bytes", "unique_bytes",
                                         "per_copy_duplicate_bytes", "repeated_content_bytes",
                                         "trivial_bytes", "sends")}}
            for i, e in enumerate(r["edges"])]
    return {**r, "series": {"interval_seconds": 1.0, "requested_interval_seconds": 1.0, "coarsenings": 0,
                            "start": 1738238400.0, "intervals": len(rows), "max_intervals": 10000,
                            "max_rows": 262144, "rows": rows}}


def test_html_and_csv_of_a_sample_result() -> None:
    r = _with_series(sample_result())
    page = render_html(r)
    assert page.count('id="series-chart"') == 1 and "<script" in page
    assert "https://" not in page.split("<script", 1)[0]
    assert len(to_csv(SERIES_COLUMNS, series_rows(r)).splitlines()) == 1 + len(r["edges"])


@pytest.mark.parametrize("times,text", [(1, "coarsened 1 time to stay within 10,000 intervals"),
                                        (3, "coarsened 3 times to stay within 10,000 intervals")])
def test_html_says_how_often_the_series_was_coarsened(times: int, text: str) -> None:
    r = _with_series(sample_result())
    r["series"].update(coarsenings=times, interval_seconds=2.0 ** times)
    assert text in render_html(r)




@settings(max_examples=60, deadline=None)
@given(st.data())
def test_html_and_csv_never_raise_on_damaged_results(data: Any) -> None:
    r = _mutate(_with_series(sample_result()), data)
    render_html(r)
    to_csv(SERIES_COLUMNS, series_rows(r))
    to_csv(EDGE_COLUMNS, edge_rows(r))


def test_csv_series_rows_that_are_not_a_list_give_no_rows() -> None:
    # Found by the property test above (rows replaced by `True`: iterating it raised).
    for damaged in (True, 3, "rows", {"t": 1}):
        r = _with_series(sample_result())
        r["series"]["rows"] = damaged
        assert series_rows(r) == []
        assert to_csv(SERIES_COLUMNS, series_rows(r)).count("\r\n") == 1
