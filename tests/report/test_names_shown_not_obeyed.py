"""Names from the wire (share and file names of the top duplicates) and from the user (input
paths, node names) are shown as they are, never acted on: the terminal report, the live view,
its status line, the HTML page and `verify`'s table show terminal control characters, bidi
overrides and zero-width characters as escapes (`units.printable`), and rich never reads
`[bold]`, `[/]` or `:smile:` in a name as markup or an emoji code. Before, a file name with
`[/]` on the wire ended the report with an internal error (rich's MarkupError), `[bold]` in
a capture's name vanished from the inputs line, and an ESC in a file name reached the
terminal."""

from __future__ import annotations

import copy
import io
import re

import pytest
from rich.console import Console

from report.test_live_tui import edge, snapshot
from report.test_report import sample_result
from smbwire.html import render_html
from smbwire.report import render_report
from smbwire.tui import live_lines, status_line
from smbwire.units import printable, printable_tree

EVIL = "evil[/]\x1b[2J\x1b]0;t\x07[bold]b:smile:\u202egpj.exe\u200bz"
SHOWN = "evil[/]\\x1b[2J\\x1b]0;t\\x07[bold]b:smile:\\u202egpj.exe\\u200bz"


def test_printable():
    assert printable(EVIL) == SHOWN
    assert printable("vm01\\disk 1.vhdx") == "vm01\\disk 1.vhdx"
    assert printable("\U000e0001") == "\\U000e0001"  # a tag character (format, invisible)
    clean = sample_result()
    assert printable_tree(clean) is clean  # nothing copied when nothing needs it
    dirty = {"a": [{"k\x1b": "v\x07"}, "ok"], "n": 1}
    assert printable_tree(dirty) == {"a": [{"k\\x1b": "v\\x07"}, "ok"], "n": 1}
    assert dirty == {"a": [{"k\x1b": "v\x07"}, "ok"], "n": 1}  # the result itself is left alone


def evil_result() -> dict:
    r = copy.deepcopy(sample_result())
    for d in r["top_duplicates"]:
        for s in d["sends"]:
            s["file_name"] = EVIL
            s["share"] = "\\\\srv\\[link=http://x]share"
    r["inputs"][0]["path"] = "/caps/cap[bold]y.pcap"
    return r


@pytest.mark.parametrize("terminal", [True, False])
@pytest.mark.parametrize("markup", [True, False])
def test_the_report_shows_names_as_they_are(terminal, markup):
    buf = io.StringIO()
    console = Console(file=buf, width=400, force_terminal=terminal, color_system="truecolor" if terminal else None,
                      markup=markup, emoji=markup)
    render_report(evil_result(), console)
    out = buf.getvalue()
    assert "cap[bold]y.pcap" in out
    assert SHOWN in out
    assert "\\\\srv\\[link=http://x]share" in out
    for raw in ("\x1b[2J", "\x07", "\u202e", "\u200b", "\U0001f604"):
        assert raw not in out


def test_the_live_view_and_status_line_show_names_as_they_are():
    snap = snapshot([edge("198.18.0.1", "198.18.0.2", "write", 100 << 20, 50 << 20)])
    snap["edges"][0]["src"] = "node\x1b[2J[/]a"
    text = "\n".join(line.plain for line in live_lines(snap, 200, 50))
    assert "node\\x1b[2J[/]a" in text and "\x1b" not in text
    assert "\x1b" not in status_line(snap)


def test_the_html_page_shows_names_as_they_are():
    page = render_html(evil_result())
    assert "\u202e" not in page and "\u200b" not in page and "\x1b" not in page
    assert "\\u202egpj.exe" in page


def test_verify_shows_failures_as_they_are():
    from smbwire.verify import Check, render

    checks = [Check(digest="d[/]", index=1, file=0, frames=(1, 2), transport="tcp",
                    failures=[f"file: Wireshark's name is {EVIL}"])]
    buf = io.StringIO()
    render(checks, Console(file=buf, width=400, force_terminal=True, color_system="truecolor"))
    out = buf.getvalue()
    assert "d[/]" in out and SHOWN in out and "\x1b[2J" not in out and "\u202e" not in out


def test_skipped_keys_are_left_as_they_are_in_their_place():
    rows = [{"src": "a\x1b", "t": 1}]
    r = {"edges": [{"src": "n\x07"}], "series": {"rows": rows}, "totals": {}}
    out = printable_tree(r, skip=("series",))
    assert list(out) == ["edges", "series", "totals"]
    assert out["edges"][0]["src"] == "n\\x07" and out["series"]["rows"] is rows
    clean = {"edges": [], "series": {"rows": rows}}
    assert printable_tree(clean, skip=("series",)) is clean


def test_error_and_warning_lines_show_paths_as_they_are(tmp_path):
    import subprocess
    import sys

    from paths import CAPTURES

    bad = str(tmp_path / "x\x1b[31mred\nnext.pcap")
    r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", bad], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr == f"smbwire: error: {tmp_path}/x\\x1b[31mred\\x0anext.pcap: no such file\n"
    r = subprocess.run([sys.executable, "-m", "smbwire", "analyze", bad, str(CAPTURES / "mirror2-1MiB.pcap"), "-q"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "\x1b" not in r.stderr and "x\\x1b[31mred\\x0anext.pcap: no such file" in r.stderr


def test_printable_output_is_always_printable():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=500, deadline=None)
    @given(st.text(alphabet=st.characters(codec=None), max_size=40))
    def check(s):
        out = printable(s)
        assert out.isprintable()
        assert (out == s) == s.isprintable()
        if "\\" not in s:
            # Without the escapes, the printable characters in their order.
            assert re.sub(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})", "", out) == "".join(c for c in s if c.isprintable())

    check()
