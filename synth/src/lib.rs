//! Capture synthesizer: emits the published S2D experiments (and variants with mirror-port
//! duplication, retransmission and reordering) as pcap files, and returns the figures the
//! analyzer must find in them (`Truth`).
//!
//! - `spec`: the JSON options; `scenario`: nodes, flows and the per-I/O exchange;
//! - `smb2`: SMB2 message builders (MS-SMB2 §2.2); `data`: per-I/O data, block facts;
//! - `tcp`: SMB2 over Direct TCP, segmentation and impairments; `frames`: Ethernet/IPv4/TCP;
//! - `pcap`: the streaming writer and the capture point (link clock, mirror port);
//! - `truth`: the expected results, tallied while writing.
//!
//! - `smbdirect`: SMB Direct (MS-SMBD) over an RDMA link (`rdma::RdmaLink`): `roce`
//!   (RoCEv2, or RoCEv1 with `transport: "rocev1"`, or native InfiniBand in ERF records with
//!   `transport: "infiniband"`, with the RDMA CM exchange)
//!   or `iwarp` (RDMAP/DDP/MPA on `tcp`).
//!
//! Every record is written by the engine's encoder beside its parser (`smbwire_dissectors`:
//! `wire`, `smb2::records`, `smbdirect::records`, `rdma::{ib, ddp, mpa, cm}`), which also
//! owns the ICRC and the MPA CRC; this crate decides what to send when.
//!
//! A transport carries whole SMB2 messages between the two ends of a connection
//! (`Transport`). Over SMB Direct, WRITE/READ data does not travel in the SMB2 message: the
//! client registers a buffer (`register`), names it in the request's channel info, and the
//! server pulls it with RDMA Read (`rdma_read`) or pushes it with RDMA Write (`rdma_write`)
//! (MS-SMB2 §3.3.5.12, §3.3.5.13; MS-SMBD §3.1.4.5).

pub mod data;
pub mod frames;
pub mod iwarp;
pub mod pcap;
pub mod rdma;
pub mod roce;
pub mod scenario;
pub mod smb2;
pub mod smbdirect;
pub mod spec;
pub mod tcp;
pub mod truth;

pub use spec::Spec;
pub use truth::Truth;

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

/// A cluster node as the capture sees it.
#[derive(Clone, Debug)]
pub struct Host {
    pub index: usize,
    pub name: &'static str,
    pub mac: [u8; 6],
    pub ip: IpAddr,
}

pub const OWNER: usize = 0;
pub const PARTNER: usize = 1;

/// The two nodes of the experiments (RFC 2544 benchmarking addresses, 198.18.0.1 and .2; with
/// `ipv6`, RFC 5180's benchmarking prefix, 2001:2::1 and ::2; locally administered MACs).
pub fn hosts(ipv6: bool) -> Vec<Host> {
    let ip = |n: u8| {
        if ipv6 {
            IpAddr::V6(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, u16::from(n)))
        } else {
            IpAddr::V4(Ipv4Addr::new(198, 18, 0, n))
        }
    };
    vec![
        Host {
            index: OWNER,
            name: "owner",
            mac: [0x02, 0x53, 0x32, 0x44, 0x00, 0x01],
            ip: ip(1),
        },
        Host {
            index: PARTNER,
            name: "partner",
            mac: [0x02, 0x53, 0x32, 0x44, 0x00, 0x02],
            ip: ip(2),
        },
    ]
}

/// Index of a connection inside its transport.
pub type ConnId = usize;

/// Which end of a connection sends: the SMB client (who connected) or the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client = 0,
    Server = 1,
}

/// Carries SMB2 messages between two hosts.
pub trait Transport<W: Write> {
    /// Open a connection from `client` to the SMB server on `server`.
    fn connect(
        &mut self,
        tap: &mut pcap::Tap<W>,
        client: &Host,
        server: &Host,
    ) -> io::Result<ConnId>;
    /// Send one SMB2 message: `head` then `data` (inline WRITE/READ data, possibly empty).
    fn send(
        &mut self,
        tap: &mut pcap::Tap<W>,
        conn: ConnId,
        from: Side,
        head: &[u8],
        data: &[u8],
    ) -> io::Result<()>;
    /// Close the connection (the client closes first).
    fn close(&mut self, tap: &mut pcap::Tap<W>, conn: ConnId) -> io::Result<()>;

