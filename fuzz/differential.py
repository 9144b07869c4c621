"""Differential fuzzing of whole runs: random captures, damaged at random, analysed as a user
runs smbwire, and compared with themselves. Each case is 1-3 captures, each either generated
(`smbwire synth`'s engine, one in five started mid-traffic, its first records left out: a
random scenario, transport, I/O size, channels, mirror copies,
retransmission, reordering, loss, compression, tunnels, link rate, MSS, RoCE path MTU, SMB
Direct's send size, descriptors, invalidation and solicited events, iWARP's MPA options and
Terminate, another upper layer's RoCE connection, 802.1Q and QinQ tags, IPv6) or one of `captures/` (bundled and
public), then (most of the time) damaged: bytes past the file header changed, a stretch
zeroed, or the file cut short, and analysed with random options: the window, a topology,
`--assume-members`, `--interval`, `--max-index-memory`, `--max-memory`, `--reorder-buffer`,
`--from`/`--to` inside the capture's time span, and `--keys` when an encrypted public capture
with recorded keys, or an encrypted multichannel SMB 3.1.1 session (tests/encrypted_capture.py, one
input in ten, its keys the session key alone), is among the inputs. A case is a finding when:

- `analyze --threads 2` or `--threads 3` gives another result than `--threads 1` (the JSON
  apart from `analysis`, and the evidence file byte for byte); not compared when a run
  reached a limit of state each worker holds for itself (the flow table, the out-of-order
  bytes of all flows, buffered encrypted or compressed messages, SMB2 and RDMA state tables;
  README, `--threads`: "while none is reached ... the result is one pipeline's"); such
  cases are counted as limited;
- the accounting does not reconcile (a byte in no category, or in two);
- `attribute` on the ledger of `analyze --ledger` gives another result than `analyze` on as
  many threads;
- the shard tasks and merge of `analyze --dask` (the engine's `analyze_shard` and
  `merge_parts`, with 2 and 3 shards, the parts in a random order, in a child process without
  a cluster) give another result than one pipeline (the JSON apart from `analysis`, the
  evidence byte for byte; not with `--keys`, which `--dask` refuses, nor when limited);
- a command fails (a traceback, a crash, an exit status other than 0);
- the case is one generated capture, undamaged and without lost packets, and `analyze` with
  the scenario's topology does not find the generator's ground truth: per edge its payload,
  trivial bytes and sends; per edge and class its unique, per-copy duplicate and repeated
  content bytes; the totals; the SMB2 WRITE requests and READ responses. (The class of a send
  without a non-trivial block is the one inferred without forwarding, docs/attribution.md:
  the truth's class for it is not compared.)

    python fuzz/differential.py --minutes 30 --out /tmp/diff
    python fuzz/differential.py --seed 7 --cases 200
    python fuzz/differential.py --truth-only --minutes 20 --out /tmp/truth

`--truth-only` runs only the last check, on generated captures alone (undamaged, no packet
lost for good), about five times as many cases a minute; and the captures whose frames are in
stream order (drawn so half the time) are also cut in two at a random record, and analysed
with 1-20 random records left out (frames a mirror port dropped): the head and the tail (a
capture started mid-traffic) and the lossy capture must reconcile and find no payload and no
send of a duplicated payload the whole does not, and the head and tail lose together only the
messages the cut splits (at most one per direction of each connection).

Each finding's captures and options are kept in OUT/finding-N/ (case.json says what was
generated, how it was damaged and what differed). Prints one line per finding and a summary;
exit status 1 when there is a finding. Found on 2026-12-06 with it: five ways in which damaged
RDMA and TCP traffic gave another result on several threads, or an unreconciled run
(commit 8900241); an index memory estimate that moved with a map's seed (ae2973e); with the
ground truth, RoCE and InfiniBand RDMA messages of 5000 bytes left incomplete when a mirror
port reordered a message's LAST before its FIRST; on 2026-12-07, RoCE Read Responses taken
for another queue pair's request between the same two addresses (217b03c)."""

from __future__ import annotations

import argparse
import collections
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from smbwire import _core

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import encrypted_capture as encrypted  # noqa: E402  (an encrypted multichannel session's capture)
from tshark_oracle import recorded_keys  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "captures"
TOPOLOGY = CAPTURES / "s2d-two-node.toml"
SMBWIRE = [sys.executable, "-m", "smbwire"]
THREADS = (1, 2, 3)


