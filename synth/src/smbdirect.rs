//! SMB Direct (MS-SMBD) for the synthesizer: the negotiate exchange (§2.2.1, §2.2.2), SMB2
//! messages in data transfer messages (§2.2.3) cut to the negotiated send size
//! (RemainingDataLength > 0 means more fragments follow, §3.1.5.8), buffer descriptors
//! (§2.2.3.1), and a `Transport` that carries all of it over an RDMA link (RoCEv2 or iWARP,
//! `super::rdma::RdmaLink`). All integers are little-endian (§2.2).

use super::data::SplitMix64;
use super::pcap::Tap;
use super::rdma::RdmaLink;
use super::{ConnId, Host, Side, Transport};
use std::io::{self, Write};

/// SMB Direct 1.0 (§1.7).
pub const VERSION_1: u16 = 0x0100;
/// Data transfer header: 20 bytes, then padding to DataOffset 24 (§2.2.3: 8-byte aligned).
pub const DATA_HEADER_LEN: usize = 20;
pub const DATA_OFFSET: usize = 24;
pub const NEGOTIATE_REQUEST_LEN: usize = 20;
pub const NEGOTIATE_RESPONSE_LEN: usize = 32;
/// Send credits each side asks for and the server grants at first (Windows' target, 255).
const CREDIT_TARGET: u16 = 255;
/// Largest reassembled message either side accepts (§3.1.1.1 MaxFragmentedRecvSize).
pub const MAX_FRAGMENTED_SIZE: u32 = 1 << 20;
/// Largest RDMA read/write the server does for one request (§2.2.2 MaxReadWriteSize).
pub const MAX_READ_WRITE_SIZE: u32 = 8 << 20;

/// SMB_DIRECT_BUFFER_DESCRIPTOR_V1 (§2.2.3.1): Offset (provider offset or virtual
/// address), Token (STag / R_Key), Length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferDescriptor {
    pub offset: u64,
    pub token: u32,
    pub length: u32,
}

impl BufferDescriptor {
    pub const LEN: usize = 16;

    pub fn emit(&self, b: &mut Vec<u8>) {
        b.extend_from_slice(&self.offset.to_le_bytes());
        b.extend_from_slice(&self.token.to_le_bytes());
        b.extend_from_slice(&self.length.to_le_bytes());
    }

    pub fn parse(b: &[u8]) -> Option<BufferDescriptor> {
        let b = b.get(..Self::LEN)?;
        Some(BufferDescriptor {
            offset: u64::from_le_bytes(b[0..8].try_into().ok()?),
            token: u32::from_le_bytes(b[8..12].try_into().ok()?),
            length: u32::from_le_bytes(b[12..16].try_into().ok()?),
        })
    }
}

/// Negotiate Request (§2.2.1, values per §3.1.5.2).
pub fn negotiate_request(max_send: u32, max_receive: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(NEGOTIATE_REQUEST_LEN);
    b.extend_from_slice(&VERSION_1.to_le_bytes()); // MinVersion
    b.extend_from_slice(&VERSION_1.to_le_bytes()); // MaxVersion
    b.extend_from_slice(&0u16.to_le_bytes()); // Reserved
    b.extend_from_slice(&CREDIT_TARGET.to_le_bytes()); // CreditsRequested
    b.extend_from_slice(&max_send.to_le_bytes()); // PreferredSendSize
    b.extend_from_slice(&max_receive.to_le_bytes()); // MaxReceiveSize
    b.extend_from_slice(&MAX_FRAGMENTED_SIZE.to_le_bytes()); // MaxFragmentedSize
    b
}

/// Negotiate Response (§2.2.2), STATUS_SUCCESS, version 1.0 chosen.
pub fn negotiate_response(max_send: u32, max_receive: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(NEGOTIATE_RESPONSE_LEN);
    b.extend_from_slice(&VERSION_1.to_le_bytes()); // MinVersion
    b.extend_from_slice(&VERSION_1.to_le_bytes()); // MaxVersion
    b.extend_from_slice(&VERSION_1.to_le_bytes()); // NegotiatedVersion
    b.extend_from_slice(&0u16.to_le_bytes()); // Reserved
    b.extend_from_slice(&CREDIT_TARGET.to_le_bytes()); // CreditsRequested
    b.extend_from_slice(&CREDIT_TARGET.to_le_bytes()); // CreditsGranted
    b.extend_from_slice(&0u32.to_le_bytes()); // Status
    b.extend_from_slice(&MAX_READ_WRITE_SIZE.to_le_bytes()); // MaxReadWriteSize
    b.extend_from_slice(&max_send.to_le_bytes()); // PreferredSendSize
    b.extend_from_slice(&max_receive.to_le_bytes()); // MaxReceiveSize
    b.extend_from_slice(&MAX_FRAGMENTED_SIZE.to_le_bytes()); // MaxFragmentedSize
    b
}

/// The fields of a data transfer message header (§2.2.3) that vary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHeader {
    pub credits_requested: u16,
    pub credits_granted: u16,
    pub flags: u16,
    pub remaining_data_length: u32,
    pub data_length: u32,
}

impl DataHeader {
    /// The 24 bytes before the data: header, DataOffset = 24, 4 bytes of padding.
    pub fn emit(&self) -> [u8; DATA_OFFSET] {
        let mut b = [0u8; DATA_OFFSET];
        b[0..2].copy_from_slice(&self.credits_requested.to_le_bytes());
        b[2..4].copy_from_slice(&self.credits_granted.to_le_bytes());
        b[4..6].copy_from_slice(&self.flags.to_le_bytes());
        // 6..8 Reserved
        b[8..12].copy_from_slice(&self.remaining_data_length.to_le_bytes());
        b[12..16].copy_from_slice(&(DATA_OFFSET as u32).to_le_bytes());
        b[16..20].copy_from_slice(&self.data_length.to_le_bytes());
        b
    }
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
            let h = DataHeader {
                credits_requested: CREDIT_TARGET,
                credits_granted: granted,
                flags: 0,
                remaining_data_length: remaining,
                data_length: (e - s) as u32,
            };
            msg.clear();
            msg.extend_from_slice(&h.emit());
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
    fn layouts() {
        let r = negotiate_request(1364, 1364);
        assert_eq!(r.len(), NEGOTIATE_REQUEST_LEN);
        assert_eq!(u16::from_le_bytes([r[0], r[1]]), 0x0100);
        assert_eq!(u32::from_le_bytes(r[8..12].try_into().unwrap()), 1364);
        let p = negotiate_response(1364, 1364);
        assert_eq!(p.len(), NEGOTIATE_RESPONSE_LEN);
        assert_eq!(
            u32::from_le_bytes(p[16..20].try_into().unwrap()),
            MAX_READ_WRITE_SIZE
        );
        let h = DataHeader {
            credits_requested: 255,
            credits_granted: 3,
            flags: 0,
            remaining_data_length: 7,
            data_length: 9,
        }
        .emit();
        assert_eq!(u32::from_le_bytes(h[12..16].try_into().unwrap()), 24);
        assert_eq!(u32::from_le_bytes(h[8..12].try_into().unwrap()), 7);
        let d = BufferDescriptor {
            offset: 0x1122_3344_5566_7788,
            token: 0xAABBCCDD,
            length: 4096,
        };
        let mut b = Vec::new();
        d.emit(&mut b);
        assert_eq!(BufferDescriptor::parse(&b), Some(d));
        assert_eq!(BufferDescriptor::parse(&b[..15]), None);
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
