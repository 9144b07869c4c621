//! eBPF backend: loads `bpf/smbwire.bpf.c` (compiled by build.rs, embedded here) with one of
//! its two entry points, fills its ports and config maps, attaches it through a bpf_link —
//! `smbwire_tc` at the interface's TCX ingress (Linux 6.6+) or `smbwire_xdp` at its XDP hook
//! (Linux 5.9+) — and consumes the ring buffer.
//!
//! The link is owned by this process's file descriptor: when the process ends — cleanly,
//! SIGTERM or SIGKILL — the kernel detaches and frees the program. Nothing is pinned.

// Without clang at build time only the stub at the end is compiled.
#![cfg_attr(not(smbwire_bpf), allow(dead_code, unused_imports))]

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use libbpf_rs::{
    libbpf_sys, AsRawLibbpf, Link, MapCore, MapFlags, MapHandle, Object, ObjectBuilder,
};

use super::flows::{self, FlowKey, FlowStat};
use super::sys::{self, IfDrops, PromiscGuard};
use super::{
    pick_queue, Head, Hook, HookInfo, LiveError, LiveOptions, LiveSource, LiveStats, MAX_SNAPLEN,
    STATS_TOP_FLOWS,
};
use crate::capture::{linktype, FrameInfo, RawFrame};
use crate::frame::FrameRef;
use crate::parallel::Lease;

/// Name of the program in the object (and in `bpftool prog show`) for each hook.
pub fn program_name(hook: Hook) -> &'static str {
    match hook {
        Hook::Tcx => "smbwire_tc",
        Hook::Xdp => "smbwire_xdp",
    }
}

// Constants and layouts of bpf/smbwire.h (`crate::abi`, generated from it).
use crate::abi::{self, u32_of};
const CFG_XDP_DROP: u32 = u32_of(abi::SMBWIRE_CFG_XDP_DROP);
const CFG_SHEDDING: u32 = u32_of(abi::SMBWIRE_CFG_SHEDDING);
/// `struct smbwire_config`: snaplen, flags, rings, shed_at.
const CONFIG_SIZE: usize = abi::smbwire_config::SIZE;
use abi::smbwire_config as config_at;
/// Sets the u32 field at `at` of a config value.
fn put_u32(cfg: &mut [u8; CONFIG_SIZE], at: usize, v: u32) {
    cfg[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}
/// `SMBWIRE_MAX_RINGS`: ring0 .. ring15 in the object.
const MAX_RINGS: usize = super::MAX_QUEUES as usize;
/// `struct smbwire_shed_counters`.
const SHED_VALUE_SIZE: usize = abi::smbwire_shed_counters::SIZE;

/// `struct smbwire_event_hdr` (bpf/smbwire.h).
mod event {
    pub use crate::abi::smbwire_event_hdr::{CAPLEN, FLAGS, LEN, SIZE, TS_NS, VLAN_PROTO, VLAN_TCI};
    // `segs` is counted in the kernel's totals already; frames carry orig_len only.
    /// SMBWIRE_EV_VLAN: the outer tag was stripped by the kernel.
    pub const FLAG_VLAN: u32 = crate::abi::u32_of(crate::abi::SMBWIRE_EV_VLAN);
    /// SMBWIRE_EV_SHED_HERE: the program shed the frame's connection at it.
    pub const FLAG_SHED_HERE: u32 = crate::abi::u32_of(crate::abi::SMBWIRE_EV_SHED_HERE);
}

/// `struct smbwire_totals` (bpf/smbwire.h): u64 counters, read by their offsets.
mod totals {
    pub use crate::abi::smbwire_totals::*;
}
const TOTALS_SIZE: usize = totals::SIZE;
/// `struct smbwire_flow_key` and `struct smbwire_flow_counters` (bpf/smbwire.h).
const FLOW_KEY_SIZE: usize = std::mem::size_of::<FlowKey>();
const FLOW_VALUE_SIZE: usize = abi::smbwire_flow_counters::SIZE;
/// `SMBWIRE_MAX_PORTS`.
const MAX_PORTS: usize = abi::SMBWIRE_MAX_PORTS as usize;

#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);

/// The compiled object; libelf parses it in place, so keep it 8-byte aligned.
#[cfg(smbwire_bpf)]
static OBJECT: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/smbwire.bpf.o")));

fn rd<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[at..at + N]);
    out
}

/// `struct bpf_ringbuf_hdr` (linux/bpf.h): a u32 length with two flag bits, a u32 page offset.
const RB_HDR: usize = 8;
const RB_BUSY: u32 = 1 << 31;
const RB_DISCARD: u32 = 1 << 30;

/// How long after its time stamp a record is surely in its ring: the program stamps a frame
/// before it copies it (up to 64 KiB) and commits it, in softirq context. While a ring is
/// empty, heads of the other rings are taken only once they are this old (`pick_queue`).
const ORDER_GRACE_NS: u64 = 2_000_000;
/// Bytes one `next_batch` hands out at most (with `super::batch_full`), so the session gets
/// back to its snapshot and shedding decisions under a continuous flood.
const BATCH_MAX_BYTES: usize = 4 << 20;

/// The two mappings of one BPF ring buffer (Documentation/bpf/ringbuf.rst, the layout the
/// kernel maps): a read-write page with the consumer position, then read-only the producer
/// position page and the data pages mapped twice in a row, so a record that wraps is
/// contiguous. Unmapped once neither the ring nor a lease of its memory (`Ring::lend`) holds
/// it.
struct Mapping {
    consumer: *mut u8,
    producer: *const u8,
    size: u64,
    page: usize,
}

// SAFETY: the mappings are plain shared memory; through `Mapping` they are only unmapped
// (once, on drop), and leases only read the data pages.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the two mappings made by `Ring::map`, unmapped once, when nothing uses them.
        unsafe {
            libc::munmap(self.consumer as *mut libc::c_void, self.page);
            libc::munmap(self.producer as *mut libc::c_void, self.page + 2 * self.size as usize);
        }
    }
}

