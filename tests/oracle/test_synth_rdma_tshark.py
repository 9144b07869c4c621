"""tshark is the oracle for the SMB Direct captures (RoCEv2 and iWARP) the scenario generator
writes: every frame dissects without a malformed or warning item, iWARP FPDU CRCs are good,
and tshark's own counts agree with the generator's Truth: SMB Direct negotiate and data
messages (and their DataLength sum), SMB2 WRITE requests / READ responses and the bytes they
move by RDMA (RemainingBytes, DataRemaining, buffer descriptors), the IB BTH / RDMAP opcode
histograms, RDMA Read sizes, the RDMA CM messages and Send with Invalidate.

tshark 4.0 shows the RoCEv2 ICRC but does not check it; the generator's ICRC is checked
against a real capture in the Rust tests (`synth::roce`). SMB2 WRITEs over SMB Direct
show as "Write Request Len:0" with smb2.channel = 0x1 (or 0x2), smb2.remaining_bytes = the
byte count and smb2.buffer_descriptor.{offset,token,length} per descriptor."""

from __future__ import annotations

import subprocess
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

import synth_oracle as oracle
from synth_oracle import CM_FIELDS, ints

pytestmark = [pytest.mark.tshark, pytest.mark.usefixtures("tshark_required")]

MiB = 1 << 20
W = 2 * MiB
SCENARIOS = ["mirror2", "nested4", "six", "redirect4", "read-nonowner", "read-owner"]
VARIANTS = {
    "rocev2-mtu4096": {"transport": "rocev2", "mtu": 4096},
    "rocev2-mtu1024": {"transport": "rocev2", "mtu": 1024},
    "iwarp-crc": {"transport": "iwarp", "mpa_crc": True},
    "iwarp-crc-markers": {"transport": "iwarp", "mpa_crc": True, "mpa_markers": True},
}
BASE_OPTS = ["--disable-protocol", "artemis", "-o", "tcp.reassemble_out_of_order:TRUE"]
fields = partial(oracle.fields, opts=BASE_OPTS)
values = partial(oracle.values, opts=BASE_OPTS)
problems = partial(oracle.problems, opts=BASE_OPTS)


def crc_verdicts(path: Path) -> Counter:
    out = subprocess.run([oracle.TSHARK, "-n", "-r", str(path), *BASE_OPTS, "-V"], capture_output=True, text=True,
                         check=True).stdout
    return Counter("good" if "(Good CRC32)" in line else "bad" for line in out.splitlines() if "CRC check:" in line)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("synth-rdma")


def check_counts(path: Path, truth: dict) -> None:
    rdma = truth["rdma"]
    assert problems(path) == []
    oracle.check_smbd_smb2_counts(path, truth, BASE_OPTS)
    # RDMA opcodes and RDMA Read sizes.
    if rdma["transport"] == "rocev2":
        hist = Counter(values(path, "infiniband.bth.opcode"))
        read_sizes = ints(values(path, "infiniband.reth.dmalen"))
        # RETH is on Read Requests and on RDMA Write FIRST/ONLY: count the Read Requests' ones.
        req = fields(path, "infiniband.bth.opcode == 12", ["infiniband.reth.dmalen"])
        assert sum(int(r[0]) for r in req) == rdma["rdma_read_bytes"]
        assert len(read_sizes) >= len(req)
        cm = {name: len(values(path, f)) for name, f in CM_FIELDS.items()}
        assert cm == rdma["cm"]
        # tshark lists the IETH twice per packet (header item and value): count packets.
        assert len(fields(path, "infiniband.ieth", ["frame.number"])) == rdma["send_with_invalidate"]
    else:
        hist = Counter(str(int(v, 16)) for v in values(path, "iwarp_rdma.opcode"))
        assert sum(ints(values(path, "iwarp_rdma.rdmardsz"))) == rdma["rdma_read_bytes"]
        inval = [v for v in values(path, "iwarp_rdma.inval_stag") if int(v, 16) != 0]
        assert len(inval) == rdma["send_with_invalidate"]
        verdicts = crc_verdicts(path)
        fpdus = sum(rdma["opcodes"].values())
        if rdma["mpa_crc"]:
            assert verdicts == Counter({"good": fpdus})
        assert len(values(path, "iwarp_mpa.ulpdulength")) == fpdus
    assert dict(hist) == rdma["opcodes"]


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_tshark_dissects_and_counts_agree(synth, workdir, scenario, variant):
    spec = {"scenario": scenario, "bytes": W, "io_size": MiB, "seed": 5, **VARIANTS[variant]}
    path = workdir / f"{scenario}-{variant}.pcap"
    truth = synth(spec, path)
    check_counts(path, truth)
    # The published table, independent of the generator's arithmetic.
    table = {"mirror2": 1, "nested4": 2, "six": 3, "redirect4": 3, "read-nonowner": 1, "read-owner": 0}[scenario]
    moved = truth["rdma"]["rdma_read_bytes"] + truth["rdma"]["rdma_write_bytes"]
    assert moved == table * W


