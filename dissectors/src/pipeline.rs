//! The pipeline: frames → wire decode → TCP flows → SMB2 streams → dedupe. (stub)
use crate::accounting::Accounting;
use crate::anomaly::Anomalies;
use crate::dedupe::Dedupe;
use crate::smb2::state::SmbState;

/// State shared by every stream consumer: counters, SMB sessions, the dedupe index.
pub struct Shared {
    pub anomalies: Anomalies,
    pub accounting: Accounting,
    pub smb: SmbState,
    pub dedupe: Dedupe,
}
