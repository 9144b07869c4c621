//! RoCEv1 captures (`transport: "rocev1"`): the frames read back through the capture reader
//! and `wire::decode`, the end-to-end checks of `tests_rdma` (independent RoCE reader, SMB Direct, SMB2, data behind
//! the descriptors), and the equivalence with RoCEv2 from the BTH on. The ICRC rule itself is
//! checked against a real InfiniBand packet with a GRH beside it, in the engine's `rdma::ib`.

use super::rdma::{check, gen, spec};
use smbwire_dissectors::capture::testutil::{open_bytes, read_all};
use smbwire_dissectors::wire::{self, Transport};
use std::net::{IpAddr, Ipv4Addr};

const ETH: usize = 14;
const GRH: usize = 40;

/// The Ethernet header and GRH of a frame, and the rest (BTH..ICRC).
fn split(f: &[u8]) -> (&[u8], &[u8]) {
    let len = usize::from(u16::from_be_bytes([f[ETH + 4], f[ETH + 5]]));
    (&f[..ETH + GRH], &f[ETH + GRH..ETH + GRH + len])
}

/// Every frame of a RoCEv1 capture goes through the capture reader and `wire::decode` as
/// `Transport::RoceV1` from the GRH to the ICRC, with IPv4-mapped GIDs of the two nodes,
/// and nothing is counted as odd.
#[test]
fn frames_round_trip_through_the_reader_and_decoder() {
    let (buf, truth, _) = gen(&spec(
        "redirect4",
        r#","transport":"rocev1","mtu":1024,"mirror_dup":true,"retransmit":0.01,"reorder":0.01"#,
    ));
    let pass = read_all(open_bytes(buf).unwrap());
    assert_eq!(pass.an.iter().count(), 0, "reader anomalies");
    assert_eq!(pass.frames.len() as u64, truth.capture.frames);
    let nodes = [Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2)];
    let node = |ip: IpAddr| match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped().filter(|v| nodes.contains(v)),
        IpAddr::V4(_) => None,
    };
    let mut opcodes = std::collections::BTreeSet::new();
    for (info, data) in &pass.frames {
        let d = wire::decode(info.linktype, data).unwrap();
        assert_eq!(d.anomaly, None);
        let (src, dst) = (node(d.src).expect("src GID"), node(d.dst).expect("dst GID"));
        assert_ne!(src, dst);
        let Transport::RoceV1(r) = d.transport else {
            panic!("frame {:?} is not RoCEv1", info.frame)
        };
        let (_, body) = split(data);
        assert_eq!(r.len(), GRH + body.len());
        assert_eq!(d.header_bytes + r.len(), data.len());
        assert_eq!(r[GRH..], *body);
        opcodes.insert(body[0]);
    }
    // CM MADs, Sends, Read Request/Responses, ACKs all present.
    for op in [0x64u8, 0x04, 0x0c, 0x0d, 0x0e, 0x0f, 0x11] {
        assert!(opcodes.contains(&op), "opcode {op:#x}");
    }
}

