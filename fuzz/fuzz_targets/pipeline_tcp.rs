//! TCP streams to the SMB ports (445) and iWARP's (5445) through the whole pipeline:
//! reassembly (reordering, gaps, retransmissions from the control byte), NetBIOS/SMB2 framing,
//! compounds, decryption (a key for SessionId 1) and decompression, MPA/DDP/RDMAP, dedupe.
#![no_main]

use libfuzzer_sys::fuzz_target;
mod common;
use common::*;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let dport = if first & 1 == 0 { 445 } else { 5445 };
    let mut p = pipeline(first & 2 != 0);
    let mut seq = [1000u32, 90_000u32];
    for (n, (ctl, payload)) in (1u64..).zip(records(rest)) {
        let dir = usize::from(ctl & 1);
        let mut flags = 0x18u8; // PSH|ACK
        if ctl & 2 != 0 {
            flags = 0x02; // SYN
        } else if ctl & 4 != 0 {
            flags |= 0x01; // FIN
        }
        // Bits 3..7: move this segment back or forward (reordering, overlap, holes).
        let shift = i64::from((ctl >> 3) as i8 - 16) * 512;
        let s = (i64::from(seq[dir]) + if ctl >> 3 == 16 { 0 } else { shift }) as u32;
        let frame = tcp_frame(dir == 0, 50_000, dport, s, seq[1 - dir], flags, payload);
        feed(&mut p, n, ethernet(), &frame);
        seq[dir] = seq[dir].wrapping_add(payload.len() as u32 + u32::from(flags & 0x03 != 0));
        if n % 8 == 0 {
            // A live snapshot now and then, as `live` takes every second (`Dedupe::snapshot`
            // keeps its figures from the first; debug builds check them against the window).
            let _ = p.view();
        }
    }
    let r = p.finish(Vec::new(), Default::default(), std::time::Instant::now());
    let _ = serde_json::to_string(&r);
});