/// One BPF ring buffer, read in place. Records are 8-byte aligned, each after an 8-byte
/// header whose busy bit the kernel clears (with release order) when the record is committed.
///
/// **Leases.** With `--threads`, workers decode frames where they lie in the ring instead of
/// copies (`crate::parallel::Lease`). The kernel reserves a record only where the consumer
/// position leaves room (a reservation past `consumer + size` fails and is counted as a
/// drop), so it never writes between the consumer position and the producer's. The ring
/// therefore keeps two positions: `read`, after the records handed out, and the kernel's
/// consumer position, which trails it while a lease of the stretch between is held. A
/// stretch goes back to the kernel, oldest first, once no batch holds its lease.
struct Ring {
    fd: i32,
    map: Arc<Mapping>,
    consumer: *mut u8,
    producer: *const u8,
    size: u64,
    page: usize,
    /// The read position: records before it were handed out.
    read: Cell<u64>,
    /// Leases handed out and still held, oldest first, each with the read position at the
    /// end of its stretch.
    lent: RefCell<VecDeque<(u64, Arc<Lease>)>>,
    /// A batch's lease is out (`lend` .. `settle`), from this read position on.
    lending: Cell<bool>,
    lent_from: Cell<u64>,
}

impl Ring {
    /// Maps the ring buffer map `fd` of `size` data bytes (a power of two, page multiple).
    fn map(fd: i32, size: u64) -> io::Result<Ring> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: mapping a ring buffer map's fd as the kernel documents; checked below.
        let consumer = unsafe {
            libc::mmap(std::ptr::null_mut(), page, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if consumer == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above; the producer page and twice the data, read-only.
        let producer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page + 2 * size as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                page as libc::off_t,
            )
        };
        if producer == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: the mapping made just above.
            unsafe { libc::munmap(consumer, page) };
            return Err(e);
        }
        let (consumer, producer) = (consumer as *mut u8, producer as *const u8);
        let map = Arc::new(Mapping { consumer, producer, size, page });
        // SAFETY: the first word of the consumer page, 8-byte aligned.
        let read = unsafe { (*(consumer as *const AtomicU64)).load(Ordering::Relaxed) };
        Ok(Ring { fd, map, consumer, producer, size, page, read: Cell::new(read), lent: RefCell::default(), lending: Cell::new(false), lent_from: Cell::new(read) })
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the first word of the consumer page, 8-byte aligned, mapped while self lives.
        unsafe { &*(self.consumer as *const AtomicU64) }
    }

    fn producer_pos(&self) -> u64 {
        // SAFETY: the first word of the producer page; the kernel writes it with release order.
        unsafe { (*(self.producer as *const AtomicU64)).load(Ordering::Acquire) }
    }

    /// Records not handed out yet, headers included.
    fn pending(&self) -> u64 {
        self.producer_pos().wrapping_sub(self.read.get())
    }

    /// Bytes the kernel cannot write now: records not handed out and stretches still lent.
    fn occupied(&self) -> u64 {
        self.producer_pos().wrapping_sub(self.consumer_pos().load(Ordering::Relaxed))
    }

    /// The oldest committed record not handed out and its size in the ring (header and
    /// padding included); None when there is none or the oldest is not committed yet.
    /// Discarded records are skipped.
    fn head(&self) -> Option<(&[u8], u64)> {
        loop {
            let cons = self.read.get();
            if cons >= self.producer_pos() {
                return None;
            }
            let at = self.page + (cons & (self.size - 1)) as usize;
            // SAFETY: `at` is inside the first copy of the data pages; the header is 8-byte
            // aligned and the kernel publishes it with release order.
            let len = unsafe { (*(self.producer.add(at) as *const AtomicU32)).load(Ordering::Acquire) };
            if len & RB_BUSY != 0 {
                return None;
            }
            let body = (len & !(RB_BUSY | RB_DISCARD)) as u64;
            let total = (body + RB_HDR as u64 + 7) & !7;
            if len & RB_DISCARD != 0 || body > self.size {
                // A discarded record (or a length no record can have): step over it.
                self.release(total.min(self.size));
                continue;
            }
            // SAFETY: the record's body follows its header; the data pages are mapped twice in
            // a row, so `body` bytes (at most the ring's size) are contiguous and mapped.
            let rec = unsafe { std::slice::from_raw_parts(self.producer.add(at + RB_HDR), body as usize) };
            return Some((rec, total));
        }
    }

    /// Hands the oldest record out: its space goes back to the kernel now, or with the
    /// stretch it lies in when that is lent (`settle`).
    fn release(&self, total: u64) {
        let read = self.read.get() + total;
        self.read.set(read);
        if !self.lending.get() && self.lent.borrow().is_empty() {
            self.consumer_pos().store(read, Ordering::Release);
        }
    }

    /// A lease of the ring's memory from the read position on, `size` bytes (within the
    /// second copy of the data pages), holding every record the batch about to start may
    /// hand out. Give it back with `settle` at the batch's end.
    fn lend(&self) -> Arc<Lease> {
        // Until `settle`, the consumer position stays where it is: so the records this batch
        // hands out lie within `size` bytes of the read position now.
        self.lending.set(true);
        self.lent_from.set(self.read.get());
        let at = self.page + (self.read.get() & (self.size - 1)) as usize;
        let owner: Arc<dyn Send + Sync> = self.map.clone();
        // SAFETY: `at..at + size` lies within the producer mapping (page + 2 * size bytes),
        // which `owner` keeps mapped. The kernel writes only records it reserves, past the
        // consumer position plus nothing lent: the consumer position stays at or before this
        // stretch's start while the lease is held (`settle`, `reclaim`).
        Arc::new(unsafe { Lease::new(self.producer.add(at), self.size as usize, owner) })
    }

    /// The batch that took `lease` (`lend`) is over: when something holds it, its stretch
    /// (to the read position now) waits for it; else it is handed back with the rest.
    fn settle(&self, mut lease: Arc<Lease>) {
        self.lending.set(false);
        let mut lent = self.lent.borrow_mut();
        // `get_mut`: as in `reclaim`.
        if Arc::get_mut(&mut lease).is_none() {
            lent.push_back((self.read.get(), lease));
        } else if lent.is_empty() {
            self.consumer_pos().store(self.read.get(), Ordering::Release);
        }
    }

    /// Hands back to the kernel the stretches whose leases nothing holds any more, oldest
    /// first; all that was read once none is held.
    fn reclaim(&self) {
        let mut lent = self.lent.borrow_mut();
        let mut to = None;
        while let Some((end, lease)) = lent.front_mut() {
            // `get_mut` succeeds only when this is the last reference, and synchronizes with
            // the other holders' drops (their reads of the stretch happen before).
            if Arc::get_mut(lease).is_none() {
                break;
            }
            to = Some(*end);
            lent.pop_front();
        }
        if lent.is_empty() {
            // All read, up to where the batch's own lease starts while it is out.
            to = Some(if self.lending.get() { self.lent_from.get() } else { self.read.get() });
        }
        if let Some(to) = to {
            self.consumer_pos().store(to, Ordering::Release);
        }
    }
}

