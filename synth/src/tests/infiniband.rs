//! Native InfiniBand captures (`transport: "infiniband"`): ERF InfiniBand records (LINKTYPE_ERF)
//! read back through the capture reader and `wire::decode` (LRH with the nodes' LIDs, ICRC and
//! VCRC recomputed here), the same packets as RoCEv2 from the BTH on, and the same analysis
//! through the real `Pipeline` as the same scenario over RoCEv2, names of the nodes aside (LIDs
//! rather than IPv4 addresses).

use super::rdma::{gen, spec};
use crate::pcap::LINKTYPE_ERF;
use smbwire_dissectors::accounting::Accounting;
use smbwire_dissectors::capture::testutil::{open_bytes, read_all};
use smbwire_dissectors::capture::RawFrame;
use smbwire_dissectors::pipeline::{Config, Pipeline};
use smbwire_dissectors::rdma::ib;
use smbwire_dissectors::wire::{self, erf, infiniband as ibl, Transport};
use serde_json::{json, Value};
use std::time::Instant;

const ETH: usize = 14;

/// Every record is an ERF InfiniBand record holding LRH / BTH..ICRC / VCRC between the two
/// nodes' LIDs (1 and 2), with both CRCs right, decoded as `Transport::Infiniband`; the BTH
/// onwards is RoCEv2's packet for the same spec (bar the ICRC, and Sends carrying a time).
#[test]
fn infiniband_is_rocev2_with_an_lrh() {
    let extra = r#","mtu":1024,"reorder":0.02,"retransmit":0.02,"loss":0.01"#;
    let (buf, t1, _) = gen(&spec("nested4", &format!(r#","transport":"infiniband"{extra}"#)));
    let (_, t2, f2) = gen(&spec("nested4", &format!(r#","transport":"rocev2"{extra}"#)));
    assert_eq!(u32::from_le_bytes(buf[20..24].try_into().unwrap()), LINKTYPE_ERF);
    let pass = read_all(open_bytes(buf).unwrap());
    assert_eq!(pass.an.iter().count(), 0, "reader anomalies");
    assert_eq!(pass.frames.len(), f2.len());
    let lids = [ibl::lid_addr(1), ibl::lid_addr(2)];
    for ((info, rec), b) in pass.frames.iter().zip(&f2) {
        assert_eq!(info.linktype, LINKTYPE_ERF);
        assert_eq!(rec.len() % 8, 0, "records padded to 8 bytes");
        let r = erf::record(rec).unwrap();
        assert_eq!((r.rtype, r.offset), (erf::rtype::INFINIBAND, erf::HEADER_LEN));
        let pkt = r.packet;
        let lrh = ibl::Lrh::parse(&ibl::Packet::new_checked(pkt).unwrap());
        assert_eq!(lrh.lnh, ibl::lnh::IBA_LOCAL);
        let end = usize::from(lrh.pkt_len) * 4;
        assert_eq!(end + ibl::VCRC_LEN, pkt.len());
        assert_eq!(ib::icrc_infiniband(&pkt[..end - 4]).to_le_bytes(), pkt[end - 4..end]);
        assert_eq!(ibl::vcrc(&pkt[..end]).to_le_bytes(), pkt[end..]);
        let d = wire::decode(info.linktype, rec).unwrap();
        assert_eq!(d.anomaly, None);
        assert!(lids.contains(&d.src) && lids.contains(&d.dst) && d.src != d.dst);
        let Transport::Infiniband(v1) = d.transport else { panic!("frame {:?}", info.frame) };
        assert_eq!(v1, &pkt[ibl::LRH_LEN..end]);
        assert_eq!(d.header_bytes + v1.len(), rec.len());
        let ip = &b.data[ETH..];
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let v2 = &ip[20 + 8..total];
        assert_eq!((v1[..12].to_vec(), v1.len()), (v2[..12].to_vec(), v2.len()));
        if (0x06..=0x10).contains(&v1[0]) {
            assert_eq!(v1[..v1.len() - 4], v2[..v2.len() - 4]);
        }
    }
    let (r1, r2) = (t1.rdma.unwrap(), t2.rdma.unwrap());
    assert_eq!(r1.transport, "infiniband");
    assert_eq!(r1.opcodes, r2.opcodes);
    assert_eq!(t1.edges.len(), t2.edges.len());
}

/// The capture through `Pipeline::process` with the topology naming the nodes by `addrs`:
/// (edges reduced to the compared fields, sorted; totals; the RDMA section; accounting
/// categories that are not header bytes, and anomalies).
fn figures(pcap: Vec<u8>, addrs: [&str; 2]) -> (Vec<Value>, Value, Value, Value) {
    let topo = json!({"topology": {"nodes": [
        {"name": "owner", "addresses": [addrs[0]], "member": true},
        {"name": "partner", "addresses": [addrs[1]], "member": true}]}});
    let mut p = Pipeline::new(&Config::from_json(&topo.to_string()).unwrap(), None);
    let pass = read_all(open_bytes(pcap).unwrap());
    let mut frame_bytes = 0u64;
    for (info, data) in &pass.frames {
        frame_bytes += data.len() as u64;
        p.process(&RawFrame { info: *info, data });
    }
    let r = serde_json::to_value(p.finish(Vec::new(), Accounting::default(), Instant::now())).unwrap();
    let mut edges: Vec<Value> = r["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| json!([e["src"], e["dst"], e["class"], e["payload_bytes"], e["unique_bytes"], e["sends"], e["dup_ratio"]]))
        .collect();
    edges.sort_by_key(|e| e.to_string());
    // Every frame byte in one category (the file's own headers are not given here).
    let total: u64 = r["accounting"]["categories"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(total, frame_bytes);
    let mut cats = r["accounting"]["categories"].clone();
    let m = cats.as_object_mut().unwrap();
    m.remove("protocol_headers");
    m.remove("capture_format");
    (edges, r["totals"].clone(), r["rdma"].clone(), json!([cats, r["anomalies"]]))
}

/// The S2D figures do not depend on the transport: edges, totals, the RDMA section and every
/// byte category but the link/network headers are the same over InfiniBand as over RoCEv2, with
/// and without noise (mirror copies, retransmitted, reordered and lost-then-resent packets).
#[test]
fn infiniband_analysis_equals_rocev2() {
    for (scenario, extra) in [
        ("redirect4", r#","mtu":4096"#),
        ("read-nonowner", r#","mtu":1024"#),
        ("nested4", r#","mtu":1024,"mirror_dup":true,"retransmit":0.02,"reorder":0.02,"loss":0.01"#),
        ("redirect4", r#","max_send_size":128,"send_with_invalidate":true,"descriptors":2,"qps":2"#),
    ] {
        let (ib_pcap, t, _) = gen(&spec(scenario, &format!(r#","transport":"infiniband"{extra}"#)));
        let (v2_pcap, _, _) = gen(&spec(scenario, &format!(r#","transport":"rocev2"{extra}"#)));
        let ib = figures(ib_pcap, ["fe80::ffff:0:1", "fe80::ffff:0:2"]);
        let v2 = figures(v2_pcap, ["198.18.0.1", "198.18.0.2"]);
        assert!(!ib.0.is_empty(), "{scenario}: edges");
        assert_eq!(ib, v2, "{scenario}{extra}");
        let payload: u64 = t.edges.iter().map(|e| e.payload_bytes).sum();
        assert_eq!(ib.1["payload_bytes"], json!(payload), "{scenario}: the truth's payload");
    }
}
