//! The text inputs users write: topology TOML and the keys file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smbwire_dissectors::dedupe::Topology;
use smbwire_dissectors::smb2::crypto::KeyTable;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(t) = Topology::from_toml(text) {
        // What the engine writes back, it reads back the same.
        let again = Topology::from_toml(&t.to_toml()).expect("to_toml output parses");
        assert_eq!(again.config_json(), t.config_json());
    }
    let _ = KeyTable::parse(text);
});
