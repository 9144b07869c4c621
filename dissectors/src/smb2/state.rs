//! Sessions, trees and open files keyed by SessionId/TreeId/FileId, shared by all
//! connections so one session spread over several channels (multichannel) is one session.
//! Also the SMB2 counters reported in `"smb2"`.

#[derive(Debug, Default)]
pub struct SmbState {}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Smb2Stats {}

impl SmbState {
    pub fn new() -> Self {
        SmbState::default()
    }
    pub fn stats(&self) -> Smb2Stats {
        Smb2Stats::default()
    }
}
