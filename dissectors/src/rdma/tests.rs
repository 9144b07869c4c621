//! RDMA decoding end to end on the public captures (numbers cross-checked with tshark in
//! tests/test_oracle_rdma.py) and on synthetic exchanges.

use crate::capture::testutil::public_dir;
use crate::pipeline::{analyze_files, Config};
use crate::report::Results;

fn run(name: &str) -> Results {
    let path = public_dir().join(name);
    analyze_files(&[path.to_string_lossy().into_owned()], &Config::default(), None, &mut |_, _| true).expect("analysis")
}

#[test]
fn print_public_rdma() {
    for f in [
        "smbdirect-iwarp-win2012-smb300.pcap",
        "rdma-iwarp-rdma-read.pcap",
        "rdma-iwarp-rdma-write-crc.pcap",
        "rdma-iwarp-read-write-long-run-markers.pcap",
        "rdma-iwarp-send-recv-crc-markers.pcap",
        "rdma-iwarp-connect-c11-m11.pcap",
        "rdma-rocev2-rc-send.pcap",
    ] {
        let r = run(f);
        eprintln!("{f}: {}", serde_json::to_string(&r.rdma).unwrap());
        eprintln!("  acct {:?} reconciled {}", r.accounting.categories, r.accounting.reconciled);
        eprintln!("  smb2 {:?} anomalies {:?}", r.smb2.commands, r.anomalies);
        assert!(r.accounting.reconciled, "{f}");
    }
}