def random_spec(r: random.Random, seed: int) -> dict:
    transport = r.choice(["tcp", "tcp", "tcp", "rocev1", "rocev2", "infiniband", "iwarp"])
    spec = {
        "scenario": r.choice([s["name"] for s in json.loads(_core.synth_scenarios())]),
        "transport": transport,
        "seed": seed,
        "io_size": r.choice([512, 4096, 4097, 5000, 8192, 9000, 12288, 65536, 100000, 262144, 1 << 20]),
        "bytes": r.choice([1, 2, 4, 6]) << 20,
        "mirror_dup": r.random() < 0.4,
        "retransmit": r.choice([0, 0, 0.01, 0.05]),
        "reorder": r.choice([0, 0, 0.01, 0.05]),
        "channels": r.choice([1, 1, 2, 4]),
        "zero_fill": r.choice([0, 0, 0.1, 0.5]),
    }
    if r.random() < 0.3:
        spec["link_gbps"] = r.choice([1, 25, 100, 400])
    if transport == "tcp":
        spec["mss"] = r.choice([536, 1000, 1448, 1460, 8948, 9000])
        if r.random() < 0.3:
            spec["dialect"] = "3.1.1"
            spec["compression"] = r.choice(["lznt1", "lz77", "lz77huffman", "chained"])
    else:
        spec["loss"] = r.choice([0, 0, 0.01])
        spec["loss_mode"] = r.choice(["retransmit", "drop"])
        # SMB Direct's negotiated sizes and options (MS-SMBD): Windows' 1364-byte sends most
        # of the time, and the rest of what the synthesizer can vary.
        if r.random() < 0.3:
            spec["max_send_size"] = r.choice([128, 512, 1364, 4096, 8192, 65536])
        if r.random() < 0.3:
            spec["descriptors"] = r.choice([2, 3, 16])
        spec["send_with_invalidate"] = r.random() < 0.3
        spec["solicited_event"] = r.random() < 0.2
        if transport in ("rocev1", "rocev2", "infiniband"):
            spec["mtu"] = r.choice([256, 512, 1024, 1024, 2048, 4096, 4096])
            if r.random() < 0.15:
                spec["other_ulp_port"] = r.choice([4420, 3260])
        if transport == "iwarp":
            spec["mpa_markers"] = r.random() < 0.5
            spec["mpa_crc"] = r.random() < 0.8
            spec["mpa_private_data"] = r.random() < 0.5
            spec["iwarp_terminate"] = r.random() < 0.2
    if transport != "infiniband" and r.random() < 0.2:
        spec["encap"] = r.choice(["gretap", "erspan1", "erspan2", "erspan3", "vxlan", "geneve"])
    if transport != "infiniband" and r.random() < 0.25:
        spec["vlan"] = r.choice(["dot1q", "qinq"])
    if transport != "infiniband" and r.random() < 0.2:
        spec["ipv6"] = True
    return spec


def damage(r: random.Random, data: bytes) -> tuple[bytes, str]:
    """Bytes past the first 24 (a pcap file header; inside a pcapng's first block) changed."""
    b = bytearray(data)
    if len(b) <= 25:
        return data, "none"
    how = r.choice(["bytes", "bytes", "cut", "zeroed"])
    if how == "bytes":
        for _ in range(r.choice([1, 5, 50, 500])):
            b[r.randrange(24, len(b))] = r.randrange(256)
    elif how == "cut":
        del b[r.randrange(24, len(b)):]
    else:
        at = r.randrange(24, len(b))
        n = min(r.randrange(1, 3000), len(b) - at)
        b[at:at + n] = bytes(n)
    return bytes(b), how


def cut_head(r: random.Random, data: bytes) -> tuple[bytes, int]:
    """A generated (little-endian pcap) capture that starts mid-traffic: its first records
    (0 to 40% of them) left out, as when a live capture starts after the connections' setup.
    Returns the bytes and how many records were left out."""
    starts = records(data)
    k = r.randrange(len(starts) * 2 // 5 + 1) if starts else 0
    return (data[:24] + data[starts[k]:] if k else data), k


def result(path: Path) -> dict:
    r = json.loads(path.read_text())
    r.pop("analysis")
    return r


def differences(want: dict, got: dict) -> list[str]:
    """The top-level keys whose values differ."""
    return sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))


