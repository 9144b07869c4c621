//! eBPF backend: loads `bpf/smbwire.bpf.c` (compiled by build.rs, embedded here) with one of
//! its two entry points, fills its ports and config maps, attaches it through a bpf_link —
//! `smbwire_tc` at the interface's TCX ingress (Linux 6.6+) or `smbwire_xdp` at its XDP hook
//! (Linux 5.9+) — and consumes the ring buffer.
//!
//! The link is owned by this process's file descriptor: when the process ends — cleanly,
//! SIGTERM or SIGKILL — the kernel detaches and frees the program. Nothing is pinned.

// Without clang at build time only the stub at the end is compiled.
#![cfg_attr(not(smbwire_bpf), allow(dead_code, unused_imports))]

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use libbpf_rs::{
    libbpf_sys, AsRawLibbpf, Link, MapCore, MapFlags, MapHandle, Object, ObjectBuilder,
};

use super::flows::{self, FlowKey, FlowStat};
use super::sys::{self, IfDrops, PromiscGuard};
use super::{
    Hook, HookInfo, LiveError, LiveOptions, LiveSource, LiveStats, MAX_SNAPLEN, STATS_TOP_FLOWS,
};
use crate::capture::{linktype, FrameInfo, RawFrame};
use crate::frame::FrameRef;

/// Name of the program in the object (and in `bpftool prog show`) for each hook.
pub fn program_name(hook: Hook) -> &'static str {
    match hook {
        Hook::Tcx => "smbwire_tc",
        Hook::Xdp => "smbwire_xdp",
    }
}

/// `SMBWIRE_CFG_XDP_DROP` (bpf/smbwire.h).
const CFG_XDP_DROP: u32 = 1;

/// `struct smbwire_event_hdr` (bpf/smbwire.h).
mod event {
    pub const SIZE: usize = 32;
    pub const TS_NS: usize = 0;
    pub const LEN: usize = 8;
    pub const CAPLEN: usize = 12;
    pub const VLAN_PROTO: usize = 20;
    pub const VLAN_TCI: usize = 22;
    pub const FLAGS: usize = 24;
    // `segs` at 28 is counted in the kernel's totals already; frames carry orig_len only.
    /// SMBWIRE_EV_VLAN: the outer tag was stripped by the kernel.
    pub const FLAG_VLAN: u32 = 1;
}

/// `struct smbwire_totals` (bpf/smbwire.h): seven u64 counters.
const TOTALS_SIZE: usize = 56;
/// `struct smbwire_flow_key` and `struct smbwire_flow_counters` (bpf/smbwire.h).
const FLOW_KEY_SIZE: usize = std::mem::size_of::<FlowKey>();
const FLOW_VALUE_SIZE: usize = 16;
/// `SMBWIRE_MAX_PORTS`.
const MAX_PORTS: usize = 64;

#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);

/// The compiled object; libelf parses it in place, so keep it 8-byte aligned.
#[cfg(smbwire_bpf)]
static OBJECT: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/smbwire.bpf.o")));

type Sink = dyn for<'a> FnMut(RawFrame<'a>);

/// State the ring buffer callback works on; boxed so its address is stable.
struct Consumer {
    /// Set only for the duration of one `next_batch`.
    sink: Option<*mut Sink>,
    next_number: u64,
    wall_offset: u64,
    retag_buf: Vec<u8>,
    delivered: u64,
    bad_records: u64,
    panic: Option<Box<dyn std::any::Any + Send>>,
}

fn rd<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[at..at + N]);
    out
}

