//! Per-direction TCP reassembly with an in-order fast path and a bounded out-of-order buffer.
