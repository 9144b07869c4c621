//! Least privilege after setup: once the capture source is attached and its rings are
//! mapped, `smbwire live` needs no capability to go on (a parser bug reached from the wire
//! then never runs with privilege), so it gives them all up, like `tcpdump -Z`.
//!
//! What the running capture still does, and why that needs nothing:
//! - reads the BPF ring buffer and the AF_PACKET ring: memory mapped at setup;
//! - reads the eBPF counters (maps) through file descriptors opened at setup: the kernel
//!   checks privilege when a map is created, not when an fd is used — except kernels that
//!   apply `kernel.unprivileged_bpf_disabled` to every bpf() command (before 6.5 or so).
//!   There `drop` keeps CAP_BPF (CAP_SYS_ADMIN where the kernel has no CAP_BPF) in the
//!   capture thread only: `fd_reads_need_cap` finds out by trying, on a thread of its own;
//! - reads the interface's drop counters in sysfs (world-readable);
//! - writes `--write` files: the first is opened before the drop (and given to `--user`);
//!   rotation creates the next ones as the user the process now is, in the same directory;
//! - on exit closes its descriptors: closing a bpf_link's fd detaches the program, closing
//!   the socket ends promiscuous mode; neither needs a capability.
//!
//! Capabilities are per thread in Linux: every thread that exists at the drop drops its own
//! (the capture thread and the thread that started it); threads created later inherit the
//! dropped sets. setgroups/setgid/setuid go through glibc, which applies them to all threads.
//! `summary` reads every thread of the process back from /proc.

use std::ffi::CString;
use std::io;

use serde::Serialize;

use super::LiveError;

pub const CAP_NET_ADMIN: u32 = 12;
pub const CAP_NET_RAW: u32 = 13;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_BPF: u32 = 39;

/// linux/capability.h: _LINUX_CAPABILITY_VERSION_3 (two 32-bit words per set).
const CAP_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// A capability set field of /proc/thread-self/status (`CapEff`, `CapPrm`, ...).
fn status_field(path: &str, field: &str) -> Option<u64> {
    status_text_field(&std::fs::read_to_string(path).ok()?, field)
}

/// A hexadecimal field of a /proc status text.
fn status_text_field(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(field))?;
    u64::from_str_radix(line.split(':').nth(1)?.trim(), 16).ok()
}

fn has(set: u64, cap: u32) -> bool {
    set >> cap & 1 == 1
}

/// What a BPF load refused with EPERM/EACCES lacks, from the calling thread's effective set:
/// loading maps needs CAP_BPF, a networking program also CAP_NET_ADMIN (CAP_SYS_ADMIN stands
/// in for either, as in the kernel). None when both are there: the refusal had another cause
/// (the verifier answers EACCES).
pub fn missing_for_bpf_load() -> Option<&'static str> {
    let Some(eff) = status_field("/proc/thread-self/status", "CapEff:") else {
        return Some("CAP_BPF and CAP_NET_ADMIN");
    };
    let bpf = has(eff, CAP_BPF) || has(eff, CAP_SYS_ADMIN);
    match (bpf, has(eff, CAP_NET_ADMIN) || has(eff, CAP_SYS_ADMIN)) {
        (false, false) => Some("CAP_BPF and CAP_NET_ADMIN"),
        (false, true) => Some("CAP_BPF"),
        (true, false) => Some("CAP_NET_ADMIN"),
        (true, true) => None,
    }
}

/// The user `--user NAME` switches to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

pub fn lookup_user(name: &str) -> Result<User, LiveError> {
    let cname = CString::new(name).map_err(|_| LiveError::Io(format!("no such user: {name:?}")))?;
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: every pointer is valid for the call; `out` is NULL or points to `pw`.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut out,
        )
    };
    if rc != 0 || out.is_null() {
        return Err(LiveError::Io(format!("--user: no such user: {name}")));
    }
    Ok(User {
        name: name.to_string(),
        uid: pw.pw_uid,
        gid: pw.pw_gid,
    })
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The first step, on each thread: empty the bounding set (what an execve could ever gain;
/// needs CAP_SETPCAP, so it is skipped where the process started without it, e.g. file
/// capabilities on a non-root user — no_new_privs covers execve then), clear the ambient
/// set, set no_new_privs. `keep_across_setuid`: a later setuid keeps the permitted set (the
/// capture thread, when `fd_reads_need_cap`). Returns whether the bounding set is empty.
pub fn limit_thread(keep_across_setuid: bool) -> io::Result<bool> {
    let mut bounding_cleared = true;
    for cap in 0..64u64 {
        // SAFETY: plain prctl calls.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if rc < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINVAL) => break, // past CAP_LAST_CAP
                Some(libc::EPERM) => {
                    bounding_cleared = false;
                    break;
                }
                _ => return Err(io::Error::last_os_error()),
            }
        }
    }
    // SAFETY: as above.
    unsafe {
        check(libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        ))?;
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        check(libc::prctl(
            libc::PR_SET_KEEPCAPS,
            libc::c_ulong::from(keep_across_setuid),
            0,
            0,
            0,
        ))?;
    }
    Ok(bounding_cleared)
}