impl Consumer {
    fn handle(&mut self, rec: &[u8]) {
        if rec.len() < event::SIZE {
            self.bad_records += 1;
            return;
        }
        let ts = u64::from_ne_bytes(rd(rec, event::TS_NS));
        let len = u32::from_ne_bytes(rd(rec, event::LEN));
        let caplen = u32::from_ne_bytes(rd(rec, event::CAPLEN)) as usize;
        let flags = u32::from_ne_bytes(rd(rec, event::FLAGS));
        let Some(data) = rec.get(event::SIZE..event::SIZE + caplen) else {
            self.bad_records += 1;
            return;
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
            frame: FrameRef {
                file: 0,
                number: self.next_number,
            },
            ts_ns: ts.wrapping_add(self.wall_offset),
            linktype: linktype::ETHERNET,
            orig_len: len,
        };
        self.next_number += 1;
        self.delivered += 1;
        if let Some(sink) = self.sink {
            // SAFETY: `sink` points to the closure borrowed by the running `next_batch`.
            unsafe { (*sink)(RawFrame { info, data }) };
        }
    }
}

unsafe extern "C" fn on_record(
    ctx: *mut libc::c_void,
    data: *mut libc::c_void,
    size: libbpf_sys::size_t,
) -> i32 {
    // SAFETY: ctx is the boxed Consumer registered with ring_buffer__new; libbpf hands us
    // `size` readable bytes at `data` for the duration of the call.
    let c = unsafe { &mut *(ctx as *mut Consumer) };
    let rec = unsafe { std::slice::from_raw_parts(data as *const u8, size as usize) };
    // A panic must not unwind through libbpf's C frames: keep it and rethrow after the poll.
    match catch_unwind(AssertUnwindSafe(|| c.handle(rec))) {
        Ok(()) => 0,
        Err(p) => {
            c.panic = Some(p);
            -1
        }
    }
}

struct RingBuffer(*mut libbpf_sys::ring_buffer);

impl Drop for RingBuffer {
    fn drop(&mut self) {
        // SAFETY: created by ring_buffer__new, freed once.
        unsafe { libbpf_sys::ring_buffer__free(self.0) };
    }
}

