//! The published Storage Spaces Direct experiments as SMB2 traffic between two nodes.
//!
//! A scenario is a list of flows. A flow is one SMB session from a client node to the SMB
//! server on a peer node (one TCP connection per channel), with target files opened at the
//! start and closed at the end. Per I/O, every flow sends its requests in order (a WRITE
//! per copy, or a READ), then the responses come back in reverse order: in `redirect4` the
//! owner replicates a redirected write to its partner before it answers the non-owner,
//! as write-through storage must.

use super::data::IoData;
use super::pcap::Tap;
use super::smb2::{self, command, FileId, Header};
use super::smbdirect::BufferDescriptor;
use super::spec::Spec;
use super::truth::{Class, Tally};
use super::{ConnId, Host, Side, Transport, OWNER, PARTNER};
use std::io::{self, Write};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// WRITE requests carry the data client → server.
    Write,
    /// READ responses carry the data server → client.
    Read,
    /// Only connection setup and metadata (open, close): no data on the wire.
    Metadata,
}

#[derive(Clone, Debug)]
pub struct Flow {
    pub client: usize,
    pub server: usize,
    pub op: Op,
    /// Messages per I/O, each to its own target file.
    pub copies: usize,
    pub class: Class,
    /// Share name on the server; the tree path is `\\<server name>\<share>`.
    pub share: &'static str,
    /// Target file names (one per copy).
    pub files: &'static [&'static str],
}

/// Software Storage Bus copies on the partner (the SBL SMB instance; share name [I]).
const SBL_SHARE: &str = "SBL$";
const EXTENTS: &[&str] = &[
    "Slab\\extent-0001.dat",
    "Slab\\extent-0002.dat",
    "Slab\\extent-0003.dat",
];
/// CSV redirected I/O to the coordinator (share name [I], see PROTOCOL-NOTES).
const CSV_SHARE: &str = "ClusterStorage$";
const VM_DISK: &[&str] = &["Volume1\\VM01\\VM01-disk0.vhdx"];

fn replication(copies: usize) -> Flow {
    Flow {
        client: OWNER,
        server: PARTNER,
        op: Op::Write,
        copies,
        class: Class::Replication,
        share: SBL_SHARE,
        files: &EXTENTS[..copies],
    }
}

/// The scenarios `flows` knows, with one line on each (`smbwire synth --help` lists them).
pub const SCENARIOS: &[(&str, &str)] = &[
    ("mirror2", "two-way mirror: the owner writes one copy to its partner (ratio 1)"),
    ("nested4", "nested two-way mirror, four copies, two per node: each write crosses twice (ratio 2)"),
    ("six", "six copies on two nodes, three per node (ratio 3)"),
    ("redirect4", "VM on the non-owner: its write is redirected to the owner, which writes two copies back"),
    ("read-nonowner", "VM on the non-owner reads through the owner (redirected reads)"),
    ("read-owner", "VM on the owner reads locally: only the replication session's setup is on the wire"),
];

/// The flows of a scenario.
pub fn flows(scenario: &str) -> Result<Vec<Flow>, String> {
    Ok(match scenario {
        // Two-way mirror: the partner holds one copy.
        "mirror2" => vec![replication(1)],
        // Nested two-way mirror: four copies, two per node.
        "nested4" => vec![replication(2)],
        // Six copies on two nodes: three per node.
        "six" => vec![replication(3)],
        // VM on the non-owner: its write goes to the owner, which sends two copies back.
        "redirect4" => vec![
            Flow {
                client: PARTNER,
                server: OWNER,
                op: Op::Write,
                copies: 1,
                class: Class::Redirection,
                share: CSV_SHARE,
                files: VM_DISK,
            },
            replication(2),
        ],
        // VM on the non-owner reads through the owner.
        "read-nonowner" => vec![Flow {
            client: PARTNER,
            server: OWNER,
            op: Op::Read,
            copies: 1,
            class: Class::RedirectedRead,
            share: CSV_SHARE,
            files: VM_DISK,
        }],
        // VM on the owner reads locally: only the replication session's setup is seen.
        "read-owner" => vec![Flow { op: Op::Metadata, ..replication(1) }],
        other => {
            let names: Vec<&str> = SCENARIOS.iter().map(|(n, _)| *n).collect();
            return Err(format!("unknown scenario {other:?} ({})", names.join(", ")))
        }
    })
}

