"""fuzz/differential.py: random captures, damaged at random, analysed on 1, 2 and 3 threads,
through a ledger and as `--dask`'s shard tasks and merge; a difference, an unreconciled run or
a failed command is a finding, kept with its captures, and the exit status says so."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

from paths import ROOT

SCRIPT = ROOT / "fuzz" / "differential.py"


def load():
    spec = importlib.util.spec_from_file_location("differential", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_short_run_finds_nothing(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "--seed", "5", "--cases", "12", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1].startswith("12 cases: 0 findings (")
    assert not list(tmp_path.iterdir())


def test_a_short_truth_only_run_finds_nothing(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "--truth-only", "--seed", "5", "--cases", "20",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("20 cases checked against the generator's truth, ") and last.endswith(" of them also cut in two: 0 findings")
    assert int(last.split(", ")[1].split()[0]) > 0
    assert not list(tmp_path.iterdir())


def test_a_truth_only_case_that_differs_is_kept(tmp_path, monkeypatch):
    d = load()
    real = d.result

    def wrong(path):
        got = real(path)
        got["totals"]["payload_bytes"] += 1
        return got

    monkeypatch.setattr(d, "result", wrong)
    done, findings, _ = d.run_truth(seed=3, cases=2, seconds=None, out=tmp_path)
    assert done == 2 and len(findings) == 2 and "totals.payload_bytes" in findings[0]
    case = json.loads((tmp_path / "finding-1" / "case.json").read_text())
    assert case["inputs"][0]["synth"].get("loss_mode") != "drop"
    assert case["found"][0]["truth"][0].startswith("totals.payload_bytes")
    assert (tmp_path / "finding-1" / "c.pcap").stat().st_size > 0


def test_a_capture_cut_in_two_loses_only_the_messages_the_cut_splits(tmp_path, monkeypatch):
    """The head and the tail of a generated capture cut at a record find together every SMB2
    WRITE of the whole but those the cut splits, and no send the whole does not have; a tail
    that lost more (as one starting at data that read as a NetBIOS session request did, before
    7692809) is a finding, and so is a send the whole capture does not have. Records left out
    (frames a mirror port dropped) find no send the whole does not have."""
    from smbwire import _core
    from smbwire.topology import Topology

    d = load()
    spec = {"scenario": "redirect4", "transport": "tcp", "bytes": 2 << 20, "io_size": 65536, "seed": 5, "channels": 2}
    assert d.cuttable(spec) and not d.cuttable({**spec, "reorder": 0.01})
    cap = tmp_path / "c.pcap"
    truth = json.loads(_core.synth(json.dumps(spec), str(cap)))
    (tmp_path / "truth.toml").write_text(Topology.from_config(truth["topology"], source="t").to_toml())
    n = len(d.records(cap.read_bytes()))
    for k in (1, n // 3, n // 2, n - 1):
        assert d.cut_check(tmp_path, cap, k) == [], k
    assert d.drop_check(tmp_path, cap, [5, n // 2, n - 3]) == []
    real_result, real_keys = d.result, d.send_keys

    def lost(path):
        # Head and tail each miss 5 WRITEs: 10 lost, more than the 8 directions can split.
        got = real_result(path)
        if Path(path).name == "part.json":
            got["smb2"]["write_req_pdus"] -= 5
        return got

    monkeypatch.setattr(d, "result", lost)
    (found,) = d.cut_check(tmp_path, cap, n // 2)
    assert found["cut_at_record"] == n // 2
    assert found["cut"][0].startswith("smb2.write_req_pdus: whole 96, ") and "(at most 8 lost)" in found["cut"][0]
    monkeypatch.setattr(d, "result", real_result)

    def moved(path):
        # A part names a send at another offset than the whole capture does.
        got = real_keys(path)
        if Path(path).name == "part.jsonl":
            got = {k: v if v is None else {s: {o + 1 for o in offsets} for s, offsets in v.items()} for k, v in got.items()}
        return got

    monkeypatch.setattr(d, "send_keys", moved)
    (found,) = d.drop_check(tmp_path, cap, [5])
    assert "the whole capture does not have" in found["drop"][0]


def test_differences_and_failures_are_findings(tmp_path, monkeypatch):
    d = load()
    assert d.differences({"a": 1, "b": [1]}, {"a": 1, "b": [2], "c": 0}) == ["b", "c"]
    assert d.differences({"a": 1}, {"a": 1}) == []
    # A command that fails is a finding, kept with its captures and what was done.
    monkeypatch.setattr(d, "SMBWIRE", [sys.executable, "-c", "import sys; sys.exit(3)"])
    done, findings, _, _ = d.run(seed=2, cases=1, seconds=None, mutate=0.0, out=tmp_path)
    assert done == 1 and len(findings) == 1 and "exit 3" in findings[0]
    (kept,) = tmp_path.iterdir()
    case = json.loads((kept / "case.json").read_text())
    assert case["inputs"] and "failed" in case["found"][0]
    assert len(list(kept.glob("c*.pcap*"))) == len(case["inputs"])


def test_a_capture_started_mid_traffic_keeps_whole_records(tmp_path):
    d = load()
    from smbwire import _core

    cap = tmp_path / "c.pcap"
    _core.synth(json.dumps({"scenario": "mirror2", "bytes": 1 << 20, "io_size": 65536, "seed": 1}), str(cap))
    data = cap.read_bytes()
    cuts = {d.cut_head(random.Random(seed), data)[1] for seed in range(30)}
    assert len(cuts) > 10
    for seed in range(6):
        got, k = d.cut_head(random.Random(seed), data)
        assert got[:24] == data[:24] and data.endswith(got[24:])
        (tmp_path / "cut.pcap").write_bytes(got)
        p = subprocess.run([sys.executable, "-m", "smbwire", "analyze", str(tmp_path / "cut.pcap"), "-q", "--json",
                            str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        acc = json.loads((tmp_path / "r.json").read_text())["accounting"]
        assert acc["reconciled"] and acc.get("categories", {}).get("truncated_tail", 0) == 0, (seed, k)
    assert not d.truth_checkable({"synth": {}, "records_left_out": 3})
    assert d.truth_checkable({"synth": {}, "records_left_out": 0})


def test_damage_keeps_the_file_header(tmp_path):
    import random

    d = load()
    data = bytes(range(256)) * 40
    for seed in range(40):
        got, how = d.damage(random.Random(seed), data)
        assert got[:24] == data[:24]
        assert how in ("bytes", "cut", "zeroed")
        assert (got != data) or how == "bytes"


def test_shard_tasks_and_merge_are_compared_with_one_pipeline(tmp_path, monkeypatch):
    """The `--dask` engine half: a merge that gives another result or another evidence file
    than one pipeline is a finding; the same result is none."""
    import types

    d = load()
    cap = [str(ROOT / "captures" / "redirect4-1MiB.pcap")]
    options = ["-w", "60", "-t", str(d.TOPOLOGY)]
    assert d.shard_run(tmp_path, cap, options, 1) == []
    real = d._core

    def merge_changed(parts, config, evidence):
        got = json.loads(real.merge_parts(parts, config, evidence))
        got["accounting"]["input_bytes"] += 1
        return json.dumps(got)

    def merge_other_evidence(parts, config, evidence):
        text = real.merge_parts(parts, config, evidence)
        with open(evidence, "a") as f:
            f.write("{}\n")
        return text

    for merge, want in ((merge_changed, {"keys": ["accounting"]}), (merge_other_evidence, {"evidence": "differs"})):
        monkeypatch.setattr(d, "_core", types.SimpleNamespace(
            analyze=real.analyze, analyze_shard=real.analyze_shard, merge_parts=merge))
        assert d.shard_run(tmp_path, cap, options, 1) == [{"shards": 2, **want}, {"shards": 3, **want}]


def test_a_shard_run_that_fails_is_a_finding(tmp_path, monkeypatch):
    d = load()
    failing = tmp_path / "fails.py"
    failing.write_text("import sys; sys.exit(4)\n")
    monkeypatch.setattr(d, "__file__", str(failing))
    # Shards are not run with --keys (`--dask` refuses it): a case without keys.
    real = d.random_options
    monkeypatch.setattr(d, "random_options", lambda r, work, captures, keys: real(r, work, captures, [None] * len(keys)))
    done, findings, limited, _ = d.run(seed=2, cases=1, seconds=None, mutate=0.0, out=tmp_path / "out")
    assert done == 1 and len(findings) == 1 and limited == 0
    assert "exit 4: shard tasks and merge" in findings[0]


def test_options_of_a_case(tmp_path):
    """Cases draw every option that changes a result; decoding options go to `analyze` and
    `analyze --ledger`, dedupe options to `analyze` and `attribute`, `--max-memory` to both;
    `--keys` only with an encrypted public capture, its line from the recorded tshark keys;
    `--from`/`--to` inside the inputs' time span."""
    import random

    d = load()
    keys = d.keyed_captures()
    assert len(keys) == 5 and all(len(k.split(",")) == 4 for k in keys.values())
    cap = ROOT / "captures" / "nested4-1MiB-mirrordup-retx-reorder.pcap"
    first, last = d.time_span(tmp_path, [cap])
    assert last > first
    seen = set()
    r = random.Random(1)
    for _ in range(400):
        decode, dedupe = d.random_options(r, tmp_path, [cap], [None, keys["smb311-aes128gcm-wstest.pcap"]])
        o, dd = d.parse_options(decode), d.parse_options(dedupe)
        seen |= set(o) | set(dd)
        assert "-w" in dd and not set(o) & {"-w", "-t", "--assume-members", "--interval", "--max-index-memory"}
        assert not set(dd) & {"--keys", "--from", "--to", "--reorder-buffer"}
        assert o.get("--max-memory") == dd.get("--max-memory")
        for k in ("--from", "--to"):
            if k in o:
                assert first <= float(o[k]) <= last
        if "--keys" in o:
            assert Path(o["--keys"]).read_text() == keys["smb311-aes128gcm-wstest.pcap"] + "\n"
    assert seen == {"-w", "-t", "--assume-members", "--interval", "--max-index-memory", "--reorder-buffer",
                    "--keys", "--from", "--to", "--max-memory"}
    # Without a keyed input, no --keys.
    assert all("--keys" not in d.random_options(r, tmp_path, [cap], [None])[0] for _ in range(100))
    # The shard config the CLI would build from them.
    c = d.engine_config(["--from", "1738238400.5", "--reorder-buffer", "64KiB", "-w", "1", "--assume-members"])
    assert c["from_ns"] == 1738238400_500_000_000 and c["reorder_buffer_bytes"] == 65536