/// The frame of one ring record, as the session receives it.
struct Records {
    next_number: u64,
    wall_offset: u64,
    retag_buf: Vec<u8>,
    delivered: u64,
    bad_records: u64,
}

impl Records {
    /// Hands the record's frame to `f`, with whether the program shed its connection at it
    /// (`SMBWIRE_EV_SHED_HERE`); false for a record too short or inconsistent.
    fn deliver(&mut self, rec: &[u8], f: &mut dyn FnMut(RawFrame<'_>, bool)) -> bool {
        if rec.len() < event::SIZE {
            self.bad_records += 1;
            return false;
        }
        let ts = u64::from_ne_bytes(rd(rec, event::TS_NS));
        let len = u32::from_ne_bytes(rd(rec, event::LEN));
        let caplen = u32::from_ne_bytes(rd(rec, event::CAPLEN)) as usize;
        let flags = u32::from_ne_bytes(rd(rec, event::FLAGS));
        let Some(data) = rec.get(event::SIZE..event::SIZE + caplen) else {
            self.bad_records += 1;
            return false;
        };
        let data = if flags & event::FLAG_VLAN != 0 {
            let tpid = u16::from_ne_bytes(rd(rec, event::VLAN_PROTO));
            let tci = u16::from_ne_bytes(rd(rec, event::VLAN_TCI));
            sys::retag(&mut self.retag_buf, data, tpid, tci);
            &self.retag_buf[..]
        } else {
            data
        };
        let info = FrameInfo {
            frame: FrameRef { file: 0, number: self.next_number },
            ts_ns: ts.wrapping_add(self.wall_offset),
            linktype: linktype::ETHERNET,
            orig_len: len,
        };
        self.next_number += 1;
        self.delivered += 1;
        f(RawFrame { info, data }, flags & event::FLAG_SHED_HERE != 0);
        true
    }
}

/// One ring record through the same reading as a live one (fuzz target `live_frames`): the
/// frame's bytes it would hand on, or None for a record it counts as bad.
pub fn read_record(rec: &[u8]) -> Option<Vec<u8>> {
    let mut r = Records { next_number: 1, wall_offset: 0, retag_buf: Vec::new(), delivered: 0, bad_records: 0 };
    let mut out = None;
    r.deliver(rec, &mut |f, _| out = Some(f.data.to_vec()));
    debug_assert_eq!(out.is_some(), r.bad_records == 0);
    out
}

/// A record's time stamp (CLOCK_MONOTONIC ns), for ordering the rings.
fn record_ts(rec: &[u8]) -> u64 {
    if rec.len() < event::SIZE {
        0
    } else {
        u64::from_ne_bytes(rd(rec, event::TS_NS))
    }
}

#[cfg(smbwire_bpf)]
pub struct EbpfSource {
    // Field order is drop order: unmap the rings, detach, then free maps and program.
    rings: Vec<Ring>,
    records: Records,
    _link: Link,
    /// The ring buffer maps in use (their fds back `rings`).
    _ring_maps: Vec<MapHandle>,
    flows: MapHandle,
    totals: MapHandle,
    shed_map: MapHandle,
    config: MapHandle,
    /// The config map's value as written (`smbwire_config`).
    cfg: [u8; CONFIG_SIZE],
    _obj: Object,
    _promisc: Option<PromiscGuard>,
    if_drops: IfDrops,
    hook: HookInfo,
}

/// The object's `.rodata`: `struct smbwire_rodata` (copy_flags, wake_at).
const RODATA_SIZE: usize = abi::smbwire_rodata::SIZE;
/// `copy_flags` bits (bpf/smbwire.bpf.c): the kernel has `bpf_xdp_load_bytes`; frames are
/// staged in `scratch_buf` and copied into the ring by `bpf_ringbuf_output` instead of being
/// copied once, straight into a ring reservation.
const COPY_XDP_HELPER: u32 = u32_of(abi::SMBWIRE_COPY_XDP_HELPER);
const COPY_STAGED: u32 = u32_of(abi::SMBWIRE_COPY_STAGED);

/// The running kernel lets XDP programs call `bpf_xdp_load_bytes` (Linux 5.18+): libbpf loads
/// a two-instruction probe program that calls it. The XDP entry point then copies a frame
/// with one helper call instead of a loop of 8-byte loads, each checked against the frame's
/// end.
fn has_xdp_load_bytes() -> bool {
    // SAFETY: no pointers besides the documented NULL options.
    unsafe {
        libbpf_sys::libbpf_probe_bpf_helper(
            libbpf_sys::BPF_PROG_TYPE_XDP,
            libbpf_sys::BPF_FUNC_xdp_load_bytes,
            std::ptr::null(),
        ) == 1
    }
}

/// The program's `copy_flags` for `hook`. A frame is copied once, straight into a ring
/// reservation, unless XDP has no `bpf_xdp_load_bytes` (its word loop would be walked by the
/// verifier once per reservation size) or `SMBWIRE_BPF_COPY=staged` asks for the copy through
/// the per-CPU slot (benchmarks). `SMBWIRE_XDP_COPY=loop` keeps the pre-5.18 XDP copy on any
/// kernel (tests, benchmarks).
fn copy_flags(hook: Hook) -> u32 {
    let xdp_load_bytes = hook == Hook::Xdp
        && std::env::var("SMBWIRE_XDP_COPY").map_or(true, |v| v != "loop")
        && has_xdp_load_bytes();
    let staged = std::env::var("SMBWIRE_BPF_COPY").is_ok_and(|v| v == "staged")
        || (hook == Hook::Xdp && !xdp_load_bytes);
    (if xdp_load_bytes { COPY_XDP_HELPER } else { 0 }) | (if staged { COPY_STAGED } else { 0 })
}

fn bpf_error(e: libbpf_rs::Error, what: String) -> LiveError {
    if e.kind() == libbpf_rs::ErrorKind::PermissionDenied {
        // Maps need CAP_BPF; networking programs CAP_BPF and CAP_NET_ADMIN. Name what is
        // missing from the effective set, not the whole list.
        if let Some(capability) = super::privs::missing_for_bpf_load() {
            return LiveError::Permission { capability, what };
        }
    }
    let msg = e.to_string();
    LiveError::Unsupported(format!("{what}: {}", msg.lines().next().unwrap_or("")))
}

#[cfg(smbwire_bpf)]
impl EbpfSource {
    pub fn open(
        iface: &str,
        ifindex: u32,
        opts: &LiveOptions,
        hook: Hook,
    ) -> Result<EbpfSource, LiveError> {
        if opts.tcp_ports.len() > MAX_PORTS {
            return Err(LiveError::Io(format!("at most {MAX_PORTS} TCP ports")));
        }
        // libbpf would print verifier and probe chatter on stderr; errors come back to us.
        // SMBWIRE_LIBBPF_DEBUG=1 shows it (a verifier log when a kernel refuses the program,
        // the verifier's statistics, instructions processed, when it takes it).
        let debug = std::env::var_os("SMBWIRE_LIBBPF_DEBUG").is_some();
        if debug {
            libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, |_, msg: String| {
                eprint!("{msg}")
            })));
        } else {
            libbpf_rs::set_print(None);
        }
        let mut open = ObjectBuilder::default()
            .open_memory(&OBJECT.0)
            .map_err(|e| bpf_error(e, "opening the eBPF object".into()))?;
        let ring_bytes = opts.ring_bytes.max(4096).next_power_of_two();
        let cpus =
            libbpf_rs::num_possible_cpus().map_err(|e| bpf_error(e, "counting CPUs".into()))?;
        // Load only the entry point of the chosen hook: an older kernel would refuse the
        // other one (TCX's attach type), and the verifier's time is not spent twice.
        for mut p in open.progs_mut() {
            let name = p.name().to_str().unwrap_or("").to_string();
            p.set_autoload(name == program_name(hook));
            if debug {
                // BPF_LOG_STATS: libbpf prints the log of a program the kernel accepted too.
                p.set_log_level(4);
            }
        }
        let queues = opts.queues.clamp(1, super::MAX_QUEUES) as usize;
        let copy = copy_flags(hook);
        for mut m in open.maps_mut() {
            let name = m.name().to_str().unwrap_or("");
            if name.ends_with(".rodata") {
                // `struct smbwire_rodata`, the object's one read-only global (its only
                // `.rodata`): constants the verifier prunes the copy's other branches by, and
                // the reader's wake-up mark (a frame then asks its ring only what is queued).
                let v = m.initial_value_mut().filter(|v| v.len() == RODATA_SIZE).ok_or_else(|| {
                    LiveError::Unsupported(format!("eBPF object's .rodata is not the expected {RODATA_SIZE} bytes"))
                })?;
                let wake_at = (ring_bytes / 4).min(u32_of(abi::SMBWIRE_WAKEUP_BYTES));
                v[abi::smbwire_rodata::COPY_FLAGS..][..4].copy_from_slice(&copy.to_ne_bytes());
                v[abi::smbwire_rodata::WAKE_AT..][..4].copy_from_slice(&wake_at.to_ne_bytes());
                continue;
            }
            let entries = match name {
                // A slot per CPU where the program uses them: the staged copy, and XDP's
                // load offsets (`load`); the direct copy at TC needs none.
                "scratch_buf" if hook == Hook::Xdp || copy & COPY_STAGED != 0 => cpus as u32,
                "scratch_buf" => 1,
                // ring0 .. ring15: the queues in use get the ring size, the others a page.
                _ => match name.strip_prefix("ring").and_then(|n| n.parse::<usize>().ok()) {
                    Some(i) if i < queues => ring_bytes,
                    Some(_) => 4096,
                    None => continue,
                },
            };
            m.set_max_entries(entries)
                .map_err(|e| bpf_error(e, "sizing the maps".into()))?;
        }
        let obj = open
            .load()
            .map_err(|e| bpf_error(e, "loading the eBPF program".into()))?;
        let handle = |name: &str| -> Result<MapHandle, LiveError> {
            let m = obj
                .maps()
                .find(|m| m.name() == name)
                .ok_or_else(|| LiveError::Unsupported(format!("eBPF object has no map {name}")))?;
            MapHandle::try_from(&m).map_err(|e| bpf_error(e, format!("map {name}")))
        };
        let (ports, config, flows, totals, shed_map) = (
            handle("tcp_ports")?,
            handle("config")?,
            handle("flows")?,
            handle("totals")?,
            handle("shed")?,
        );
        let ring_maps = (0..queues)
            .map(|i| handle(&format!("ring{i}")))
            .collect::<Result<Vec<_>, _>>()?;
        if (shed_map.key_size() as usize, shed_map.value_size() as usize) != (FLOW_KEY_SIZE, SHED_VALUE_SIZE)
            || config.value_size() as usize != CONFIG_SIZE
        {
            return Err(LiveError::Unsupported("eBPF maps shed or config have unexpected sizes".into()));
        }
        if (flows.key_size() as usize, flows.value_size() as usize) != (FLOW_KEY_SIZE, FLOW_VALUE_SIZE) {
            return Err(LiveError::Unsupported("eBPF map flows has unexpected key or value sizes".into()));
        }
        for p in &opts.tcp_ports {
            ports
                .update(&p.to_ne_bytes(), &[1], MapFlags::ANY)
                .map_err(|e| bpf_error(e, "filling the ports map".into()))?;
        }
        let mut cfg = [0u8; CONFIG_SIZE];
        put_u32(&mut cfg, config_at::SNAPLEN, opts.snaplen.min(MAX_SNAPLEN));
        put_u32(&mut cfg, config_at::RINGS, queues as u32);
        let flags = if opts.xdp_drop && hook == Hook::Xdp {
            CFG_XDP_DROP
        } else {
            0
        };
        put_u32(&mut cfg, config_at::FLAGS, flags);
        // The program sheds a connection itself once a ring is nearly full (bpf/smbwire.h).
        let shed_at = if opts.shed { ring_bytes - (ring_bytes >> abi::SMBWIRE_SHED_FULL_SHIFT) } else { 0 };
        put_u32(&mut cfg, config_at::SHED_AT, shed_at);
        config
            .update(&0u32.to_ne_bytes(), &cfg, MapFlags::ANY)
            .map_err(|e| bpf_error(e, "filling the config map".into()))?;

        let promisc = if opts.promisc {
            Some(PromiscGuard::new(ifindex)?)
        } else {
            None
        };

        let name = program_name(hook);
        let prog = obj
            .progs()
            .find(|p| p.name() == name)
            .ok_or_else(|| LiveError::Unsupported(format!("eBPF object has no program {name}")))?;
        // SAFETY: prog is a loaded program of `obj`; libbpf returns NULL and sets errno on error.
        let raw = unsafe {
            match hook {
                Hook::Tcx => {
                    let tcx = libbpf_sys::bpf_tcx_opts {
                        sz: std::mem::size_of::<libbpf_sys::bpf_tcx_opts>() as _,
                        ..Default::default()
                    };
                    libbpf_sys::bpf_program__attach_tcx(
                        prog.as_libbpf_object().as_ptr(),
                        ifindex as i32,
                        &tcx,
                    )
                }
                // No mode flag: the driver's native XDP when it has one, else generic XDP.
                Hook::Xdp => libbpf_sys::bpf_program__attach_xdp(
                    prog.as_libbpf_object().as_ptr(),
                    ifindex as i32,
                ),
            }
        };
        let Some(raw) = std::ptr::NonNull::new(raw) else {
            let e = io::Error::last_os_error();
            let (what, needs) = match hook {
                Hook::Tcx => (format!("TCX attach on {iface}"), "kernel 6.6 or later"),
                Hook::Xdp => (
                    format!("XDP attach on {iface}"),
                    "kernel 5.9 or later, MTU within one page, no other XDP program",
                ),
            };
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => LiveError::Permission {
                    capability: "CAP_NET_ADMIN",
                    what,
                },
                _ => LiveError::Unsupported(format!("{what} ({needs}): {e}")),
            });
        };
        // SAFETY: a fresh link we now own; dropping it destroys the link (detach).
        let link = unsafe { Link::from_ptr(raw) };
        let xdp_mode = match hook {
            Hook::Tcx => None,
            Hook::Xdp => Some(xdp_mode(ifindex)),
        };

        let rings = ring_maps
            .iter()
            .map(|m| Ring::map(m.as_fd().as_raw_fd(), ring_bytes as u64))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| LiveError::Io(format!("mapping the ring buffers: {e}")))?;
        Ok(EbpfSource {
            if_drops: IfDrops::new(iface, ifindex),
            rings,
            records: Records {
                next_number: 1,
                wall_offset: sys::monotonic_to_wall_offset(),
                retag_buf: Vec::with_capacity(MAX_SNAPLEN as usize + 4),
                delivered: 0,
                bad_records: 0,
            },
            _link: link,
            _ring_maps: ring_maps,
            flows,
            totals,
            shed_map,
            config,
            cfg,
            _obj: obj,
            _promisc: promisc,
            hook: HookInfo {
                hook,
                xdp_mode,
                xdp_copy: (hook == Hook::Xdp).then_some(if copy & COPY_XDP_HELPER != 0 { "helper" } else { "loop" }),
                ring_copy: if copy & COPY_STAGED != 0 { "staged" } else { "direct" },
            },
        })
    }

    /// Every flow of the kernel's table into `top` (`read_flows`).
    fn flow_stats(&self, top: &mut flows::TopFlows) {
        read_flows(&self.flows, top);
    }
}

