"""The live view (`smbwire.tui`) rendered into fixed-size consoles: 80x24 and 200x50, with no
traffic, with a normal snapshot and with a long list of edges. Nothing may crash, the key
figures must be visible, and nothing may overflow the screen in either direction."""

from __future__ import annotations

import io

import pytest
from rich.cells import cell_len
from rich.console import Console

from smbwire.tui import build_live_view, live_lines, status_line

SIZES = [(80, 24), (200, 50)]
CLASSES = ["redirection", "replication", "redirected-read", "client"]


def edge(src, dst, cls, payload, unique):
    return {"src": src, "dst": dst, "class": cls, "payload_bytes": payload, "unique_bytes": unique,
            "nontrivial_bytes": payload, "sends": payload // 65536, "trivial_bytes": 0,
            "per_copy_duplicate_bytes": payload - unique, "repeated_content_bytes": 0,
            "dup_ratio": payload / unique if unique else None}


def snapshot(edges, samples=120, backend="ebpf", why=None, dups=3):
    rates = [{"t": 1.7e9 + i, "seconds": 1.0, "wire_bytes": 5e7 + i * 1e5, "packets": 4000.0,
              "classes": {"client": 1e6 * (i % 7), "redirection": 2e6, "replication": 3e7 if i % 2 else 0.0,
                          "redirected-read": 0.0}} for i in range(samples)]
    return {
        "schema": "smbwire/1", "snapshot": True, "window_seconds": 60.0,
        "edges": edges,
        "totals": {"dup_ratio": 2.5, "amplification": 3.25},
        "top_duplicates": [{"digest": "ab" * 32, "size": 65536, "sends_total": 3, "duplicate_bytes": 131072,
                            "sends": [{"src_node": "n1", "dst_node": "n2", "file_name": f"copy{j}.bin"}
                                      for j in range(3)]} for _ in range(dups)],
        "tcp": {"gaps": 2, "gap_bytes": 1448},
        "accounting": {"categories": {"smb_encrypted": 4096, "smb_payload": 10 ** 9}},
        "live": {"iface": "span1", "backend": backend, "fallback_reason": why, "uptime_seconds": 125.0,
                 "stats": {"kernel_drops": 0, "ring_drops": 17, "copy_errors": 0, "packets_matched": 123456,
                           "bytes_matched": 2 * 10 ** 9},
                 "rates": {"classes": CLASSES, "samples": rates}, "write": None, "errors": []},
    }


def render(snap, width, height) -> str:
    con = Console(width=width, height=height, file=io.StringIO(), record=True, force_terminal=True,
                  color_system="truecolor")
    con.print(build_live_view(snap, width, height))
    return con.export_text()


def check_fits(text: str, width: int, height: int) -> list[str]:
    lines = text.rstrip("\n").split("\n")
    assert len(lines) <= height, f"{len(lines)} lines > {height}"
    for line in lines:
        assert cell_len(line) <= width, f"overflow ({cell_len(line)} > {width}): {line!r}"
    return lines


@pytest.mark.parametrize("width,height", SIZES)
def test_no_traffic(width, height):
    snap = snapshot([], samples=0, dups=0)
    snap["totals"] = {"dup_ratio": 1.0, "amplification": 1.0}
    text = render(snap, width, height)
    check_fits(text, width, height)
    assert "no SMB payload seen yet" in text
    assert "Capture health" in text and "kernel drops 0" in text
    assert "span1" in text and "ebpf" in text


@pytest.mark.parametrize("width,height", SIZES)
def test_before_the_first_snapshot(width, height):
    text = render(None, width, height)
    check_fits(text, width, height)
    assert "smbwire live" in text and "Capture health" in text


@pytest.mark.parametrize("width,height", SIZES)
def test_key_figures_visible(width, height):
    snap = snapshot([edge("n1", "n2", "replication", 3 * 4 << 20, 4 << 20),
                     edge("n1", "n2", "redirection", 4 << 20, 4 << 20),
                     edge("n2", "n1", "replication", 2 * 4 << 20, 4 << 20)],
                    backend="af-packet", why="AF_PACKET forced")
    text = render(snap, width, height)
    check_fits(text, width, height)
    assert "n1 → n2" in text and "n2 → n1" in text
    assert "3.00" in text and "2.00" in text  # ratios
    assert "ring drops 17" in text and "LOSS" in text
    assert "gaps 2" in text and "not analysed 4.00 KiB" in text
    assert "eBPF not used: AF_PACKET forced" in text
    for label in ("client I/O", "redirection", "replication"):
        assert label in text
    assert "28.61 MiB/s" in text  # replication peak (3e7 B/s)
    if height >= 40:
        assert "Top duplicated payloads" in text and "copy0.bin" in text