def smbwire(*args) -> None:
    p = subprocess.run([*SMBWIRE, *map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: smbwire {' '.join(map(str, args))}\n{p.stderr[-2000:]}")


def parse_options(options: list[str]) -> dict:
    """The options as a map (`--assume-members`, which takes no value: True)."""
    o: dict = {}
    i = 0
    while i < len(options):
        if options[i] == "--assume-members":
            o[options[i]] = True
            i += 1
        else:
            o[options[i]] = options[i + 1]
            i += 2
    return o


def engine_config(options: list[str]) -> dict:
    """The engine config the CLI builds from these options."""
    from smbwire import engine
    from smbwire.topology import load_topology
    from smbwire.units import parse_size, parse_time

    o = parse_options(options)

    def size(k: str) -> int | None:
        return parse_size(o[k]) if k in o else None

    return engine.build_config(
        window=float(o["-w"]),
        topology=load_topology(o["-t"]) if "-t" in o else None,
        assume_members="--assume-members" in o,
        interval=float(o["--interval"]) if "--interval" in o else None,
        max_index_memory=size("--max-index-memory"),
        max_memory=size("--max-memory"),
        reorder_buffer=size("--reorder-buffer"),
        from_ns=parse_time(o["--from"]) if "--from" in o else None,
        to_ns=parse_time(o["--to"]) if "--to" in o else None)


# Limits of state each worker holds for itself (README, `--threads`: "Limits (flow table,
# reorder buffers, SMB2 state maps) hold per worker ... while none is reached ... the result is
# one pipeline's"): reaching one lets several threads keep what one sheds. Limits of one
# connection, transfer or message (`tcp.reorder_beyond_buffer`, `rdma.reorder_buffer_full`,
# `smb2.message_over_cap`) and the ordered stage's (`dedupe.*`) are the same on any thread
# count and excuse nothing.
PER_WORKER = ("tcp.flow_table_full", "tcp.storage_flow_evicted", "tcp.global_buffer_cap",
              "smb2.open_budget_exceeded", "smb2.state_evicted", "smb2.report_files_capped",
              "rdma.connection_table_full", "rdma.qp_table_full", "rdma.read_table_full",
              "rdma.transfer_evicted")


def limited(runs: list[dict]) -> bool:
    """A run reached a limit of state each worker holds: the thread counts may differ."""
    return any(r["anomalies"].get(a) for r in runs for a in PER_WORKER)


def keyed_captures() -> dict[str, str]:
    """The encrypted public captures with recorded keys: name -> keys file line (from the
    tshark options in captures/public/expected.json)."""
    return {name: ",".join(fields) for name, fields in recorded_keys(CAPTURES / "public" / "expected.json").items()}


def shard_run(work: Path, captures: list[str], options: list[str], order_seed: int) -> list:
    """`analyze --dask`'s engine half, without a cluster: every shard task, then the merge of
    their parts in a random order, against one pipeline. Runs in a child process (a crash is
    a failed command, not the end of the soak)."""
    config = engine_config(options)
    paths = [str(Path(c).resolve()) for c in captures]
    one = json.loads(_core.analyze(paths, json.dumps({**config, "threads": 1}), str(work / "s1.jsonl")))
    one.pop("analysis")
    want_ev = (work / "s1.jsonl").read_bytes()
    found: list = []
    for n in (2, 3):
        parts = [str(work / f"part-{k}-of-{n}.parquet") for k in range(n)]
        for k, part in enumerate(parts):
            _core.analyze_shard(paths, json.dumps(config), k, n, part)
        random.Random(order_seed + n).shuffle(parts)
        got = json.loads(_core.merge_parts(parts, json.dumps(config), str(work / f"s{n}.jsonl")))
        got.pop("analysis")
        if d := differences(one, got):
            found.append({"shards": n, "keys": d})
        if (work / f"s{n}.jsonl").read_bytes() != want_ev:
            found.append({"shards": n, "evidence": "differs"})
    return found


# The truth's figures compared per edge (whatever the class of a send of trivial blocks only)
# and per edge and class.
EDGE_SUMS = ("payload_bytes", "trivial_bytes", "sends")
CLASS_FIGURES = ("unique_bytes", "per_copy_duplicate_bytes", "repeated_content_bytes")


def truth_checkable(what: dict) -> bool:
    """An input whose generator's truth `analyze` must find: generated, undamaged, no packet
    lost for good (a lost packet that is retransmitted loses nothing)."""
    spec = what.get("synth")
    return (spec is not None and "damage" not in what and not what.get("records_left_out")
            and not (spec.get("loss") and spec.get("loss_mode") == "drop"))


def against_truth(truth: dict, r: dict) -> list[str]:
    """How a result of the scenario's capture on its own topology differs from its truth."""
    def sums(edges: list[dict], keys: tuple, by_class: bool) -> dict:
        m: dict = collections.defaultdict(lambda: [0] * len(keys))
        for e in edges:
            k = (e["src"], e["dst"], e["class"]) if by_class else (e["src"], e["dst"])
            for i, key in enumerate(keys):
                m[k][i] += e[key]
        return {"/".join(k): v for k, v in sorted(m.items()) if any(v)}

    out = []
    for keys, by_class in ((EDGE_SUMS, False), (CLASS_FIGURES, True)):
        got, want = sums(r["edges"], keys, by_class), sums(truth["edges"], keys, by_class)
        if got != want:
            out.append(f"edges {'/'.join(keys)}: {got}, truth {want}")
    got_t, want_t = r["totals"], truth["totals"]
    if got_t["payload_bytes"] != want_t["payload_bytes"]:
        out.append(f"totals.payload_bytes: {got_t['payload_bytes']}, truth {want_t['payload_bytes']}")
    # With no payload on the wire the truth's amplification is 0 (nothing over what the VM
    # did) and the result's 1.0 by convention (docs/json-schema.md).
    elif want_t["payload_bytes"] and not math.isclose(got_t["amplification"], want_t["amplification"], rel_tol=1e-9):
        out.append(f"totals.amplification: {got_t['amplification']}, truth {want_t['amplification']}")
    for got_k, want_k in (("write_req_pdus", "write_requests"), ("read_resp_pdus", "read_responses")):
        if r["smb2"].get(got_k) != truth["smb2"][want_k]:
            out.append(f"smb2.{got_k}: {r['smb2'].get(got_k)}, truth {truth['smb2'][want_k]}")
    return out


def truth_check(work: Path, capture: Path, truth: dict, threads: int) -> list:
    """`analyze` on the scenario's own topology against the generator's truth."""
    from smbwire.topology import Topology

    topo = work / "truth.toml"
    topo.write_text(Topology.from_config(truth["topology"], source="synthesizer topology").to_toml())
    smbwire("analyze", capture, "-t", topo, "--threads", threads, "--json", work / "t.json", "-q")
    d = against_truth(truth, result(work / "t.json"))
    return [{"truth": d, "threads": threads}] if d else []


def check(work: Path, captures: list[Path], decode: list[str], dedupe: list[str], ledger_threads: int,
          order_seed: int, truth: dict | None = None) -> tuple[list, bool]:
    """What differs for one case (empty: nothing), and whether a limit of state each worker
    holds was reached (threads and shards then not compared). `decode`: the options of decoding (for
    `analyze` and `analyze --ledger`), `dedupe`: those of dedupe (for `analyze` and
    `attribute`); `--max-memory` is in both. `truth`: the generator's, when the case is one
    generated capture whose truth `analyze` must find (`truth_checkable`)."""
    options = [*decode, *(_without(dedupe, "--max-memory") if "--max-memory" in dedupe else dedupe)]
    found: list = []
    runs = {}
    for t in THREADS:
        smbwire("analyze", *captures, *options, "--threads", t, "--json", work / f"r{t}.json",
                "--evidence", work / f"e{t}.jsonl", "-q")
        runs[t] = result(work / f"r{t}.json")
    one = runs[1]
    is_limited = limited(list(runs.values()))
    for t in THREADS[1:]:
        if is_limited:
            break
        if d := differences(one, runs[t]):
            found.append({"threads": t, "keys": d})
        if (work / f"e{t}.jsonl").read_bytes() != (work / "e1.jsonl").read_bytes():
            found.append({"threads": t, "evidence": "differs"})
    if not one["accounting"]["reconciled"]:
        found.append({"accounting": {k: v for k, v in one["accounting"].items() if k != "categories"}})
    smbwire("analyze", *captures, *decode, "--ledger", work / "l.parquet", "--threads", ledger_threads, "-q")
    smbwire("attribute", work / "l.parquet", *dedupe, "--json", work / "a.json", "--evidence", work / "ea.jsonl", "-q")
    # Against `analyze` on as many threads as wrote the ledger (they differ when limited).
    if d := differences(runs[ledger_threads], result(work / "a.json")):
        found.append({"ledger": d})
    if (work / "ea.jsonl").read_bytes() != (work / f"e{ledger_threads}.jsonl").read_bytes():
        found.append({"ledger": "evidence differs"})
    if "--keys" not in options and not is_limited:
        p = subprocess.run([sys.executable, __file__, "--shard-run", json.dumps(
            {"work": str(work), "captures": list(map(str, captures)), "options": options, "order_seed": order_seed})],
            capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: shard tasks and merge\n{p.stderr[-2000:]}")
        found += json.loads(p.stdout)
    if truth is not None:
        found += truth_check(work, captures[0], truth, THREADS[order_seed % len(THREADS)])
    return found, is_limited


def _without(options: list[str], name: str) -> list[str]:
    """The options without `name` and its value."""
    i = options.index(name)
    return options[:i] + options[i + 2:]


def run(seed: int, cases: int | None, seconds: float | None, mutate: float, out: Path) -> tuple[int, list[str], int, int]:
    """Cases until `cases` or `seconds`: how many ran, the findings, how many were limited, and
    how many were checked against the generator's truth."""
    r = random.Random(seed)
    real = sorted(p for p in CAPTURES.rglob("*") if p.is_file() and p.suffix in (".pcap", ".pcapng"))
    keys = keyed_captures()
    end = time.monotonic() + seconds if seconds is not None else None
    findings: list[str] = []
    done = limited_cases = truth_cases = 0
    with tempfile.TemporaryDirectory(prefix="smbwire-diff-") as tmp:
        work = Path(tmp)
        while (cases is None or done < cases) and (end is None or time.monotonic() < end):
            done += 1
            case: dict = {"inputs": []}
            captures = []
            truths = []
            for i in range(r.choice([1, 1, 1, 2, 3])):
                if r.random() < 0.1:
                    # An encrypted multichannel SMB 3.1.1 session (tests/encrypted_capture.py), its
                    # keys file line the session key alone: with --keys, the workers of
                    # --threads share its preauth hash (smb2::keyshare).
                    enc = {"io": r.choice([4096, 65536, 1 << 20]), "channels": r.choice([2, 3, 4]), "seed": r.randrange(1 << 30)}
                    enc["bytes"] = enc["io"] * r.randrange(4, 40)
                    cap = work / f"c{i}.pcap"
                    meta = encrypted.make(cap, enc["bytes"], enc["io"], enc["channels"], enc["seed"])
                    data = cap.read_bytes()
                    what = {"encrypted": enc, "keys_line": meta["keys_line"]}
                    if r.random() < 0.2:
                        data, what["records_left_out"] = cut_head(r, data)
                elif r.random() < 0.4:
                    src = r.choice(real)
                    cap = work / f"c{i}{src.suffix}"
                    data = src.read_bytes()
                    what: dict = {"file": str(src.relative_to(ROOT))}
                else:
                    spec = random_spec(r, r.randrange(1 << 30))
                    cap = work / f"c{i}.pcap"
                    truths.append(json.loads(_core.synth(json.dumps(spec), str(cap))))
                    data = cap.read_bytes()
                    what = {"synth": spec}
                    if r.random() < 0.2:
                        data, what["records_left_out"] = cut_head(r, data)
                if r.random() < mutate:
                    data, what["damage"] = damage(r, data)
                cap.write_bytes(data)
                captures.append(cap)
                case["inputs"].append(what)
            decode, dedupe = random_options(r, work, captures,
                                            [w.get("keys_line") or keys.get(Path(w.get("file", "")).name) for w in case["inputs"]])
            case["options"] = {"decode": decode, "dedupe": dedupe}
            if "--keys" in decode:
                case["keys"] = Path(decode[decode.index("--keys") + 1]).read_text()
            case["ledger_threads"], case["order_seed"] = r.choice([1, 2]), r.randrange(1 << 30)
            try:
                truth = truths[0] if len(case["inputs"]) == 1 and truth_checkable(case["inputs"][0]) else None
                truth_cases += truth is not None
                found, was_limited = check(work, captures, decode, dedupe, case["ledger_threads"], case["order_seed"],
                                           truth)
                limited_cases += was_limited
            except RuntimeError as e:
                found = [{"failed": str(e)}]
            if found:
                case["found"] = found
                keep = out / f"finding-{done}"
                keep.mkdir(parents=True, exist_ok=True)
                for c in captures:
                    shutil.copy(c, keep)
                (keep / "case.json").write_text(json.dumps(case, indent=1))
                findings.append(f"case {done}: {json.dumps(found)[:300]} ({keep})")
    return done, findings, limited_cases, truth_cases


def records(data: bytes) -> list[int]:
    """Where each record of a (little-endian, generated) pcap starts."""
    at, starts = 24, []
    while at + 16 <= len(data):
        starts.append(at)
        at += 16 + int.from_bytes(data[at + 8:at + 12], "little")
    return starts


def cuttable(spec: dict) -> bool:
    """A generated capture whose frames are in stream order (no retransmission, reordering or
    loss), so a cut between two records splits at most one message per direction of each
    connection."""
    return not (spec.get("retransmit") or spec.get("reorder") or spec.get("loss"))


def send_keys(evidence: Path) -> dict[str, dict | None]:
    """The sends of each duplicated payload in an evidence file (`--evidence`), by what the
    wire says of them (ends, kind, MessageId), with their offsets (not what a capture that
    starts later cannot know: file names, sessions' labels, the class). None for a payload whose
    list is capped (its first 1,000 sends)."""
    out: dict[str, dict | None] = {}
    for line in evidence.read_text().splitlines():
        d = json.loads(line)
        if d["sends_total"] > len(d["sends"]):
            out[d["digest"]] = None
            continue
        # Over RoCE there are no ports: two connections' sends can share a key.
        sends: dict = out.setdefault(d["digest"], {})
        for s in d["sends"]:
            sends.setdefault((s["src"], s["src_port"], s["dst"], s["dst_port"], s["kind"], s["message_id"]), set()).add(s["offset"])
    return out


def part_check(work: Path, whole: dict, whole_sends: dict[str, dict | None], parts: dict[str, Path], directions: int,
               lost_bound: int | None, copies: bool = False) -> list[str]:
    """What parts of a capture (cut from it, or with records left out) find that the whole does
    not: an unreconciled run, payload or a send of a duplicated payload the whole does not
    have, and (with `lost_bound`) more SMB2 WRITEs or READ responses lost than that. `copies`:
    the capture has every frame twice (a mirror port): a cut between a frame and its copy sees
    the message in that frame in both parts (as many more as directions, and their payload)."""
    found, got = [], {}
    for name, cap in parts.items():
        smbwire("analyze", cap, "-t", work / "truth.toml", "--json", work / "part.json", "--evidence",
                work / "part.jsonl", "-q")
        got[name] = r = result(work / "part.json")
        if not r["accounting"]["reconciled"]:
            found.append(f"{name}: accounting not reconciled")
        for digest, sends in send_keys(work / "part.jsonl").items():
            known = whole_sends.get(digest, {})
            if known is None or sends is None:
                continue
            # The same sends, at the same offsets (or at one the part cannot know: null).
            if extra := [(k, o) for k, o in sends.items() if k not in known or not o - {None} <= known[k]]:
                found.append(f"{name}: sends of {digest[:16]} the whole capture does not have: {sorted(extra, key=str)[:3]}")
    payload = sum(r["totals"]["payload_bytes"] for r in got.values())
    if payload > whole["totals"]["payload_bytes"] and not copies:
        found.append(f"totals.payload_bytes: {' + '.join(got)} {payload} > whole {whole['totals']['payload_bytes']}")
    if lost_bound is not None:
        for key in ("write_req_pdus", "read_resp_pdus"):
            lost = whole["smb2"][key] - sum(r["smb2"][key] for r in got.values())
            if not (-lost_bound if copies else 0) <= lost <= lost_bound:
                each = ", ".join(f"{n} {r['smb2'][key]}" for n, r in got.items())
                found.append(f"smb2.{key}: whole {whole['smb2'][key]}, {each} (at most {lost_bound} lost)")
    return found


def whole_run(work: Path, capture: Path) -> tuple[dict, dict[str, dict | None], int]:
    """The whole capture's result, its duplicated payloads' sends, and its connections'
    directions (TCP flows and SMB Direct connections, both ways)."""
    smbwire("analyze", capture, "-t", work / "truth.toml", "--json", work / "whole.json", "--evidence",
            work / "whole.jsonl", "-q")
    whole = result(work / "whole.json")
    return whole, send_keys(work / "whole.jsonl"), 2 * (whole["tcp"]["flows"] + whole["rdma"]["smbdirect_connections"])


def cut_check(work: Path, capture: Path, k: int, copies: bool = False) -> list:
    """The capture cut in two at its record `k`: the head (records before `k`) and the tail (a
    capture starting mid-traffic at `k`) must each reconcile and find no payload and no send
    of a duplicated payload the whole capture does not (head + tail <= whole), and lose
    together only the messages the cut splits: at most one per direction of each connection.
    The tail is what a capture started during the traffic sees."""
    data = capture.read_bytes()
    starts = records(data)
    # Not between a frame and its mirror copy (the next record, the same bytes): a message in
    # that frame alone would be whole in both parts.
    frame = lambda i: data[starts[i] + 16:starts[i + 1] if i + 1 < len(starts) else len(data)]  # noqa: E731
    if 0 < k < len(starts) and frame(k) == frame(k - 1):
        k += 1
    if k >= len(starts):
        return []
    head, tail = work / "head.pcap", work / "tail.pcap"
    head.write_bytes(data[:starts[k]])
    tail.write_bytes(data[:24] + data[starts[k]:])
    whole, sends, directions = whole_run(work, capture)
    found = part_check(work, whole, sends, {"head": head, "tail": tail}, directions, directions, copies)
    return [{"cut_at_record": k, "cut": found}] if found else []


def drop_check(work: Path, capture: Path, left_out: list[int]) -> list:
    """The capture with the records `left_out` (as a mirror port or a capture that drops
    frames): it must reconcile and find no payload and no send of a duplicated payload the
    whole capture does not."""
    data = capture.read_bytes()
    starts = records(data) + [len(data)]
    gone = set(left_out)
    lossy = work / "lossy.pcap"
    lossy.write_bytes(data[:24] + b"".join(data[starts[i]:starts[i + 1]] for i in range(len(starts) - 1) if i not in gone))
    whole, sends, directions = whole_run(work, capture)
    found = part_check(work, whole, sends, {"lossy": lossy}, directions, None)
    return [{"records_left_out": sorted(gone), "drop": found}] if found else []


def run_truth(seed: int, cases: int | None, seconds: float | None, out: Path) -> tuple[int, list[str], int]:
    """`--truth-only`: only the ground-truth check, about five times as many cases a minute as
    `run`. Each case is one generated capture of a drawn spec, undamaged and with no packet
    lost for good (`loss_mode` "drop" becomes "retransmit"), analysed on 1 or 2 threads on the
    scenario's own topology; those in stream order (retransmission, reordering and loss drawn
    away 40% of the time) are also cut in two (`cut_check`) and analysed with records left out
    (`drop_check`). Returns how many cases ran, the findings, and how many were cut."""
    r = random.Random(seed)
    end = time.monotonic() + seconds if seconds is not None else None
    findings: list[str] = []
    done = cuts = 0
    with tempfile.TemporaryDirectory(prefix="smbwire-truth-") as tmp:
        work = Path(tmp)
        while (cases is None or done < cases) and (end is None or time.monotonic() < end):
            done += 1
            spec = random_spec(r, r.randrange(1 << 30))
            if spec.get("loss_mode") == "drop":
                spec["loss_mode"] = "retransmit"
            if r.random() < 0.4:
                # Frames in stream order, for the cut and the records left out.
                spec.update({k: 0 for k in ("retransmit", "reorder", "loss") if k in spec})
            cap = work / "c.pcap"
            truth = json.loads(_core.synth(json.dumps(spec), str(cap)))
            threads = r.choice([1, 2])
            try:
                found = truth_check(work, cap, truth, threads)
                if not found and cuttable(spec):
                    n = len(records(cap.read_bytes()))
                    cut = r.randrange(1, n)
                    cuts += 1
                    found = cut_check(work, cap, cut, bool(spec.get("mirror_dup")))
                    if not found:
                        dropped = r.sample(range(n), min(n, r.choice([1, 2, 5, 20])))
                        found = drop_check(work, cap, dropped)
            except RuntimeError as e:
                found = [{"failed": str(e)}]
            if found:
                keep = out / f"finding-{done}"
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(cap, keep)
                (keep / "case.json").write_text(json.dumps({"inputs": [{"synth": spec}], "found": found}, indent=1))
                findings.append(f"case {done}: {json.dumps(found)[:300]} ({keep})")
    return done, findings, cuts


def random_options(r: random.Random, work: Path, captures: list[Path], keys: list[str | None]) -> tuple[list, list]:
    """Options for a case: those of decoding (`analyze`, `analyze --ledger`) and those of
    dedupe (`analyze`, `attribute`); `--max-memory` goes to both. `keys`: each input's keys
    line, when it is an encrypted public capture with recorded keys."""
    dedupe = ["-w", r.choice(["60", "1", "0.002", "0.0005"])]
    if r.random() < 0.6:
        dedupe += ["-t", str(TOPOLOGY)]
    elif r.random() < 0.3:
        dedupe += ["--assume-members"]
    if r.random() < 0.2:
        dedupe += ["--max-index-memory", r.choice(["64KiB", "1MiB"])]
    if r.random() < 0.2:
        dedupe += ["--interval", r.choice(["0.0001", "0.01", "5"])]
    decode: list = []
    if r.random() < 0.2:
        decode += ["--reorder-buffer", r.choice(["64KiB", "256KiB", "1MiB"])]
    if any(keys) and r.random() < 0.8:
        (work / "keys.txt").write_text("".join(f"{k}\n" for k in keys if k))
        decode += ["--keys", str(work / "keys.txt")]
    if r.random() < 0.15 and (span := time_span(work, captures)):
        first, last = span
        a, b = sorted((r.random(), r.random()))
        if r.random() < 0.7:
            decode += ["--from", f"{first + a * (last - first):.6f}"]
        if r.random() < 0.7 and b > a:
            decode += ["--to", f"{first + b * (last - first):.6f}"]
    if r.random() < 0.1:
        m = r.choice(["16MiB", "32MiB"])
        decode += ["--max-memory", m]
        dedupe += ["--max-memory", m]
    return decode, dedupe


def time_span(work: Path, captures: list[Path]) -> tuple[float, float] | None:
    """The first and last capture time of the inputs (None: no frame, or both the same)."""
    smbwire("analyze", *captures, "--json", work / "span.json", "-q")
    c = json.loads((work / "span.json").read_text())["capture"]
    first, last = c.get("first_ts"), c.get("last_ts")
    return (first, last) if first is not None and last is not None and last > first else None


def main() -> int:
    if sys.argv[1:2] == ["--shard-run"]:
        a = json.loads(sys.argv[2])
        print(json.dumps(shard_run(Path(a["work"]), a["captures"], a["options"], a["order_seed"])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, help="how many cases (default: until --minutes)")
    ap.add_argument("--minutes", type=float, help="how long (default 10 when --cases is not given)")
    ap.add_argument("--damage", type=float, default=0.7, help="the share of inputs damaged (default 0.7)")
    ap.add_argument("--out", type=Path, default=Path("differential-findings"),
                    help="where findings' captures are kept (default ./differential-findings)")
    ap.add_argument("--truth-only", action="store_true",
                    help="only generated captures, undamaged, checked against the generator's truth")
    args = ap.parse_args()
    minutes = args.minutes if args.minutes is not None else (None if args.cases else 10.0)
    if args.truth_only:
        done, findings, cuts = run_truth(args.seed, args.cases, None if minutes is None else minutes * 60, args.out)
        for f in findings:
            print(f)
        print(f"{done} cases checked against the generator's truth, {cuts} of them also cut in two: {len(findings)} findings")
        return 1 if findings else 0
    done, findings, limited_cases, truth_cases = run(args.seed, args.cases, None if minutes is None else minutes * 60, args.damage, args.out)
    for f in findings:
        print(f)
    print(f"{done} cases: {len(findings)} findings ({limited_cases} limited: a limit of a worker's "
          f"state reached, threads and shards not compared; {truth_cases} checked against the generator's truth)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