/// Every flow of the kernel's flow table `map` into `top`. Batched (`BPF_MAP_LOOKUP_BATCH`,
/// Linux 5.6+): a full table is 65,536 flows, read every snapshot; one key at a time that was
/// two system calls and two allocations a flow, most of the capture thread's system time
/// under a flood of new flows (issue 12). Key by key where the kernel has no batch.
#[cfg(smbwire_bpf)]
fn read_flows(map: &MapHandle, top: &mut flows::TopFlows) {
    if read_flows_batched(map, top).is_err() {
        top.clear();
        read_flows_by_key(map, top);
    }
}

/// Flows read per `BPF_MAP_LOOKUP_BATCH` call.
const FLOW_BATCH: usize = 4096;

#[cfg(smbwire_bpf)]
fn read_flows_batched(map: &MapHandle, top: &mut flows::TopFlows) -> io::Result<()> {
    if (map.key_size() as usize, map.value_size() as usize) != (FLOW_KEY_SIZE, FLOW_VALUE_SIZE) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let fd = map.as_fd().as_raw_fd();
    let mut keys = vec![0u8; FLOW_BATCH * FLOW_KEY_SIZE];
    let mut values = vec![0u8; FLOW_BATCH * FLOW_VALUE_SIZE];
    // Where the next call goes on (a bucket number for hash maps, 4 bytes); no `in_batch`
    // starts at the beginning.
    let (mut token_in, mut token_out) = ([0u8; 8], [0u8; 8]);
    let mut first = true;
    let opts = libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
        ..Default::default()
    };
    loop {
        let mut count = FLOW_BATCH as u32;
        // SAFETY: the buffers hold `count` keys and values of the map's sizes (checked
        // above), the tokens 8 bytes.
        let rc = unsafe {
            libbpf_sys::bpf_map_lookup_batch(
                fd,
                if first { std::ptr::null_mut() } else { token_in.as_mut_ptr().cast() },
                token_out.as_mut_ptr().cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        // ENOENT: the last batch (`count` of them are valid).
        let done = match rc {
            0 => false,
            e if e == -libc::ENOENT => true,
            e => return Err(io::Error::from_raw_os_error(-e)),
        };
        let n = (count as usize).min(FLOW_BATCH);
        let entries = keys.chunks_exact(FLOW_KEY_SIZE).zip(values.chunks_exact(FLOW_VALUE_SIZE));
        for (k, v) in entries.take(n) {
            if let Some(flow) = FlowKey::from_bytes(k) {
                top.push(FlowStat {
                    flow,
                    packets: u64::from_ne_bytes(rd(v, 0)),
                    bytes: u64::from_ne_bytes(rd(v, 8)),
                });
            }
        }
        if done {
            return Ok(());
        }
        token_in = token_out;
        first = false;
    }
}

#[cfg(smbwire_bpf)]
fn read_flows_by_key(map: &MapHandle, top: &mut flows::TopFlows) {
    for k in map.keys() {
        let (Some(flow), Ok(Some(v))) = (FlowKey::from_bytes(&k), map.lookup(&k, MapFlags::ANY)) else {
            continue;
        };
        if v.len() >= FLOW_VALUE_SIZE {
            top.push(FlowStat {
                flow,
                packets: u64::from_ne_bytes(rd(&v, 0)),
                bytes: u64::from_ne_bytes(rd(&v, 8)),
            });
        }
    }
}

#[cfg(smbwire_bpf)]
impl EbpfSource {
    /// The program's totals (`struct smbwire_totals`), summed over CPUs; zeros when unreadable.
    fn totals(&self) -> [u64; TOTALS_SIZE / 8] {
        let mut t = [0u64; TOTALS_SIZE / 8];
        if let Ok(Some(cpus)) = self.totals.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY) {
            for v in cpus.iter().filter(|v| v.len() >= TOTALS_SIZE) {
                for (i, slot) in t.iter_mut().enumerate() {
                    *slot += u64::from_ne_bytes(rd(v, i * 8));
                }
            }
        }
        t
    }

    /// The largest share of its ring that `bytes` counts, over the rings (0.0 to 1.0).
    fn fullest(&self, bytes: fn(&Ring) -> u64) -> f64 {
        self.rings.iter().map(|r| bytes(r) as f64 / r.size as f64).fold(0.0, f64::max).min(1.0)
    }

    /// `next_batch` with each ring's lease lent (`leases`, by ring).
    fn hand_out(
        &mut self,
        timeout_ms: i32,
        leases: &[Option<Arc<Lease>>],
        f: &mut dyn FnMut(RawFrame<'_>, super::Handed<'_>),
    ) -> io::Result<usize> {
        let (mut frames, mut bytes) = (0usize, 0usize);
        let mut waited = false;
        let started = std::time::Instant::now();
        let mut heads = [Head::Empty; MAX_RINGS];
        let heads = &mut heads[..self.rings.len()];
        loop {
            let horizon = sys::clock_ns(libc::CLOCK_MONOTONIC).saturating_sub(ORDER_GRACE_NS);
            for (h, r) in heads.iter_mut().zip(&self.rings) {
                *h = match r.head() {
                    Some((rec, _)) => Head::At(record_ts(rec)),
                    None => Head::Empty,
                };
            }
            while let Some(i) = pick_queue(heads, horizon) {
                let ring = &self.rings[i];
                let Some((rec, total)) = ring.head() else { break };
                let lease = leases[i].as_ref();
                self.records.deliver(rec, &mut |r, shed_here| f(r, super::Handed { lease, shed_here }));
                ring.release(total);
                frames += 1;
                bytes += total as usize;
                heads[i] = match ring.head() {
                    Some((rec, _)) => Head::At(record_ts(rec)),
                    None => Head::Empty,
                };
                if bytes >= BATCH_MAX_BYTES || super::batch_full(frames, started) {
                    return Ok(frames);
                }
            }
            if frames > 0 || waited || timeout_ms == 0 {
                return Ok(frames);
            }
            // Nothing to hand out: sleep until a ring has data (the program wakes us once
            // SMBWIRE_WAKEUP_BYTES are queued) or the timeout; while frames are held back for
            // order, only until they are old enough.
            if heads.iter().any(|h| *h != Head::Empty) {
                // Frames held back for order: they are old enough after a short sleep.
                std::thread::sleep(std::time::Duration::from_millis(1));
                waited = true;
                continue;
            }
            // A ring polls readable while its consumer position trails the producer's, as it
            // does while a stretch is lent (`Ring::lend`), and the program's wake-up counts
            // lent bytes as queued: then poll would return at once, again and again. Until
            // the workers give the stretches back, look again after a short sleep instead.
            for r in &self.rings {
                r.reclaim();
            }
            if self.rings.iter().any(|r| !r.lent.borrow().is_empty()) {
                std::thread::sleep(std::time::Duration::from_millis(1));
                waited = true;
                continue;
            }
            let mut fds = [libc::pollfd { fd: -1, events: libc::POLLIN, revents: 0 }; MAX_RINGS];
            for (p, r) in fds.iter_mut().zip(&self.rings) {
                p.fd = r.fd;
            }
            // SAFETY: the first `rings.len()` entries of fds are valid pollfds.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), self.rings.len() as libc::nfds_t, timeout_ms) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            waited = true;
        }
    }
}

