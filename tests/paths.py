"""Where the tests find the repository and its bundled captures (a clone alone runs them)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "captures"
# Public captures with their MANIFEST (sources and licences) and tshark-derived expected.json.
PUBLIC = CAPTURES / "public"
