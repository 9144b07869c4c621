//! What `smbwire live` reads from the wire before the engine: the user-space classifier
//! (AF_PACKET's filter, and the connection key and segment span shedding uses) on any
//! frame, and an eBPF ring record through the live reader.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smbwire_dissectors::live::classify::inspect;

fuzz_target!(|data: &[u8]| {
    let ports = [445u16, 5445, 8445];
    let seen = inspect(data, &ports);
    assert!(seen.header_len <= data.len().max(64 * 1024));
    if let Some(k) = seen.key {
        // Both directions of a connection have one key, and it is its own connection.
        let mut back = k;
        std::mem::swap(&mut back.saddr, &mut back.daddr);
        std::mem::swap(&mut back.sport, &mut back.dport);
        let c = k.connection();
        assert_eq!(c, back.connection());
        assert_eq!(c, c.connection());
        assert_eq!(smbwire_dissectors::live::FlowKey::from_bytes(&c.to_bytes()), Some(c));
    }
    // A TCP segment's span (where shedding cuts a connection) only for TCP storage
    // traffic, its payload within an IP packet's length or the frame's, plus SYN and FIN.
    if let Some(t) = seen.tcp {
        assert!(seen.key.is_some_and(|k| k.proto == 6));
        assert!(t.len as usize <= data.len().max(65_535) + 2);
    }
    #[cfg(target_os = "linux")]
    if let Some(frame) = smbwire_dissectors::live::ebpf::read_record(data) {
        assert!(frame.len() <= data.len() + 4);
    }
});
