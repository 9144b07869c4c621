//! Scenario tests of the index: hand-built sends, exact figures.

use super::figures::{DedupeReport, EdgeReport};
use super::*;
use crate::frame::FrameRef;
use crate::payload::hash::digest_of;
use crate::payload::{BlockDigest, PayloadDigest, BLOCK_SIZE};
use std::net::IpAddr;
use std::sync::Arc;
use serde_json::json;
use std::io::Write;
use std::sync::Mutex;

const MS: u64 = 1_000_000;
const B: u64 = BLOCK_SIZE as u64;

/// Distinct, non-trivial content: `n` blocks derived from `tag`.
pub(crate) fn data(tag: u64, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * BLOCK_SIZE);
    let mut x = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in 0..n * BLOCK_SIZE {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(x as u8);
    }
    out
}

fn ip(last: u8) -> IpAddr {
    IpAddr::from([198, 18, 0, last])
}

pub(crate) fn rec(
    kind: SendKind,
    src: u8,
    dst: u8,
    conn: u64,
    mid: u64,
    t_ms: u64,
    bytes: &[u8],
) -> SendRecord {
    SendRecord {
        conn,
        message_id: mid,
        kind,
        transport: Transport::Tcp,
        src: ip(src),
        dst: ip(dst),
        src_port: 50000,
        dst_port: 445,
        ip_proto: 6,
        session_id: 0x1122,
        tree_id: 5,
        file_id: [7; 16],
        share: Some(r"\\srv\share".into()),
        file_name: Some("disk.vhdx".into()),
        offset: mid * 65536,
        first_frame: FrameRef {
            file: 0,
            number: mid * 10 + 1,
        },
        last_frame: FrameRef {
            file: 0,
            number: mid * 10 + 3,
        },
        header_frame: None,
        ts_ns: t_ms * MS,
        digest: digest_of(bytes),
    }
}

/// A little driver: sends get increasing MessageIds per connection.
struct Net {
    d: Dedupe,
    next_mid: u64,
}

impl Net {
    /// Every address its own node and a cluster member (`--assume-members`).
    fn new() -> Net {
        Net::with(DedupeConfig::default(), json!({"assume_members": true}), None)
    }
    fn with(cfg: DedupeConfig, topo: serde_json::Value, ev: Option<Box<dyn Write + Send>>) -> Net {
        Net {
            d: Dedupe::new(cfg, Topology::from_json(&topo).unwrap(), ev),
            next_mid: 1,
        }
    }
    /// Send and return the MessageId used.
    fn send(
        &mut self,
        kind: SendKind,
        src: u8,
        dst: u8,
        conn: u64,
        t_ms: u64,
        bytes: &[u8],
    ) -> u64 {
        let mid = self.next_mid;
        self.next_mid += 1;
        self.d.send(rec(kind, src, dst, conn, mid, t_ms, bytes));
        mid
    }
    /// Send and complete at once (a write whose response came back before the next send).
    fn write_done(&mut self, src: u8, dst: u8, t_ms: u64, bytes: &[u8]) {
        let mid = self.send(SendKind::Write, src, dst, 1, t_ms, bytes);
        self.d.complete(1, mid, t_ms * MS + 1);
    }
    /// `finish`, checking on the way that a snapshot taken just before equals it (but for
    /// the series, which only `finish` gives).
    fn finish(mut self) -> DedupeReport {
        let snap = self.d.snapshot();
        let r = self.d.finish();
        assert!(snap.series.is_none());
        assert_same_report(&snap, &DedupeReport { series: None, ..r.clone() });
        r
    }
}

fn edge<'a>(r: &'a DedupeReport, src: &str, dst: &str, class: Class) -> &'a EdgeReport {
    r.edges
        .iter()
        .find(|e| e.src == src && e.dst == dst && e.class == class)
        .unwrap_or_else(|| panic!("no edge {src}->{dst} {class:?} in {:#?}", r.edges))
}

/// Invariants every report must satisfy.
fn check_invariants(r: &DedupeReport) {
    for e in &r.edges {
        let f = &e.figures;
        assert_eq!(
            f.payload_bytes,
            f.nontrivial_bytes + f.trivial_bytes,
            "{e:?}"
        );
        assert_eq!(
            f.nontrivial_bytes,
            f.unique_bytes + f.per_copy_duplicate_bytes + f.repeated_content_bytes,
            "{e:?}"
        );
        assert_eq!(
            f.payload_bytes,
            e.decided_by.inference + e.decided_by.rule + e.decided_by.forwarded,
            "{e:?}"
        );
    }
    assert!(r.totals.globally_unique_bytes <= r.totals.figures.unique_bytes);
    let sends: u64 = r.edges.iter().map(|e| e.figures.sends).sum();
    assert_eq!(sends, r.totals.figures.sends);
    check_series_sums(r);
}

/// The series of a finished report sums, per (edge, class), to that edge entry exactly, and
/// has no row for an (edge, class) without one.
fn check_series_sums(r: &DedupeReport) {
    let Some(series) = &r.series else { return };
    let mut sums: std::collections::BTreeMap<(String, String, Class), super::figures::Figures> = Default::default();
    for row in &series.rows {
        sums.entry((row.src.clone(), row.dst.clone(), row.class)).or_default().add(&row.figures);
    }
    for e in &r.edges {
        let got = sums.remove(&(e.src.clone(), e.dst.clone(), e.class)).unwrap_or_default();
        assert_eq!(got, e.figures, "series of {} -> {} {:?}", e.src, e.dst, e.class);
    }
    assert!(sums.is_empty(), "series rows without an edge entry: {sums:?}");
}

const N1: &str = "198.18.0.1";
const N2: &str = "198.18.0.2";
const N3: &str = "198.18.0.3";

#[test]
fn two_way_mirror_one_copy_is_ratio_one() {
    let mut n = Net::new();
    for i in 0..5 {
        n.write_done(1, 2, i * 10, &data(i, 4));
    }
    let r = n.finish();
    check_invariants(&r);
    assert_eq!(r.edges.len(), 1);
    let e = edge(&r, N1, N2, Class::Replication);
    assert_eq!(e.figures.sends, 5);
    assert_eq!(e.figures.payload_bytes, 20 * B);
    assert_eq!(e.figures.unique_bytes, 20 * B);
    assert_eq!(e.dup_ratio, Some(1.0));
    assert_eq!(e.decided_by.inference, 20 * B);
    assert_eq!(r.totals.amplification, 1.0);
    assert!(r.top_duplicates.is_empty());
}

fn nested_copies(copies: u64) -> DedupeReport {
    let mut n = Net::new();
    let mut t = 0;
    for i in 0..10 {
        let w = data(i, 3);
        for _ in 0..copies {
            n.write_done(1, 2, t, &w);
            t += 1;
        }
    }
    n.finish()
}

#[test]
fn four_copies_nested_is_ratio_two_all_per_copy() {
    let r = nested_copies(2);
    check_invariants(&r);
    let e = edge(&r, N1, N2, Class::Replication);
    assert_eq!(e.figures.sends, 20);
    assert_eq!(e.figures.nontrivial_bytes, 60 * B);
    assert_eq!(e.figures.unique_bytes, 30 * B);
    assert_eq!(e.figures.per_copy_duplicate_bytes, 30 * B);
    assert_eq!(e.figures.repeated_content_bytes, 0);
    assert_eq!(e.dup_ratio, Some(2.0));
    assert_eq!(r.totals.amplification, 2.0);
    assert_eq!(r.top_duplicates.len(), 10);
    assert_eq!(r.duplicated_payloads, 10);
    assert!(r
        .top_duplicates
        .iter()
        .all(|d| d.sends_total == 2 && d.duplicate_bytes == 3 * B));
}

