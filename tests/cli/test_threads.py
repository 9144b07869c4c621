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


def test_threads_are_checked_and_keys_run_on_one_pipeline(tmp_path):
    r = CliRunner().invoke(cli, ["analyze", str(CAPTURES / "mirror2-1MiB.pcap"), "--threads", "0"])
    assert r.exit_code == 2 and "--threads" in r.output
    keys = tmp_path / "keys.txt"
    keys.write_text("0x0000000000000001,00112233445566778899aabbccddeeff\n")
    out = tmp_path / "r.json"
    run("analyze", CAPTURES / "mirror2-1MiB.pcap", "--threads", "3", "--keys", keys, "--json", out, "-q")
    # Keys derive from a session's first channel, which another worker may hold.
    assert json.loads(out.read_text())["analysis"]["threads"] == 1


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
