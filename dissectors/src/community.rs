//! Community ID v1 (the community-id-spec flow hash): one string naming a connection the same
//! way in smbwire's evidence and in other tools' logs (Zeek, Suricata).
//!
//! Construction (spec v1): SHA-1 over seed (2 bytes, big endian), source address, destination
//! address (4 or 16 bytes, network order), IP protocol (1 byte), one zero pad byte, source
//! port, destination port (2 bytes each, big endian), after ordering the endpoints so the
//! smaller (address, port) comes first (both directions of a connection give the same ID);
//! the digest in standard base64 with padding, prefixed with the version, `1:`.

use sha1::{Digest, Sha1};
use std::net::IpAddr;

/// IP protocol numbers used here.
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

/// A Community ID v1 as its SHA-1 digest (20 bytes, no allocation); serialises and displays
/// as the spec's string, `1:` + base64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommunityId(pub [u8; 20]);

impl CommunityId {
    /// Community ID v1 of a flow with ports (TCP, UDP, SCTP). `None` when the two addresses
    /// are of different families (no such flow exists).
    pub fn v1(seed: u16, src: IpAddr, sport: u16, dst: IpAddr, dport: u16, proto: u8) -> Option<CommunityId> {
        digest_v1(seed, src, sport, dst, dport, proto).map(CommunityId)
    }
}

impl std::fmt::Display for CommunityId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "1:{}", base64(&self.0))
    }
}

impl serde::Serialize for CommunityId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The Community ID v1 string of a flow with ports; see `CommunityId::v1`.
pub fn community_id_v1(seed: u16, src: IpAddr, sport: u16, dst: IpAddr, dport: u16, proto: u8) -> Option<String> {
    CommunityId::v1(seed, src, sport, dst, dport, proto).map(|c| c.to_string())
}

fn digest_v1(seed: u16, src: IpAddr, sport: u16, dst: IpAddr, dport: u16, proto: u8) -> Option<[u8; 20]> {
    let (s, d) = (addr_bytes(src), addr_bytes(dst));
    if s.len() != d.len() {
        return None;
    }
    // Ordering rule: the smaller address first; equal addresses, the smaller port first.
    let ((s, sport), (d, dport)) = if (&s, sport) <= (&d, dport) { ((s, sport), (d, dport)) } else { ((d, dport), (s, sport)) };
    let mut h = Sha1::new();
    h.update(seed.to_be_bytes());
    h.update(&s);
    h.update(&d);
    h.update([proto, 0]);
    h.update(sport.to_be_bytes());
    h.update(dport.to_be_bytes());
    Some(h.finalize().into())
}

/// Standard base64 (RFC 4648 §4) with padding.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The spec's published baseline vectors (community-id-spec, also in Zeek's and Vector's
    /// test suites): TCP and UDP 1.2.3.4:1122 → 5.6.7.8:3344 with seeds 0 and 1, both directions.
    #[test]
    fn spec_vectors() {
        let cases = [
            (0, PROTO_TCP, "1:wCb3OG7yAFWelaUydu0D+125CLM="),
            (0, PROTO_UDP, "1:0Mu9InQx6z4ZiCZM/7HXi2WMhOg="),
            (1, PROTO_TCP, "1:HhA1B+6CoLbiKPEs5nhNYN4XWfk="),
            (1, PROTO_UDP, "1:OShq+iKDAMVouh/4bMxB9Sz4amw="),
        ];
        for (seed, proto, want) in cases {
            let fwd = community_id_v1(seed, ip("1.2.3.4"), 1122, ip("5.6.7.8"), 3344, proto);
            let rev = community_id_v1(seed, ip("5.6.7.8"), 3344, ip("1.2.3.4"), 1122, proto);
            assert_eq!(fwd.as_deref(), Some(want), "seed {seed} proto {proto}");
            assert_eq!(rev.as_deref(), Some(want), "reverse, seed {seed} proto {proto}");
        }
    }

    #[test]
    fn same_address_orders_by_port_and_mixed_families_have_none() {
        let a = community_id_v1(0, ip("10.0.0.1"), 445, ip("10.0.0.1"), 50000, PROTO_TCP);
        let b = community_id_v1(0, ip("10.0.0.1"), 50000, ip("10.0.0.1"), 445, PROTO_TCP);
        assert_eq!(a, b);
        assert!(community_id_v1(0, ip("10.0.0.1"), 1, ip("::1"), 2, PROTO_TCP).is_none());
        let v6 = community_id_v1(0, ip("2001:db8::1"), 1, ip("2001:db8::2"), 445, PROTO_TCP).unwrap();
        assert!(v6.starts_with("1:") && v6.len() == 30, "{v6}");
    }

    #[test]
    fn base64_rfc4648_vectors() {
        for (i, o) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy")] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }
}
