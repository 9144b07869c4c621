//! ipv4
