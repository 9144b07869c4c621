//! AF_PACKET backend: a TPACKET_V3 mmap ring (linux/if_packet.h, Documentation/networking/
//! packet_mmap.rst). The kernel fills blocks of frames; a block is ours while its
//! `block_status` has TP_STATUS_USER and goes back when we write TP_STATUS_KERNEL.
//!
//! Only frames received on the interface (not PACKET_OUTGOING) are taken, so both backends
//! see the same ingress traffic. A one-instruction classic BPF filter (`ret #snaplen`)
//! truncates copies to the snap length in the kernel. PACKET_VNET_HDR puts a
//! `struct virtio_net_hdr` before each frame: its gso_size tells how many wire packets a
//! GRO/GSO frame stands for, so the counters are in wire packets like the eBPF ones.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr;
use std::sync::atomic::{fence, Ordering};

use super::classify::inspect;
use super::flows::FlowTable;
use super::sys::{self, os_error, setsockopt, SOL_PACKET};
use super::{LiveError, LiveOptions, LiveSource, LiveStats, STATS_TOP_FLOWS};
use crate::capture::{linktype, FrameInfo, RawFrame};
use crate::frame::FrameRef;

const ETH_P_ALL: u16 = 0x0003;
const PACKET_RX_RING: i32 = 5;
const PACKET_STATISTICS: i32 = 6;
const PACKET_VERSION: i32 = 10;
const PACKET_VNET_HDR: i32 = 15;
/// struct virtio_net_hdr (linux/virtio_net.h): gso_type at 1, gso_size at 4, little-endian
/// (virtio 1.0; the kernel writes it so on every host it supports with VNET_HDR here).
const VNET_HDR_LEN: usize = 10;
const VNET_GSO_TYPE: usize = 1;
const VNET_GSO_SIZE: usize = 4;
const TPACKET_V3: i32 = 2;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const PACKET_OUTGOING: u8 = 4;
const SO_ATTACH_FILTER: i32 = 26;
/// Frame slot size hint for the ring request; V3 packs frames of any size into blocks.
const FRAME_SIZE: u32 = 2048;

/// struct tpacket_block_desc + tpacket_hdr_v1 field offsets.
mod block {
    pub const BLOCK_STATUS: usize = 8;
    pub const NUM_PKTS: usize = 12;
    pub const OFFSET_TO_FIRST_PKT: usize = 16;
}

/// struct tpacket3_hdr field offsets; struct sockaddr_ll follows at TPACKET_ALIGN(48).
mod hdr {
    pub const NEXT_OFFSET: usize = 0;
    pub const SEC: usize = 4;
    pub const NSEC: usize = 8;
    pub const SNAPLEN: usize = 12;
    pub const LEN: usize = 16;
    pub const STATUS: usize = 20;
    pub const MAC: usize = 24;
    pub const VLAN_TCI: usize = 32;
    pub const VLAN_TPID: usize = 36;
    pub const SLL_PKTTYPE: usize = 48 + 10;
}

#[repr(C)]
struct TpacketReq3 {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
    tp_retire_blk_tov: u32,
    tp_sizeof_priv: u32,
    tp_feature_req_word: u32,
}

#[repr(C)]
#[derive(Default)]
struct TpacketStatsV3 {
    tp_packets: u32,
    tp_drops: u32,
    tp_freeze_q_cnt: u32,
}

#[repr(C)]
struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

/// The mmap'ed ring; unmapped on drop.
struct Ring {
    base: *mut u8,
    block_size: usize,
    block_count: usize,
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned.
        unsafe {
            libc::munmap(
                self.base as *mut libc::c_void,
                self.block_size * self.block_count,
            )
        };
    }
}

impl Ring {
    fn block(&self, i: usize) -> *mut u8 {
        // SAFETY: i < block_count, so the offset is inside the mapping.
        unsafe { self.base.add(i * self.block_size) }
    }
}

fn rd32(p: *const u8, off: usize) -> u32 {
    // SAFETY: callers keep `off + 4` inside the current block.
    unsafe { ptr::read_unaligned(p.add(off) as *const u32) }
}

fn rd16(p: *const u8, off: usize) -> u16 {
    // SAFETY: as rd32.
    unsafe { ptr::read_unaligned(p.add(off) as *const u16) }
}

pub struct AfPacketSource {
    ring: Ring,
    fd: OwnedFd,
    current: usize,
    tcp_ports: Vec<u16>,
    next_number: u64,
    retag_buf: Vec<u8>,
    flows: FlowTable,
    stats: LiveStats,
    kernel_drops: Cell<u64>,
    if_drops: super::sys::IfDrops,
}