#[test]
fn without_membership_a_plain_write_is_unclassified_with_the_same_figures() {
    // The nested-mirror sends with no topology: nothing on the wire says n1 and n2 are
    // cluster members, so the class is `write`; the duplicate figures do not change.
    let mut n = Net::with(DedupeConfig::default(), json!({}), None);
    let mut t = 0;
    for i in 0..10 {
        let w = data(i, 3);
        for _ in 0..2 {
            n.write_done(1, 2, t, &w);
            t += 1;
        }
        n.send(SendKind::Read, 2, 1, 2, t, &data(100 + i, 1));
        t += 1;
    }
    let r = n.finish();
    check_invariants(&r);
    assert_eq!(r.membership, "unknown");
    let e = edge(&r, N1, N2, Class::Write);
    assert_eq!(e.figures.sends, 20);
    assert_eq!(e.dup_ratio, Some(2.0));
    assert_eq!(e.figures.per_copy_duplicate_bytes, 30 * B);
    assert_eq!(e.decided_by.inference, 60 * B);
    let rd = edge(&r, N2, N1, Class::Read);
    assert_eq!(rd.figures.sends, 10);
    assert!(r.edges.iter().all(|e| matches!(e.class, Class::Write | Class::Read)), "{:#?}", r.edges);
}

#[test]
fn without_membership_forwarding_on_the_wire_proves_redirection_and_replication() {
    // n1 sends W to n2, n2 writes two copies back: the same blocks went n1 -> n2 -> n1, so
    // the wire alone shows redirection (n1 -> n2) and the replication that follows it.
    let mut n = Net::with(DedupeConfig::default(), json!({}), None);
    let mut t = 0;
    for i in 0..4 {
        let w = data(i, 2);
        n.write_done(1, 2, t, &w);
        n.write_done(2, 1, t + 1, &w);
        n.write_done(2, 1, t + 2, &w);
        t += 10;
    }
    // A write nobody forwards stays unclassified.
    n.write_done(1, 2, t, &data(50, 1));
    let r = n.finish();
    check_invariants(&r);
    let redirect = edge(&r, N1, N2, Class::Redirection);
    assert_eq!(redirect.figures.sends, 4);
    assert_eq!(redirect.decided_by.forwarded, 8 * B);
    let repl = edge(&r, N2, N1, Class::Replication);
    assert_eq!(repl.figures.sends, 8);
    assert_eq!(repl.dup_ratio, Some(2.0));
    assert_eq!(repl.decided_by.forwarded, 16 * B);
    let plain = edge(&r, N1, N2, Class::Write);
    assert_eq!(plain.figures.sends, 1);
    assert_eq!(r.edges.len(), 3, "{:#?}", r.edges);
}

#[test]
fn six_copies_is_ratio_three() {
    let r = nested_copies(3);
    check_invariants(&r);
    let e = edge(&r, N1, N2, Class::Replication);
    assert_eq!(e.dup_ratio, Some(3.0));
    assert_eq!(e.figures.per_copy_duplicate_bytes, 60 * B);
    assert_eq!(e.figures.repeated_content_bytes, 0);
}

#[test]
fn non_owner_redirects_to_owner_which_replicates_back() {
    // n1 (non-owner) sends W to n2 (owner); n2 writes two copies back to n1.
    let mut n = Net::new();
    let mut t = 0;
    for i in 0..4 {
        let w = data(i, 2);
        n.write_done(1, 2, t, &w);
        n.write_done(2, 1, t + 1, &w);
        n.write_done(2, 1, t + 2, &w);
        t += 10;
    }
    let r = n.finish();
    check_invariants(&r);
    assert_eq!(r.edges.len(), 2, "{:#?}", r.edges);
    let redirect = edge(&r, N1, N2, Class::Redirection);
    assert_eq!(redirect.figures.sends, 4);
    assert_eq!(redirect.figures.payload_bytes, 8 * B);
    assert_eq!(redirect.dup_ratio, Some(1.0));
    assert_eq!(redirect.decided_by.forwarded, 8 * B);
    let repl = edge(&r, N2, N1, Class::Replication);
    assert_eq!(repl.figures.sends, 8);
    assert_eq!(repl.figures.payload_bytes, 16 * B);
    assert_eq!(repl.dup_ratio, Some(2.0));
    assert_eq!(repl.figures.per_copy_duplicate_bytes, 8 * B);
    assert_eq!(r.totals.globally_unique_bytes, 8 * B);
    assert_eq!(r.totals.amplification, 3.0);
    // Largest edge first.
    assert_eq!(r.edges[0].class, Class::Replication);
}

#[test]
fn forwarding_to_a_third_node_is_redirection() {
    let mut n = Net::new();
    let w = data(1, 2);
    n.write_done(1, 2, 0, &w);
    n.write_done(2, 3, 5, &w);
    let r = n.finish();
    check_invariants(&r);
    assert_eq!(
        edge(&r, N1, N2, Class::Redirection).figures.payload_bytes,
        2 * B
    );
    assert_eq!(
        edge(&r, N2, N3, Class::Replication).figures.payload_bytes,
        2 * B
    );
    assert_eq!(r.totals.amplification, 2.0);
}

#[test]
fn partial_forwarding_splits_blocks_and_send_goes_to_majority() {
    // n2 forwards only the first of three blocks it received.
    let mut n = Net::new();
    let w = data(1, 3);
    n.write_done(1, 2, 0, &w);
    n.write_done(2, 3, 5, &w[..BLOCK_SIZE]);
    let r = n.finish();
    check_invariants(&r);
    let red = edge(&r, N1, N2, Class::Redirection);
    assert_eq!((red.figures.payload_bytes, red.figures.sends), (B, 0));
    let rep = edge(&r, N1, N2, Class::Replication);
    assert_eq!((rep.figures.payload_bytes, rep.figures.sends), (2 * B, 1));
}

#[test]
fn forwarding_after_the_window_is_not_redirection() {
    let cfg = DedupeConfig {
        window_ns: 100 * MS,
        ..Default::default()
    };
    let mut n = Net::with(cfg, json!({"assume_members": true}), None);
    let w = data(1, 1);
    n.write_done(1, 2, 0, &w);
    n.write_done(2, 1, 101, &w);
    let r = n.finish();
    check_invariants(&r);
    assert_eq!(edge(&r, N1, N2, Class::Replication).figures.sends, 1);
    assert_eq!(
        r.totals.amplification, 1.0,
        "the block is globally unique again after the window"
    );
}

#[test]
fn reads_between_members_are_redirected_reads() {
    let mut n = Net::new();
    let w = data(9, 2);
    n.send(SendKind::Read, 2, 1, 1, 0, &w);
    n.send(SendKind::Read, 2, 1, 1, 1, &w);
    let r = n.finish();
    check_invariants(&r);
    let e = edge(&r, N2, N1, Class::RedirectedRead);
    assert_eq!(e.figures.sends, 2);
    assert_eq!(e.dup_ratio, Some(2.0));
    // Second read of the same payload, consecutive on the edge: per-copy.
    assert_eq!(e.figures.per_copy_duplicate_bytes, 2 * B);
}