@pytest.mark.parametrize("width,height", SIZES)
@pytest.mark.parametrize("count", [40, 60])
def test_long_edge_lists_do_not_overflow(width, height, count):
    edges = [edge(f"node-with-a-rather-long-name-{i:02d}", f"peer-{i:02d}.cluster.example", CLASSES[i % 4],
                  (100 - i) << 20, (70 - i) << 20) for i in range(count)]
    text = render(snapshot(edges), width, height)
    lines = check_fits(text, width, height)
    shown = [l for l in lines if "→ peer-" in l]
    assert len(shown) >= 2
    if len(shown) < count:
        assert f"{count - len(shown)} more edge rows" in text
    # Largest first, both ends recognisable.
    assert "node-with" in shown[0] and "-00" in shown[0] and "peer-0" in shown[0]
    assert "Capture health" in lines[-1] or "Capture health" in lines[-2]


@pytest.mark.parametrize("width,height", [(20, 4), (40, 10), (300, 100)])
def test_odd_sizes_and_junk(width, height):
    for snap in ({}, {"edges": "junk", "live": {"rates": {"samples": [None, 3]}}}, snapshot([edge("a", "b", 7, 1, 0)])):
        check_fits(render(snap, width, height), max(width, 20), max(height, 4))


def test_live_lines_respect_height_exactly():
    edges = [edge(f"a{i}", f"b{i}", "client", 1000 + i, 1000) for i in range(40)]
    for h in range(4, 60):
        assert len(live_lines(snapshot(edges), 80, h)) <= h


def test_status_line_is_one_line_with_key_figures():
    snap = snapshot([edge("n1", "n2", "replication", 3 << 20, 1 << 20)])
    line = status_line(snap, now=0)
    assert "\n" not in line
    assert "backend=ebpf" in line and "n1->n2:replication=3.00" in line
    assert "ring_drops=17" in line and "replication=" in line and "gap_bytes=1448" in line
    assert "\n" not in status_line(None)


def history(n=300):
    """`n` one-second samples: a replication burst in the oldest 10 s only, client I/O in the
    newest 10 s only (the default history is 300 s: "the last minutes")."""
    return [{"t": 1.7e9 + i, "seconds": 1.0, "wire_bytes": 1e6, "packets": 10.0,
             "classes": {"client": 4e6 if i >= n - 10 else 0.0, "redirection": 0.0,
                         "replication": 8e6 if i < 10 else 0.0, "redirected-read": 0.0}}
            for i in range(n)]


def spark_of(lines, label, width):
    row = next(l for l in lines if l.startswith(label))
    spark_w = max(width - 16 - 22 - 2, 8)
    return row[16:16 + spark_w]


@pytest.mark.parametrize("width,height,per,span", [(80, 24, 8, "last 5 min 0 s, 8 s per column"),
                                                   (200, 50, 2, "last 5 min 0 s, 2 s per column")])
