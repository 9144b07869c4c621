//! udp
