"""`analyze --threads N`: workers take whole connections, one ordered stage does dedupe in
capture order, and the result is the one one pipeline gives: the same JSON apart from
`analysis` (timing, thread count) and the same evidence file, byte for byte.

The engine's own test (`parallel::tests`) compares every bundled and public capture; here
every generated scenario on every transport, with mirror copies, retransmissions,
reordering, loss, multichannel and compression, through the CLI as a user runs it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from smbwire import _core
from smbwire.cli import cli
from paths import CAPTURES, PUBLIC
from tshark_oracle import recorded_keys

TOPOLOGY = CAPTURES / "s2d-two-node.toml"
MiB = 1 << 20
SCENARIOS = [s["name"] for s in json.loads(_core.synth_scenarios())]

CASES = [
    ("tcp", {"mirror_dup": True, "retransmit": 0.02, "reorder": 0.02}),
    ("tcp", {"channels": 3, "io_size": 64 << 10, "dialect": "3.1.1", "compression": "chained"}),
    ("rocev2", {"channels": 2, "loss": 0.01}),
    ("iwarp", {"mirror_dup": True, "mpa_markers": True, "mpa_crc": True}),
    ("infiniband", {}),
]


def run(*args) -> dict:
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def analyse(tmp_path, captures, threads, *options):
    out, ev = tmp_path / f"r{threads}.json", tmp_path / f"e{threads}.jsonl"
    run("analyze", *captures, *options, "--threads", threads, "--json", out, "--evidence", ev, "-q")
    r = json.loads(out.read_text())
    return r, r.pop("analysis"), ev.read_bytes()


def assert_same_for_any_threads(tmp_path, captures, *options, counts=(2, 3)):
    one, a1, ev1 = analyse(tmp_path, captures, 1, *options)
    assert a1["threads"] == 1
    for n in counts:
        many, an, evn = analyse(tmp_path, captures, n, *options)
        assert an["threads"] == n
        diff = sorted(k for k in set(one) | set(many) if one.get(k) != many.get(k))
        assert not diff, {k: (one.get(k), many.get(k)) for k in diff[:3]}
        assert evn == ev1
    return one


@pytest.mark.parametrize("transport,opts", CASES, ids=[f"{t}-{i}" for i, (t, _) in enumerate(CASES)])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_scenario_gives_the_same_result_on_any_number_of_threads(tmp_path, scenario, transport, opts):
    spec = {"scenario": scenario, "bytes": 4 * MiB, "io_size": 256 << 10, "seed": 3, "transport": transport, **opts}
    cap = tmp_path / "s.pcap"
    _core.synth(json.dumps(spec), str(cap))
    r = assert_same_for_any_threads(tmp_path, [cap], "-t", TOPOLOGY, "-w", "0.002", "--top", "5")
    assert r["accounting"]["reconciled"]
    if scenario != "read-owner":
        assert r["totals"]["payload_bytes"] > 0


def test_merged_mirror_ports_and_a_topology_give_the_same_result(tmp_path):
    """Several public captures merged by time, and a bundled noisy capture with a topology."""
    smb = sorted(p for p in PUBLIC.glob("smb3*.pcap*") if "aes" not in p.name)
    assert len(smb) >= 5
    assert_same_for_any_threads(tmp_path, smb)
    noisy = CAPTURES / "nested4-1MiB-mirrordup-retx-reorder.pcap"
    r = assert_same_for_any_threads(tmp_path, [noisy], "-t", TOPOLOGY, counts=(2, 4))
    assert r["totals"]["dup_ratio"] == pytest.approx(2.0)


def test_threads_are_checked_and_keys_run_on_threads_too(tmp_path):
    """With --keys the workers share the sessions' preauth hashes (`smb2::keyshare`): the
    five encrypted public captures, merged, with the session keys alone (3.0 and 3.1.1
    derivations) give one pipeline's result on 2 and 3 threads. The engine's test
    (`parallel::tests::keys`) adds a multichannel session bound on another worker's channel."""
    r = CliRunner().invoke(cli, ["analyze", str(CAPTURES / "mirror2-1MiB.pcap"), "--threads", "0"])
    assert r.exit_code == 2 and "--threads" in r.output
    encrypted = recorded_keys(PUBLIC / "expected.json")
    assert len(encrypted) == 5
    keys = tmp_path / "keys.txt"
    keys.write_text("".join(f"{sid},{session_key}\n" for sid, session_key, *_ in encrypted.values()))
    r = assert_same_for_any_threads(tmp_path, [PUBLIC / f for f in encrypted], "--keys", keys)
    assert r["smb2"]["decrypted_messages"] == r["smb2"]["encrypted_messages"] > 0
    assert r["smb2"]["decrypt_failed"] == 0


