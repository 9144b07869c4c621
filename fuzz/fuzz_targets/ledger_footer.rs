//! A ledger's footer (its Thrift-encoded Parquet metadata) alone: smbwire's footer check, then,
//! when it passes, the `parquet` crate's decoding (`ledger::decode_footer_metadata`). The crate
//! reads a field it knows as parquet.thrift's type whatever type the field declares, so where
//! the check passes what the crate then reads differently, a few KB can cost it seconds (found
//! by `ledger_inputs`, 2026-11-30 and 2026-12-01): such an input shows here as a slow unit or a
//! timeout, at far more executions a second than whole files through `attribute`. Seeds: the
//! footers of the ledgers in `corpus/ledger_inputs` and of the other writers' files in
//! `dissectors/src/ledger/vectors`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = smbwire_dissectors::ledger::decode_footer_metadata(data);
});
