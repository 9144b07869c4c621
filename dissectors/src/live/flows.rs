//! Flow identity and exact per-flow counters, shared by both backends.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Serialize, Serializer};

/// `FlowKey::family` values (`SMBWIRE_FAMILY_*` in bpf/smbwire.h).
pub mod family {
    use crate::abi::{u8_of, SMBWIRE_FAMILY_IPV4, SMBWIRE_FAMILY_IPV6, SMBWIRE_FAMILY_ROCEV1};
    pub const IPV4: u8 = u8_of(SMBWIRE_FAMILY_IPV4);
    pub const IPV6: u8 = u8_of(SMBWIRE_FAMILY_IPV6);
    /// RoCEv1: the addresses are the GRH source and destination GIDs.
    pub const ROCEV1: u8 = u8_of(SMBWIRE_FAMILY_ROCEV1);
}

/// Protocol of a RoCEv1 flow: the GRH next header of a BTH (IBTA vol.1 8.3).
pub const PROTO_BTH: u8 = 0x1b;

/// One direction of a flow. Byte-compatible with `struct smbwire_flow_key`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// Network order; IPv4 in the first 4 bytes.
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub family: u8,
    pub _pad: u16,
}

const _: () = {
    use crate::abi::smbwire_flow_key as k;
    use std::mem::{offset_of, size_of};
    assert!(size_of::<FlowKey>() == k::SIZE);
    assert!(offset_of!(FlowKey, saddr) == k::SADDR && offset_of!(FlowKey, daddr) == k::DADDR);
    assert!(offset_of!(FlowKey, sport) == k::SPORT && offset_of!(FlowKey, dport) == k::DPORT);
    assert!(offset_of!(FlowKey, proto) == k::PROTO && offset_of!(FlowKey, family) == k::FAMILY);
};

impl FlowKey {
    /// The connection this flow direction belongs to, the same key for both directions
    /// (`connection_key()` in bpf/smbwire.c computes the same): TCP, the two (address, port)
    /// ends in order, lower first; RoCEv2 (UDP to 4791) and RoCEv1, the two addresses in
    /// order with no ports (every queue pair between two ports is one unit, as the
    /// analysis shards them). What the session sheds as a whole.
    pub fn connection(&self) -> FlowKey {
        let mut k = *self;
        k._pad = 0;
        let rdma = self.family == family::ROCEV1 || self.proto == 17;
        if rdma {
            k.sport = 0;
            k.dport = 0;
        }
        if (k.daddr, k.dport) < (k.saddr, k.sport) {
            std::mem::swap(&mut k.saddr, &mut k.daddr);
            std::mem::swap(&mut k.sport, &mut k.dport);
        }
        k
    }

    /// The kernel's key bytes (`from_bytes` reads them back).
    pub fn to_bytes(&self) -> [u8; 40] {
        let mut b = [0u8; 40];
        b[0..16].copy_from_slice(&self.saddr);
        b[16..32].copy_from_slice(&self.daddr);
        b[32..34].copy_from_slice(&self.sport.to_ne_bytes());
        b[34..36].copy_from_slice(&self.dport.to_ne_bytes());
        b[36] = self.proto;
        b[37] = self.family;
        b
    }

    /// Reads the kernel's key bytes (host-order ports).
    pub fn from_bytes(b: &[u8]) -> Option<FlowKey> {
        if b.len() != 40 {
            return None;
        }
        let mut k = FlowKey::default();
        k.saddr.copy_from_slice(&b[0..16]);
        k.daddr.copy_from_slice(&b[16..32]);
        k.sport = u16::from_ne_bytes([b[32], b[33]]);
        k.dport = u16::from_ne_bytes([b[34], b[35]]);
        k.proto = b[36];
        k.family = b[37];
        Some(k)
    }

    fn addr(&self, a: &[u8; 16]) -> String {
        match self.family {
            family::IPV4 => Ipv4Addr::new(a[0], a[1], a[2], a[3]).to_string(),
            _ => Ipv6Addr::from(*a).to_string(),
        }
    }

