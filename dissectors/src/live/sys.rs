//! Small Linux helpers shared by both backends: interface lookup, promiscuous mode,
//! clocks, error mapping.

// The eBPF-only helpers are unused in a build without the BPF object.
#![cfg_attr(not(smbwire_bpf), allow(dead_code))]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::LiveError;

// linux/if_packet.h (declared here: not every libc release exports them).
pub const SOL_PACKET: i32 = 263;
pub const PACKET_ADD_MEMBERSHIP: i32 = 1;
pub const PACKET_MR_PROMISC: u16 = 1;

#[repr(C)]
struct PacketMreq {
    mr_ifindex: i32,
    mr_type: u16,
    mr_alen: u16,
    mr_address: [u8; 8],
}

pub fn ifindex(iface: &str) -> Result<u32, LiveError> {
    let name = CString::new(iface).map_err(|_| LiveError::NoSuchInterface(iface.into()))?;
    // SAFETY: `name` is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if idx == 0 {
        return Err(LiveError::NoSuchInterface(iface.into()));
    }
    Ok(idx)
}

/// Maps an OS error to a one-line `LiveError`, naming the capability on EPERM/EACCES.
pub fn os_error(err: io::Error, what: &str, capability: &'static str) -> LiveError {
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => LiveError::Permission {
            capability,
            what: what.to_string(),
        },
        Some(libc::ENODEV) | Some(libc::ENXIO) => LiveError::NoSuchInterface(what.to_string()),
        _ => LiveError::Io(format!("{what}: {err}")),
    }
}

/// An AF_PACKET socket; `protocol` 0 receives nothing (used only to hold promiscuous mode).
pub fn packet_socket(protocol: u16) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned right away.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            i32::from(protocol.to_be()),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn setsockopt<T>(fd: &OwnedFd, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: value points to a live T of the given size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Adds a PACKET_MR_PROMISC membership on `fd`; the kernel removes it when the socket
/// closes, including when the process dies, so the interface never stays promiscuous.
pub fn add_promisc(fd: &OwnedFd, ifindex: u32) -> io::Result<()> {
    let mreq = PacketMreq {
        mr_ifindex: ifindex as i32,
        mr_type: PACKET_MR_PROMISC,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)
}

/// Holds promiscuous mode for the eBPF backend: a packet socket that receives nothing.
pub struct PromiscGuard {
    _fd: OwnedFd,
}

impl PromiscGuard {
    pub fn new(ifindex: u32) -> Result<PromiscGuard, LiveError> {
        let fd = packet_socket(0)
            .map_err(|e| os_error(e, "promiscuous mode (AF_PACKET socket)", "CAP_NET_RAW"))?;
        add_promisc(&fd, ifindex)
            .map_err(|e| os_error(e, "promiscuous mode (PACKET_ADD_MEMBERSHIP)", "CAP_NET_RAW"))?;
        Ok(PromiscGuard { _fd: fd })
    }
}

/// The running kernel's release (`uname -r`), "" if unknown.
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is a valid out-pointer.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    // SAFETY: uname NUL-terminates release.
    unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

pub(crate) fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC: added to bpf_ktime_get_ns() for wall-clock time.
pub fn monotonic_to_wall_offset() -> u64 {
    let mono = clock_ns(libc::CLOCK_MONOTONIC);
    let wall = clock_ns(libc::CLOCK_REALTIME);
    wall.wrapping_sub(mono)
}

/// Puts a VLAN tag the kernel stripped back after the MAC addresses, so the frame is as it
/// was on the wire. `out` is reused between frames.
pub fn retag(out: &mut Vec<u8>, data: &[u8], tpid: u16, tci: u16) {
    out.clear();
    let split = data.len().min(12);
    out.extend_from_slice(&data[..split]);
    out.extend_from_slice(&tpid.to_be_bytes());
    out.extend_from_slice(&tci.to_be_bytes());
    out.extend_from_slice(&data[split..]);
}

/// The interface's own receive drop counters, as a delta since `new`: sysfs
/// `statistics/rx_dropped` (the kernel: a full receive backlog, also frames of a protocol no
/// handler on this host takes) plus `statistics/rx_missed_errors` (the NIC: its receive ring
/// was full). `None` when they cannot be read, or when this process's /sys shows another
/// network namespace than the interface's (the ifindex differs).
pub struct IfDrops {
    dir: std::path::PathBuf,
    base: Option<u64>,
}

impl IfDrops {
    pub fn new(iface: &str, ifindex: u32) -> IfDrops {
        let dir = std::path::Path::new("/sys/class/net").join(iface);
        let same = read_u64(&dir.join("ifindex")) == Some(u64::from(ifindex));
        let mut d = IfDrops { dir, base: None };
        if same {
            d.base = d.total();
        }
        d
    }

    fn total(&self) -> Option<u64> {
        let stats = self.dir.join("statistics");
        let dropped = read_u64(&stats.join("rx_dropped"))?;
        let missed = read_u64(&stats.join("rx_missed_errors")).unwrap_or(0);
        Some(dropped + missed)
    }

    /// Frames the interface counted as dropped since `new`.
    pub fn since_open(&self) -> Option<u64> {
        let base = self.base?;
        Some(self.total()?.saturating_sub(base))
    }
}

fn read_u64(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retag_puts_tag_after_macs() {
        let data: Vec<u8> = (0u8..20).collect();
        let mut out = Vec::new();
        retag(&mut out, &data, 0x8100, 0x0064);
        assert_eq!(&out[..12], &data[..12]);
        assert_eq!(&out[12..16], &[0x81, 0x00, 0x00, 0x64]);
        assert_eq!(&out[16..], &data[12..]);
        retag(&mut out, &data[..5], 0x8100, 1);
        assert_eq!(out.len(), 9);
    }

    #[test]
    fn missing_interface_is_named() {
        let e = ifindex("smbwire-nope0").unwrap_err();
        assert_eq!(e.to_string(), "no such network interface: smbwire-nope0");
    }

    #[test]
    fn eperm_names_the_capability() {
        let e = os_error(
            io::Error::from_raw_os_error(libc::EPERM),
            "AF_PACKET socket",
            "CAP_NET_RAW",
        );
        assert!(e.to_string().contains("CAP_NET_RAW"), "{e}");
    }
}
