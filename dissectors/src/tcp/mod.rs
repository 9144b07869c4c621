//! TCP: the flow table and per-direction reassembly.
//!
//! Reassembly delivers each direction's byte stream in order, exactly once: retransmitted
//! and overlapping bytes are dropped (and counted), out-of-order segments wait in a bounded
//! buffer, and bytes that never arrive (lost segments, snaplen-truncated frames, buffer
//! overflow) are delivered as an explicit `Chunk::Gap` so the consumer can skip or resync.

pub mod anomaly;
pub mod flow;
pub mod reassembly;

pub use anomaly::Anomaly;

pub use flow::{Endpoint, FlowConfig, FlowOutcome, FlowTable};
pub use reassembly::{Reassembler, ReassemblyConfig, SegmentOutcome};

use crate::frame::FrameCtx;

/// What reassembly hands to a stream consumer.
#[derive(Debug, Clone, Copy)]
pub enum Chunk<'a> {
    /// The next in-order bytes of the stream.
    Data(&'a [u8]),
    /// This many bytes of the stream are missing from the capture.
    Gap(u64),
}

/// A consumer of one direction of a TCP stream (SMB2 framing, iWARP MPA...).
/// `S` is the run state the consumer is lent (`context::Shared` in the pipeline; `()` in tests).
pub trait StreamConsumer<S> {
    fn data(&mut self, bytes: &[u8], ctx: &FrameCtx, shared: &mut S);
    fn gap(&mut self, missing: u64, ctx: &FrameCtx, shared: &mut S);
    /// The stream ended (FIN/RST seen, idle expiry, or end of input).
    fn close(&mut self, ctx: &FrameCtx, shared: &mut S);
    /// Has this direction carried storage traffic (a valid SMB2 or MPA start)? The flow
    /// table evicts flows that have not before those that have.
    fn carries_storage(&self) -> bool {
        false
    }
}

/// Counters reassembly keeps (summed into the report).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReassemblyStats {
    pub segments: u64,
    /// Payload bytes of segments that were already delivered (retransmission/overlap).
    pub retransmitted_bytes: u64,
    pub retransmitted_segments: u64,
    pub out_of_order_segments: u64,
    /// Bytes declared missing (lost segments, snaplen truncation, buffer overflow).
    pub gap_bytes: u64,
    pub gaps: u64,
    /// Peak bytes held in out-of-order buffers (all flows).
    pub peak_buffered_bytes: u64,
    /// Captured payload bytes that cannot belong to their stream (before its first byte, beyond
    /// the largest possible window, after it closed, or carried by a RST).
    pub dropped_bytes: u64,
    /// Holes declared lost because an out-of-order buffer hit its limits.
    pub overflow_gaps: u64,
    /// Bytes of such holes that arrived afterwards (reordering beyond the buffer), and the
    /// segments that carried them; not counted in `gap_bytes` or as retransmitted.
    pub late_bytes: u64,
    pub late_segments: u64,
    /// Keep-alive probes (RFC 1122 §4.2.3.6): SND.NXT-1 with at most one octet.
    pub keepalives: u64,
    /// Frames dropped as mirror-port copies of a frame seen moments before.
    pub mirror_duplicate_frames: u64,
}

impl ReassemblyStats {
    /// Adds another table's counters (the peak is the larger one: the caller knows better when
    /// the tables' buffers add up at one moment, as `--threads` does).
    pub fn absorb(&mut self, o: &ReassemblyStats) {
        let ReassemblyStats {
            segments,
            retransmitted_bytes,
            retransmitted_segments,
            out_of_order_segments,
            gap_bytes,
            gaps,
            peak_buffered_bytes,
            dropped_bytes,
            overflow_gaps,
            late_bytes,
            late_segments,
            keepalives,
            mirror_duplicate_frames,
        } = *o;
        self.segments += segments;
        self.retransmitted_bytes += retransmitted_bytes;
        self.retransmitted_segments += retransmitted_segments;
        self.out_of_order_segments += out_of_order_segments;
        self.gap_bytes += gap_bytes;
        self.gaps += gaps;
        self.peak_buffered_bytes = self.peak_buffered_bytes.max(peak_buffered_bytes);
        self.dropped_bytes += dropped_bytes;
        self.overflow_gaps += overflow_gaps;
        self.late_bytes += late_bytes;
        self.late_segments += late_segments;
        self.keepalives += keepalives;
        self.mirror_duplicate_frames += mirror_duplicate_frames;
    }
}