#[test]
fn non_members_are_clients_even_when_forwarded() {
    let topo = json!({"nodes": [
        {"name": "n1", "addresses": [N1], "member": true},
        {"name": "n2", "addresses": [N2], "member": true}
    ]});
    let mut n = Net::with(DedupeConfig::default(), topo, None);
    let w = data(1, 2);
    n.write_done(9, 1, 0, &w); // client 198.18.0.9 writes to n1
    n.write_done(1, 2, 1, &w); // n1 replicates to n2
    n.send(SendKind::Read, 1, 9, 1, 2, &data(2, 1)); // n1 answers a client read
    let r = n.finish();
    check_invariants(&r);
    assert_eq!(
        edge(&r, "198.18.0.9", "n1", Class::Client)
            .figures
            .payload_bytes,
        2 * B
    );
    assert_eq!(
        edge(&r, "n1", "198.18.0.9", Class::Client)
            .figures
            .payload_bytes,
        B
    );
    assert_eq!(
        edge(&r, "n1", "n2", Class::Replication)
            .figures
            .payload_bytes,
        2 * B
    );
    let client = r.nodes.iter().find(|x| x.name == "198.18.0.9").unwrap();
    assert!(!client.member);
}

#[test]
fn trivial_blocks_are_never_duplicates() {
    let mut n = Net::new();
    let mut w = vec![0u8; 3 * BLOCK_SIZE];
    w.extend(data(1, 1));
    w.extend(vec![0xFF; 100]);
    for t in 0..3 {
        n.write_done(1, 2, t, &w);
    }
    n.write_done(1, 2, 3, &vec![0u8; 2 * BLOCK_SIZE]);
    let r = n.finish();
    check_invariants(&r);
    let e = edge(&r, N1, N2, Class::Replication);
    assert_eq!(e.figures.sends, 4);
    assert_eq!(e.figures.trivial_bytes, 3 * (3 * B + 100) + 2 * B);
    assert_eq!(e.figures.nontrivial_bytes, 3 * B);
    assert_eq!(e.figures.unique_bytes, B);
    assert_eq!(e.dup_ratio, Some(3.0));

    // Only trivial bytes: ratio 1.0 by definition.
    let mut n = Net::new();
    n.write_done(1, 2, 0, &vec![0u8; BLOCK_SIZE]);
    n.write_done(1, 2, 1, &vec![0u8; BLOCK_SIZE]);
    let r = n.finish();
    let e = edge(&r, N1, N2, Class::Replication);
    assert_eq!((e.figures.nontrivial_bytes, e.figures.unique_bytes), (0, 0));
    assert_eq!(e.dup_ratio, Some(1.0));
    assert_eq!(r.totals.amplification, 1.0);
}

#[test]
fn template_block_at_many_offsets_is_repeated_content() {
    let template = data(1000, 1);
    let mut n = Net::new();
    for i in 0..10u64 {
        // A payload of the template plus its own data.
        let mut w = template.clone();
        w.extend(data(i, 1));
        n.write_done(1, 2, i * 3, &w);
        // The template alone, then unrelated writes in between.
        n.write_done(1, 2, i * 3 + 1, &template);
        n.write_done(1, 2, i * 3 + 2, &data(100 + i, 1));
    }
    let r = n.finish();
    check_invariants(&r);
    let e = edge(&r, N1, N2, Class::Replication);
    // 30 sends, 40 non-trivial blocks; unique: template once + 20 own blocks.
    assert_eq!(e.figures.sends, 30);
    assert_eq!(e.figures.nontrivial_bytes, 40 * B);
    assert_eq!(e.figures.unique_bytes, 21 * B);
    assert_eq!(e.figures.repeated_content_bytes, 19 * B);
    assert_eq!(e.figures.per_copy_duplicate_bytes, 0);
}

#[test]
fn block_repeated_inside_one_payload_is_repeated_content() {
    let mut n = Net::new();
    let mut w = data(1, 1);
    w.extend(data(1, 1));
    w.extend(data(1, 1));
    n.write_done(1, 2, 0, &w);
    let r = n.finish();
    let e = edge(&r, N1, N2, Class::Replication);
    assert_eq!(e.figures.unique_bytes, B);
    assert_eq!(e.figures.repeated_content_bytes, 2 * B);
    assert_eq!(r.totals.amplification, 3.0);
}

#[test]
fn concurrent_copies_over_two_connections_are_per_copy() {
    // W1 and W2 each go over conn 1 and conn 2, interleaved, all outstanding.
    let (w1, w2) = (data(1, 2), data(2, 2));
    let mut n = Net::new();
    let a = n.send(SendKind::Write, 1, 2, 1, 0, &w1);
    let b = n.send(SendKind::Write, 1, 2, 1, 1, &w2);
    let c = n.send(SendKind::Write, 1, 2, 2, 2, &w1);
    let d = n.send(SendKind::Write, 1, 2, 2, 3, &w2);
    n.d.complete(1, a, 4 * MS);
    n.d.complete(1, b, 4 * MS);
    n.d.complete(2, c, 4 * MS);
    n.d.complete(2, d, 4 * MS);
    let r = n.finish();
    check_invariants(&r);
    let e = edge(&r, N1, N2, Class::Replication);
    assert_eq!(e.figures.per_copy_duplicate_bytes, 4 * B);
    assert_eq!(e.figures.repeated_content_bytes, 0);
    assert_eq!(e.dup_ratio, Some(2.0));

    // Same order, but every write completed before the next one started: the repeats are
    // not consecutive and not concurrent, so they count as repeated content.
    let mut n = Net::new();
    n.write_done(1, 2, 0, &w1);
    n.write_done(1, 2, 1, &w2);
    n.write_done(1, 2, 2, &w1);
    n.write_done(1, 2, 3, &w2);
    let r = n.finish();
    let e = edge(&r, N1, N2, Class::Replication);
    assert_eq!(e.figures.per_copy_duplicate_bytes, 0);
    assert_eq!(e.figures.repeated_content_bytes, 4 * B);
}

#[test]
fn completion_time_decides_outstanding() {
    // The completion of the first copy is recorded after the second copy's first byte:
    // the first copy was still outstanding then.
    let w = data(1, 1);
    let mut n = Net::new();
    let a = n.send(SendKind::Write, 1, 2, 1, 0, &w);
    n.send(SendKind::Write, 1, 2, 1, 1, &data(2, 1));
    n.d.complete(1, a, 3 * MS);
    n.send(SendKind::Write, 1, 2, 2, 2, &w);
    let r = n.finish();
    assert_eq!(
        edge(&r, N1, N2, Class::Replication)
            .figures
            .per_copy_duplicate_bytes,
        B
    );
}

#[test]
fn same_block_after_the_window_is_unique_again() {
    let cfg = DedupeConfig {
        window_ns: 1000 * MS,
        ..Default::default()
    };
    let w = data(1, 2);
    let mut n = Net::with(cfg.clone(), json!({"assume_members": true}), None);
    n.write_done(1, 2, 0, &w);
    n.write_done(1, 2, 1000, &w); // exactly one window later: still inside
    n.write_done(1, 2, 2001, &w); // more than a window after the previous send
    let r = n.finish();
    check_invariants(&r);
    let e = edge(&r, N1, N2, Class::Replication);
    assert_eq!(e.figures.unique_bytes, 4 * B);
    assert_eq!(e.figures.per_copy_duplicate_bytes, 2 * B);
    assert_eq!(r.totals.globally_unique_bytes, 4 * B);

    // `advance` alone expires sends (the pipeline calls it as time moves).
    let mut n = Net::with(cfg, json!({"assume_members": true}), None);
    n.write_done(1, 2, 0, &w);
    n.d.advance(1000 * MS);
    assert_eq!(n.d.live_sends(), 1);
    n.d.advance(1000 * MS + 1);
    assert_eq!((n.d.live_sends(), n.d.live_blocks()), (0, 0));
}

