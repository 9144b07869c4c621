"""fuzz/differential.py: random captures, damaged at random, analysed on 1, 2 and 3 threads,
through a ledger and as `--dask`'s shard tasks and merge; a difference, an unreconciled run or
a failed command is a finding, kept with its captures, and the exit status says so."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

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
    assert p.stdout.strip().splitlines()[-1] == "12 cases: 0 findings"
    assert not list(tmp_path.iterdir())


def test_differences_and_failures_are_findings(tmp_path, monkeypatch):
    d = load()
    assert d.differences({"a": 1, "b": [1]}, {"a": 1, "b": [2], "c": 0}) == ["b", "c"]
    assert d.differences({"a": 1}, {"a": 1}) == []
    # A command that fails is a finding, kept with its captures and what was done.
    monkeypatch.setattr(d, "SMBWIRE", [sys.executable, "-c", "import sys; sys.exit(3)"])
    done, findings = d.run(seed=2, cases=1, seconds=None, mutate=0.0, out=tmp_path)
    assert done == 1 and len(findings) == 1 and "exit 3" in findings[0]
    (kept,) = tmp_path.iterdir()
    case = json.loads((kept / "case.json").read_text())
    assert case["inputs"] and "failed" in case["found"][0]
    assert len(list(kept.glob("c*.pcap*"))) == len(case["inputs"])


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
    done, findings = d.run(seed=2, cases=1, seconds=None, mutate=0.0, out=tmp_path / "out")
    assert done == 1 and len(findings) == 1
    assert "exit 4: shard tasks and merge" in findings[0]
