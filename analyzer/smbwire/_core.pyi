# Type stub of the Rust extension module smbwire._core (dissectors/src/python.rs), built by
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

def synth(spec_json: str, out_path: str) -> str:
    """Write a synthetic scenario capture to out_path; returns the truth JSON."""

def version() -> str: ...
