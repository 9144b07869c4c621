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
}
