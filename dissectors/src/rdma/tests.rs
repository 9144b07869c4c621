//! RDMA decoding end to end on the public captures (numbers cross-checked with tshark in
//! tests/test_oracle_rdma.py) and on synthetic exchanges.

use crate::capture::testutil::public_dir;
use crate::parallel::analyze_files;
use crate::pipeline::Config;
use crate::report::Results;

fn run(name: &str) -> Results {
    let path = public_dir().join(name);
    analyze_files(&[path.to_string_lossy().into_owned()], &Config::default(), None, &mut |_, _| true).expect("analysis")
}

#[test]
fn public_rdma_captures_decode_and_reconcile() {
    for f in [
        "smbdirect-iwarp-win2012-smb300.pcap",
        "rdma-iwarp-rdma-read.pcap",
        "rdma-iwarp-rdma-write-crc.pcap",
        "rdma-iwarp-read-write-long-run-markers.pcap",
        "rdma-iwarp-send-recv-crc-markers.pcap",
        "rdma-iwarp-connect-c11-m11.pcap",
        "rdma-rocev2-rc-send.pcap",
        "rdma-infiniband-erf-ipoib.pcap",
    ] {
        let r = run(f);
        assert!(r.accounting.reconciled, "{f}: {:?}", r.accounting.categories);
        assert_eq!(r.rdma.iwarp.mpa_requests, u64::from(f.contains("iwarp")), "{f}");
    }
    // SMB Direct over iWARP: 25 Sends (1 + 1 negotiate, 23 data messages; one 20-byte
    // segment is missing from the capture and framing resumes by CRC), CRCs all good.
    let r = run("smbdirect-iwarp-win2012-smb300.pcap");
    let s = &r.rdma.smbdirect;
    assert_eq!((s.negotiate_requests, s.negotiate_responses, s.data_messages), (1, 1, 23));
    assert_eq!((r.rdma.iwarp.crc_errors, r.rdma.iwarp.resyncs, r.rdma.gaps), (0, 1, 1));
    assert_eq!((r.smb2.read_resp_pdus, r.smb2.read_bytes), (2, 348));
    // RoCEv2 RC Sends with immediate and ACKs of another upper layer.
    let r = run("rdma-rocev2-rc-send.pcap");
    assert_eq!(r.rdma.infiniband.bth_opcodes.get("17"), Some(&37));
    assert!(r.accounting.categories.get("rdma_other_ulp").is_some_and(|n| *n > 0));
}

#[test]
fn opcode_keys_match_their_formatting() {
    let mut dec = std::collections::BTreeMap::new();
    let mut hex = std::collections::BTreeMap::new();
    for op in 0..=255u8 {
        super::count_opcode(&mut dec, op, false);
        super::count_opcode(&mut hex, op, true);
        super::count_opcode(&mut hex, op, true);
    }
    for op in 0..=255u8 {
        assert_eq!(dec.get(&op.to_string()), Some(&1));
        assert_eq!(hex.get(&format!("0x{op:02x}")), Some(&2));
    }
    assert_eq!((dec.len(), hex.len()), (256, 256));
}

/// rdma-infiniband-erf-ipoib.pcap, the steps the pipeline takes (wire to the BTH, the IPoIB
/// Send opened, its packet decoded as LINKTYPE_IPOIB): IPv4 10 (UDP 4), IPv6 5, ARP 2, as
/// tshark's protocol hierarchy in expected.json says (ip:10, udp:4, ipv6:5, arp:2), each
/// frame's bytes split without remainder; the 26 other packets go to the RoCE code.
#[test]
fn ipoib_inside_infiniband_sends_is_ip() {
    use crate::capture::testutil::read_all;
    use crate::wire::{self, linktype, Transport};
    let p = read_all(crate::capture::open(public_dir().join("rdma-infiniband-erf-ipoib.pcap").to_str().unwrap(), 0).unwrap());
    let mut st = super::RdmaState::new();
    let (mut v4, mut udp, mut v6, mut arp, mut rest) = (0, 0, 0, 0, 0);
    for (info, data) in &p.frames {
        let d = wire::decode(info.linktype, data).unwrap();
        let Transport::Infiniband(bth) = d.transport else { panic!("frame {}", info.frame.number) };
        let Some(inner) = st.ipoib(d.src, d.dst, bth) else {
            rest += 1;
            continue;
        };
        let ip = wire::decode(linktype::IPOIB, inner).unwrap();
        match (inner[0], inner[1], ip.transport) {
            (0x08, 0x00, Transport::Udp(u)) => {
                v4 += 1;
                udp += 1;
                assert_eq!(ip.header_bytes + u.payload.len(), inner.len());
            }
            (0x08, 0x00, _) => v4 += 1,
            (0x86, 0xdd, _) => v6 += 1,
            (0x08, 0x06, Transport::Other) => arp += 1,
            other => panic!("frame {}: {other:?}", info.frame.number),
        }
    }
    assert_eq!((v4, udp, v6, arp, rest), (10, 4, 5, 2, 26));
    assert_eq!(st.stats.infiniband.ipoib_packets, 17);
}