    /// Whether WRITE/READ data moves by RDMA (SMB Direct) rather than inline.
    fn rdma(&self) -> bool {
        false
    }
    /// The client registers a `len`-byte buffer on `conn` for the server to read or write.
    fn register(&mut self, _conn: ConnId, _len: usize) -> Vec<smbdirect::BufferDescriptor> {
        Vec::new()
    }
    /// The server pulls `data` from the client's buffers `descs` (RDMA Read).
    fn rdma_read(
        &mut self,
        _tap: &mut pcap::Tap<W>,
        _conn: ConnId,
        _descs: &[smbdirect::BufferDescriptor],
        _data: &[u8],
    ) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "not an RDMA transport",
        ))
    }
    /// The server pushes `data` into the client's buffers `descs` (RDMA Write).
    fn rdma_write(
        &mut self,
        _tap: &mut pcap::Tap<W>,
        _conn: ConnId,
        _descs: &[smbdirect::BufferDescriptor],
        _data: &[u8],
    ) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "not an RDMA transport",
        ))
    }
    /// Send one SMB2 message and remotely invalidate `token` with it (MS-SMBD §3.1.4.2).
    fn send_invalidate(
        &mut self,
        tap: &mut pcap::Tap<W>,
        conn: ConnId,
        from: Side,
        head: &[u8],
        _token: u32,
    ) -> io::Result<()> {
        self.send(tap, conn, from, head, &[])
    }
}

/// First frame time: 2025-01-30 12:00:00 UTC (fixed, so a seed gives the same file).
const START_NS: u64 = 1_738_238_400 * 1_000_000_000;
/// Seed domains for the generators that are not payload data.
const PURPOSE_NETWORK: u64 = 0x4e45_5457;
const PURPOSE_IDS: u64 = 0x4944_5300;
const PURPOSE_RDMA: u64 = 0x5244_4d41;
const PURPOSE_KEYS: u64 = 0x4b45_5953;

/// Generate the capture described by `spec` into `out` (pcap, nanosecond timestamps,
/// Ethernet) and return what it contains.
///
/// The file takes its name once complete (`outputs::Staged`): Ctrl-C (asked every 64 MiB)
/// or a write error leaves nothing at `out`, and an earlier file there whole. Interrupted,
/// the error is `INTERRUPTED`.
pub fn generate(spec: &Spec, out: &Path) -> Result<Truth, String> {
    spec.validate()?;
    let name = out.to_string_lossy();
    let (f, staged) = smbwire_dissectors::outputs::Staged::create(&name, 0o666)
        .map_err(|e| format!("{}: cannot create: {e}", out.display()))?;
    let file = pcap::PcapWriter::with_file(f, out).map_err(|e| format!("{}: cannot create: {e}", out.display()))?;
    let truth = generate_to(spec, file).map_err(|e| {
        if smbwire_dissectors::capture::interrupt::is_mark(&e) {
            INTERRUPTED.to_string()
        } else {
            format!("{}: write failed: {e}", out.display())
        }
    })?;
    staged.commit().map_err(|e| format!("{}: write failed: {e}", out.display()))?;
    Ok(truth)
}

/// `generate`'s error when the user interrupted it.
pub const INTERRUPTED: &str = "interrupted";

/// Generate into any writer (tests use a Vec). `spec` must be valid.
pub fn generate_to<W: Write>(spec: &Spec, pcap: pcap::PcapWriter<W>) -> io::Result<Truth> {
    let flows = scenario::flows(&spec.scenario)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let hosts = hosts(spec.ipv6);
    let mut pcap = pcap;
    if spec.transport == "infiniband" {
        // tshark 4 does not read LINKTYPE_INFINIBAND (247) files; it decodes ERF InfiniBand
        // records (ibdump's format) down to SMB2.
        pcap.linktype = pcap::LINKTYPE_ERF;
    }
    let mut tap = pcap::Tap::new(pcap, START_NS, spec.link_gbps, spec.mirror_dup);
    tap.tunnel = frames::Tunnel::new(frames::Encap::from_name(&spec.encap).unwrap_or_default());
    tap.vlan = frames::Vlan::from_name(&spec.vlan).unwrap_or_default();
    let net = data::stream(spec.seed, PURPOSE_NETWORK, 0);
    let loss_mode = if spec.loss_mode == "drop" {
        tcp::LossMode::Drop
    } else {
        tcp::LossMode::Retransmit
    };
    let keys = data::stream(spec.seed, PURPOSE_KEYS, 0);
    let max_send = spec.max_send_size as usize;
    let descs = spec.descriptors as usize;
    match spec.transport.as_str() {
        "rocev1" | "rocev2" | "infiniband" => {
            let version = match spec.transport.as_str() {
                "rocev1" => roce::RoceVersion::V1,
                "infiniband" => roce::RoceVersion::Infiniband,
                _ => roce::RoceVersion::V2,
            };
            let imp = tcp::Impairments {
                retransmit: spec.retransmit,
                reorder: spec.reorder,
                loss: spec.loss,
                loss_mode,
            };
            let mut link = roce::RoceLink::new(
                version,
                spec.mtu,
                imp,
                data::stream(spec.seed, PURPOSE_RDMA, 0),
                &hosts,
            );
            link.solicited_event = spec.solicited_event;
            let mut tap = tap;
            if spec.other_ulp_port != 0 {
                link.other_ulp(&mut tap, &hosts[0], &hosts[1], spec.other_ulp_port)?;
            }
            let t = smbdirect::SmbDirectTransport::new(link, max_send, descs, keys);
            finish(spec, &flows, &hosts, tap, t, |t| {
                (tcp::TcpStats::default(), Some(t.link.stats.clone()))
            })
        }
        "iwarp" => {
            let imp = tcp::Impairments {
                retransmit: spec.retransmit,
                reorder: spec.reorder,
                loss: spec.loss,
                loss_mode,
            };
            let mut link = iwarp::IwarpLink::new(
                spec.mss as usize,
                imp,
                spec.mpa_markers,
                spec.mpa_crc,
                spec.mpa_private_data,
                net,
                data::stream(spec.seed, PURPOSE_RDMA, 0),
                hosts.len(),
            );
            link.terminate = spec.iwarp_terminate;
            link.solicited_event = spec.solicited_event;
            let t = smbdirect::SmbDirectTransport::new(link, max_send, descs, keys);
            finish(spec, &flows, &hosts, tap, t, |t| {
                let tcp = t.link.tcp.stats;
                let mut r = t.link.stats.clone();
                r.lost_packets = tcp.lost_segments;
                r.dropped_packets = tcp.dropped_segments;
                r.dropped_bytes = tcp.dropped_bytes;
                (tcp, Some(r))
            })
        }
        _ => {
            let t = tcp::TcpTransport::new(
                spec.mss as usize,
                spec.retransmit,
                spec.reorder,
                net,
                hosts.len(),
            );
            finish(spec, &flows, &hosts, tap, t, |t| (t.link.stats, None))
        }
    }
}

