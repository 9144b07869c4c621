//! Link, IP, TCP/UDP decoding of arbitrary frames for every link type the engine reads
//! (Ethernet/VLAN, SLL, SLL2, raw IP, BSD loopback, ERF, InfiniBand, IPoIB), and the same
//! frames through the pipeline.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smbwire_dissectors::wire::{self, linktype};
mod common;

const TYPES: [u32; 11] = [
    linktype::ETHERNET, linktype::LINUX_SLL, linktype::LINUX_SLL2, linktype::RAW, linktype::IPV4,
    linktype::IPV6, linktype::NULL, linktype::ERF, linktype::IPOIB, linktype::INFINIBAND, 12345,
];

fuzz_target!(|data: &[u8]| {
    let Some((&first, frame)) = data.split_first() else { return };
    let lt = TYPES[usize::from(first) % TYPES.len()];
    let _ = wire::decode(lt, frame);
    let mut p = common::pipeline(false);
    common::feed(&mut p, 1, lt, frame);
    let _ = p.finish(Vec::new(), Default::default(), std::time::Instant::now());
});