def test_generated_cases_draw_every_synthesizer_option(tmp_path):
    """Every field of the synthesizer's spec (`synth/src/spec.rs`) is drawn, with every value of
    the options that name kinds, and the drawn specs are ones the synthesizer accepts: an
    option added to the synthesizer and not to the differential fails here."""
    import re

    from smbwire import _core

    d = load()
    text = (ROOT / "synth" / "src" / "spec.rs").read_text()
    body = text[text.index("pub struct Spec {"):]
    fields = set(re.findall(r"^    pub (\w+):", body[:body.index("\n}\n")], re.M))
    assert {"vlan", "encap", "compression", "mtu", "mss"} <= fields
    r = random.Random(3)
    drawn: dict[str, set] = {}
    for i in range(3000):
        spec = d.random_spec(r, i)
        for k, v in spec.items():
            drawn.setdefault(k, set()).add(json.dumps(v))
        if spec["transport"] == "infiniband":
            assert "vlan" not in spec and "encap" not in spec and "ipv6" not in spec
    assert fields - set(drawn) == set()
    assert drawn["vlan"] == {'"dot1q"', '"qinq"'}
    assert drawn["ipv6"] == {"true"}
    assert drawn["encap"] == {f'"{k}"' for k in ("gretap", "erspan1", "erspan2", "erspan3", "vxlan", "geneve")}
    assert drawn["transport"] == {f'"{t}"' for t in ("tcp", "rocev1", "rocev2", "infiniband", "iwarp")}
    # Drawn specs with tags or IPv6, shrunk to 64 KiB: the synthesizer accepts them.
    r = random.Random(4)
    tagged = [s for s in (d.random_spec(r, i) for i in range(200)) if "vlan" in s or "ipv6" in s][:16]
    assert {s["transport"] for s in tagged} >= {"tcp", "rocev2"}
    for i, spec in enumerate(tagged):
        _core.synth(json.dumps({**spec, "bytes": 65536}), str(tmp_path / f"{i}.pcap"))


