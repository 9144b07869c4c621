# Type stub of the Rust extension module smbwire._core (pybind/src/lib.rs), built by
# maturin. Use it through smbwire.engine, which adds input checks and error mapping.
from typing import Callable

def analyze(
    paths: list[str],
    config_json: str,
    evidence_path: str | None,
    progress: Callable[[int, int], None] | None,
) -> str:
    """Analyse the capture files together; returns the result JSON (schema "smbwire/1").
    Raises ValueError (one line) when nothing can be analysed."""

def annotate(paths: list[str], evidence_path: str, out_path: str) -> str:
    """Write out_path (pcapng): the inputs' frames with a comment on each frame of each send in
    the evidence file; returns the counts as JSON. Raises ValueError (one line)."""

def attribute(paths: list[str], config_json: str, evidence_path: str | None = None) -> str:
    """Rerun dedupe and attribution from send ledgers; returns the result JSON (schema
    "smbwire/1"). Raises ValueError (one line) for a file that is not a ledger."""

def analyze_shard(paths: list[str], config_json: str, shard: int, shards: int, part_path: str,
                  progress: Callable[[int, int], object] | None = None) -> str:
    """One decoding task of `analyze --dask`: reads every input, decodes shard `shard` of
    `shards` (by connection), writes its ledger part to `part_path`. Returns JSON {shard,
    shards, frames, shard_frames, shard_bytes, input_bytes, rows}. ValueError (one line) for
    an unreadable input, a stream, or a part that cannot be written."""

def merge_parts(parts: list[str], config_json: str, evidence_path: str | None = None) -> str:
    """The ordered stage of `analyze --dask` over every shard's part: the result JSON that
    `analyze` gives on the same inputs and options. ValueError (one line) for missing,
    foreign or damaged parts."""

def synth_scenarios() -> str:
    """The synthesizer's scenarios: JSON `[{"name", "description"}]`."""
    ...
def synth(spec_json: str, out_path: str) -> str:
    """Write a synthetic scenario capture to out_path; returns the truth JSON."""

def version() -> str: ...

def build_id() -> str: ...

def check_outputs(outputs: list[tuple[str, str]], inputs: list[str]) -> None:
    """ValueError (one line) when an output is an input or another output, by any name."""

def check_writable(path: str) -> None:
    """ValueError (one line) when `path` cannot be an output file."""

def write_output(path: str, data: bytes) -> None:
    """Write `data` as the whole file `path`, atomically; ValueError (one line) on failure."""

class TopologyError(ValueError):
    """A topology that cannot be used; the message is one line (`FILE: line N: key: what`)."""

def load_topology(path: str) -> str:
    """Read and check a topology TOML file; returns its config object as JSON
    (`{"nodes": [{"name", "addresses", "member"}], "rules": [{"share", "file", "class"}]}`)."""

def parse_topology(text: str, source: str = "topology.toml") -> str:
    """`load_topology` on TOML text; `source` names it in the error."""

def check_topology(config_json: str, source: str = "topology") -> str:
    """Check a topology config object (JSON); returns it normalised."""

def topology_to_toml(config_json: str) -> str:
    """A topology config object (JSON) as a TOML file `load_topology` reads back."""

def byte_categories() -> str:
    """JSON `[{"name", "description", "disposition"}]`: every accounting category."""

def traffic_classes() -> str:
    """JSON `[{"name", "label", "description"}]`: the attribution classes, in report order."""

def finding_codes() -> str:
    """JSON `[{"code", "fields": [...]}]`: every finding code and the figures it carries."""

def derive_findings(result_json: str) -> str:
    """JSON `[{"code", <figures>..., "message"}]`: the findings a result's figures give."""

class LiveSession:
    """Live capture and analysis on an engine thread (`smbwire.live` wraps it).
    Raises PermissionError (names the capability), ValueError (bad options, no such
    interface), NotImplementedError, OSError."""

    def __init__(self, iface: str, options_json: str, config_json: str) -> None: ...
    def poll(self, timeout: float = 0.0) -> str | None:
        """Newest snapshot JSON not returned before, waiting up to `timeout` seconds."""
    def stop(self) -> str:
        """Stop, drain, and return the final result JSON."""
    @property
    def backend(self) -> str: ...
    @property
    def hook(self) -> str | None:
        """The eBPF hook in use ("tcx" or "xdp"); None with AF_PACKET."""
    @property
    def fallback_reason(self) -> str | None: ...
    @property
    def finished(self) -> bool: ...