impl AfPacketSource {
    pub fn open(
        iface: &str,
        ifindex: u32,
        opts: &LiveOptions,
    ) -> Result<AfPacketSource, LiveError> {
        let cap = "CAP_NET_RAW";
        let err = |e: io::Error, what: &str| os_error(e, &format!("{what} on {iface}"), cap);
        // Protocol 0 until bound: no frames from other interfaces slip in meanwhile.
        let fd = sys::packet_socket(0).map_err(|e| err(e, "AF_PACKET socket"))?;
        setsockopt(&fd, SOL_PACKET, PACKET_VERSION, &TPACKET_V3)
            .map_err(|e| err(e, "TPACKET_V3"))?;
        setsockopt(&fd, SOL_PACKET, PACKET_VNET_HDR, &1i32)
            .map_err(|e| err(e, "PACKET_VNET_HDR"))?;

        let page = 4096u32;
        let block_size = opts.block_size.max(page).div_ceil(page) * page;
        let block_size = block_size.max(super::MAX_SNAPLEN.div_ceil(page) * page * 2);
        let block_count = opts.block_count.max(2);
        let req = TpacketReq3 {
            tp_block_size: block_size,
            tp_block_nr: block_count,
            tp_frame_size: FRAME_SIZE,
            tp_frame_nr: block_size / FRAME_SIZE * block_count,
            tp_retire_blk_tov: opts.block_timeout_ms.max(1),
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(&fd, SOL_PACKET, PACKET_RX_RING, &req).map_err(|e| err(e, "PACKET_RX_RING"))?;
        let len = block_size as usize * block_count as usize;
        // SAFETY: mapping the ring the kernel just allocated for this socket.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(err(
                io::Error::last_os_error(),
                "mmap of the TPACKET_V3 ring",
            ));
        }
        let ring = Ring {
            base: base as *mut u8,
            block_size: block_size as usize,
            block_count: block_count as usize,
        };

        let filter = [SockFilter {
            code: 0x06, /* BPF_RET|BPF_K */
            jt: 0,
            jf: 0,
            k: opts.snaplen,
        }];
        let prog = SockFprog {
            len: 1,
            filter: filter.as_ptr(),
        };
        setsockopt(&fd, libc::SOL_SOCKET, SO_ATTACH_FILTER, &prog)
            .map_err(|e| err(e, "snap length filter"))?;

        if opts.promisc {
            sys::add_promisc(&fd, ifindex).map_err(|e| err(e, "promiscuous mode"))?;
        }
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: sll is a valid sockaddr_ll.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(err(io::Error::last_os_error(), "bind"));
        }
        Ok(AfPacketSource {
            ring,
            fd,
            current: 0,
            tcp_ports: opts.tcp_ports.clone(),
            next_number: 1,
            retag_buf: Vec::with_capacity(super::MAX_SNAPLEN as usize + 4),
            flows: FlowTable::default(),
            stats: LiveStats { queues: 1, ..LiveStats::default() },
            kernel_drops: Cell::new(0),
            if_drops: super::sys::IfDrops::new(iface, ifindex),
        })
    }

    fn block_ready(&self, i: usize) -> bool {
        let p = self.ring.block(i);
        // SAFETY: inside the mapping; the kernel writes this word concurrently.
        let status = unsafe { ptr::read_volatile(p.add(block::BLOCK_STATUS) as *const u32) };
        let ready = status & TP_STATUS_USER != 0;
        if ready {
            fence(Ordering::Acquire);
        }
        ready
    }

    /// Hands every frame of block `i` to `f` and returns the block to the kernel.
    fn drain_block(&mut self, i: usize, f: &mut dyn FnMut(RawFrame<'_>)) -> usize {
        let b = self.ring.block(i);
        let bs = self.ring.block_size;
        let num = rd32(b, block::NUM_PKTS);
        let mut off = rd32(b, block::OFFSET_TO_FIRST_PKT) as usize;
        let mut delivered = 0;
        for _ in 0..num {
            // A frame header must lie inside the block; anything else means a corrupt ring.
            if off < 16 || off + 64 > bs {
                break;
            }
            // SAFETY: off + 64 <= block size.
            let p = unsafe { b.add(off) };
            let snaplen = rd32(p, hdr::SNAPLEN) as usize;
            let wire_len = rd32(p, hdr::LEN);
            let status = rd32(p, hdr::STATUS);
            let mac = rd16(p, hdr::MAC) as usize;
            // SAFETY: SLL_PKTTYPE < 64.
            let pkttype = unsafe { *p.add(hdr::SLL_PKTTYPE) };
            if off + mac + snaplen <= bs && pkttype != PACKET_OUTGOING {
                // SAFETY: checked just above to be inside the block.
                let data = unsafe { std::slice::from_raw_parts(p.add(mac), snaplen) };
                let (data, wire_len) = if status & TP_STATUS_VLAN_VALID != 0 {
                    let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
                        rd16(p, hdr::VLAN_TPID)
                    } else {
                        0x8100
                    };
                    let tci = rd32(p, hdr::VLAN_TCI) as u16;
                    sys::retag(&mut self.retag_buf, data, tpid, tci);
                    (&self.retag_buf[..], wire_len + 4)
                } else {
                    (data, wire_len)
                };
                // GSO segments: what the peer or GRO coalesced into this one frame.
                let insp = inspect(data, &self.tcp_ports);
                let mut segs = 1u64;
                if mac >= VNET_HDR_LEN && insp.header_len > 0 {
                    let v = mac - VNET_HDR_LEN;
                    // SAFETY: v + VNET_HDR_LEN = mac, inside the frame slot.
                    let gso_type = unsafe { *p.add(v + VNET_GSO_TYPE) };
                    let gso_size = u16::from_le(rd16(p, v + VNET_GSO_SIZE)) as usize;
                    let payload = (wire_len as usize).saturating_sub(insp.header_len);
                    if gso_type != 0 && gso_size > 0 && payload > gso_size {
                        segs = payload.div_ceil(gso_size) as u64;
                    }
                }
                let wire_bytes = u64::from(wire_len) + (segs - 1) * insp.header_len as u64;
                self.stats.packets_seen += segs;
                self.stats.bytes_seen += wire_bytes;
                if let Some(key) = insp.key {
                    self.stats.packets_matched += segs;
                    self.stats.bytes_matched += wire_bytes;
                    self.stats.frames_matched += 1;
                    self.flows.add(key, segs, wire_bytes);
                    let ts_ns = u64::from(rd32(p, hdr::SEC)) * 1_000_000_000
                        + u64::from(rd32(p, hdr::NSEC));
                    let info = FrameInfo {
                        frame: FrameRef {
                            file: 0,
                            number: self.next_number,
                        },
                        ts_ns,
                        linktype: linktype::ETHERNET,
                        orig_len: wire_len,
                    };
                    self.next_number += 1;
                    f(RawFrame { info, data });
                    delivered += 1;
                }
            }
            let next = rd32(p, hdr::NEXT_OFFSET) as usize;
            if next == 0 {
                break;
            }
            off += next;
        }
        fence(Ordering::Release);
        // SAFETY: inside the mapping; hands the block back to the kernel.
        unsafe { ptr::write_volatile(b.add(block::BLOCK_STATUS) as *mut u32, TP_STATUS_KERNEL) };
        self.stats.packets_delivered += delivered as u64;
        delivered
    }
}

