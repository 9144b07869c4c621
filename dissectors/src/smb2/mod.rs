//! SMB2/3 (MS-SMB2): NetBIOS session framing, record parsers, the streaming message parser
//! and the session/tree/file state shared by all connections (multichannel).
//!
//! - `netbios`: the 4-byte Direct TCP transport header (MS-SMB2 §2.1).
//! - `records`: pure parsers, bytes in, structs out (header, NEGOTIATE, SESSION_SETUP,
//!   TREE_CONNECT, CREATE, READ, WRITE, CLOSE, ...); no state.
//! - `stream`: per-direction streaming parser: frames messages, walks compound chains,
//!   streams WRITE/READ data into the payload hasher without buffering it, resyncs after gaps.
//! - `state`: sessions, trees, open files keyed by SessionId/TreeId/FileId; pending requests.

pub mod netbios;
pub mod records;
pub mod state;
pub mod stream;