@pytest.mark.parametrize("transport", ["rocev2", "iwarp"])
def test_fragments_invalidate_descriptors_multichannel(synth, workdir, transport):
    spec = {"scenario": "redirect4", "bytes": W, "seed": 2, "dialect": "3.1.1", "transport": transport,
            "max_send_size": 128, "send_with_invalidate": True, "descriptors": 2, "qps": 2, "mtu": 1024}
    path = workdir / f"frag-{transport}.pcap"
    truth = synth(spec, path)
    assert truth["rdma"]["smbd_fragmented_messages"] > 0
    assert truth["rdma"]["send_with_invalidate"] == truth["smb2"]["write_requests"]
    check_counts(path, truth)
    descs = fields(path, "smb2.cmd == 9 && smb2.flags.response == 0", ["smb2.buffer_descriptor.token"])
    assert all(len(set(d[0].split("|"))) == 1 and len(d[0].split("|")) == 2 for d in descs)


def test_iwarp_without_crc_or_private_data(synth, workdir):
    spec = {"scenario": "read-nonowner", "bytes": W, "seed": 4, "transport": "iwarp", "mpa_crc": False,
            "mpa_private_data": False}
    path = workdir / "iwarp-nocrc.pcap"
    truth = synth(spec, path)
    check_counts(path, truth)
    assert ints(values(path, "iwarp_mpa.pdlength")) == [0, 0]
    assert crc_verdicts(path)["good"] == 0


def test_the_oracle_notices_a_bad_mpa_crc(synth, workdir):
    path = workdir / "crc.pcap"
    synth({"scenario": "mirror2", "bytes": MiB, "seed": 1, "transport": "iwarp"}, path)
    data = bytearray(path.read_bytes())
    i = data.rfind(b"\xfeSMB")  # inside an FPDU near the end
    data[i + 20] ^= 0x01
    bad = workdir / "crc-bad.pcap"
    bad.write_bytes(data)
    assert crc_verdicts(bad)["bad"] == 1


# Lost-and-resent RoCE packets (same PSN, later), mirror-port copies, and for iWARP TCP
# retransmissions, reordering and lost-then-resent segments: still no malformed frame and no
# warning outside tshark's "sequence" group (which is where retransmissions belong).
NOISY = {
    "rocev2": {"transport": "rocev2", "mirror_dup": True, "loss": 0.01},
    "rocev2-mtu1024": {"transport": "rocev2", "mtu": 1024, "mirror_dup": True, "loss": 0.02},
    "iwarp-crc": {"transport": "iwarp", "mpa_crc": True, "mirror_dup": True, "retransmit": 0.01,
                  "reorder": 0.01, "loss": 0.01},
}


