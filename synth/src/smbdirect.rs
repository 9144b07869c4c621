//! SMB Direct (MS-SMBD) for the synthesizer: the negotiate exchange (§2.2.1, §2.2.2), SMB2
//! messages in data transfer messages (§2.2.3) cut to the negotiated send size
//! (RemainingDataLength > 0 means more fragments follow, §3.1.5.8), buffer descriptors
//! (§2.2.3.1), and a `Transport` that carries all of it over an RDMA link (RoCEv2 or iWARP,
//! `super::rdma::RdmaLink`). All integers are little-endian (§2.2).

use super::data::SplitMix64;
use super::pcap::Tap;
use super::rdma::RdmaLink;
use super::{ConnId, Host, Side, Transport};
use smbwire_dissectors::smbdirect::records::{
    DataTransfer, NegotiateRequest, NegotiateResponse, VERSION_1_0,
};
use std::io::{self, Write};

/// Send credits each side asks for and the server grants at first (Windows' target, 255).
const CREDIT_TARGET: u16 = 255;
/// Largest reassembled message either side accepts (§3.1.1.1 MaxFragmentedRecvSize).
pub const MAX_FRAGMENTED_SIZE: u32 = 1 << 20;
/// Largest RDMA read/write the server does for one request (§2.2.2 MaxReadWriteSize).
pub const MAX_READ_WRITE_SIZE: u32 = 8 << 20;
/// Where the data of a data transfer message starts (§2.2.3: 8-byte aligned, after the header).
pub const DATA_OFFSET: usize = DataTransfer::DATA_OFFSET as usize;

/// SMB_DIRECT_BUFFER_DESCRIPTOR_V1 (§2.2.3.1), as the engine parses and emits it.
pub use smbwire_dissectors::smb2::records::BufferDescriptorV1 as BufferDescriptor;

/// Negotiate Request (§2.2.1, values per §3.1.5.2).
pub fn negotiate_request(max_send: u32, max_receive: u32) -> Vec<u8> {
    NegotiateRequest {
        min_version: VERSION_1_0,
        max_version: VERSION_1_0,
        credits_requested: CREDIT_TARGET,
        preferred_send_size: max_send,
        max_receive_size: max_receive,
        max_fragmented_size: MAX_FRAGMENTED_SIZE,
    }
    .emit()
}

/// Negotiate Response (§2.2.2), STATUS_SUCCESS, version 1.0 chosen.
pub fn negotiate_response(max_send: u32, max_receive: u32) -> Vec<u8> {
    NegotiateResponse {
        min_version: VERSION_1_0,
        max_version: VERSION_1_0,
        negotiated_version: VERSION_1_0,
        credits_requested: CREDIT_TARGET,
        credits_granted: CREDIT_TARGET,
        status: 0,
        max_read_write_size: MAX_READ_WRITE_SIZE,
        preferred_send_size: max_send,
        max_receive_size: max_receive,
        max_fragmented_size: MAX_FRAGMENTED_SIZE,
    }
    .emit()
}

/// Cut a message of `len` bytes into fragments of at most `max_data` bytes:
/// (start, end, RemainingDataLength).
pub fn fragments(len: usize, max_data: usize) -> Vec<(usize, usize, u32)> {
    let n = len.div_ceil(max_data).max(1);
    (0..n)
        .map(|i| {
            let (s, e) = (i * max_data, ((i + 1) * max_data).min(len));
            (s, e, (len - e) as u32)
        })
        .collect()
}

struct Connection {
    link: ConnId,
    /// Messages each side received since it last sent (the credits it grants next).
    unreplenished: [u16; 2],
}

/// SMB2 over SMB Direct over an RDMA link.
pub struct SmbDirectTransport<L> {
    pub link: L,
    conns: Vec<Connection>,
    /// Negotiated max send size (both directions use the same here).
    max_send: usize,
    /// Buffer descriptors per registered buffer.
    descriptors: usize,
    rng: SplitMix64,
    next_region: u64,
}

impl<L> SmbDirectTransport<L> {
    pub fn new(link: L, max_send: usize, descriptors: usize, rng: SplitMix64) -> Self {
        SmbDirectTransport {
            link,
            conns: Vec::new(),
            max_send,
            descriptors: descriptors.max(1),
            rng,
            next_region: 0,
        }
    }
}

