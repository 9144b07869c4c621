//! Benchmark traffic generator for the live capture sources: sends storage frames out of an
//! interface through an AF_PACKET socket with `sendmmsg` batches, paced to a packet rate or
//! as fast as the kernel takes them, and prints one JSON object with what it really sent.
//!
//! blast IFACE --dst-mac M [--src-mac M] [--size N] [--pps R] [--seconds S] [--batch N]
//!             [--flows N]
//! blast IFACE --pcap FILE [--mbps R] [--batch N]
//! Frames alternate over `--flows` flows from 198.18.0.1 to 198.18.0.2 (RFC 2544 benchmark
//! range): even flows are RoCEv2 (UDP to 4791, BTH RDMA WRITE Only), odd flows SMB over TCP
//! (to port 445, ACK|PSH). Every frame is `--size` bytes without FCS (60..=9014; above 1514
//! the interface's MTU must carry it).
//! `--pps 0` sends at top speed. Payloads are zero bytes; nothing is read or written to disk.
//! Addresses are fixed inside 198.18.0.0/15; run it only on a link inside namespaces the
//! caller made.
//!
//! With `--pcap FILE` (pcap or pcapng, Ethernet link type, read with the engine's capture
//! reader) it replays a capture instead, like `tcpreplay`: every frame is loaded into memory
//! first, then each is sent exactly once, in file order, as recorded (addresses and MACs
//! unchanged), paced to `--mbps R` megabits of frame bytes per second (without FCS; 0 = top
//! speed, the default). Record timestamps are ignored. The JSON then counts the frames and bytes
//! really sent (`sent`, `bytes`), the frames in the file (`frames`), the seconds from the first
//! send to the last (`seconds`), the load time (`load_seconds`) and the CPU seconds of the
//! sending alone (`cpu_seconds`, user + system). A frame the interface
//! refuses (larger than its MTU) stops the replay with an error: the capture on the other side
//! would be incomplete. Frames are sent from memory only; nothing is written to disk.

use std::io;
use std::mem;
use std::time::{Duration, Instant};

const ETH_P_ALL: u16 = 0x0003;
/// `PACKET_QDISC_BYPASS` (linux/if_packet.h): hand frames straight to the driver.
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const SRC_IP: [u8; 4] = [198, 18, 0, 1];
const DST_IP: [u8; 4] = [198, 18, 0, 2];
const ROCEV2_UDP_PORT: u16 = 4791;
const SMB_TCP_PORT: u16 = 445;
/// IBTA vol.1 9.2 Table 38: RC RDMA WRITE Only.
const BTH_OPCODE_RC_RDMA_WRITE_ONLY: u8 = 0x0a;

/// One sendmmsg of `msgs[..want]`: the frames sent, `None` to try again (the interface's
/// queue is full, counted in `enobufs`, or a signal came), or the error.
///
/// # Safety
/// `msgs[..want]` must point at valid iovecs over memory alive for the call.
unsafe fn send_batch(fd: libc::c_int, msgs: &mut [libc::mmsghdr], want: usize, enobufs: &mut u64) -> io::Result<Option<usize>> {
    let n = libc::sendmmsg(fd, msgs.as_mut_ptr(), want as u32, 0);
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOBUFS) | Some(libc::EAGAIN) => {
            *enobufs += 1;
            std::thread::yield_now();
            Ok(None)
        }
        Some(libc::EINTR) => Ok(None),
        _ => Err(e),
    }
}