@pytest.mark.parametrize("variant", list(NOISY))
def test_noisy_captures_dissect_cleanly(synth, workdir, variant):
    quiet = {k: v for k, v in NOISY[variant].items() if k not in ("mirror_dup", "loss", "retransmit", "reorder")}
    clean = synth({"scenario": "redirect4", "bytes": W, "io_size": MiB, "seed": 5, **quiet},
                  workdir / f"quiet-{variant}.pcap")
    path = workdir / f"noisy-{variant}.pcap"
    truth = synth({"scenario": "redirect4", "bytes": W, "io_size": MiB, "seed": 5, **NOISY[variant]}, path)
    assert truth["rdma"]["lost_packets"] > 0
    frames = len(fields(path, "", ["frame.number"]))
    assert frames > 2 * len(fields(workdir / f"quiet-{variant}.pcap", "", ["frame.number"])) - 1, "mirror copies"
    assert clean["smb2"] == truth["smb2"]
    assert problems(path) == []


@pytest.mark.parametrize("invalidate", [False, True], ids=["send", "send-invalidate"])
def test_iwarp_solicited_event_sends(synth, workdir, invalidate):
    """With the opt-in `solicited_event`, the iWARP Sends are RDMAP Send with Solicited Event
    (opcode 5) and, with Send with Invalidate, Send with Solicited Event and Invalidate
    (opcode 6): tshark decodes them without a malformed frame, carries the SMB Direct and SMB2
    counts as before, and its opcode histogram is the generator's, with 5/6 in place of 3/4."""
    base = {"scenario": "redirect4", "bytes": W, "io_size": MiB, "seed": 6, "transport": "iwarp",
            "max_send_size": 512, "send_with_invalidate": invalidate}
    plain = synth(base, workdir / f"se-off-{invalidate}.pcap")
    path = workdir / f"se-on-{invalidate}.pcap"
    truth = synth({**base, "solicited_event": True}, path)
    check_counts(path, truth)  # includes: tshark's opcode histogram == truth["rdma"]["opcodes"]
    ops, before = truth["rdma"]["opcodes"], plain["rdma"]["opcodes"]
    assert "3" not in ops and "4" not in ops and "5" not in before and "6" not in before
    assert ops["5"] == before["3"] > 0
    assert ops.get("6", 0) == before.get("4", 0)
    assert (ops.get("6", 0) > 0) == invalidate
    hist = Counter(int(v, 16) for v in values(path, "iwarp_rdma.opcode"))
    assert hist[5] == ops["5"] and hist[6] == ops.get("6", 0)
    sends = truth["rdma"]
    assert sends["solicited_events"] == (sends["smbd_negotiate_requests"] + sends["smbd_negotiate_responses"]
                                         + sends["smbd_data_messages"])
    # The rest of the capture is what it was without the option.
    assert {k: v for k, v in truth.items() if k != "rdma"} == {k: v for k, v in plain.items() if k != "rdma"}


def test_roce_solicited_event_sets_the_bth_se_bit(synth, workdir):
    """RoCE has no Solicited Event opcode: the option sets the BTH SE bit on the last (or only)
    packet of each Send (IBTA §9.2.1). tshark sees it there and nowhere else; opcodes unchanged."""
    base = {"scenario": "redirect4", "bytes": W, "io_size": MiB, "seed": 6, "transport": "rocev2", "mtu": 1024,
            "max_send_size": 2048, "send_with_invalidate": True}
    plain = synth(base, workdir / "roce-se-off.pcap")
    path = workdir / "roce-se-on.pcap"
    truth = synth({**base, "solicited_event": True}, path)
    check_counts(path, truth)
    assert truth["rdma"]["opcodes"] == plain["rdma"]["opcodes"]
    rows = fields(path, "infiniband.bth.se == 1", ["infiniband.bth.opcode"])
    assert Counter(int(r[0]) for r in rows).keys() <= {2, 4, 0x16, 0x17}
    assert len(rows) == truth["rdma"]["solicited_events"] > 0
    assert fields(workdir / "roce-se-off.pcap", "infiniband.bth.se == 1", ["frame.number"]) == []