#[test]
fn memory_is_bounded_by_the_window() {
    // One million single-block sends, 1 ms apart, over many edges; 50 ms window.
    let cfg = DedupeConfig {
        window_ns: 50 * MS,
        ..Default::default()
    };
    let mut d = Dedupe::new(cfg, Topology::default(), None);
    let base = rec(SendKind::Write, 1, 2, 1, 0, 0, &[1, 2, 3]);
    let mut max_live = 0;
    for i in 0..1_000_000u64 {
        let mut s = base.clone();
        s.message_id = i;
        s.src = IpAddr::from([198, 18, 1, (i % 7) as u8]);
        s.dst = IpAddr::from([198, 18, 2, (i % 5) as u8]);
        s.ts_ns = i * MS;
        // Half the sends repeat content from 10 sends earlier, the rest are new.
        let content = if i % 2 == 0 { i } else { i.saturating_sub(10) };
        let mut hash = [0u8; 16];
        hash[..8].copy_from_slice(&content.to_le_bytes());
        let mut digest = [0u8; 32];
        digest[..8].copy_from_slice(&content.to_le_bytes());
        s.digest = PayloadDigest {
            len: 4096,
            digest,
            blocks: vec![BlockDigest {
                hash,
                len: 4096,
                trivial: false,
            }],
        };
        d.send(s);
        if i % 4 == 0 {
            d.complete(1, i, i * MS + 1);
        }
        max_live = max_live.max(d.live_sends());
    }
    assert!(max_live <= 51, "live sends {max_live}");
    let r = d.finish();
    check_invariants(&r);
    assert!(r.index.peak_live_sends <= 51);
    assert!(r.index.peak_live_blocks <= 51);
    assert!(
        r.index.peak_bytes_estimate < 1 << 20,
        "{}",
        r.index.peak_bytes_estimate
    );
    assert_eq!(r.totals.figures.sends, 1_000_000);
    assert_eq!(r.totals.figures.payload_bytes, 1_000_000 * B);
}

/// What a live 4 KiB send costs (issue 7): every block is a send of its own, so the send's
/// record and its table slots are most of it. 200,000 one-block WRITEs and READs on 4
/// connections, all within the window; a quarter repeat a payload sent 999 sends earlier
/// (a duplicated payload: its first send's evidence is held in the send table until it
/// leaves, and the second send opens an evidence entry for both).
#[test]
fn a_live_4k_send_costs_what_the_figures_say() {
    let mut d = Dedupe::new(DedupeConfig::default(), Topology::default(), None);
    let base = rec(SendKind::Write, 1, 2, 1, 0, 0, &[1, 2, 3]);
    let n = 200_000u64;
    for i in 0..n {
        let mut s = base.clone();
        s.conn = i % 4;
        s.message_id = i;
        s.kind = if i % 10 < 7 { SendKind::Read } else { SendKind::Write };
        s.ts_ns = i * 1000;
        // Frames a few apart, random 4 KiB-aligned offsets in a 4 TiB file (the evidence
        // fields' stream holds them as differences from the previous send's).
        s.first_frame.number = 4 * i + 1;
        s.last_frame.number = 4 * i + 2;
        s.offset = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 34) << 12;
        let content = if i % 4 == 0 && i >= 1000 { i - 999 } else { i };
        let mut digest = [0u8; 32];
        digest[..8].copy_from_slice(&content.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
        let mut hash = [0u8; 16];
        hash[..8].copy_from_slice(&digest[..8]);
        s.digest = PayloadDigest { len: 4096, digest, blocks: vec![BlockDigest { hash, len: 4096, trivial: false }] };
        d.send(s);
    }
    assert_eq!(d.live_sends() as u64, n);
    let r = d.finish();
    check_invariants(&r);
    let ix = &r.index;
    assert_eq!((ix.peak_live_sends, ix.peak_live_blocks), (n, n));
    // The two parts add up to the whole (one send per block here).
    let sum = ix.block_bytes_per_live_block + ix.send_bytes_per_live_send;
    assert!((ix.bytes_per_live_block - sum).abs() < 1e-6, "{ix:?}");
    // Blocks: 21 bytes in the ring and three table slots (5 bytes, 7/16 to 7/8 full).
    assert!(ix.block_bytes_per_live_block <= 21.0 + 3.0 * 5.0 * 16.0 / 7.0 + 1.0, "{ix:?}");
    // Sends: the 32-byte record (in chunks; its times' bases 8 bytes per 1,024 sends) and its
    // evidence fields in the stream (13 bytes: 7 for the offset's difference, 1 for each
    // other field), a message slot and a `singles` slot (5 bytes, 7/16 to 7/8 full: at most
    // 11.5 each); a pair of sends of one payload (half the sends) opens one 64-byte evidence
    // entry with a lookup slot: 19 bytes per send (18 with the 60-byte entry before live
    // snapshots found a payload's sends from its first, 21 with the 72-byte entry). 78
    // here; 86 with the 40-byte record, 89 with the 72-byte entry, 97 with
    // the 48-byte record that kept its block count and edge epoch,
    // 150 with the 80-byte record that held the evidence fields (and this
    // test's earlier sends, all of one frame and offset), about 400 before the send record
    // held its evidence (issue 7).
    assert!(ix.send_bytes_per_live_send <= 32.0 + 13.0 + 2.0 * 11.5 + 19.0 + 4.0, "{ix:?}");
    assert_eq!(r.duplicated_payloads, (n - 1000) / 4);
    assert_eq!(r.top_duplicates.len(), DedupeConfig::default().top_n.min(r.duplicated_payloads as usize));
    assert!(r.top_duplicates.iter().all(|p| p.sends.len() == 2 && p.sends[0].message_id + 999 == p.sends[1].message_id));
}

/// Empty payloads are not tracked as evidence, and their sends leaving the window touch no
/// other send's evidence (a send with an empty payload has no context to release: releasing
/// one released the context a duplicated payload's sends still needed).
#[test]
fn empty_payloads_between_the_sends_of_a_duplicated_payload() {
    let x = vec![0x5a; 3 * 4096];
    for empties in [1, 2, 3] {
        let mut n = Net::new();
        n.send(SendKind::Write, 1, 2, 1, 0, &x);
        for i in 0..empties {
            n.send(SendKind::Write, 1, 2, 1, 1 + i, &[]);
        }
        n.send(SendKind::Write, 1, 2, 1, 10, &x);
        let r = n.d.finish();
        check_invariants(&r);
        assert_eq!(r.duplicated_payloads, 1, "{empties} empty sends");
        let dup = &r.top_duplicates[0];
        assert_eq!(dup.sends.len(), 2);
        assert!(dup.sends.iter().all(|s| s.share.as_deref() == Some(r"\\srv\share") && s.conn == 1));
    }
}

#[test]
fn live_block_cap_folds_early_with_anomaly() {
    let cfg = DedupeConfig {
        max_live_blocks: 10,
        ..Default::default()
    };
    let mut n = Net::with(cfg, json!({"assume_members": true}), None);
    for i in 0..20 {
        n.write_done(1, 2, i, &data(i, 3));
        assert!(n.d.live_blocks() <= 10);
    }
    assert!(n.d.anomalies().get("dedupe.live_block_cap") > 0);
    let r = n.finish();
    check_invariants(&r);
    assert_eq!(r.totals.figures.sends, 20);
    assert_eq!(r.index.early_expiries, r.anomalies["dedupe.live_block_cap"]);
}

