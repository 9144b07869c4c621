//! SMB2/3 (MS-SMB2): NetBIOS session framing, record parsers, the streaming message parser
//! and the session/tree/file state shared by all connections (multichannel).
//!
//! - `netbios`: the 4-byte Direct TCP transport header (MS-SMB2 §2.1).
//! - `records`: pure parsers, bytes in, structs out (header, NEGOTIATE, SESSION_SETUP,
//!   TREE_CONNECT, CREATE, READ, WRITE, CLOSE, ...); no state.
//! - `transform`: TRANSFORM_HEADER, COMPRESSION_TRANSFORM_HEADER, SMB1 recognition.
//! - `stream`: per-direction streaming parser: frames messages, walks compound chains,
//!   streams WRITE/READ data into the payload hasher without buffering it, resyncs after gaps.
//! - `handle`: what each message does to the state (joins requests and responses).
//! - `state`: sessions, trees, open files keyed by SessionId/TreeId/FileId; pending requests.
//! - `xca`: the MS-XCA decompressors and compressors (LZNT1, Plain LZ77, LZ77+Huffman) for
//!   SMB 3.1.1 compression.
//! - `keyshare`: with `--keys` and `--threads`, the sessions' preauth hashes the workers share.
//! - `bounded`: the capped, oldest-first-evicting map the state is built on.

pub mod anomaly;
pub mod bounded;
pub mod crypto;
pub mod handle;
pub mod keyshare;
pub mod netbios;
pub mod records;
pub mod state;
pub mod stream;
#[cfg(test)]
pub mod testutil;
pub mod transform;
pub mod xca;

pub use anomaly::Anomaly;

pub use state::{SmbState, Smb2Stats};
pub use crate::context::PayloadSink;
pub use stream::Smb2Stream;

/// The parts of the run state lent to the SMB2 stage and the stages that carry SMB2 (SMB Direct).
pub type Parts<'a> = crate::context::Parts<'a, SmbState>;