def test_the_default_is_the_cpus_available(tmp_path):
    import os

    out = tmp_path / "r.json"
    run("analyze", CAPTURES / "mirror2-1MiB.pcap", "--json", out, "-q")
    assert json.loads(out.read_text())["analysis"]["threads"] == len(os.sched_getaffinity(0))


def test_captures_of_one_server_with_colliding_ids_give_the_same_result(tmp_path):
    """Two generated captures of the same server addresses, RoCEv2 and iWARP, starting at the
    same time with the same SessionIds, TreeIds and FileIds (independent runs analysed
    together): a worker knows only its connections' names and sessions; sends are named and
    sessions counted as one pipeline does (the ordered stage answers from every connection's)."""
    caps = []
    for scenario, transport in (("redirect4", "rocev2"), ("mirror2", "iwarp")):
        cap = tmp_path / f"{transport}.pcap"
        spec = {"scenario": scenario, "bytes": 4 * MiB, "io_size": 256 << 10, "seed": 3, "transport": transport}
        _core.synth(json.dumps(spec), str(cap))
        caps.append(cap)
    r = assert_same_for_any_threads(tmp_path, caps)
    assert r["smb2"]["sessions"] == 2
    named = [s for t in r["top_duplicates"] for s in t["sends"] if s["file_name"]]
    assert named, "some sends are named"


def damage(cap, offset_in_frame, every, first=0):
    """Adds 1 to one byte (`offset_in_frame` into the frame) of every `every`-th frame of a
    little-endian pcap, from frame `first` (0-based): a damaged address, as a bad cable or a
    hostile sender gives. Returns the frames damaged."""
    import struct

    b = bytearray(cap.read_bytes())
    pos, n, hit = 24, 0, 0
    while pos + 16 <= len(b):
        incl = struct.unpack_from("<I", b, pos + 8)[0]
        if n >= first and (n - first) % every == 0 and offset_in_frame < incl:
            b[pos + 16 + offset_in_frame] = (b[pos + 16 + offset_in_frame] + 1) & 0xFF
            hit += 1
        pos += 16 + incl
        n += 1
    cap.write_bytes(bytes(b))
    return hit


# Where a frame's source and destination addresses' last bytes are: RoCEv2 (Ethernet, IPv4),
# RoCEv1 (Ethernet, GRH: SGID, DGID), InfiniBand (ERF record, LRH: DLID, SLID).
ADDRESS_BYTES = {"rocev2": (14 + 15, 14 + 19), "rocev1": (14 + 8 + 15, 14 + 24 + 15), "infiniband": (16 + 7, 16 + 3)}


@pytest.mark.parametrize("transport", sorted(ADDRESS_BYTES))
def test_damaged_rdma_addresses_give_the_same_result_on_any_number_of_threads(tmp_path, transport):
    """RDMA packets whose source or destination address was damaged (found by a random-capture
    soak): a packet to a known queue pair number from another source belongs to another queue
    pair, and a CM reply answers only a request sent to its sender, as the workers (each
    holding the packets between one pair of addresses) see it; so one pipeline and several
    give the same result."""
    src, dst = ADDRESS_BYTES[transport]
    for k, (offset, every, first) in enumerate([(src, 41, 7), (dst, 53, 0), (dst, 1 << 30, 0)]):
        cap = tmp_path / f"d{k}.pcap"
        spec = {"scenario": "nested4", "bytes": 4 * MiB, "io_size": 256 << 10, "seed": 5 + k, "transport": transport, "channels": 2}
        _core.synth(json.dumps(spec), str(cap))
        assert damage(cap, offset, every, first) > 0
        r = assert_same_for_any_threads(tmp_path, [cap], "-t", TOPOLOGY)
        assert r["accounting"]["reconciled"]
        assert r["anomalies"], "the damage shows"