/// A memory bound shortens the window: the index stays under it, the oldest sends leave
/// early (anomaly, counters, shortest window), and a repeat further back than what fits is
/// missed; without the bound the same sends find it.
#[test]
fn index_memory_cap_shortens_the_window() {
    let run = |max: Option<u64>| {
        let cfg = DedupeConfig { max_index_bytes: max, ..Default::default() };
        let mut n = Net::with(cfg, json!({}), None);
        for i in 0..40u64 {
            // Send i repeats the content of send i - 20 (20 ms earlier), on the same edge.
            n.write_done(1, 2, i, &data(i % 20, 8));
            if let Some(max) = max {
                assert!(n.d.held_bytes() <= max || n.d.live_sends() == 1, "held {} > {max}", n.d.held_bytes());
            }
        }
        let anomalies = n.d.anomalies().get("dedupe.index_memory_cap");
        let r = n.finish();
        check_invariants(&r);
        (r, anomalies)
    };
    let (free, none) = run(None);
    assert_eq!(none, 0);
    assert_eq!(free.index.memory_early_expiries, 0);
    assert_eq!(free.index.shortest_window_seconds, None);
    assert_eq!(free.totals.figures.repeated_content_bytes + free.totals.figures.per_copy_duplicate_bytes, 20 * 8 * B);
    // Room for about 5 sends of 8 blocks.
    let (capped, raised) = run(Some(5 * 8 * 60 + 2_000));
    assert!(raised > 0);
    assert_eq!(capped.index.memory_early_expiries, raised);
    assert_eq!(capped.index.max_index_bytes, Some(5 * 8 * 60 + 2_000));
    let w = capped.index.shortest_window_seconds.expect("sends left early");
    assert!(w < 0.020, "shortest window {w}");
    assert_eq!(capped.totals.figures.sends, 40);
    assert_eq!(capped.totals.figures.payload_bytes, free.totals.figures.payload_bytes);
    assert_eq!(capped.totals.figures.unique_bytes, 40 * 8 * B, "repeats 20 ms apart are out of a shortened window");
    let json = serde_json::to_value(&capped.index).unwrap();
    assert_eq!(json["memory_early_expiries"], raised);
    // The live-block bound and the window are unchanged.
    assert_eq!(capped.index.early_expiries, 0);
}

#[test]
fn topology_rule_overrides_inference() {
    let topo = json!({"rules": [{"file": "*.VHDX", "class": "client"}]});
    let mut n = Net::with(DedupeConfig::default(), topo, None);
    let w = data(1, 1);
    n.write_done(1, 2, 0, &w);
    n.write_done(2, 1, 1, &w); // would make the first send redirection without the rule
    let r = n.finish();
    check_invariants(&r);
    let e = edge(&r, N1, N2, Class::Client);
    assert_eq!(e.decided_by.rule, B);
    assert_eq!(edge(&r, N2, N1, Class::Client).decided_by.rule, B);
    assert!(r.edges.iter().all(|e| e.class == Class::Client));
}

#[test]
fn repeated_send_record_is_ignored() {
    let w = data(1, 2);
    let mut n = Net::new();
    n.d.send(rec(SendKind::Write, 1, 2, 1, 42, 0, &w));
    n.d.send(rec(SendKind::Write, 1, 2, 1, 42, 1, &w));
    n.d.send(rec(SendKind::Write, 1, 2, 1, 42, 2, &data(5, 1)));
    // Same MessageId on another connection, or as a READ, is a different send.
    n.d.send(rec(SendKind::Write, 1, 2, 2, 42, 3, &data(6, 1)));
    n.d.send(rec(SendKind::Read, 2, 1, 1, 42, 4, &data(7, 1)));
    assert_eq!(n.d.anomalies().get("dedupe.repeated_message"), 2);
    let r = n.finish();
    check_invariants(&r);
    assert_eq!(r.totals.figures.sends, 3);
    assert_eq!(
        edge(&r, N1, N2, Class::Replication).figures.payload_bytes,
        3 * B
    );
    assert_eq!(r.anomalies["dedupe.repeated_message"], 2);
}

#[test]
fn out_of_order_send_uses_the_running_clock() {
    let mut n = Net::new();
    n.write_done(1, 2, 10, &data(1, 1));
    n.write_done(1, 2, 5, &data(2, 1));
    let r = n.finish();
    assert_eq!(r.totals.figures.sends, 2);
    assert_eq!(r.anomalies["dedupe.send_out_of_order"], 1);
}

