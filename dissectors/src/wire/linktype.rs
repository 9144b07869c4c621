//! Link-layer types (tcpdump.org LINKTYPE_* values) that `wire::decode` understands, as the
//! capture readers report them (pcap file header, pcapng interface description).

pub const NULL: u32 = 0; // BSD loopback: 4-byte host-order address family
pub const ETHERNET: u32 = 1;
pub const RAW: u32 = 101; // raw IPv4/IPv6
pub const LINUX_SLL: u32 = 113;
pub const IPV4: u32 = 228;
pub const IPV6: u32 = 229;
pub const LINUX_SLL2: u32 = 276;
pub const ERF: u32 = 197;
pub const IPOIB: u32 = 242; // RFC 4391 §6 encapsulation header, then IP
pub const INFINIBAND: u32 = 247; // an InfiniBand packet from its LRH