fn usage() -> ! {
    eprintln!("usage: blast IFACE --dst-mac M [--src-mac M] [--size N] [--pps R] [--seconds S] [--batch N] [--flows N]");
    eprintln!("       blast IFACE --pcap FILE [--mbps R] [--batch N]");
    std::process::exit(2);
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in m.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

/// RFC 1071 Internet checksum over `data`, seeded with `sum`.
fn checksum(data: &[u8], mut sum: u32) -> u16 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// One frame of flow `flow`: Ethernet, IPv4, then UDP+BTH (RoCEv2) or TCP (SMB), zero
/// payload up to `size`.
fn frame(dst: [u8; 6], src: [u8; 6], size: usize, flow: u16) -> Vec<u8> {
    let rocev2 = flow.is_multiple_of(2);
    let mut f = vec![0u8; size];
    f[0..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (size - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[4..6].copy_from_slice(&flow.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = if rocev2 { 17 } else { 6 };
    ip[12..16].copy_from_slice(&SRC_IP);
    ip[16..20].copy_from_slice(&DST_IP);
    let c = checksum(ip, 0);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let l4 = &mut f[34..];
    if rocev2 {
        // RoCEv2: the UDP source port carries flow entropy; checksum 0 (RFC 768, IPv4).
        l4[0..2].copy_from_slice(&(49152 + flow).to_be_bytes());
        l4[2..4].copy_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
        l4[4..6].copy_from_slice(&(ip_len - 20).to_be_bytes());
        let bth = &mut l4[8..20];
        bth[0] = BTH_OPCODE_RC_RDMA_WRITE_ONLY;
        bth[2..4].copy_from_slice(&0xffffu16.to_be_bytes()); // P_Key default
        bth[5..8].copy_from_slice(&[0, 0, 0x11 + flow as u8]); // DestQP
    } else {
        l4[0..2].copy_from_slice(&(50000 + flow).to_be_bytes());
        l4[2..4].copy_from_slice(&SMB_TCP_PORT.to_be_bytes());
        l4[4..8].copy_from_slice(&1u32.to_be_bytes()); // sequence number
        l4[12] = 5 << 4;
        l4[13] = 0x18; // ACK|PSH
        l4[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
        let mut pseudo = 0u32;
        for w in [&SRC_IP[0..2], &SRC_IP[2..4], &DST_IP[0..2], &DST_IP[2..4]] {
            pseudo += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        pseudo += 6 + u32::from(ip_len - 20);
        let c = checksum(l4, pseudo);
        l4[16..18].copy_from_slice(&c.to_be_bytes());
    }
    f
}

fn open(iface: &str) -> io::Result<libc::c_int> {
    let name = std::ffi::CString::new(iface).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: plain syscalls on a fresh descriptor; pointers are to live locals.
    unsafe {
        let ifindex = libc::if_nametoindex(name.as_ptr());
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        // Protocol 0: a send-only socket, so it never receives (and never costs) a copy.
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            PACKET_QDISC_BYPASS,
            &one as *const _ as *const libc::c_void,
            mem::size_of::<libc::c_int>() as u32,
        );
        let sndbuf: libc::c_int = 16 << 20;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            &sndbuf as *const _ as *const libc::c_void,
            mem::size_of::<libc::c_int>() as u32,
        );
        let mut sll: libc::sockaddr_ll = mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = ifindex as i32;
        if libc::bind(
            fd,
            &sll as *const _ as *const libc::sockaddr,
            mem::size_of::<libc::sockaddr_ll>() as u32,
        ) < 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(fd)
    }
}

/// Every frame of an Ethernet capture, back to back in one buffer.
struct Loaded {
    data: Vec<u8>,
    /// (offset in `data`, length) per frame, in file order.
    frames: Vec<(usize, usize)>,
    /// Frames whose captured length is shorter than on the wire (snaplen): sent as captured.
    cut: u64,
}

fn load(path: &str) -> Result<Loaded, String> {
    use smbwire_dissectors::{accounting::Accounting, anomaly::Anomalies, capture};
    let mut r = capture::open(path, 0).map_err(|e| e.to_string())?;
    let mut acct = Accounting::default();
    let mut an = Anomalies::default();
    let mut out = Loaded {
        data: Vec::with_capacity(r.file_size() as usize),
        frames: Vec::new(),
        cut: 0,
    };
    while r.advance(&mut acct, &mut an) {
        let Some(f) = r.current() else { continue };
        if f.info.linktype != capture::linktype::ETHERNET {
            return Err(format!(
                "{path}: frame {}: link type {}, not Ethernet",
                out.frames.len() + 1,
                f.info.linktype
            ));
        }
        if (f.info.orig_len as usize) > f.data.len() {
            out.cut += 1;
        }
        out.frames.push((out.data.len(), f.data.len()));
        out.data.extend_from_slice(f.data);
    }
    // The file's own damage (cut record, bad block) would make the replay differ from it.
    let damage: Vec<String> = an.iter().map(|(n, c)| format!("{n}={c}")).collect();
    if !damage.is_empty() {
        return Err(format!("{path}: damaged capture ({})", damage.join(", ")));
    }
    Ok(out)
}

/// User + system CPU seconds of this process so far (the kernel's work inside `sendmmsg`,
/// softirq included when it runs there, is system time).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// `--pcap`: send every frame of the file once, in order, paced to `mbps` (0: top speed).
fn replay(iface: &str, path: &str, mbps: f64, batch: usize) {
    let t0 = Instant::now();
    let cap = load(path).unwrap_or_else(|e| {
        eprintln!("blast: {e}");
        std::process::exit(1);
    });
    let load_seconds = t0.elapsed().as_secs_f64();
    let fd = open(iface).unwrap_or_else(|e| {
        eprintln!("blast: {iface}: {e}");
        std::process::exit(1);
    });
    let mut iov: Vec<libc::iovec> = (0..batch)
        .map(|_| libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        })
        .collect();
    // SAFETY: mmsghdr is plain data; zero is a valid empty header.
    let mut msgs: Vec<libc::mmsghdr> = (0..batch).map(|_| unsafe { mem::zeroed() }).collect();
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    let bytes_per_s = mbps * 1e6 / 8.0;
    let n_frames = cap.frames.len();
    let mut next = 0usize; // index of the next frame to send
    let mut sent_bytes = 0u64;
    let mut enobufs = 0u64;
    let mut sleeps = 0u64;
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    while next < n_frames {
        let mut want = batch.min(n_frames - next);
        if bytes_per_s > 0.0 {
            // Pace against the ideal schedule: the frames due by now, at least one, never
            // more than one batch.
            let due = ((start.elapsed().as_secs_f64()) * bytes_per_s) as u64;
            if due <= sent_bytes {
                let ahead = (sent_bytes + 1 - due) as f64 / bytes_per_s;
                sleeps += 1;
                std::thread::sleep(Duration::from_secs_f64(ahead.min(0.001)));
                continue;
            }
            let mut budget = due - sent_bytes;
            let mut k = 0;
            while k < want {
                let len = cap.frames[next + k].1 as u64;
                if k > 0 && len > budget {
                    break;
                }
                budget = budget.saturating_sub(len);
                k += 1;
            }
            want = k;
        }
        for (j, v) in iov.iter_mut().enumerate().take(want) {
            let (off, len) = cap.frames[next + j];
            v.iov_base = cap.data[off..].as_ptr() as *mut libc::c_void;
            v.iov_len = len;
        }
        // SAFETY: msgs[..want] point at iovecs over `cap.data`, alive for the whole loop.
        let n = match unsafe { send_batch(fd, &mut msgs, want, &mut enobufs) } {
            Ok(Some(n)) => n,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("blast: sendmmsg: frame {} of {path} ({} bytes): {e}", next + 1, cap.frames[next].1);
                std::process::exit(1);
            }
        };
        for j in 0..n {
            sent_bytes += cap.frames[next + j].1 as u64;
        }
        next += n;
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let out = serde_json::json!({
        "pcap": path,
        "frames": n_frames,
        "sent": next,
        "bytes": sent_bytes,
        "seconds": secs,
        "load_seconds": load_seconds,
        "cpu_seconds": cpu,
        "pps": next as f64 / secs,
        "gbit_s": sent_bytes as f64 * 8.0 / secs / 1e9,
        "target_mbps": mbps,
        "batch": batch,
        "enobufs": enobufs,
        "sleeps": sleeps,
        "cut_frames": cap.cut,
    });
    println!("{out}");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let iface = args.next().unwrap_or_else(|| usage());
    let mut dst = None;
    let mut src = [0x02, 0, 0, 0, 0, 0x01];
    let mut size = 128usize;
    let mut pps = 0f64;
    let mut seconds = 3f64;
    let mut batch = 64usize;
    let mut flows = 4u16;
    let mut pcap = None;
    let mut mbps = 0f64;
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--dst-mac" => dst = Some(parse_mac(&val()).unwrap_or_else(|| usage())),
            "--src-mac" => src = parse_mac(&val()).unwrap_or_else(|| usage()),
            "--size" => size = val().parse().unwrap_or_else(|_| usage()),
            "--pps" => pps = val().parse().unwrap_or_else(|_| usage()),
            "--seconds" => seconds = val().parse().unwrap_or_else(|_| usage()),
            "--batch" => batch = val().parse().unwrap_or_else(|_| usage()),
            "--flows" => flows = val().parse().unwrap_or_else(|_| usage()),
            "--pcap" => pcap = Some(val()),
            "--mbps" => mbps = val().parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    if let Some(path) = pcap {
        if !((1..=1024).contains(&batch) && mbps >= 0.0 && mbps.is_finite()) {
            usage();
        }
        return replay(&iface, &path, mbps, batch);
    }
    let dst = dst.unwrap_or_else(|| usage());
    if !(60..=9014).contains(&size) || !(1..=1024).contains(&batch) || !(1..=256).contains(&flows) {
        usage();
    }
    let fd = open(&iface).unwrap_or_else(|e| {
        eprintln!("blast: {iface}: {e}");
        std::process::exit(1);
    });
    let frames: Vec<Vec<u8>> = (0..flows).map(|i| frame(dst, src, size, i)).collect();
    let mut iov: Vec<libc::iovec> = (0..batch)
        .map(|j| libc::iovec {
            iov_base: frames[j % flows as usize].as_ptr() as *mut libc::c_void,
            iov_len: size,
        })
        .collect();
    // SAFETY: mmsghdr is plain data; zero is a valid empty header.
    let mut msgs: Vec<libc::mmsghdr> = (0..batch).map(|_| unsafe { mem::zeroed() }).collect();
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }

    let mut per_flow = vec![0u64; flows as usize];
    let mut sent = 0u64;
    let mut enobufs = 0u64;
    let mut next_flow = 0usize; // flow of msgs[0] in the current rotation
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let mut want = batch as u64;
        if pps > 0.0 {
            // Pace against the ideal schedule: never more than one batch ahead.
            let due = ((now - start).as_secs_f64() * pps) as u64;
            if due <= sent {
                let ahead = (sent + 1 - due) as f64 / pps;
                std::thread::sleep(Duration::from_secs_f64(ahead.min(0.001)));
                continue;
            }
            want = want.min(due - sent);
        }
        // Rotate so the flow sequence continues across partial batches.
        let off = next_flow;
        for (j, v) in iov.iter_mut().enumerate().take(want as usize) {
            v.iov_base = frames[(off + j) % flows as usize].as_ptr() as *mut libc::c_void;
        }
        // SAFETY: msgs[..want] point at iovecs and frames that live for the whole loop.
        let n = match unsafe { send_batch(fd, &mut msgs, want as usize, &mut enobufs) } {
            Ok(Some(n)) => n,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("blast: sendmmsg: {e}");
                std::process::exit(1);
            }
        };
        for j in 0..n {
            per_flow[(off + j) % flows as usize] += 1;
        }
        next_flow = (off + n) % flows as usize;
        sent += n as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    let flows_out: Vec<_> = (0..flows)
        .map(|i| {
            let rocev2 = i % 2 == 0;
            serde_json::json!({
                "proto": if rocev2 { "rocev2" } else { "tcp" },
                "sport": if rocev2 { 49152 + i } else { 50000 + i },
                "dport": if rocev2 { ROCEV2_UDP_PORT } else { SMB_TCP_PORT },
                "packets": per_flow[i as usize],
            })
        })
        .collect();
    let out = serde_json::json!({
        "sent": sent,
        "bytes": sent * size as u64,
        "seconds": secs,
        "pps": sent as f64 / secs,
        "gbit_s": (sent * size as u64) as f64 * 8.0 / secs / 1e9,
        "target_pps": pps,
        "size": size,
        "enobufs": enobufs,
        "flows": flows_out,
    });
    println!("{out}");
}