/// Server think time for metadata, and storage latency for a data request.
const METADATA_LATENCY_NS: u64 = 80_000;
const IO_LATENCY_NS: u64 = 25_000;
/// Credits a client asks for and a server grants (§3.3.1.2: grant at least what is charged).
const CREDITS: u16 = 256;

/// Seconds between 1601-01-01 and 1970-01-01 (FILETIME epoch, MS-DTYP §2.3.3).
const FILETIME_UNIX_OFFSET_S: u64 = 11_644_473_600;

struct Channel {
    conn: ConnId,
    next_message_id: u64,
}

struct Session {
    flow: Flow,
    session_id: u64,
    tree_id: u32,
    channels: Vec<Channel>,
    file_ids: Vec<FileId>,
}

/// Everything one generation run writes to or draws from.
pub struct Run<'a, W: Write, T: Transport<W>> {
    pub spec: &'a Spec,
    pub hosts: &'a [Host],
    pub tap: Tap<W>,
    pub transport: T,
    pub tally: Tally,
    pub rng: super::data::SplitMix64,
}

impl<W: Write, T: Transport<W>> Run<'_, W, T> {
    fn filetime(&self) -> u64 {
        (self.tap.now_ns() / 100) + FILETIME_UNIX_OFFSET_S * 10_000_000
    }

    /// Give a request header the channel's next MessageId; a request consumes as many
    /// MessageIds as its CreditCharge (MS-SMB2 §3.2.4.1.5).
    fn allocate(s: &mut Session, ch: usize, h: Header) -> Header {
        let c = &mut s.channels[ch];
        let h = Header {
            message_id: c.next_message_id,
            ..h
        };
        c.next_message_id += u64::from(h.credit_charge.max(1));
        h
    }

    fn request(&mut self, s: &Session, ch: usize, msg: &[u8], data: &[u8]) -> io::Result<()> {
        self.transport
            .send(&mut self.tap, s.channels[ch].conn, Side::Client, msg, data)?;
        self.tally.smb2.messages += 1;
        Ok(())
    }

    fn respond(&mut self, s: &Session, ch: usize, msg: &[u8], data: &[u8]) -> io::Result<()> {
        self.transport
            .send(&mut self.tap, s.channels[ch].conn, Side::Server, msg, data)?;
        self.tally.smb2.messages += 1;
        Ok(())
    }

    /// A response to an RDMA request: with RDMA_V1_INVALIDATE it also invalidates the
    /// client's token (MS-SMB2 §3.3.5.13 hands it to MS-SMBD §3.1.4.2 Send with Invalidate).
    fn respond_rdma(
        &mut self,
        s: &Session,
        ch: usize,
        msg: &[u8],
        descs: &[BufferDescriptor],
    ) -> io::Result<()> {
        match descs.first() {
            Some(d) if self.spec.send_with_invalidate => {
                self.transport.send_invalidate(
                    &mut self.tap,
                    s.channels[ch].conn,
                    Side::Server,
                    msg,
                    d.token,
                )?;
                self.tally.smb2.messages += 1;
                Ok(())
            }
            _ => self.respond(s, ch, msg, &[]),
        }
    }

    fn rdma_channel(&self) -> u32 {
        if self.spec.send_with_invalidate {
            smb2::channel::RDMA_V1_INVALIDATE
        } else {
            smb2::channel::RDMA_V1
        }
    }

    /// A metadata request and its response, with server think time between.
    fn exchange(
        &mut self,
        s: &mut Session,
        ch: usize,
        h: Header,
        req: impl Fn(&Header) -> Vec<u8>,
        resp: impl Fn(&Header) -> Vec<u8>,
    ) -> io::Result<Header> {
        let h = Self::allocate(s, ch, h);
        self.request(s, ch, &req(&h), &[])?;
        self.tap.idle(METADATA_LATENCY_NS);
        self.respond(s, ch, &resp(&h.response()), &[])?;
        Ok(h)
    }

    fn guid(&mut self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[..8].copy_from_slice(&self.rng.next_u64().to_le_bytes());
        g[8..].copy_from_slice(&self.rng.next_u64().to_le_bytes());
        g
    }

    fn salt(&mut self) -> [u8; 32] {
        let mut s = [0u8; 32];
        for c in s.chunks_mut(8) {
            c.copy_from_slice(&self.rng.next_u64().to_le_bytes());
        }
        s
    }

    /// Connect every channel, NEGOTIATE and SESSION_SETUP on each (binding the extra
    /// channels to the session, MS-SMB2 §3.2.4.1.7), then TREE_CONNECT and CREATE on the
    /// first channel: trees and opens belong to the session, not the connection.
    fn open_session(&mut self, flow: &Flow, index: usize) -> io::Result<Session> {
        let (client, server) = (&self.hosts[flow.client], &self.hosts[flow.server]);
        let mut s = Session {
            flow: flow.clone(),
            // Windows-like SessionIds: a high allocation counter, low bits per session.
            session_id: 0x0000_0c00_0000_0041 + ((index as u64) << 32),
            tree_id: 1 + index as u32,
            channels: Vec::new(),
            file_ids: Vec::new(),
        };
        let client_guid = self.guid();
        let server_guid = self.guid();
        let dialect = self.spec.dialect;
        let compression = self.spec.compression();
        for ch in 0..self.spec.channels as usize {
            let conn = self.transport.connect(&mut self.tap, client, server)?;
            s.channels.push(Channel {
                conn,
                next_message_id: 0,
            });
            let (csalt, ssalt, now) = (self.salt(), self.salt(), self.filetime());
            let h = Header {
                command: command::NEGOTIATE,
                credit_charge: 0,
                credits: 1,
                ..Default::default()
            };
            self.exchange(
                &mut s,
                ch,
                h,
                |h| smb2::negotiate_request(h, dialect, client_guid, &csalt, compression),
                |h| {
                    smb2::negotiate_response(
                        &Header { credits: 1, ..*h },
                        dialect,
                        server_guid,
                        &ssalt,
                        now,
                        compression,
                    )
                },
            )?;
            // The first SESSION_SETUP of a session carries SessionId 0 (§3.2.4.2.3); a
            // binding one names the session it joins.
            let sid = if ch == 0 { 0 } else { s.session_id };
            let h = Header {
                command: command::SESSION_SETUP,
                credit_charge: 1,
                credits: CREDITS,
                session_id: sid,
                ..Default::default()
            };
            let session_id = s.session_id;
            self.exchange(
                &mut s,
                ch,
                h,
                |h| smb2::session_setup_request(h, ch > 0),
                |h| smb2::session_setup_response(&Header { session_id, ..*h }),
            )?;
        }
        let path = format!("\\\\{}\\{}", server.name, flow.share);
        let h = Header {
            command: command::TREE_CONNECT,
            credit_charge: 1,
            credits: CREDITS,
            session_id: s.session_id,
            ..Default::default()
        };
        let tree_id = s.tree_id;
        self.exchange(
            &mut s,
            0,
            h,
            |h| smb2::tree_connect_request(h, &path),
            |h| smb2::tree_connect_response(&Header { tree_id, ..*h }),
        )?;
        let end_of_file = self.spec.bytes;
        for name in flow.files {
            let fid = FileId {
                persistent: self.rng.next_u64() >> 16,
                volatile: self.rng.next_u64(),
            };
            s.file_ids.push(fid);
            let now = self.filetime();
            let h = Header {
                command: command::CREATE,
                credit_charge: 1,
                credits: CREDITS,
                session_id: s.session_id,
                tree_id,
                ..Default::default()
            };
            self.exchange(
                &mut s,
                0,
                h,
                |h| smb2::create_request(h, name),
                |h| smb2::create_response(h, fid, now, end_of_file),
            )?;
        }
        Ok(s)
    }

    fn close_session(&mut self, s: &mut Session) -> io::Result<()> {
        for fid in s.file_ids.clone() {
            let h = Header {
                command: command::CLOSE,
                credit_charge: 1,
                credits: CREDITS,
                session_id: s.session_id,
                tree_id: s.tree_id,
                ..Default::default()
            };
            self.exchange(
                s,
                0,
                h,
                |h| smb2::close_request(h, fid),
                smb2::close_response,
            )?;
        }
        for ch in &s.channels {
            self.transport.close(&mut self.tap, ch.conn)?;
        }
        Ok(())
    }

    /// Generate the whole scenario.
    pub fn run(&mut self, flows: &[Flow]) -> io::Result<()> {
        let mut sessions = Vec::new();
        for (i, f) in flows.iter().enumerate() {
            sessions.push(self.open_session(f, i)?);
        }
        let mut io = IoData::default();
        let has_data = flows.iter().any(|f| f.op != Op::Metadata);
        let ios = if has_data { self.spec.ios() } else { 0 };
        let nch = self.spec.channels;
        // (session, channel, request, the client's RDMA buffers)
        let mut pending: Vec<(usize, usize, Header, Vec<BufferDescriptor>)> = Vec::new();
        let rdma = self.transport.rdma();
        for index in 0..ios {
            let offset = index * self.spec.io_size;
            let len = self.spec.io_size.min(self.spec.bytes - offset) as usize;
            io.fill(self.spec.seed, index, len, self.spec.zero_fill);
            pending.clear();
            for (si, s) in sessions.iter_mut().enumerate() {
                for k in 0..s.flow.copies {
                    let ch = ((index + k as u64) % nch) as usize;
                    let fid = s.file_ids[k];
                    let charge = smb2::credit_charge(len as u32);
                    let base = Header {
                        credit_charge: charge,
                        credits: charge.max(CREDITS),
                        session_id: s.session_id,
                        tree_id: s.tree_id,
                        ..Default::default()
                    };
                    let conn = s.channels[ch].conn;
                    let mut descs = Vec::new();
                    let h = match s.flow.op {
                        Op::Write => {
                            let h = Self::allocate(
                                s,
                                ch,
                                Header {
                                    command: command::WRITE,
                                    ..base
                                },
                            );
                            if rdma {
                                // The server pulls the data as soon as it has the request.
                                descs = self.transport.register(conn, len);
                                let chan = self.rdma_channel();
                                let head = smb2::write_request_rdma(
                                    &h, fid, offset, len as u32, chan, &descs,
                                );
                                self.request(s, ch, &head, &[])?;
                                self.transport
                                    .rdma_read(&mut self.tap, conn, &descs, &io.bytes)?;
                            } else {
                                let head = smb2::write_request_head(&h, fid, offset, len as u32);
                                match smb2::compress_message(self.spec.compression(), &head, &io.bytes) {
                                    Some(msg) => self.request(s, ch, &msg, &[])?,
                                    None => self.request(s, ch, &head, &io.bytes)?,
                                }
                            }
                            self.tally.smb2.write_requests += 1;
                            self.tally.smb2.write_data_bytes += len as u64;
                            self.tally
                                .send(s.flow.client, s.flow.server, s.flow.class, &io);
                            h
                        }
                        Op::Read => {
                            let h = Self::allocate(
                                s,
                                ch,
                                Header {
                                    command: command::READ,
                                    ..base
                                },
                            );
                            let msg = if rdma {
                                descs = self.transport.register(conn, len);
                                let chan = self.rdma_channel();
                                smb2::read_request_rdma(&h, fid, offset, len as u32, chan, &descs)
                            } else {
                                smb2::read_request(&h, fid, offset, len as u32)
                            };
                            self.request(s, ch, &msg, &[])?;
                            h
                        }
                        Op::Metadata => continue,
                    };
                    pending.push((si, ch, h, descs));
                }
            }
            self.tap.idle(IO_LATENCY_NS);
            for (si, ch, h, descs) in pending.iter().rev() {
                let (ch, h) = (*ch, *h);
                let s = &sessions[*si];
                match s.flow.op {
                    Op::Write => {
                        let msg = smb2::write_response(&h.response(), len as u32);
                        if rdma {
                            self.respond_rdma(s, ch, &msg, descs)?;
                        } else {
                            self.respond(s, ch, &msg, &[])?;
                        }
                    }
                    Op::Read => {
                        if rdma {
                            // The data goes first; the response follows its completion
                            // (MS-SMB2 §3.3.5.12).
                            let conn = s.channels[ch].conn;
                            self.transport
                                .rdma_write(&mut self.tap, conn, descs, &io.bytes)?;
                            let msg = smb2::read_response_rdma(&h.response(), len as u32);
                            self.respond_rdma(s, ch, &msg, descs)?;
                        } else {
                            let head = smb2::read_response_head(&h.response(), len as u32);
                            match smb2::compress_message(self.spec.compression(), &head, &io.bytes) {
                                Some(msg) => self.respond(s, ch, &msg, &[])?,
                                None => self.respond(s, ch, &head, &io.bytes)?,
                            }
                        }
                        self.tally.smb2.read_responses += 1;
                        self.tally.smb2.read_data_bytes += len as u64;
                        self.tally
                            .send(s.flow.server, s.flow.client, s.flow.class, &io);
                    }
                    Op::Metadata => {}
                }
            }
        }
        for s in sessions.iter_mut() {
            self.close_session(s)?;
        }
        Ok(())
    }
}