impl LiveSource for AfPacketSource {
    fn next_batch(
        &mut self,
        timeout_ms: i32,
        f: &mut dyn FnMut(RawFrame<'_>),
    ) -> io::Result<usize> {
        if !self.block_ready(self.current) {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                return if e.kind() == io::ErrorKind::Interrupted {
                    Ok(0)
                } else {
                    Err(e)
                };
            }
        }
        let mut n = 0;
        // At most one lap, so a busy interface cannot keep us here forever.
        for _ in 0..self.ring.block_count {
            if !self.block_ready(self.current) {
                break;
            }
            n += self.drain_block(self.current, f);
            self.current = (self.current + 1) % self.ring.block_count;
        }
        Ok(n)
    }

    fn stats(&self) -> LiveStats {
        let mut st = TpacketStatsV3::default();
        let mut len = std::mem::size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: st is a valid out-buffer of `len` bytes. Reading resets the kernel's
        // counters, so they are accumulated.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                &mut st as *mut TpacketStatsV3 as *mut libc::c_void,
                &mut len,
            )
        };
        if rc == 0 {
            self.kernel_drops
                .set(self.kernel_drops.get() + u64::from(st.tp_drops));
        }
        let mut s = self.stats.clone();
        s.interface_drops = self.if_drops.since_open();
        s.kernel_drops = self.kernel_drops.get() + s.interface_drops.unwrap_or(0);
        s.flow_count = self.flows.len() as u64;
        s.flows = self.flows.top(STATS_TOP_FLOWS);
        s
    }
}
