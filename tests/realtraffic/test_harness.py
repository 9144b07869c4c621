"""The lab itself, checked with tshark and /proc (no smbwire involved): the span capture holds
exactly the SMB2 traffic the clients generated, each frame once, and the lab leaves nothing
behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .capture_check import frame_health, smb2_io
from .netlab import ADDRESSES, LAB_PREFIX, SEGMENTATION_OFFLOADS, Lab, LabError, lab_namespaces, pid_alive
from .workloads import ALL, CHUNK

pytestmark = pytest.mark.netns

NAMES = sorted(ALL)


@pytest.mark.parametrize("name", NAMES)
def test_capture_holds_what_the_clients_sent(workload_runs, name):
    run = workload_runs(name)
    wl = run.workload
    io = smb2_io(run.capture.path)
    # What each client run reports it did is what the workload describes ...
    for r, summary in zip(wl.runs, run.summaries):
        writes = [op for op in r.ops if op["op"] == "write"]
        reads = [op for op in r.ops if op["op"] == "read"]
        assert summary["dialect"] == "0x0311"
        assert (summary["writes"], summary["write_bytes"]) == (len(writes), sum(op["length"] for op in writes))
        assert (summary["reads"], summary["read_bytes"]) == (len(reads), sum(op["length"] for op in reads))
    # ... and tshark finds exactly that on the span, per direction.
    expected_w = wl.write_totals()
    expected_r = wl.read_totals()
    for a in ("n1", "n2"):
        for b in ("n1", "n2"):
            if a == b:
                continue
            pair = io.get((ADDRESSES[a], ADDRESSES[b]))
            got_w = (pair.write_requests, pair.write_bytes) if pair else (0, 0)
            assert got_w == expected_w.get((a, b), (0, 0)), f"WRITEs {a}->{b} in {run.capture.path}"
            # READ responses flow server -> client: (b, a) is (client, server).
            got_r = (pair.read_responses, pair.read_bytes) if pair else (0, 0)
            assert got_r == expected_r.get((b, a), (0, 0)), f"READ responses {a}->{b} in {run.capture.path}"


@pytest.mark.parametrize("name", NAMES)
def test_span_sees_every_frame_once(workload_runs, name):
    """Ingress mirroring on every bridge port: each frame once, as a switch would copy it."""
    run = workload_runs(name)
    health = frame_health(run.capture.path)
    # shown when an assertion below fails; backlog drops (any frame on the machine) name the
    # likeliest cause of a frame missing from the span
    print(f"capture {run.capture.path}: {health}, kernel backlog drops {run.capture.backlog_drops}")
    assert run.capture.packets_dropped == 0
    assert run.capture.packets_captured == health.frames
    # Every frame the span port handed to the capture is in the file (none left unread when
    # the capture stopped).
    assert run.capture.packets_received == run.capture.packets_captured
    assert health.tcp_frames > 1000  # 4+ MiB of SMB payload in MTU-sized segments
    assert health.duplicate_frames == 0
    # Retransmissions are real (e.g. a tail-loss probe when a node is slow to ACK) and both
    # copies were on the wire, so they are not asserted away; a frame the span missed is.
    assert health.lost_segments == 0
    assert health.bad_checksums == 0
    assert health.max_frame_len <= 1514  # offloads off: no GSO super-frames on the span
    assert health.non_lab_frames == 0


def test_egress_mirroring_would_duplicate_every_frame(workload_runs):
    """Why only ingress is mirrored: adding egress hooks puts every unicast frame on the span
    twice (and the duplicate check above would see it)."""
    run = workload_runs("distinct+dupmirror")
    health = frame_health(run.capture.path)
    assert run.capture.packets_dropped == 0
    assert health.lost_segments == 0
    assert health.tcp_frames > 0
    assert health.duplicate_frames * 2 == health.tcp_frames
    io = smb2_io(run.capture.path)[(ADDRESSES["n1"], ADDRESSES["n2"])]
    # tshark takes the second copy of each segment for a retransmission and dissects it once.
    assert (io.write_requests, io.write_bytes) == (64, 4 * 1024 * 1024)


def test_reads_return_the_placed_file(workload_runs):
    run = workload_runs("reads")
    assert run.summaries[0]["read_sha256"] == run.put_sha256


@pytest.mark.parametrize("name", NAMES)
def test_workload_lab_was_torn_down(workload_runs, name):
    run = workload_runs(name)
    assert run.lab_namespaces, "the run recorded its namespaces"
    left = set(lab_namespaces()) & set(run.lab_namespaces)
    assert not left
    assert [p for p in run.lab_pids if pid_alive(p)] == []


def _lab_state(lab: Lab) -> tuple[list[str], list[int], Path]:
    pids = sorted({p for ns in lab.namespaces for p in Lab._netns_pids(ns)} | set(lab.pids))
    return list(lab.namespaces), pids, lab.tmp


def test_teardown_leaves_nothing(tmp_path):
    with Lab(client=True, capture_dir=tmp_path) as lab:
        # A client namespace c1 writing to n1 leaves an smbd connection child behind.
        ops = [{"op": "write", "file": "c.bin", "offset": i * CHUNK, "length": CHUNK, "data_seed": f"td/{i}"}
               for i in range(4)]
        summary = lab.run_client("c1", "n1", ops)
        namespaces, pids, tmp = _lab_state(lab)
        cap = lab.stop_capture()
    assert summary["writes"] == 4
    io = smb2_io(cap.path)
    assert (io[(ADDRESSES["c1"], ADDRESSES["n1"])].write_requests,
            io[(ADDRESSES["c1"], ADDRESSES["n1"])].write_bytes) == (4, 4 * CHUNK)
    assert sorted(n[len(lab.prefix):] for n in namespaces) == ["c1", "mon", "n1", "n2", "sw"]
    assert len(pids) >= 3  # two smbd parents and tcpdump, at least
    assert not set(lab_namespaces()) & set(namespaces)
    assert [p for p in pids if pid_alive(p)] == []
    assert not tmp.exists()
    assert cap.path.exists()  # the capture lives in the caller's dir and survives


def test_teardown_after_failure(tmp_path):
    with pytest.raises(LabError):
        with Lab(capture_dir=tmp_path) as lab:
            namespaces, pids, tmp = _lab_state(lab)
            # A READ of a file that does not exist makes the client fail inside the lab.
            lab.run_client("n1", "n2", [{"op": "read", "file": "missing.bin", "offset": 0, "length": 4096}])
    assert not set(lab_namespaces()) & set(namespaces)
    assert [p for p in pids if pid_alive(p)] == []
    assert not tmp.exists()


def test_lab_names_are_per_run():
    with Lab(capture=False) as a, Lab(capture=False) as b:
        assert a.prefix != b.prefix
        assert a.prefix.startswith(LAB_PREFIX) and LAB_PREFIX == f"smbw-{os.getpid()}-"
        assert not set(a.namespaces) & set(b.namespaces)
        # Two labs at once: same addresses, separate segments, both serve.
        for lab in (a, b):
            s = lab.run_client("n1", "n2", [{"op": "write", "file": "x.bin", "offset": 0, "length": 4096,
                                             "data_hex_pattern": "5a"}])
            assert s["write_bytes"] == 4096


def test_checksum_zero_has_two_forms():
    """0x0000 and 0xffff are the same one's complement zero (RFC 1624 §3): a segment whose
    checksum is zero, sent as 0xffff, is good (tshark 4.0 says bad); any other mismatch is bad."""
    from realtraffic.capture_check import _ones_complement_zero

    assert _ones_complement_zero("0xffff", "0x0000") and _ones_complement_zero("0x0000", "0xffff")
    assert not _ones_complement_zero("0x1234", "0x0000")
    assert not _ones_complement_zero("0xffff", "0xfffe")
    assert not _ones_complement_zero("", "0x0000")


def test_span_port_has_no_segmentation_offload():
    """libpcap sizes tcpdump's ring slots for 64 KiB frames on a device with TSO/GSO/GRO on
    (about 2,000 frames in the 128 MiB ring instead of 80,000): the capture port has them off."""
    with Lab(capture=False) as lab:
        assert lab.ethtool(lab.mon, "span1", SEGMENTATION_OFFLOADS) == [0, 0, 0]
