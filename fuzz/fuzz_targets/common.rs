//! Shared by the pipeline targets: frames built around fuzzed payloads, so the fuzzer's
//! bytes reach the deep parsers (TCP reassembly, NetBIOS/SMB2, MPA/DDP, BTH, SMB Direct,
//! decryption, decompression) instead of dying at an Ethernet or IP check.
#![allow(dead_code)]

use smbwire_dissectors::capture::{FrameInfo, RawFrame};
use smbwire_dissectors::frame::FrameRef;
use smbwire_dissectors::pipeline::{Config, Pipeline};
use smbwire_dissectors::wire::linktype;

pub const CLIENT: [u8; 4] = [198, 18, 0, 10];
pub const SERVER: [u8; 4] = [198, 18, 0, 1];

/// A session key for SessionId 1, so TRANSFORM messages of that session are decrypted.
pub const KEYS: &str = "0100000000000000,00112233445566778899aabbccddeeff";

pub fn pipeline(keys: bool) -> Pipeline {
    let cfg = if keys {
        format!(r#"{{"window_seconds": 1, "keys": "{KEYS}"}}"#)
    } else {
        r#"{"window_seconds": 1}"#.to_string()
    };
    Pipeline::new(&Config::from_json(&cfg).expect("config"), None)
}

fn ipv4(proto: u8, src: [u8; 4], dst: [u8; 4], l4: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(34 + l4.len());
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00]);
    let total = (20 + l4.len()).min(0xffff) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = proto;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let mut sum = 0u32;
    for c in ip.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(l4);
    f
}

pub fn tcp_frame(to_server: bool, sport: u16, dport: u16, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let (src, dst, sp, dp) = if to_server { (CLIENT, SERVER, sport, dport) } else { (SERVER, CLIENT, dport, sport) };
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sp.to_be_bytes());
    t[2..4].copy_from_slice(&dp.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    t.extend_from_slice(payload);
    ipv4(6, src, dst, &t)
}

pub fn udp_frame(dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = vec![0u8; 8];
    u[0..2].copy_from_slice(&49152u16.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&((8 + payload.len()).min(0xffff) as u16).to_be_bytes());
    u.extend_from_slice(payload);
    ipv4(17, CLIENT, SERVER, &u)
}

pub fn feed(p: &mut Pipeline, n: u64, linktype_: u32, data: &[u8]) {
    let info = FrameInfo { frame: FrameRef { file: 0, number: n }, ts_ns: 1_700_000_000_000_000_000 + n * 1_000_000, linktype: linktype_, orig_len: data.len() as u32 };
    p.process(&RawFrame { info, data });
}

pub fn ethernet() -> u32 {
    linktype::ETHERNET
}

/// Splits fuzz input into records: `[ctl][len lo][len hi][len bytes]`; a short tail is one
/// record of what is left.
pub fn records(mut data: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    while data.len() >= 3 && out.len() < 4096 {
        let ctl = data[0];
        let len = usize::from(u16::from_le_bytes([data[1], data[2]]));
        let rest = &data[3..];
        let take = len.min(rest.len());
        out.push((ctl, &rest[..take]));
        data = &rest[take..];
    }
    out
}