/// Run the scenario on `transport` and assemble the Truth; `stats` reads the transport's
/// TCP and RDMA figures.
fn finish<W: Write, T: Transport<W>>(
    spec: &Spec,
    flows: &[scenario::Flow],
    hosts: &[Host],
    tap: pcap::Tap<W>,
    transport: T,
    stats: impl Fn(&T) -> (tcp::TcpStats, Option<rdma::RdmaTruth>),
) -> io::Result<Truth> {
    let mut run = scenario::Run {
        spec,
        hosts,
        tap,
        transport,
        tally: truth::Tally::default(),
        rng: data::stream(spec.seed, PURPOSE_IDS, 0),
    };
    run.run(flows)?;
    let last_ts_ns = run.tap.pcap.last_ts_ns;
    let mirror_duplicate_frames = run.tap.mirror_duplicates;
    let (frames, file_bytes) = (run.tap.pcap.frames, run.tap.pcap.bytes);
    run.tap.pcap.finish()?;
    let (tcp_stats, rdma_truth) = stats(&run.transport);

    let edges = run.tally.edges(hosts);
    let payload_bytes: u64 = edges.iter().map(|e| e.payload_bytes).sum();
    Ok(Truth {
        schema: truth::SCHEMA,
        scenario: spec.scenario.clone(),
        transport: spec.transport.clone(),
        dialect: format!("{:#06x}", spec.dialect),
        seed: spec.seed,
        bytes: spec.bytes,
        io_size: spec.io_size,
        ios: if flows.iter().all(|f| f.op == scenario::Op::Metadata) {
            0
        } else {
            spec.ios()
        },
        channels: spec.channels,
        edges,
        totals: truth::Totals {
            payload_bytes,
            logical_bytes: spec.bytes,
            amplification: if spec.bytes > 0 {
                payload_bytes as f64 / spec.bytes as f64
            } else {
                0.0
            },
        },
        smb2: run.tally.smb2.clone(),
        tcp: tcp_stats,
        rdma: rdma_truth,
        capture: truth::CaptureTruth {
            frames,
            file_bytes,
            mirror_duplicate_frames,
            first_ts_ns: START_NS,
            last_ts_ns,
        },
        topology: truth::TopologyTruth {
            nodes: hosts
                .iter()
                .map(|h| {
                    let mut addresses = vec![h.ip.to_string()];
                    if spec.transport == "infiniband" {
                        // Native IB packets without a GRH are named by their LIDs.
                        let lid = roce::lid_of_ip(h.ip);
                        addresses.push(smbwire_dissectors::wire::infiniband::lid_addr(lid).to_string());
                    }
                    truth::NodeTruth { name: h.name.into(), addresses, member: true }
                })
                .collect(),
        },
    })
}

/// `_core.synth(spec_json, out_path) -> truth_json`.
pub fn synth_json(spec_json: &str, out: &str) -> Result<String, String> {
    let spec = Spec::from_json(spec_json)?;
    let truth = generate(&spec, Path::new(out))?;
    serde_json::to_string(&truth).map_err(|e| e.to_string())
}

/// The synthesizer's tests (the engine reads what it writes): `tests.rs` and its children
/// `tests/rdma.rs`, `tests/rocev1.rs`, `tests/rdma_property.rs`, as in the engine's layout.
#[cfg(test)]
mod tests;