#[cfg(smbwire_bpf)]
impl LiveSource for EbpfSource {
    /// Frames of every ring in time stamp order (`pick_queue`), at most `BATCH_MAX_BYTES` or
    /// what `batch_full` allows; waits up to `timeout_ms` only when nothing can be handed out.
    fn next_batch(
        &mut self,
        timeout_ms: i32,
        f: &mut dyn FnMut(RawFrame<'_>, super::Handed<'_>),
    ) -> io::Result<usize> {
        // Re-read each batch so a stepped wall clock (NTP) is followed.
        self.records.wall_offset = sys::monotonic_to_wall_offset();
        // What the workers are done with goes back to the kernel; then each ring lends what
        // this batch may hand out (`Ring::lend`), settled whatever way the batch ends.
        let mut leases = [const { None }; MAX_RINGS];
        for (l, r) in leases.iter_mut().zip(&self.rings) {
            r.reclaim();
            *l = Some(r.lend());
        }
        let got = self.hand_out(timeout_ms, &leases, f);
        for (l, r) in leases.iter_mut().zip(&self.rings) {
            if let Some(l) = l.take() {
                r.settle(l);
            }
        }
        got
    }

    fn held(&self) -> bool {
        self.rings.iter().any(|r| r.pending() > 0)
    }

