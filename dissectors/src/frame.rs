//! Identity of a captured frame, carried through every stage so evidence can name frames.

use serde::Serialize;

/// A frame's place in the input: which capture file (index into the list given on the
/// command line) and its 1-based frame number in that file (Wireshark's `frame.number`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct FrameRef {
    pub file: u16,
    pub number: u64,
}

/// What every stage knows about the frame currently being processed.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameCtx {
    pub frame: FrameRef,
    /// Capture timestamp, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The frame's 1-based place among all frames of the run (0: not from a run, in unit
    /// tests). Ids of what a frame opens (TCP flows and connections, RDMA connections) are
    /// derived from it, so they are the same whichever worker of `--threads` decodes the frame
    /// and order by creation across workers.
    pub seq: u64,
}
