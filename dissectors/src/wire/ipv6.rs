//! ipv6