def test_limits_of_a_workers_state_skip_the_thread_comparison(tmp_path, monkeypatch):
    """A limit of state each worker holds for itself, reached, lets the thread counts differ
    (README): such a case is counted as limited and its threads and shards are not compared.
    Limits of one connection or message, and the index's, excuse nothing."""
    d = load()
    assert d.limited([{"anomalies": {}}, {"anomalies": {"tcp.global_buffer_cap": 2}}])
    for name in ("smb2.open_budget_exceeded", "tcp.flow_table_full", "smb2.state_evicted", "rdma.qp_table_full"):
        assert d.limited([{"anomalies": {name: 1}}])
    for name in ("tcp.reorder_beyond_buffer", "rdma.reorder_buffer_full", "dedupe.index_memory_cap", "tcp.gap"):
        assert not d.limited([{"anomalies": {name: 1}}])
    cap = ROOT / "captures" / "redirect4-1MiB.pcap"
    real = d.result

    anomaly = {"name": "tcp.global_buffer_cap"}

    def bumped(path):
        r = real(path)
        if path.name == "r2.json":
            r["totals"] = "other"
            r["anomalies"][anomaly["name"]] = 1
        return r

    monkeypatch.setattr(d, "result", bumped)
    found, was_limited = d.check(tmp_path, [cap], ["--max-memory", "16MiB"], ["-w", "60", "--max-memory", "16MiB"], 1, 1)
    assert was_limited and found == []
    # The ledger is compared with the run on as many threads as wrote it.
    found, was_limited = d.check(tmp_path, [cap], [], ["-w", "60"], 2, 1)
    assert was_limited and found == [{"ledger": ["anomalies", "totals"]}]
    anomaly["name"] = "tcp.reorder_beyond_buffer"
    found, was_limited = d.check(tmp_path, [cap], [], ["-w", "60"], 1, 1)
    assert not was_limited and {"threads": 2, "keys": ["anomalies", "totals"]} in found