#[cfg(smbwire_bpf)]
pub struct EbpfSource {
    // Field order is drop order: stop consuming, detach, then free maps and program.
    rb: RingBuffer,
    consumer: Box<Consumer>,
    _link: Link,
    flows: MapHandle,
    totals: MapHandle,
    _obj: Object,
    _promisc: Option<PromiscGuard>,
    if_drops: IfDrops,
    hook: HookInfo,
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
        // SMBWIRE_LIBBPF_DEBUG=1 shows it (a verifier log when a kernel refuses the program).
        if std::env::var_os("SMBWIRE_LIBBPF_DEBUG").is_some() {
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
        }
        for mut m in open.maps_mut() {
            let entries = match m.name().to_str() {
                Some("ring") => ring_bytes,
                Some("scratch_buf") => cpus as u32,
                _ => continue,
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
        let (ports, config, flows, totals, ring) = (
            handle("tcp_ports")?,
            handle("config")?,
            handle("flows")?,
            handle("totals")?,
            handle("ring")?,
        );
        if (flows.key_size() as usize, flows.value_size() as usize) != (FLOW_KEY_SIZE, FLOW_VALUE_SIZE) {
            return Err(LiveError::Unsupported("eBPF map flows has unexpected key or value sizes".into()));
        }
        for p in &opts.tcp_ports {
            ports
                .update(&p.to_ne_bytes(), &[1], MapFlags::ANY)
                .map_err(|e| bpf_error(e, "filling the ports map".into()))?;
        }
        let mut cfg = [0u8; 8];
        cfg[..4].copy_from_slice(&opts.snaplen.min(MAX_SNAPLEN).to_ne_bytes());
        let flags = if opts.xdp_drop && hook == Hook::Xdp {
            CFG_XDP_DROP
        } else {
            0
        };
        cfg[4..].copy_from_slice(&flags.to_ne_bytes());
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

        let mut consumer = Box::new(Consumer {
            sink: None,
            next_number: 1,
            wall_offset: sys::monotonic_to_wall_offset(),
            retag_buf: Vec::with_capacity(MAX_SNAPLEN as usize + 4),
            delivered: 0,
            bad_records: 0,
            panic: None,
        });
        let ctx = &mut *consumer as *mut Consumer as *mut libc::c_void;
        // SAFETY: ring is a BPF_MAP_TYPE_RINGBUF fd; ctx outlives rb (field order).
        let rb = unsafe {
            libbpf_sys::ring_buffer__new(
                ring.as_fd().as_raw_fd(),
                Some(on_record),
                ctx,
                std::ptr::null(),
            )
        };
        if rb.is_null() {
            return Err(LiveError::Io(format!(
                "ring buffer: {}",
                io::Error::last_os_error()
            )));
        }
        Ok(EbpfSource {
            if_drops: IfDrops::new(iface, ifindex),
            rb: RingBuffer(rb),
            consumer,
            _link: link,
            flows,
            totals,
            _obj: obj,
            _promisc: promisc,
            hook: HookInfo { hook, xdp_mode },
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
impl LiveSource for EbpfSource {
    fn next_batch(
        &mut self,
        timeout_ms: i32,
        f: &mut dyn FnMut(RawFrame<'_>),
    ) -> io::Result<usize> {
        let before = self.consumer.delivered;
        // Re-read each batch so a stepped wall clock (NTP) is followed.
        self.consumer.wall_offset = sys::monotonic_to_wall_offset();
        // SAFETY: erases the borrow's lifetime only for this call; cleared before returning.
        let sink = unsafe { std::mem::transmute::<&mut dyn FnMut(RawFrame<'_>), *mut Sink>(f) };
        self.consumer.sink = Some(sink);
        // Take what is already there first; wait only when the ring is empty.
        // SAFETY: rb is valid; the callback runs on this thread inside the call.
        let mut rc = unsafe { libbpf_sys::ring_buffer__consume(self.rb.0) };
        if rc == 0 && self.consumer.panic.is_none() {
            // SAFETY: as above.
            rc = unsafe { libbpf_sys::ring_buffer__poll(self.rb.0, timeout_ms) };
            if rc == 0 && self.consumer.panic.is_none() {
                // The program wakes us only once enough is queued (SMBWIRE_WAKEUP_BYTES):
                // take what came in while we slept until the timeout.
                // SAFETY: as above.
                rc = unsafe { libbpf_sys::ring_buffer__consume(self.rb.0) };
            }
        }
        self.consumer.sink = None;
        if let Some(p) = self.consumer.panic.take() {
            resume_unwind(p);
        }
        if rc < 0 && rc != -libc::EINTR {
            return Err(io::Error::from_raw_os_error(-rc));
        }
        Ok((self.consumer.delivered - before) as usize)
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

    fn stats(&self) -> LiveStats {
        let mut t = [0u64; TOTALS_SIZE / 8];
        if let Ok(Some(cpus)) = self
            .totals
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        {
            for v in cpus.iter().filter(|v| v.len() >= TOTALS_SIZE) {
                for (i, slot) in t.iter_mut().enumerate() {
                    *slot += u64::from_ne_bytes(rd(v, i * 8));
                }
            }
        }
        let mut top = flows::TopFlows::new(STATS_TOP_FLOWS);
        self.flow_stats(&mut top);
        let interface_drops = self.if_drops.since_open();
        LiveStats {
            kernel_drops: interface_drops.unwrap_or(0),
            interface_drops,
            packets_seen: t[0],
            bytes_seen: t[1],
            packets_matched: t[2],
            bytes_matched: t[3],
            ring_drops: t[4],
            copy_errors: t[5] + self.consumer.bad_records,
            frames_matched: t[6],
            packets_delivered: self.consumer.delivered,
            queues: 1,
            shed_frames: 0,
            shed_bytes: 0,
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
    fn next_batch(&mut self, _t: i32, _f: &mut dyn FnMut(RawFrame<'_>)) -> io::Result<usize> {
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