/// Supplementary groups, group and user of `user` (initgroups, setgid, setuid: glibc applies
/// each to every thread). Needs CAP_SETGID and CAP_SETUID in every thread.
pub fn switch_user(user: &User) -> io::Result<()> {
    let name = CString::new(user.name.as_str()).map_err(|_| io::Error::other("bad user name"))?;
    // SAFETY: plain libc calls with valid arguments.
    unsafe {
        check(libc::initgroups(name.as_ptr(), user.gid))?;
        check(libc::setgid(user.gid))?;
        check(libc::setuid(user.uid))?;
    }
    // setuid to a non-root user cannot be undone; make sure it took.
    // SAFETY: as above.
    if user.uid != 0 && unsafe { libc::setuid(0) } == 0 {
        return Err(io::Error::other(
            "setuid(0) still succeeds after switching user",
        ));
    }
    Ok(())
}

/// Sets this thread's effective and permitted sets to `keep` (a mask of capability bits) and
/// its inheritable set to nothing, then turns keep-caps off again.
pub fn set_thread_caps(keep: u64) -> io::Result<()> {
    let mut hdr = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let data = [
        CapData {
            effective: keep as u32,
            permitted: keep as u32,
            inheritable: 0,
        },
        CapData {
            effective: (keep >> 32) as u32,
            permitted: (keep >> 32) as u32,
            inheritable: 0,
        },
    ];
    // SAFETY: capset with a v3 header and two data words, as linux/capability.h defines.
    unsafe {
        check(libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) as i32)?;
        check(libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0))?;
    }
    Ok(())
}

/// Drops this thread's effective set to nothing (permitted unchanged): for a probe thread.
fn clear_thread_effective() -> io::Result<()> {
    let mut hdr = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget/capset with a v3 header and two data words.
    unsafe {
        check(libc::syscall(
            libc::SYS_capget,
            &mut hdr as *mut CapHeader,
            data.as_mut_ptr(),
        ) as i32)?;
        for d in data.iter_mut() {
            d.effective = 0;
        }
        check(libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) as i32)?;
    }
    Ok(())
}

/// Whether reading a map through an open fd (`read`, returning false on EPERM) needs a
/// capability on this kernel: tried on a short-lived thread whose effective set is empty,
/// so the caller keeps its own.
pub fn fd_reads_need_cap(read: impl FnOnce() -> bool + Send) -> bool {
    probe_on_own_thread(read).0
}

/// How long `probe_on_own_thread` waits for its thread's task to leave /proc.
const PROBE_EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// `fd_reads_need_cap`, and the probe thread's id. The thread gives up every capability
/// (effective, permitted, bounding; no_new_privs) before it ends, and this returns once its
/// task has left /proc/self/task (at most `PROBE_EXIT_WAIT`): a join returns when the thread
/// has cleared its id, while the kernel may still list the task, with its credentials, for
/// a moment after, and the privilege summary read then (`summary`, right after the drop)
/// would count it as a thread holding capabilities: the likeliest cause of one CI run on
/// 2026-12-02 reporting `threads_with_capabilities` 1 at start while every thread /proc
/// listed during the capture held none (not reproduced by hand, even on one loaded CPU).
fn probe_on_own_thread(read: impl FnOnce() -> bool + Send) -> (bool, libc::pid_t) {
    let (needs, tid) = std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let needs = clear_thread_effective().is_ok() && !read();
            // Whatever fails here leaves the thread no more than it had; it ends next.
            let _ = limit_thread(false);
            let _ = set_thread_caps(0);
            (needs, tid)
        })
        .join()
        .unwrap_or((true, 0))
    });
    if tid > 0 {
        let task = format!("/proc/self/task/{tid}");
        let deadline = std::time::Instant::now() + PROBE_EXIT_WAIT;
        while std::path::Path::new(&task).exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
    (needs, tid)
}

/// The capability to keep for map reads, when they need one: CAP_BPF, or CAP_SYS_ADMIN on a
/// kernel older than CAP_BPF (5.8) where the process holds that instead.
pub fn cap_for_bpf_reads() -> u64 {
    let eff = status_field("/proc/thread-self/status", "CapEff:").unwrap_or(0);
    if has(eff, CAP_BPF) || !has(eff, CAP_SYS_ADMIN) {
        1 << CAP_BPF
    } else {
        1 << CAP_SYS_ADMIN
    }
}