    fn backlog(&self) -> f64 {
        // What the kernel cannot write: records waiting and stretches the workers still hold
        // (`Ring::lend`), both of which push the ring towards dropping frames.
        self.fullest(Ring::occupied)
    }

    fn unread(&self) -> f64 {
        self.fullest(Ring::pending)
    }

    fn shed(&mut self, conn: &FlowKey) -> bool {
        let zero = [0u8; SHED_VALUE_SIZE];
        match self.shed_map.update(&conn.to_bytes(), &zero, MapFlags::NO_EXIST) {
            Ok(()) => {}
            // Already shed: nothing to add.
            Err(e) if e.kind() == libbpf_rs::ErrorKind::AlreadyExists => return true,
            // Full (SMBWIRE_MAX_SHED) or refused: the session discards the frames itself.
            Err(_) => return false,
        }
        let flags = u32::from_ne_bytes(rd(&self.cfg, config_at::FLAGS));
        if flags & CFG_SHEDDING == 0 {
            put_u32(&mut self.cfg, config_at::FLAGS, flags | CFG_SHEDDING);
            if self.config.update(&0u32.to_ne_bytes(), &self.cfg, MapFlags::ANY).is_err() {
                put_u32(&mut self.cfg, config_at::FLAGS, flags);
                let _ = self.shed_map.delete(&conn.to_bytes());
                return false;
            }
        }
        true
    }