/// A writer the test can read back.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn evidence_lines_and_top_duplicates() {
    let out = Shared::default();
    let cfg = DedupeConfig {
        window_ns: 100 * MS,
        top_n: 2,
        ..Default::default()
    };
    let mut n = Net::with(cfg, json!({"assume_members": true}), Some(Box::new(out.clone())));
    let (a, b, c) = (data(1, 1), data(2, 2), data(3, 1));
    n.write_done(1, 2, 0, &a);
    n.write_done(1, 2, 1, &a);
    n.write_done(2, 3, 2, &a); // same payload on another edge counts too
    n.write_done(1, 2, 3, &b);
    n.write_done(1, 2, 4, &b);
    n.write_done(1, 2, 5, &c);
    n.write_done(1, 2, 6, &c);
    n.write_done(1, 2, 7, &data(4, 1)); // sent once: no evidence
    n.d.advance(150 * MS); // everything leaves the window
    let lines: Vec<serde_json::Value> = String::from_utf8(out.0.lock().unwrap().clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    let a_digest = super::evidence::hex(&digest_of(&a).digest);
    let la = lines
        .iter()
        .find(|l| l["digest"] == a_digest.as_str())
        .unwrap();
    assert_eq!(la["size"], 4096);
    assert_eq!(la["sends_total"], 3);
    let sends = la["sends"].as_array().unwrap();
    assert_eq!(sends.len(), 3);
    assert_eq!(sends[0]["frames"], json!([11, 13]));
    assert_eq!(sends[0]["src"], N1);
    assert_eq!(sends[2]["src"], N2);
    assert_eq!(sends[0]["session"], "0x0000000000001122");
    assert_eq!(sends[0]["file_id"], "07".repeat(16));
    assert_eq!(sends[0]["share"], r"\\srv\share");
    assert_eq!(sends[0]["kind"], "write");
    assert_eq!(sends[0]["transport"], "tcp");
    assert!(sends[0].get("header_frame").is_none());

    let r = n.finish();
    assert_eq!(r.top_duplicates.len(), 2);
    // Three payloads were duplicated (three evidence lines); the top list keeps two.
    assert_eq!(r.duplicated_payloads, 3);
    assert_eq!(
        r.top_duplicates[0].duplicate_bytes,
        2 * B,
        "a: 3 sends of 1 block, or b: 2 sends of 2 blocks"
    );
    assert_eq!(r.top_duplicates[1].duplicate_bytes, 2 * B);
    // Tie on duplicate bytes: smaller digest first. `c` (one repeat of one block) fell out.
    assert!(r.top_duplicates[0].digest < r.top_duplicates[1].digest);
    let mut got: Vec<[u8; 32]> = r.top_duplicates.iter().map(|d| d.digest).collect();
    let mut want = vec![digest_of(&a).digest, digest_of(&b).digest];
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn report_json_shape() {
    let mut n = Net::new();
    let w = data(1, 1);
    n.write_done(1, 2, 0, &w);
    n.write_done(1, 2, 1, &w);
    let v = serde_json::to_value(n.finish()).unwrap();
    let e = &v["edges"][0];
    for key in [
        "src",
        "dst",
        "class",
        "payload_bytes",
        "nontrivial_bytes",
        "unique_bytes",
        "sends",
        "trivial_bytes",
        "per_copy_duplicate_bytes",
        "repeated_content_bytes",
        "dup_ratio",
        "decided_by",
    ] {
        assert!(e.get(key).is_some(), "edge lacks {key}: {e}");
    }
    assert_eq!(e["class"], "replication");
    assert_eq!(v["membership"], "assumed");
    assert_eq!(e["dup_ratio"], 2.0);
    assert_eq!(
        e["decided_by"],
        json!({"inference": 8192, "rule": 0, "forwarded": 0})
    );
    assert_eq!(v["totals"]["amplification"], 2.0);
    assert_eq!(v["totals"]["payload_bytes"], 8192);
    assert_eq!(
        v["nodes"][0],
        json!({"name": N1, "addresses": [N1], "member": true})
    );
    assert_eq!(v["index"]["window_seconds"], 60.0);
    assert_eq!(v["index"]["peak_live_sends"], 2);
    let top = &v["top_duplicates"][0];
    assert_eq!(top["size"], 4096);
    assert_eq!(top["digest"].as_str().unwrap().len(), 64);
    assert_eq!(top["sends"].as_array().unwrap().len(), 2);
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Random traffic over 3 nodes from a small pool of payloads (shared blocks, trivial
        /// tails, writes and reads, some completed): the figure invariants hold and every
        /// send is counted exactly once.
        #[test]
        fn random_traffic_invariants(
            ops in proptest::collection::vec((0u8..3, 0u8..3, 0u64..6, any::<bool>(), 0u64..4, any::<bool>()), 1..60),
        ) {
            let pool: Vec<Vec<u8>> = (0..6).map(|i| {
                let mut v = data(i % 4, 2);
                if i >= 4 { v.extend(vec![0u8; 100]); }
                v
            }).collect();
            let cfg = DedupeConfig { window_ns: 5 * MS, ..Default::default() };
            let mut n = Net::with(cfg, json!({"assume_members": true}), None);
            let mut sent = 0;
            for (t, (s, d, p, write, dt, done)) in ops.iter().enumerate() {
                let (src, dst) = (s + 1, (s + 1 + d) % 3 + 1);
                let kind = if *write { SendKind::Write } else { SendKind::Read };
                let mid = n.send(kind, src, dst, 1, t as u64 + dt, &pool[*p as usize]);
                if *done { n.d.complete(1, mid, (t as u64 + dt) * MS); }
                sent += 1;
            }
            let r = n.finish();
            check_invariants(&r);
            prop_assert_eq!(r.totals.figures.sends, sent);
            prop_assert!(r.totals.amplification >= 1.0);
        }
    }
}

/// Equal reports, apart from a snapshot's `pending_bytes` (its sends still in the window
/// have provisional classes; `finish` decides them) and the sends a snapshot lists per top
/// duplicate (its first `SNAPSHOT_SENDS_PER_PAYLOAD`; `sends_total` counts them all).
fn assert_same_report(a: &DedupeReport, b: &DedupeReport) {
    use super::evidence::SNAPSHOT_SENDS_PER_PAYLOAD as N;
    let strip = |r: &DedupeReport| {
        let mut v = serde_json::to_value(r).unwrap();
        for e in v["edges"].as_array_mut().unwrap() {
            e.as_object_mut().unwrap().remove("pending_bytes");
        }
        for t in v["top_duplicates"].as_array_mut().unwrap() {
            t["sends"].as_array_mut().unwrap().truncate(N);
        }
        v
    };
    assert_eq!(strip(a), strip(b));
    assert!(b.edges.iter().all(|e| e.pending_bytes == 0), "a final report has no pending bytes");
    assert_eq!(a.anomalies, b.anomalies);
}

/// `finish` folds the sends still in the window without taking them out of the lookup
/// tables (`fold_front_keeping(false)`): the same report and evidence as folding them one by
/// one the usual way (a time past the window, `advance`), on a run with every kind of send:
/// singles, per-copy and repeated payloads, forwarding, reads, trivial blocks, one left
/// uncompleted.
#[test]
fn the_fold_that_ends_a_run_gives_what_folding_by_time_gives() {
    let run = |by_time: bool| {
        let out = Shared::default();
        let cfg = DedupeConfig { window_ns: 1_000 * MS, top_n: 50, ..Default::default() };
        let mut n = Net::with(cfg, json!({"assume_members": true}), Some(Box::new(out.clone())));
        let mut t = 0;
        for i in 0..40u64 {
            let d = data(500 + i % 7, 1 + (i % 3) as usize);
            n.write_done(1, 2, t, &d);
            if i % 2 == 0 {
                n.write_done(2, 3, t + 1, &d); // forwarded: redirection
            }
            if i % 5 == 0 {
                n.send(SendKind::Read, 3, 1, 2, t + 2, &d);
            }
            n.write_done(1, 2, t + 3, &data(900 + i, 1)); // sent once
            n.write_done(1, 2, t + 4, &vec![0u8; 8192]); // trivial blocks
            t += 10;
        }
        n.send(SendKind::Write, 1, 3, 3, t, &data(500, 2)); // never completed
        if by_time {
            n.d.advance((t + 5_000) * MS);
        }
        let r = n.finish();
        let evidence = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        (r, evidence)
    };
    let (at_end, ev_end) = run(false);
    let (by_time, ev_time) = run(true);
    check_invariants(&at_end);
    assert!(at_end.duplicated_payloads > 5 && !ev_end.is_empty(), "{}", at_end.duplicated_payloads);
    assert!(at_end.edges.iter().any(|e| e.class == Class::Redirection));
    assert_same_report(&by_time, &at_end);
    assert_eq!(ev_time, ev_end);
    assert_eq!(serde_json::to_value(&at_end.series).unwrap(), serde_json::to_value(&by_time.series).unwrap());
}

#[test]
fn snapshot_does_not_change_the_index() {
    // The redirect scenario with snapshots between every send: same final report as
    // without, and the mid-stream snapshot counts the window provisionally.
    let run = |snap: bool| {
        let mut n = Net::new();
        let mut mids = Vec::new();
        for i in 0..4u64 {
            let d = data(100 + i, 4);
            n.write_done(1, 2, i * 10, &d);
            if snap {
                mids.push(n.d.snapshot());
            }
            n.write_done(2, 3, i * 10 + 5, &d);
            if snap {
                mids.push(n.d.snapshot());
            }
        }
        (mids, n.finish())
    };
    let (mids, with) = run(true);
    let (_, without) = run(false);
    assert_same_report(&with, &without);
    // Before 2 forwards the first payload, 1→2 is counted as unforwarded, and pending (the
    // live view shows it so); after, as redirection, decided.
    let first = &mids[0];
    assert_eq!(first.totals.figures.payload_bytes, 4 * B);
    assert!(first.edges.iter().all(|e| e.class != Class::Redirection));
    assert_eq!(edge(first, "198.18.0.1", "198.18.0.2", Class::Replication).pending_bytes, 4 * B);
    let second = &mids[1];
    assert_eq!(edge(second, "198.18.0.1", "198.18.0.2", Class::Redirection).figures.payload_bytes, 4 * B);
    assert_eq!(edge(second, "198.18.0.1", "198.18.0.2", Class::Redirection).pending_bytes, 0);
    // 2 → 3 may itself still be forwarded: pending until it leaves the window.
    assert_eq!(edge(second, "198.18.0.2", "198.18.0.3", Class::Replication).pending_bytes, 4 * B);
    assert_eq!(second.totals.figures.payload_bytes, 8 * B);
}

/// A payload written again and again within the window never leaves it, so its list of sends
/// grows with the run (up to `MAX_SENDS_PER_PAYLOAD`); a live snapshot, taken every second,
/// lists its first `SNAPSHOT_SENDS_PER_PAYLOAD` and counts them all (issue 12: the snapshot
/// grew 4 KB a second in the soak). The final result keeps the full list.
#[test]
fn snapshot_lists_the_first_sends_of_a_payload_however_often_it_is_sent() {
    use super::evidence::SNAPSHOT_SENDS_PER_PAYLOAD as N;
    let cfg = DedupeConfig { window_ns: 10_000 * MS, top_n: 2, ..Default::default() };
    let mut n = Net::with(cfg, json!({"assume_members": true}), None);
    let a = data(1, 1);
    let total = 3 * N as u64;
    for i in 0..total {
        n.write_done(1, 2, i, &a);
    }
    let snap = n.d.snapshot();
    let d = &snap.top_duplicates[0];
    assert_eq!(d.sends_total, total);
    assert_eq!(d.sends.len(), N);
    assert_eq!(d.sends.iter().map(|s| s.message_id).collect::<Vec<_>>(), (1..=N as u64).collect::<Vec<_>>());
    assert_eq!(d.duplicate_bytes, (total - 1) * B);
    // Some left the window (stored with the payload), the rest are still in it: the first
    // `N` in all, those that left first, then those in the window from the first of them.
    for left in [10u64, N as u64 - 1, N as u64, N as u64 + 5] {
        n.d.advance(10_000 * MS + (left - 1) * MS + 1);
        let snap = n.d.snapshot();
        let d = &snap.top_duplicates[0];
        assert_eq!(n.d.live_sends() as u64, total - left);
        assert_eq!(d.sends_total, total);
        assert_eq!(d.sends.iter().map(|s| s.message_id).collect::<Vec<_>>(), (1..=N as u64).collect::<Vec<_>>(), "{left} left");
    }
    // Closed (every send left the window): the same in the snapshot, all of them at the end.
    n.d.advance(20_000 * MS);
    let snap = n.d.snapshot();
    assert_eq!((snap.top_duplicates[0].sends_total, snap.top_duplicates[0].sends.len()), (total, N));
    let r = n.d.finish();
    assert_eq!(r.top_duplicates[0].sends.len(), total as usize);
}

#[test]
fn snapshot_of_an_empty_index() {
    let mut n = Net::new();
    let s = n.d.snapshot();
    assert!(s.edges.is_empty());
    assert_eq!(s.totals.dup_ratio, Some(1.0));
    n.finish();
}

#[test]
fn series_uses_the_final_class_in_the_writes_interval() {
    // 100 ms intervals: n1's WRITE to n2 at 90 ms is forwarded by n2 at 150 ms and 160 ms (next
    // interval). The WRITE's bytes are redirection, in the interval of the WRITE (its window
    // time), never replication there; the series sums to the edge totals.
    let cfg = DedupeConfig { series_interval_ns: 100 * MS, ..Default::default() };
    let mut n = Net::with(cfg, json!({}), None);
    let w = data(7, 3);
    n.write_done(1, 2, 90, &w);
    n.write_done(2, 1, 150, &w);
    n.write_done(2, 1, 160, &w);
    let r = n.finish();
    check_invariants(&r);
    let s = r.series.as_ref().unwrap();
    assert_eq!((s.interval_seconds, s.start, s.intervals), (0.1, Some(0.0), 2));
    let rows: Vec<(f64, &str, Class, u64, u64, u64)> = s
        .rows
        .iter()
        .map(|x| (x.t, x.src.as_str(), x.class, x.figures.payload_bytes, x.figures.unique_bytes, x.figures.per_copy_duplicate_bytes))
        .collect();
    assert_eq!(
        rows,
        vec![
            (0.0, N1, Class::Redirection, 3 * B, 3 * B, 0),
            (0.1, N2, Class::Replication, 6 * B, 3 * B, 3 * B),
        ]
    );
}

#[test]
fn series_of_steady_nested_writes_has_per_copy_equal_to_unique_per_interval() {
    // A 2-copy nested mirror at one WRITE pair per 10 ms over 1 s, 100 ms intervals: every
    // interval carries twice its unique bytes, per-copy = unique.
    let cfg = DedupeConfig { series_interval_ns: 100 * MS, ..Default::default() };
    let mut n = Net::with(cfg, json!({}), None);
    for i in 0..100u64 {
        let w = data(1000 + i, 2);
        n.write_done(1, 2, i * 10, &w);
        n.write_done(1, 2, i * 10 + 1, &w);
    }
    let r = n.finish();
    check_invariants(&r);
    let s = r.series.unwrap();
    assert_eq!(s.rows.len(), 10);
    for row in &s.rows {
        assert_eq!(row.figures.unique_bytes, 20 * B, "{row:?}");
        assert_eq!(row.figures.per_copy_duplicate_bytes, 20 * B, "{row:?}");
        assert_eq!(row.figures.nontrivial_bytes, 40 * B, "{row:?}");
    }
}

/// Past the bound on edges, sends of new node pairs count on `other` → `other` (one
/// `dedupe.edge_cap` each); pairs already known keep their edge; every send is counted once.
#[test]
fn edges_past_their_bound_count_on_other() {
    let cfg = DedupeConfig { max_edges: 3, ..Default::default() };
    let mut n = Net::with(cfg, json!({"assume_members": true}), None);
    for (i, (s, d)) in [(1, 2), (1, 3), (2, 3), (3, 4), (4, 5), (1, 2), (5, 6)].into_iter().enumerate() {
        n.write_done(s, d, i as u64, &data(10 + i as u64, 1));
    }
    let r = n.finish();
    check_invariants(&r);
    assert_eq!(r.totals.figures.sends, 7);
    let pairs: std::collections::BTreeMap<(String, String), u64> =
        r.edges.iter().fold(Default::default(), |mut m, e| {
            *m.entry((e.src.to_string(), e.dst.to_string())).or_insert(0) += e.figures.sends;
            m
        });
    assert_eq!(pairs.get(&("other".into(), "other".into())), Some(&3), "{pairs:?}");
    assert_eq!(pairs.get(&(ip(1).to_string(), ip(2).to_string())), Some(&2));
    assert_eq!(pairs.len(), 4, "three edges and other -> other: {pairs:?}");
    assert_eq!(r.anomalies.get("dedupe.edge_cap"), Some(&3));
}

/// A send record keeps times and frame numbers in 32 bits relative to the send; values that
/// do not fit (a response seconds after or before the send, a send handed over seconds
/// late, a payload spread over more than 2^24 frames, a header frame billions of frames
/// away) are kept whole beside it and give the same verdicts and evidence as small ones.
#[test]
fn values_too_wide_for_the_compact_send_record_are_kept_whole() {
    let (x, y) = (data(1, 1), data(2, 1));
    // A's response at `done_ms`; another payload in between, so only "outstanding" decides
    // whether the repeat of A's payload at 12 s is a per-copy send.
    for (done_ms, per_copy) in [(13_000, true), (12_001, true), (11_000, false), (7_000, false), (2_000, false)] {
        let mut n = Net::new();
        let a = n.send(SendKind::Write, 1, 2, 1, 10_000, &x);
        n.send(SendKind::Write, 1, 2, 1, 10_500, &y);
        n.d.complete(1, a, done_ms * MS);
        n.send(SendKind::Write, 1, 2, 1, 12_000, &x);
        let r = n.finish();
        let f = &r.totals.figures;
        let expect = if per_copy { (B, 0) } else { (0, B) };
        assert_eq!((f.per_copy_duplicate_bytes, f.repeated_content_bytes), expect, "response at {done_ms} ms");
    }

    let mut n = Net::new();
    n.send(SendKind::Write, 1, 2, 1, 10_000, &x);
    // Handed over when the clock is at 10 s, though it started at 2 s; its payload frames
    // span 2^24 + 5 frames, its header frame is 5e9.
    let mut late = rec(SendKind::Write, 1, 2, 1, 2, 2_000, &x);
    late.first_frame.number = 100;
    late.last_frame.number = 100 + (1 << 24) + 5;
    late.header_frame = Some(FrameRef { file: 0, number: 5_000_000_000 });
    n.d.send(late);
    // And one whose header frame came long before its payload.
    let mut early = rec(SendKind::Write, 1, 2, 1, 3, 10_100, &x);
    early.first_frame.number = 6_000_000_000;
    early.last_frame.number = 6_000_000_001;
    early.header_frame = Some(FrameRef { file: 0, number: 7 });
    n.d.send(early);
    let r = n.finish();
    let sends = &r.top_duplicates[0].sends;
    let s2 = sends.iter().find(|s| s.message_id == 2).expect("the late send");
    assert_eq!((s2.time_ns, s2.frames, s2.header_frame), (2_000 * MS, [100, 100 + (1 << 24) + 5], Some(5_000_000_000)));
    let s3 = sends.iter().find(|s| s.message_id == 3).expect("the early-header send");
    assert_eq!((s3.time_ns, s3.frames, s3.header_frame), (10_100 * MS, [6_000_000_000, 6_000_000_001], Some(7)));
    assert_eq!(r.anomalies.get("dedupe.send_out_of_order"), Some(&1));
}

/// A live send keeps its window time in 32 bits from its group's first send's, and its
/// MessageId in 32 bits; a send more than 2^32 ns (4.3 s) after its group's first, and a
/// MessageId from 2^32 - 1 on, are kept whole (`Wide`). The window, responses, repeated
/// messages, the series and the evidence all see the whole values.
#[test]
fn sends_seconds_apart_and_message_ids_past_32_bits_keep_their_values() {
    let (x, y, z) = (data(1, 1), data(2, 1), data(3, 1));
    let mids = [u64::from(u32::MAX) - 1, u64::from(u32::MAX), 1 << 32, (1 << 40) + 7, u64::MAX - 1, 9];
    let mut n = Net::new();
    let send = |n: &mut Net, mid: u64, t_ms: u64, bytes: &[u8]| {
        // Frames and offset from a small number (`rec` derives them from the MessageId).
        let mut r = rec(SendKind::Write, 1, 2, 1, t_ms, t_ms, bytes);
        r.message_id = mid;
        n.d.send(r)
    };
    send(&mut n, mids[0], 0, &x);
    send(&mut n, mids[1], 5_000, &y);
    n.d.complete(1, mids[1], 5_500 * MS);
    send(&mut n, mids[2], 10_000, &z);
    // y again: its earlier send was answered at 5.5 s, so it is repeated content; z again
    // while its earlier send is unanswered: a per-copy send.
    send(&mut n, mids[3], 11_000, &y);
    send(&mut n, mids[4], 12_000, &z);
    // The same message again while its send is live: counted, not a send.
    send(&mut n, mids[2], 12_500, &x);
    assert_eq!(n.d.snapshot().anomalies.get("dedupe.repeated_message"), Some(&1));
    // 73 s: every earlier send is more than 60 s old and has left; x is unique again.
    send(&mut n, mids[5], 73_000, &x);
    let r = n.finish();
    let f = &r.totals.figures;
    assert_eq!(f.sends, 6);
    assert_eq!((f.unique_bytes, f.repeated_content_bytes, f.per_copy_duplicate_bytes), (4 * B, B, B));
    // The series puts each send in its own second's interval.
    let series = r.series.as_ref().expect("a finished report has a series");
    assert_eq!(series.interval_seconds, 1.0);
    let mut at: Vec<u64> = series.rows.iter().filter(|row| row.figures.sends > 0).map(|row| row.t as u64).collect();
    at.sort_unstable();
    at.dedup();
    assert_eq!(at, [0, 5, 10, 11, 12, 73]);
    // The evidence of y and z: the whole MessageIds and times.
    let mut seen: Vec<(u64, u64)> = r.top_duplicates.iter().flat_map(|d| d.sends.iter().map(|s| (s.message_id, s.time_ns / MS))).collect();
    seen.sort_unstable();
    assert_eq!(seen, [(mids[1], 5_000), (mids[2], 10_000), (mids[3], 11_000), (mids[4], 12_000)]);
}

/// From the first snapshot on, the live sends' figures are kept as sends come, change and
/// leave (`LiveFigures`) rather than summed from the window at each snapshot. Every later
/// snapshot must equal the one an index fed the same sends gives at its first (which sums
/// the window): on a run with forwarding chains across five nodes (redirection and its second
/// replica), blocks repeated within a payload, trivial blocks, reads, sends leaving the window
/// by time and before it (the live-block cap), and snapshots at irregular points. The final
/// result is the one without snapshots.
#[test]
fn kept_live_figures_follow_every_change() {
    for max_live_blocks in [usize::MAX, 24] {
        let cfg = DedupeConfig { window_ns: 40 * MS, max_live_blocks, top_n: 4, ..Default::default() };
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let pool: Vec<Vec<u8>> = (0..5).map(|t| data(700 + t, 1)).collect();
        let mut ops = Vec::new();
        let mut t_ms = 0;
        for _ in 0..240 {
            t_ms += next(4);
            let src = 1 + next(5) as u8;
            let dst = 1 + (src as u64 + next(4)) as u8 % 5;
            let kind = if next(6) == 0 { SendKind::Read } else { SendKind::Write };
            let mut bytes = Vec::new();
            for _ in 0..1 + next(3) {
                match next(8) {
                    0 => bytes.extend(std::iter::repeat_n(0u8, BLOCK_SIZE)),
                    _ => bytes.extend_from_slice(&pool[next(5) as usize]),
                }
            }
            ops.push((kind, src, dst, t_ms, bytes));
        }
        let feed = |n: &mut Net, ops: &[(SendKind, u8, u8, u64, Vec<u8>)]| {
            for (kind, src, dst, t, bytes) in ops {
                n.send(*kind, *src, *dst, u64::from(*src) * 10 + u64::from(*dst), *t, bytes);
            }
        };
        let mut kept = Net::with(cfg.clone(), json!({"assume_members": true}), None);
        let (mut done, mut snapshots) = (0, 0);
        while done < ops.len() {
            let upto = (done + 1 + next(9) as usize).min(ops.len());
            feed(&mut kept, &ops[done..upto]);
            done = upto;
            let snap = kept.d.snapshot();
            assert!(kept.d.keeps_live_figures());
            let mut walked = Net::with(cfg.clone(), json!({"assume_members": true}), None);
            feed(&mut walked, &ops[..done]);
            assert!(!walked.d.keeps_live_figures());
            let want = walked.d.snapshot();
            assert_eq!(serde_json::to_value(&snap).unwrap(), serde_json::to_value(&want).unwrap(), "after {done} sends");
            snapshots += 1;
        }
        assert!(snapshots > 30);
        let with = kept.d.finish();
        let mut plain = Net::with(cfg.clone(), json!({"assume_members": true}), None);
        feed(&mut plain, &ops);
        let without = plain.d.finish();
        assert_eq!(serde_json::to_value(&with).unwrap(), serde_json::to_value(&without).unwrap());
        // The run did what it is meant to cover.
        assert!(with.edges.iter().any(|e| e.class == Class::Redirection), "{:#?}", with.edges);
        assert!(with.totals.figures.trivial_bytes > 0 && with.totals.figures.repeated_content_bytes + with.totals.figures.per_copy_duplicate_bytes > 0);
        assert_eq!(with.index.early_expiries > 0, max_live_blocks != usize::MAX);
    }
}