/// Names of the capabilities in `mask` this module deals with (others by number).
pub fn cap_names(mask: u64) -> Vec<String> {
    (0..64)
        .filter(|&b| has(mask, b))
        .map(|b| match b {
            CAP_NET_ADMIN => "CAP_NET_ADMIN".to_string(),
            CAP_NET_RAW => "CAP_NET_RAW".to_string(),
            CAP_SYS_ADMIN => "CAP_SYS_ADMIN".to_string(),
            CAP_BPF => "CAP_BPF".to_string(),
            n => format!("cap{n}"),
        })
        .collect()
}

/// What the process holds after the drop, read back from /proc for every thread.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub dropped: bool,
    /// `--user`, when given.
    pub user: Option<String>,
    pub uid: u32,
    pub gid: u32,
    /// Capabilities the capture thread kept (CAP_BPF where map reads need it), by name.
    pub kept: Vec<String>,
    /// Threads of the process whose effective or permitted set is not empty.
    pub threads_with_capabilities: u64,
    /// Every thread's bounding set is empty.
    pub bounding_set_empty: bool,
    pub no_new_privs: bool,
}

pub fn summary(user: Option<&User>, keep: u64) -> Summary {
    let mut s = Summary {
        dropped: true,
        user: user.map(|u| u.name.clone()),
        // SAFETY: no preconditions.
        uid: unsafe { libc::getuid() },
        gid: unsafe { libc::getgid() },
        kept: cap_names(keep),
        bounding_set_empty: true,
        no_new_privs: true,
        ..Default::default()
    };
    let tasks = std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten();
    for t in tasks {
        let path = t.path().join("status");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            // The thread ended after the listing: it holds nothing.
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => continue,
            // Unreadable for another reason: counted as holding everything.
            Err(_) => String::new(),
        };
        let field = |name: &str| status_text_field(&text, name);
        let eff = field("CapEff:").unwrap_or(u64::MAX);
        let prm = field("CapPrm:").unwrap_or(u64::MAX);
        s.threads_with_capabilities += u64::from(eff | prm != 0);
        s.bounding_set_empty &= field("CapBnd:") == Some(0);
        s.no_new_privs &= field("NoNewPrivs:") == Some(1);
    }
    s
}

/// Whether the real user may write and search `dir` (after a switch of user).
pub fn can_write_dir(dir: &std::path::Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: c is NUL-terminated.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_bits() {
        assert_eq!(
            cap_names((1 << CAP_BPF) | (1 << CAP_NET_ADMIN)),
            ["CAP_NET_ADMIN", "CAP_BPF"]
        );
        assert!(cap_names(0).is_empty());
    }

    #[test]
    fn root_and_nobody_are_found() {
        let r = lookup_user("root").unwrap();
        assert_eq!((r.uid, r.gid), (0, 0));
        assert!(lookup_user("smbwire-no-such-user")
            .unwrap_err()
            .to_string()
            .contains("no such user"));
    }

    #[test]
    fn the_probe_thread_is_gone_and_held_nothing_when_it_returns() {
        // SAFETY: no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !crate::live::privileged_test_runs("capability probe test", (!root).then(|| "not root".to_string())) {
            return;
        }
        let before = status_field("/proc/thread-self/status", "CapEff:").unwrap();
        for _ in 0..200 {
            let seen = std::sync::Mutex::new(None);
            let (needs, tid) = probe_on_own_thread(|| {
                *seen.lock().unwrap() = status_field("/proc/thread-self/status", "CapEff:");
                true
            });
            assert!(!needs);
            assert!(tid > 0);
            // The read ran with an empty effective set, and the thread's task is gone.
            assert_eq!(*seen.lock().unwrap(), Some(0));
            assert!(!std::path::Path::new(&format!("/proc/self/task/{tid}")).exists(), "task {tid} still listed");
        }
        assert_eq!(status_field("/proc/thread-self/status", "CapEff:"), Some(before));
    }

    #[test]
    fn a_thread_drops_its_own_capabilities_only() {
        // SAFETY: no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !crate::live::privileged_test_runs("capability drop test", (!root).then(|| "not root".to_string())) {
            return;
        }
        let before = status_field("/proc/thread-self/status", "CapEff:").unwrap();
        let after = std::thread::spawn(|| {
            limit_thread(false).unwrap();
            set_thread_caps(0).unwrap();
            (
                status_field("/proc/thread-self/status", "CapEff:"),
                status_field("/proc/thread-self/status", "CapPrm:"),
                status_field("/proc/thread-self/status", "CapBnd:"),
                status_field("/proc/thread-self/status", "NoNewPrivs:"),
            )
        })
        .join()
        .unwrap();
        assert_eq!(after, (Some(0), Some(0), Some(0), Some(1)));
        assert_eq!(
            status_field("/proc/thread-self/status", "CapEff:"),
            Some(before)
        );
    }
}