def test_history_graph_spans_the_whole_history(width, height, per, span):
    snap = snapshot([edge("n1", "n2", "replication", 3 << 20, 1 << 20)])
    snap["live"]["rates"]["samples"] = history()
    lines = check_fits(render(snap, width, height), width, height)
    title = next(l for l in lines if l.startswith("Payload bytes/s per class"))
    assert span in title, title
    rep, client = spark_of(lines, "replication", width), spark_of(lines, "client I/O", width)
    cols = -(-300 // per)
    assert len(rep) == max(width - 40, 8) and rep.strip() and client.strip()
    # The burst five minutes ago is at the left end of the graph, the recent client I/O at
    # the right end; nothing else.
    start = len(rep) - cols
    assert rep[start] != " " and rep[start + 10 // per + 1:].strip() == "", rep
    assert client[-1] != " " and client[:len(client) - 10 // per - 1].strip() == "", client
    # Now and peak stay one-second figures.
    assert "7.63 MiB" in next(l for l in lines if l.startswith("replication"))  # peak 8e6 B/s
    assert "3.81 MiB/s" in next(l for l in lines if l.startswith("client I/O"))  # now 4e6 B/s


@pytest.mark.parametrize("n,width", [(0, 40), (1, 40), (39, 40), (40, 40), (41, 40), (300, 40), (300, 160), (7, 3)])
def test_downsample_keeps_every_byte_and_fits(n, width):
    from smbwire.tui import downsample

    samples = history(n)
    cols, per = downsample(samples, width)
    assert len(cols) <= width
    assert per == max(1, -(-n // width))
    assert sum(c["seconds"] for c in cols) == pytest.approx(n) if n <= width * per else True
    for cls in ("client", "replication"):
        want = sum(s["classes"][cls] * s["seconds"] for s in samples)
        assert sum(c["classes"].get(cls, 0.0) * c["seconds"] for c in cols) == pytest.approx(want)


def test_health_counts_rdma_gaps_and_rdma_not_analysed():
    snap = snapshot([edge("n1", "n2", "replication", 3 << 20, 1 << 20)])
    snap["live"]["stats"]["ring_drops"] = 0
    snap["tcp"] = {"gaps": 1, "gap_bytes": 1000}
    snap["rdma"] = {"gaps": 4}
    snap["accounting"]["categories"] = {"smb_payload": 10 ** 9, "rdma_unlinked": 1 << 20, "rdma_unparsed": 1 << 20,
                                        "rdma_other_ulp": 1 << 20, "truncated_tail": 1 << 20, "rdma_payload": 1 << 30}
    for width, height in SIZES:
        text = render(snap, width, height)
        check_fits(text, width, height)
        assert "not analysed 4.00 MiB" in text, text
        assert "gaps 5 (1000 B TCP, 4 RDMA PSN)" in text, text
        assert "LOSS" in text
    snap["tcp"] = {"gaps": 0, "gap_bytes": 0}
    text = render(snap, 200, 50)
    assert "LOSS" in text and "gaps 4 (0 B TCP, 4 RDMA PSN)" in text  # RDMA gaps alone are loss
    snap["rdma"] = {"gaps": 0}
    assert "OK" in render(snap, 200, 50)
    line = status_line(snap, now=0)
    assert "rdma_gaps=0" in line and f"not_analysed={4 << 20}" in line


@pytest.mark.parametrize("width,height", SIZES)
def test_undecided_writes_are_shown_as_pending(width, height):
    # 6 s into a redirect run the view showed "n1 -> n2 replication 7.00 MiB" as decided; the
    # engine now says which of those bytes may still become redirection (`pending_bytes`).
    e = edge("n1", "n2", "replication", 7 << 20, 7 << 20)
    e["pending_bytes"] = 5 << 20
    decided = edge("n2", "n1", "redirection", 2 << 20, 2 << 20)
    text = render(snapshot([e, decided]), width, height)
    check_fits(text, width, height)
    assert "Pending" in text and "5.00 MiB" in text
    row = next(line for line in text.splitlines() if "n1 → n2" in line)
    assert "7.00 MiB" in row and "5.00 MiB" in row
    assert "pending: WRITEs still in the window" in text
    # Nothing pending: no column.
    assert "Pending" not in render(snapshot([decided]), width, height)


def test_top_payloads_show_what_tells_them_apart():
    snap = snapshot([edge("n1", "n2", "replication", 3 << 20, 1 << 20)], dups=3)
    for i, d in enumerate(snap["top_duplicates"]):
        for s in d["sends"]:
            s.update(offset=i * (1 << 20), frames=[100 * i + 1, 100 * i + 9], file_name="vdisk.bin")
    text = render(snap, 200, 50)
    rows = [line for line in text.splitlines() if "vdisk.bin" in line]
    assert len(rows) == 3 and len(set(rows)) == 3, rows
    assert "@1,048,576" in text and "frame 109" in text


def test_health_and_status_line_show_the_analysed_fraction():
    snap = snapshot([edge("n1", "n2", "replication", 3 << 20, 1 << 20)])
    snap["live"]["analysed"] = {"storage_bytes": 2 * 10 ** 9, "delivered_bytes": 19 * 10 ** 8,
                                "not_analysed_bytes": 0, "fraction": 0.95}
    text = render(snap, 200, 50)
    assert "analysed 95.0%" in text
    assert "analysed=0.9500" in status_line(snap, now=0)
    # Older snapshots without the section render as before.
    del snap["live"]["analysed"]
    assert "analysed=" not in status_line(snap, now=0).replace("not_analysed=", "")


@pytest.mark.parametrize("width,height", SIZES)
def test_a_remote_mirror_session_is_named_in_the_header(width, height):
    """Frames that came through an ERSPAN session (the engine's `tunnels`, in every snapshot)
    are named under the header, within the terminal; a local port's view says nothing of it."""
    snap = snapshot([edge("n1", "n2", "replication", 3 * 4 << 20, 4 << 20)])
    text = render(snap, width, height)
    assert "tunnelled" not in text
    snap["tunnels"] = {"erspan2": {"frames": 123456, "bytes": 50 * 123456}}
    text = render(snap, width, height)
    check_fits(text, width, height)
    assert "tunnelled: 123,456 frames in" in " ".join(text.split())
