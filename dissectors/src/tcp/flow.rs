//! The flow table: TCP connections keyed by their address/port pair, with idle expiry.