def test_a_generated_capture_is_checked_against_its_truth(tmp_path, monkeypatch):
    """One undamaged generated capture without packets lost for good: `analyze` on the
    scenario's topology must find the generator's truth; a result that does not is a finding."""
    d = load()
    from smbwire import _core

    assert d.truth_checkable({"synth": {"loss": 0.01, "loss_mode": "retransmit"}})
    assert d.truth_checkable({"synth": {"loss": 0, "loss_mode": "drop"}})
    assert not d.truth_checkable({"synth": {"loss": 0.01, "loss_mode": "drop"}})
    assert not d.truth_checkable({"synth": {}, "damage": "cut"})
    assert not d.truth_checkable({"file": "captures/redirect4-1MiB.pcap"})

    spec = {"scenario": "redirect4", "transport": "rocev2", "seed": 3, "io_size": 5000, "bytes": 1 << 20,
            "reorder": 0.05, "zero_fill": 0.5, "mtu": 4096}
    cap = tmp_path / "c.pcap"
    truth = json.loads(_core.synth(json.dumps(spec), str(cap)))
    assert d.truth_check(tmp_path, cap, truth, 2) == []
    r = d.result(tmp_path / "t.json")
    assert d.against_truth(truth, r) == []
    # A send of trivial blocks only that was redirected is classed as the wire shows it
    # (replication, inferred): the truth's class for it is not compared, its edge's sums are.
    moved = json.loads(json.dumps(r))
    red = next(e for e in moved["edges"] if e["class"] == "redirection")
    assert red["trivial_bytes"] >= 5000
    moved["edges"].append({**red, "class": "replication", "payload_bytes": 5000, "trivial_bytes": 5000, "sends": 1,
                           "unique_bytes": 0, "per_copy_duplicate_bytes": 0, "repeated_content_bytes": 0})
    red.update(payload_bytes=red["payload_bytes"] - 5000, trivial_bytes=red["trivial_bytes"] - 5000, sends=red["sends"] - 1)
    assert d.against_truth(truth, moved) == []
    # Bytes lost, a non-trivial block in another class, a WRITE not counted: findings.
    lost = json.loads(json.dumps(r))
    lost["edges"][0]["payload_bytes"] -= 904
    lost["totals"]["payload_bytes"] -= 904
    assert [x.split(":")[0] for x in d.against_truth(truth, lost)] == ["edges payload_bytes/trivial_bytes/sends",
                                                                       "totals.payload_bytes"]
    other = json.loads(json.dumps(r))
    next(e for e in other["edges"] if e["class"] == "redirection")["class"] = "client"
    assert [x.split(":")[0] for x in d.against_truth(truth, other)] == [
        "edges unique_bytes/per_copy_duplicate_bytes/repeated_content_bytes"]
    uncounted = json.loads(json.dumps(r))
    uncounted["smb2"]["write_req_pdus"] -= 1
    assert d.against_truth(truth, uncounted) == [
        f"smb2.write_req_pdus: {truth['smb2']['write_requests'] - 1}, truth {truth['smb2']['write_requests']}"]

    # The case that found e2cf784: 5000-byte READs over RoCE, 5% of packets reordered, RDMA
    # Write LASTs seen before their FIRST (7 here); the engine before it left 6 sends
    # incomplete (30,000 of 1,048,576 bytes), and the truth check said so.
    spec = {"scenario": "read-nonowner", "transport": "rocev2", "seed": 3, "io_size": 5000, "bytes": 1 << 20,
            "reorder": 0.05, "mtu": 4096}
    rd = tmp_path / "rd.pcap"
    assert d.truth_check(tmp_path, rd, json.loads(_core.synth(json.dumps(spec), str(rd))), 1) == []

    # The case that found the RoCE Read Responses taken for another queue pair's request:
    # 4 channels between two nodes, whose queue pairs number their packets in sequences that
    # here lie close together; the engine before it left 7 of 48 sends incomplete.
    spec = {"scenario": "redirect4", "transport": "rocev2", "seed": 131857563, "io_size": 65536, "bytes": 1 << 20,
            "channels": 4, "zero_fill": 0.5, "mtu": 1024}
    mc = tmp_path / "mc.pcap"
    assert d.truth_check(tmp_path, mc, json.loads(_core.synth(json.dumps(spec), str(mc))), 2) == []

    # In a run: the case's truth check reports what differs.
    real = d.result

    def wrong(path):
        got = real(path)
        if path.name == "t.json":
            got["totals"]["payload_bytes"] += 1
        return got

    monkeypatch.setattr(d, "result", wrong)
    found, _ = d.check(tmp_path, [cap], [], ["-w", "60"], 1, 1, truth)
    assert found == [{"truth": [f"totals.payload_bytes: {truth['totals']['payload_bytes'] + 1}, "
                                f"truth {truth['totals']['payload_bytes']}"], "threads": 2}]