    fn proto_name(&self) -> String {
        match (self.family, self.proto) {
            (family::ROCEV1, _) => "rocev1".into(),
            (_, 6) => "tcp".into(),
            (_, 17) if self.dport == super::ROCEV2_UDP_PORT => "rocev2".into(),
            (_, 17) => "udp".into(),
            (_, p) => format!("ip-proto-{p}"),
        }
    }
}

impl std::fmt::Display for FlowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (s, d) = (self.addr(&self.saddr), self.addr(&self.daddr));
        match self.family {
            family::ROCEV1 => write!(f, "{s} > {d} {}", self.proto_name()),
            family::IPV6 => write!(
                f,
                "[{s}]:{} > [{d}]:{} {}",
                self.sport,
                self.dport,
                self.proto_name()
            ),
            _ => write!(
                f,
                "{s}:{} > {d}:{} {}",
                self.sport,
                self.dport,
                self.proto_name()
            ),
        }
    }
}

impl Serialize for FlowKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Exact counters of one flow direction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FlowStat {
    pub flow: FlowKey,
    pub packets: u64,
    pub bytes: u64,
}

/// Sorts by bytes (largest first) and keeps `n`.
pub fn top(mut all: Vec<FlowStat>, n: usize) -> Vec<FlowStat> {
    all.sort_by(rank);
    all.truncate(n);
    all
}

/// Largest by bytes first; ties by flow, so the list is the same however it is built.
fn rank(a: &FlowStat, b: &FlowStat) -> std::cmp::Ordering {
    b.bytes.cmp(&a.bytes).then(a.flow.cmp(&b.flow))
}

/// The `n` largest flows of a stream of them, in memory for `2n` whatever the stream's
/// length: the stats read every flow of a full table (65,536) every second, and collecting
/// them all first allocated and sorted a 4 MB list each time (issue 12).
pub struct TopFlows {
    n: usize,
    kept: Vec<FlowStat>,
    /// Flows offered.
    pub count: u64,
}

impl TopFlows {
    pub fn new(n: usize) -> TopFlows {
        TopFlows { n, kept: Vec::with_capacity(2 * n.max(1)), count: 0 }
    }

    pub fn push(&mut self, f: FlowStat) {
        self.count += 1;
        if self.n == 0 {
            return;
        }
        self.kept.push(f);
        if self.kept.len() >= 2 * self.n {
            self.kept.select_nth_unstable_by(self.n - 1, rank);
            self.kept.truncate(self.n);
        }
    }

    /// Forgets what was offered (a read that failed half-way starts over).
    pub fn clear(&mut self) {
        self.kept.clear();
        self.count = 0;
    }

    /// The kept flows, largest first (as `top` of all of them).
    pub fn into_vec(self) -> Vec<FlowStat> {
        top(self.kept, self.n)
    }
}

/// User-space flow table (AF_PACKET backend), capped like the kernel's LRU map; flows past
/// the cap are counted together in `overflow` so totals stay exact.
#[derive(Default)]
pub struct FlowTable {
    map: HashMap<FlowKey, (u64, u64)>,
    pub overflow_packets: u64,
    pub overflow_bytes: u64,
}

/// Same capacity as `SMBWIRE_MAX_FLOWS`.
pub const MAX_FLOWS: usize = 65536;