    fn hook(&self) -> Option<HookInfo> {
        Some(self.hook)
    }

    fn reads_need_cap(&self) -> bool {
        let fd = self.totals.as_fd().as_raw_fd();
        let cpus = libbpf_rs::num_possible_cpus().unwrap_or(1).max(1);
        super::privs::fd_reads_need_cap(move || {
            let key = 0u32;
            let mut value = vec![0u8; TOTALS_SIZE * cpus];
            // SAFETY: a per-CPU array lookup writes one value per possible CPU into `value`.
            let rc = unsafe {
                libbpf_sys::bpf_map_lookup_elem(
                    fd,
                    &key as *const u32 as *const libc::c_void,
                    value.as_mut_ptr() as *mut libc::c_void,
                )
            };
            rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EPERM)
        })
    }

    fn shed_chosen(&self) -> u64 {
        self.totals()[totals::SHED_CHOSEN / 8]
    }

    fn stats(&self) -> LiveStats {
        let t = self.totals();
        let mut top = flows::TopFlows::new(STATS_TOP_FLOWS);
        self.flow_stats(&mut top);
        let interface_drops = self.if_drops.since_open();
        let at = |offset: usize| t[offset / 8];
        LiveStats {
            kernel_drops: interface_drops.unwrap_or(0),
            interface_drops,
            packets_seen: at(totals::PACKETS_SEEN),
            bytes_seen: at(totals::BYTES_SEEN),
            packets_matched: at(totals::PACKETS_MATCHED),
            bytes_matched: at(totals::BYTES_MATCHED),
            ring_drops: at(totals::RING_DROPS),
            copy_errors: at(totals::COPY_ERRORS) + self.records.bad_records,
            frames_matched: at(totals::FRAMES_MATCHED),
            packets_delivered: self.records.delivered,
            queues: self.rings.len() as u32,
            shed_frames: at(totals::SHED_FRAMES),
            shed_bytes: at(totals::SHED_BYTES),
            shed_chosen: at(totals::SHED_CHOSEN),
            flow_count: top.count,
            flows: top.into_vec(),
        }
    }
}