impl<L> SmbDirectTransport<L> {
    fn send_message<W: Write>(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: Side,
        parts: &[&[u8]],
        invalidate: Option<u32>,
    ) -> io::Result<()>
    where
        L: RdmaLink<W>,
    {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let frags = fragments(len, self.max_send - DATA_OFFSET);
        if frags.len() > 1 {
            self.link.stats().smbd_fragmented_messages += 1;
        }
        let last = frags.len() - 1;
        let mut msg = Vec::with_capacity(self.max_send);
        for (i, (s, e, remaining)) in frags.into_iter().enumerate() {
            let c = &mut self.conns[conn];
            let granted = std::mem::take(&mut c.unreplenished[from as usize]);
            c.unreplenished[1 - from as usize] += 1;
            let h = DataTransfer {
                credits_requested: CREDIT_TARGET,
                credits_granted: granted,
                flags: 0,
                remaining_data_length: remaining,
                data_offset: DataTransfer::DATA_OFFSET,
                data_length: (e - s) as u32,
            };
            msg.clear();
            msg.extend_from_slice(&h.emit_head());
            let mut base = 0;
            for p in parts {
                let (lo, hi) = (base, base + p.len());
                let (a, b) = (s.max(lo), e.min(hi));
                if a < b {
                    msg.extend_from_slice(&p[a - lo..b - lo]);
                }
                base = hi;
            }
            let link = self.conns[conn].link;
            let st = self.link.stats();
            st.smbd_data_messages += 1;
            st.smbd_data_length += (e - s) as u64;
            let inv = if i == last { invalidate } else { None };
            self.link.post_send(tap, link, from, &msg, inv)?;
        }
        Ok(())
    }
}

impl<W: Write, L: RdmaLink<W>> Transport<W> for SmbDirectTransport<L> {
    fn connect(&mut self, tap: &mut Tap<W>, client: &Host, server: &Host) -> io::Result<ConnId> {
        let link = self.link.connect(tap, client, server)?;
        let id = self.conns.len();
        self.conns.push(Connection {
            link,
            unreplenished: [0, 0],
        });
        let size = self.max_send as u32;
        self.link.post_send(
            tap,
            link,
            Side::Client,
            &negotiate_request(size, size),
            None,
        )?;
        self.link.stats().smbd_negotiate_requests += 1;
        tap.idle(20_000);
        self.link.post_send(
            tap,
            link,
            Side::Server,
            &negotiate_response(size, size),
            None,
        )?;
        self.link.stats().smbd_negotiate_responses += 1;
        tap.idle(20_000);
        Ok(id)
    }

    fn send(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: Side,
        head: &[u8],
        data: &[u8],
    ) -> io::Result<()> {
        self.send_message(tap, conn, from, &[head, data], None)
    }

    fn send_invalidate(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        from: Side,
        head: &[u8],
        token: u32,
    ) -> io::Result<()> {
        self.link.stats().send_with_invalidate += 1;
        self.send_message(tap, conn, from, &[head], Some(token))
    }

    fn close(&mut self, tap: &mut Tap<W>, conn: ConnId) -> io::Result<()> {
        let link = self.conns[conn].link;
        self.link.close(tap, link)
    }

    fn rdma(&self) -> bool {
        true
    }

    /// One memory registration per buffer (one token), described by `descriptors`
    /// consecutive pieces.
    fn register(&mut self, _conn: ConnId, len: usize) -> Vec<super::smbdirect::BufferDescriptor> {
        let token = (self.rng.next_u64() as u32) | 1;
        // Kernel-space virtual addresses, 1 MiB-aligned regions, one per I/O buffer.
        let va = 0xffff_c000_0000_0000u64 + (self.next_region << 24);
        self.next_region += 1;
        let n = self.descriptors.min(len.max(1));
        let piece = len.div_ceil(n);
        (0..n)
            .map(|i| {
                let s = i * piece;
                let e = ((i + 1) * piece).min(len);
                BufferDescriptor {
                    offset: va + s as u64,
                    token,
                    length: (e - s) as u32,
                }
            })
            .filter(|d| d.length > 0)
            .collect()
    }

    fn rdma_read(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        descs: &[BufferDescriptor],
        data: &[u8],
    ) -> io::Result<()> {
        let link = self.conns[conn].link;
        let mut at = 0;
        for d in descs {
            let piece = &data[at..at + d.length as usize];
            self.link.rdma_read(tap, link, d, piece)?;
            at += d.length as usize;
        }
        Ok(())
    }

    fn rdma_write(
        &mut self,
        tap: &mut Tap<W>,
        conn: ConnId,
        descs: &[BufferDescriptor],
        data: &[u8],
    ) -> io::Result<()> {
        let link = self.conns[conn].link;
        let mut at = 0;
        for d in descs {
            let piece = &data[at..at + d.length as usize];
            self.link.rdma_write(tap, link, d, piece)?;
            at += d.length as usize;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiate_messages_parse_back() {
        let r = NegotiateRequest::parse(&negotiate_request(1364, 1364)).unwrap();
        assert_eq!((r.min_version, r.preferred_send_size), (0x0100, 1364));
        let p = NegotiateResponse::parse(&negotiate_response(1364, 1364)).unwrap();
        assert_eq!(p.max_read_write_size, MAX_READ_WRITE_SIZE);
    }

    #[test]
    fn fragments_count_down() {
        assert_eq!(fragments(0, 100), vec![(0, 0, 0)]);
        assert_eq!(
            fragments(250, 100),
            vec![(0, 100, 150), (100, 200, 50), (200, 250, 0)]
        );
        assert_eq!(fragments(100, 100), vec![(0, 100, 0)]);
    }
}