impl FlowTable {
    pub fn add(&mut self, key: FlowKey, packets: u64, bytes: u64) {
        let len = self.map.len();
        match self.map.get_mut(&key) {
            Some(c) => {
                c.0 += packets;
                c.1 += bytes;
            }
            None if len < MAX_FLOWS => {
                self.map.insert(key, (packets, bytes));
            }
            None => {
                self.overflow_packets += packets;
                self.overflow_bytes += bytes;
            }
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn stats(&self) -> Vec<FlowStat> {
        self.map
            .iter()
            .map(|(k, &(packets, bytes))| FlowStat {
                flow: *k,
                packets,
                bytes,
            })
            .collect()
    }

    /// The `n` largest flows (as `top(self.stats(), n)`, without the full list).
    pub fn top(&self, n: usize) -> Vec<FlowStat> {
        let mut t = TopFlows::new(n);
        for (k, &(packets, bytes)) in &self.map {
            t.push(FlowStat { flow: *k, packets, bytes });
        }
        t.into_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_bytes_round_trip_and_display() {
        let mut b = [0u8; 40];
        b[0..4].copy_from_slice(&[198, 18, 0, 1]);
        b[16..20].copy_from_slice(&[198, 18, 0, 2]);
        b[32..34].copy_from_slice(&50000u16.to_ne_bytes());
        b[34..36].copy_from_slice(&445u16.to_ne_bytes());
        b[36] = 6;
        b[37] = family::IPV4;
        let k = FlowKey::from_bytes(&b).unwrap();
        assert_eq!(k.to_string(), "198.18.0.1:50000 > 198.18.0.2:445 tcp");
        assert!(FlowKey::from_bytes(&b[..39]).is_none());
        assert_eq!(k.to_bytes(), b);
    }

    #[test]
    fn both_directions_of_a_connection_have_one_key() {
        let mut a = FlowKey { proto: 6, family: family::IPV4, sport: 50000, dport: 445, ..Default::default() };
        a.saddr[..4].copy_from_slice(&[198, 18, 0, 9]);
        a.daddr[..4].copy_from_slice(&[198, 18, 0, 2]);
        let b = FlowKey { saddr: a.daddr, daddr: a.saddr, sport: a.dport, dport: a.sport, ..a };
        assert_eq!(a.connection(), b.connection());
        assert_eq!(a.connection().saddr[3], 2, "lower address first");
        assert_eq!(a.connection().sport, 445);
        // Same addresses, another client port: another connection.
        let c = FlowKey { sport: 50001, ..a };
        assert_ne!(c.connection(), a.connection());
        // Equal addresses (loopback): the ports order the ends.
        let l = FlowKey { daddr: a.saddr, ..a };
        let r = FlowKey { sport: l.dport, dport: l.sport, ..l };
        assert_eq!(l.connection(), r.connection());
        assert_eq!(l.connection().sport, 445);
        // RoCEv2: every queue pair between two addresses is one unit, ports left out.
        let q1 = FlowKey { proto: 17, sport: 49152, dport: 4791, ..a };
        let q2 = FlowKey { saddr: a.daddr, daddr: a.saddr, proto: 17, sport: 61000, dport: 4791, ..a };
        assert_eq!(q1.connection(), q2.connection());
        assert_eq!((q1.connection().sport, q1.connection().dport), (0, 0));
    }

    #[test]
    fn table_caps_and_keeps_totals() {
        let mut t = FlowTable::default();
        for i in 0..(MAX_FLOWS as u32 + 10) {
            let mut k = FlowKey::default();
            k.saddr[..4].copy_from_slice(&i.to_be_bytes());
            t.add(k, 1, 100);
        }
        assert_eq!(t.len(), MAX_FLOWS);
        assert_eq!(t.overflow_packets, 10);
        let sum: u64 = t.stats().iter().map(|s| s.bytes).sum::<u64>() + t.overflow_bytes;
        assert_eq!(sum, (MAX_FLOWS as u64 + 10) * 100);
        assert_eq!(top(t.stats(), 5).len(), 5);
        assert_eq!(t.top(5), top(t.stats(), 5));
    }

    #[test]
    fn top_flows_keeps_the_largest_in_bounded_memory() {
        let flow = |i: u32| {
            let mut k = FlowKey::default();
            k.saddr[..4].copy_from_slice(&i.to_be_bytes());
            k
        };
        // Bytes repeat (ties are ordered by flow) and arrive in no order.
        let all: Vec<FlowStat> = (0..10_000u32)
            .map(|i| FlowStat { flow: flow(i), packets: 1, bytes: u64::from(i.wrapping_mul(7919) % 1000) })
            .collect();
        for n in [0, 1, 5, 32] {
            let mut t = TopFlows::new(n);
            for f in &all {
                t.push(f.clone());
                assert!(t.kept.len() < 2 * n.max(1), "holds at most 2n");
            }
            assert_eq!(t.count, 10_000);
            assert_eq!(t.into_vec(), top(all.clone(), n), "n = {n}");
        }
    }
}