/// How the kernel runs the XDP program on `ifindex`: "native" (in the driver, before any
/// socket buffer exists) or "generic" (after GRO, on socket buffers: slower, and a coalesced
/// frame counts as one packet).
#[cfg(smbwire_bpf)]
fn xdp_mode(ifindex: u32) -> &'static str {
    let mut q = libbpf_sys::bpf_xdp_query_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_xdp_query_opts>() as _,
        ..Default::default()
    };
    // SAFETY: q is a valid, sized out-struct.
    if unsafe { libbpf_sys::bpf_xdp_query(ifindex as i32, 0, &mut q) } != 0 {
        return "unknown";
    }
    match u32::from(q.attach_mode) {
        libbpf_sys::XDP_ATTACHED_DRV => "native",
        libbpf_sys::XDP_ATTACHED_SKB => "generic",
        libbpf_sys::XDP_ATTACHED_HW => "offloaded",
        _ => "unknown",
    }
}

/// Built without clang: the eBPF backend is unavailable and `open` falls back.
#[cfg(not(smbwire_bpf))]
pub struct EbpfSource {
    _never: std::convert::Infallible,
    _p: Option<PromiscGuard>,
}

#[cfg(not(smbwire_bpf))]
impl EbpfSource {
    pub fn open(
        _iface: &str,
        _ifindex: u32,
        _opts: &LiveOptions,
        _hook: Hook,
    ) -> Result<EbpfSource, LiveError> {
        Err(LiveError::Unsupported(
            "this build has no eBPF program (clang was missing at build time)".into(),
        ))
    }
}

#[cfg(not(smbwire_bpf))]
impl LiveSource for EbpfSource {
    fn next_batch(&mut self, _t: i32, _f: &mut dyn FnMut(RawFrame<'_>, super::Handed<'_>)) -> io::Result<usize> {
        match self._never {}
    }
    fn stats(&self) -> LiveStats {
        match self._never {}
    }
}

#[cfg(all(test, smbwire_bpf))]
mod tests {
    use super::*;
    use libbpf_rs::MapType;

    /// A flow table of the kernel's layout with `n` flows, flow `i` with `i` packets and
    /// `1000 * i` bytes.
    fn table(n: u32) -> Option<MapHandle> {
        let opts = libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        let map = match MapHandle::create(MapType::LruHash, Some("smbwire_test"), FLOW_KEY_SIZE as u32, FLOW_VALUE_SIZE as u32, 65536, &opts) {
            Ok(m) => m,
            Err(e) => {
                // Creating a map needs CAP_BPF.
                super::super::privileged_test_runs("flow table test", Some(format!("cannot create a BPF map ({e})")));
                return None;
            }
        };
        for i in 1..=n {
            let mut key = [0u8; FLOW_KEY_SIZE];
            key[0..4].copy_from_slice(&i.to_be_bytes());
            key[16..20].copy_from_slice(&[198, 18, 0, 2]);
            key[32..34].copy_from_slice(&50000u16.to_ne_bytes());
            key[34..36].copy_from_slice(&445u16.to_ne_bytes());
            key[36] = 6;
            key[37] = flows::family::IPV4;
            let mut value = [0u8; FLOW_VALUE_SIZE];
            value[0..8].copy_from_slice(&u64::from(i).to_ne_bytes());
            value[8..16].copy_from_slice(&(1000 * u64::from(i)).to_ne_bytes());
            map.update(&key, &value, MapFlags::ANY).unwrap();
        }
        Some(map)
    }

    /// The loader writes `struct smbwire_rodata` as the whole of `.rodata`: the object must
    /// have exactly that (a second read-only global would be overwritten, or refuse to load).
    #[test]
    fn rodata_is_the_xdp_copy_switch_alone() {
        let mut open = ObjectBuilder::default().open_memory(&OBJECT.0).expect("the embedded object opens");
        let rodata: Vec<usize> = open
            .maps_mut()
            .filter(|m| m.name().to_str().is_some_and(|n| n.ends_with(".rodata")))
            .map(|m| m.initial_value().map_or(0, |v| v.len()))
            .collect();
        assert_eq!(rodata, vec![RODATA_SIZE]);
    }

    #[test]
    fn flow_table_is_read_whole_in_batches_and_as_key_by_key() {
        // More than one batch, and a last batch that is not full.
        let n = 2 * FLOW_BATCH as u32 + 123;
        let Some(map) = table(n) else { return };
        let mut batched = flows::TopFlows::new(STATS_TOP_FLOWS);
        read_flows_batched(&map, &mut batched).expect("batch lookup on this kernel");
        let mut by_key = flows::TopFlows::new(STATS_TOP_FLOWS);
        read_flows_by_key(&map, &mut by_key);
        assert_eq!((batched.count, by_key.count), (u64::from(n), u64::from(n)));
        let (batched, by_key) = (batched.into_vec(), by_key.into_vec());
        assert_eq!(batched, by_key);
        assert_eq!(batched.len(), STATS_TOP_FLOWS);
        assert_eq!(batched[0].packets, u64::from(n));
        assert_eq!(batched[0].bytes, 1000 * u64::from(n));
        assert_eq!(batched[STATS_TOP_FLOWS - 1].packets, u64::from(n) - STATS_TOP_FLOWS as u64 + 1);
        // An empty table, and exactly one full batch.
        for n in [0, FLOW_BATCH as u32] {
            let Some(map) = table(n) else { return };
            let mut t = flows::TopFlows::new(STATS_TOP_FLOWS);
            read_flows(&map, &mut t);
            assert_eq!(t.count, u64::from(n));
        }
    }
}
