"""CLI plumbing of `analyze` and `synth` against a stand-in engine module.

These check what the CLI does with its options and with the engine's answer (config JSON,
spec JSON, where the report and the JSON go); the stand-in returns a hand-written result.
They are not end-to-end tests of the analysis (those run the real `_core`)."""

from __future__ import annotations

import io
import json

import pytest
from click.testing import CliRunner
from rich.console import Console

from smbwire import cli as cli_module
from smbwire.cli import cli
from smbwire.topology import load_topology
from smbwire.engine import default_threads
from cli.test_cli_errors import capture, fake_core, install_core  # noqa: F401 - fixture
from report.test_report import sample_result


@pytest.fixture
def engine(monkeypatch):
    calls = []

    def analyze(paths, config_json, evidence, progress):
        calls.append({"paths": paths, "config": json.loads(config_json), "evidence": evidence,
                      "progress": progress})
        return json.dumps(sample_result())

    def synth(spec_json, out):
        spec = json.loads(spec_json)
        calls.append({"spec": spec, "out": out})
        with open(out, "wb") as f:
            f.write(b"pcap")
        truth = {"scenario": spec["scenario"], "edges": []}
        if spec["scenario"] != "no-topology":
            truth["topology"] = {"nodes": [{"name": "a", "addresses": ["198.18.0.1"], "member": True},
                                           {"name": "c", "addresses": ["198.18.0.9"], "member": False}],
                                 "rules": []}
        return json.dumps(truth)

    install_core(monkeypatch, fake_core(analyze=analyze, synth=synth))
    return calls


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_analyze_passes_options_to_the_engine(engine, capture, tmp_path):
    topo = tmp_path / "t.toml"
    topo.write_text('[nodes.a]\naddresses = ["198.18.0.1"]\n[[rules]]\nfile = "*.vhdx"\nclass = "client"\n')
    ev = tmp_path / "ev.jsonl"
    r = run("analyze", str(capture), "--topology", str(topo), "--window", "2.5", "--top", "3",
            "--evidence", str(ev))
    assert r.exit_code == 0, r.output
    (call,) = engine
    assert call["paths"] == [str(capture)]
    assert call["config"] == {
        "window_seconds": 2.5,
        "topology": {"nodes": [{"name": "a", "addresses": ["198.18.0.1"], "member": True}],
                     "rules": [{"share": None, "file": "*.vhdx", "class": "client"}]},
        "top_n": 3,
        "threads": default_threads(),  # --threads not given: the CPUs available
    }
    assert call["evidence"] == str(ev)
    assert call["progress"] is None  # stderr is not a terminal


def test_analyze_defaults(engine, capture):
    assert run("analyze", str(capture)).exit_code == 0
    assert engine[0]["config"] == {"window_seconds": 60.0, "topology": {}, "top_n": 10, "threads": default_threads()}
    assert engine[0]["evidence"] is None


def test_analyze_prints_the_report(engine, capture):
    r = run("analyze", str(capture))
    assert r.exit_code == 0
    assert "Amplification 2.41×" in r.stdout
    assert "frame.number in {77, 140, 190}" in r.stdout
    assert r.stderr == ""


def test_analyze_json_file(engine, capture, tmp_path):
    out = tmp_path / "r.json"
    r = run("analyze", str(capture), "--json", str(out), "--quiet")
    assert r.exit_code == 0
    assert r.stdout == "" and r.stderr == ""
    assert json.loads(out.read_text()) == sample_result()


def test_analyze_json_stdout_keeps_stdout_pure(engine, capture):
    r = run("analyze", str(capture), "--json", "-")
    assert r.exit_code == 0
    assert json.loads(r.stdout) == sample_result()
    assert "Amplification 2.41×" in r.stderr  # the report moved to stderr


def test_progress_bar_reports_engine_progress():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)

    def run_engine(cb):
        cb(5 * 2**20, 10 * 2**20)
        cb(10 * 2**20, 10 * 2**20)
        return {"done": True}

    assert cli_module._with_progress(console, run_engine) == {"done": True}
    assert "analysing" in buf.getvalue()


def test_synth_spec_and_outputs(engine, tmp_path):
    out, truth, topo = tmp_path / "s.pcap", tmp_path / "truth.json", tmp_path / "topo.toml"
    r = run("synth", "s2d-3way", "-o", str(out), "--bytes", "64MiB", "--io-size", "1m", "--mirror-dup",
            "--retransmit", "0.01", "--reorder", "0.02", "--seed", "7", "--transport", "smbdirect",
            "--vlan", "qinq", "--ipv6", "--truth-out", str(truth), "--topology-out", str(topo))
    assert r.exit_code == 0, r.output
    assert engine[0]["spec"] == {"scenario": "s2d-3way", "mirror_dup": True, "bytes": 64 * 2**20,
                                 "io_size": 2**20, "retransmit": 0.01, "reorder": 0.02, "seed": 7,
                                 "transport": "smbdirect", "vlan": "qinq", "ipv6": True}
    assert engine[0]["out"] == str(out)
    assert json.loads(truth.read_text())["scenario"] == "s2d-3way"
    t = load_topology(topo)
    assert [(n.name, n.addresses, n.member) for n in t.nodes] == [("a", ("198.18.0.1",), True),
                                                                 ("c", ("198.18.0.9",), False)]


def test_synth_leaves_out_options_not_given(engine, tmp_path):
    r = run("synth", "s2d-2way", "-o", str(tmp_path / "s.pcap"))
    assert r.exit_code == 0, r.output
    assert engine[0]["spec"] == {"scenario": "s2d-2way", "mirror_dup": False}


def test_synth_without_topology_in_truth(engine, tmp_path):
    r = run("synth", "no-topology", "-o", str(tmp_path / "s.pcap"), "--topology-out", str(tmp_path / "t.toml"))
    assert r.exit_code == 70
    assert r.stderr.strip() == "smbwire: error: the synthesizer returned no 'topology' for this scenario"