#[test]
fn rocev1_scenarios_carry_the_table() {
    for (name, mtu) in [
        ("mirror2", 4096),
        ("nested4", 1024),
        ("redirect4", 4096),
        ("read-nonowner", 1024),
        ("read-owner", 256),
    ] {
        let (t, o, _) = check(&spec(
            name,
            &format!(r#","transport":"rocev1","mtu":{mtu}"#),
        ));
        let r = t.rdma.unwrap();
        assert_eq!(r.transport, "rocev1");
        assert_eq!(o.cm, 5 * r.connections);
        assert_eq!(r.rdma_read_bytes, t.smb2.write_data_bytes);
        assert_eq!(r.rdma_write_bytes, t.smb2.read_data_bytes);
    }
    check(&spec(
        "redirect4",
        r#","transport":"rocev1","max_send_size":128,"send_with_invalidate":true,"descriptors":2,"qps":2"#,
    ));
}

/// Same spec, RoCEv1 and RoCEv2: the same frames from the BTH on (bar the ICRC, which
/// covers the network header), only the encapsulation differs.
#[test]
fn rocev1_is_rocev2_with_a_grh() {
    let extra = r#","mtu":1024,"reorder":0.02,"retransmit":0.02,"loss":0.01"#;
    let (_, t1, f1) = gen(&spec(
        "nested4",
        &format!(r#","transport":"rocev1"{extra}"#),
    ));
    let (_, t2, f2) = gen(&spec(
        "nested4",
        &format!(r#","transport":"rocev2"{extra}"#),
    ));
    assert_eq!(f1.len(), f2.len());
    for (a, b) in f1.iter().zip(&f2) {
        let (_, v1) = split(&a.data);
        let ip = &b.data[ETH..];
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let v2 = &ip[20 + 8..total];
        // The BTH; and the whole packet but the ICRC for RDMA data (Sends differ where
        // SMB2 carries a time, the link clock depending on frame sizes).
        assert_eq!((v1[..12].to_vec(), v1.len()), (v2[..12].to_vec(), v2.len()));
        if (0x06..=0x10).contains(&v1[0]) {
            assert_eq!(v1[..v1.len() - 4], v2[..v2.len() - 4]);
        }
        assert_eq!(&a.data[..12], &b.data[..12], "MAC addresses");
    }
    let (r1, r2) = (t1.rdma.unwrap(), t2.rdma.unwrap());
    assert_eq!(r1.opcodes, r2.opcodes);
    assert_eq!(
        (
            r1.lost_packets,
            r1.retransmitted_packets,
            r1.reordered_pairs
        ),
        (
            r2.lost_packets,
            r2.retransmitted_packets,
            r2.reordered_pairs
        )
    );
    assert_eq!(t1.edges.len(), t2.edges.len());
}

/// Retransmitted, reordered and lost-then-resent RoCE data packets: each PSN still carries
/// its bytes once, the opcode histogram counts every packet once as sent, and the extra
/// frames are exactly the retransmissions.
#[test]
fn retransmit_reorder_and_loss_on_roce() {
    for tr in ["rocev1", "rocev2"] {
        let clean = format!(r#","transport":"{tr}","mtu":1024"#);
        let (_, c, _) = gen(&spec("mirror2", &clean));
        let (t, o, _) = check(&spec(
            "mirror2",
            &format!(r#"{clean},"retransmit":0.02,"reorder":0.02,"loss":0.01"#),
        ));
        let r = t.rdma.as_ref().unwrap();
        assert!(r.retransmitted_packets > 0 && r.reordered_pairs > 0 && r.lost_packets > 0);
        assert_eq!(t.capture.frames, c.capture.frames + r.retransmitted_packets);
        assert_eq!(r.opcodes, c.rdma.as_ref().unwrap().opcodes, "{tr}");
        assert_eq!(o.opcodes, r.opcodes);
    }
    // Reordering shows as a PSN going backwards within a QP's data packets.
    let backwards = |frames: &[super::Frame]| {
        let mut last = std::collections::HashMap::new();
        let mut n = 0;
        for f in frames {
            let (_, b) = split(&f.data);
            if (0x06..=0x10).contains(&b[0]) && b[0] != 0x0c {
                let qp = u32::from_be_bytes([0, b[5], b[6], b[7]]);
                let psn = u32::from_be_bytes([0, b[9], b[10], b[11]]);
                if let Some(prev) = last.insert(qp, psn) {
                    n += u32::from(psn.wrapping_sub(prev) & 0x80_0000 != 0);
                }
            }
        }
        n
    };
    let clean = r#","transport":"rocev1","mtu":1024"#;
    let (_, _, c) = gen(&spec("mirror2", clean));
    let (_, t, f) = gen(&spec("mirror2", &format!(r#"{clean},"reorder":0.05"#)));
    let pairs = t.rdma.unwrap().reordered_pairs;
    assert_eq!((backwards(&c), u64::from(backwards(&f))), (0, pairs));
}