def test_an_encrypted_multichannel_session_is_compared_on_every_thread_count(tmp_path, monkeypatch):
    """The encrypted multichannel input (bench/encrypted.py): with its keys line (the session
    key alone) every message decrypts on 1, 2 and 3 threads, and they agree; a run that lost
    the shared hash on a thread count would be a finding."""
    d = load()
    cap = tmp_path / "enc.pcap"
    meta = d.encrypted.make(cap, 24 * 65536, 65536, 3, seed=1)
    (tmp_path / "keys.txt").write_text(meta["keys_line"] + "\n")
    found, limited = d.check(tmp_path, [cap], ["--keys", str(tmp_path / "keys.txt")], [], 2, 1)
    assert (found, limited) == ([], False)
    r = d.result(tmp_path / "r3.json")
    assert r["smb2"]["decrypted_messages"] == meta["messages"] == 48 and r["smb2"]["decrypt_failed"] == 0
    # A draw of such an input says so and brings its keys line.
    monkeypatch.setattr(d, "check", lambda *a, **k: ([], False))
    seen = []
    real_make = d.encrypted.make
    monkeypatch.setattr(d.encrypted, "make", lambda *a, **k: seen.append(a) or real_make(*a, **k))
    for seed in range(40):
        d.run(seed=seed, cases=1, seconds=None, mutate=0.0, out=tmp_path / "out")
        if seen:
            break
    assert seen, "no encrypted input drawn in 40 cases"