def test_two_sweeps_in_one_batch_close_what_each_closes(tmp_path):
    """Two sweeps of the window and idle flows in one batch of frames, and a worker with no
    frames between them (found by the random-capture soak): the ordered stage replays each
    sweep's closes at that sweep. Connection A (worker 1) holds 100 bytes out of order from
    t = 0; B (worker 2) has a frame at t = 2 s (the first sweep, which closes nothing) and
    holds 100 bytes out of order at t = 130 s, before the sweep after that frame closes A
    (idle 120 s): one pipeline holds 200 bytes then, and so do several. Before the fix the
    first sweep took A's close from the second, and two threads reported a peak of 100."""
    from scapy.all import IP, TCP, Ether, wrpcap  # type: ignore[import-untyped]

    client, server = "198.18.0.1", "198.18.0.2"

    def seg(t, sport, flags, seq, ack, payload=b"", to_server=True):
        s, d = (client, server) if to_server else (server, client)
        ports = dict(sport=sport, dport=445) if to_server else dict(sport=445, dport=sport)
        p = Ether() / IP(src=s, dst=d) / TCP(flags=flags, seq=seq, ack=ack, **ports) / payload
        p.time = 1_700_000_000 + t
        return p

    def open_with_hole(t, sport):
        return [
            seg(t, sport, "S", 1000, 0),
            seg(t + 1e-5, sport, "SA", 5000, 1001, to_server=False),
            seg(t + 2e-5, sport, "A", 1001, 5001),
        ]

    frames = open_with_hole(0, 40001) + [seg(3e-5, 40001, "PA", 1001 + 500, 5001, b"a" * 100)]
    frames += open_with_hole(1e-3, 40002) + [seg(2, 40002, "A", 1001, 5001)]
    frames += [seg(130, 40002, "PA", 1001 + 500, 5001, b"b" * 100)]
    cap = tmp_path / "sweeps.pcap"
    wrpcap(str(cap), frames)
    r = assert_same_for_any_threads(tmp_path, [cap])
    assert r["tcp"]["peak_buffered_bytes"] == 200


def test_connections_picked_up_again_after_a_clock_jump_name_their_sends_alike(tmp_path):
    """One frame of an SMB Direct (iWARP) capture stamped 11.7 years late (found by
    fuzz/differential.py): the sweep after it closes every connection, which the capture
    then picks up mid-stream. The first RDMA WRITE of such a connection is named when its
    transfer is registered, before its stream has noted its server; the SMB2 handler looked
    the names up again, found them, and a --threads worker journaled that second lookup,
    which the ordered stage gave the send in place of the first. The handler now looks names
    up only for data that follows inline, so every send has one lookup."""
    import struct

    cap = tmp_path / "jump.pcap"
    spec = {"scenario": "redirect4", "transport": "iwarp", "bytes": 2 * MiB, "io_size": 8192, "seed": 4}
    _core.synth(json.dumps(spec), str(cap))
    b = bytearray(cap.read_bytes())
    pos, records = 24, []
    while pos + 16 <= len(b):
        records.append(pos)
        pos += 16 + struct.unpack_from("<I", b, pos + 8)[0]
    at = records[int(len(records) * 0.3)]
    struct.pack_into("<I", b, at, struct.unpack_from("<I", b, at)[0] + (22 << 24))
    cap.write_bytes(bytes(b))
    r = assert_same_for_any_threads(tmp_path, [cap])
    assert r["anomalies"]["capture.time_went_backwards"] > 1000
    assert r["accounting"]["reconciled"]
