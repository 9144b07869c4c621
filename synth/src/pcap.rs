//! Streaming pcap writer (nanosecond variant, magic 0xa1b23c4d, version 2.4; the libpcap
//! file format as documented at tcpdump.org and draft-ietf-opsawg-pcap), or pcapng (one
//! section, one interface with nanosecond timestamps, Enhanced Packet Blocks, written by the
//! engine's block encoders, `capture::writer`) for a `.pcapng` file, and the capture
//! point in front of it: a link clock that paces frames at line rate, and an optional
//! mirror port that records every frame twice.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use smbwire_dissectors::capture::{interrupt, writer};

const MAGIC_NS: u32 = 0xa1b2_3c4d;
const LINKTYPE_ETHERNET: u32 = 1;
/// Endace ERF records (the InfiniBand transport writes ERF InfiniBand records).
pub const LINKTYPE_ERF: u32 = 197;
pub const SNAPLEN: u32 = 65535;

/// Writes records to a buffered file; never holds more than the buffer in memory.
pub struct PcapWriter<W: Write> {
    out: W,
    /// Link type of the file header, written with the first record (or at `finish`), so a
    /// transport can choose it after the writer was made.
    pub linktype: u32,
    header_written: bool,
    /// Write pcapng instead of classic pcap (`create` chooses it for a `.pcapng` name).
    pub pcapng: bool,
    pub frames: u64,
    pub bytes: u64,
    pub last_ts_ns: u64,
    /// `bytes` at which to ask next whether the user interrupted (`INTERRUPT_EVERY`).
    next_check: u64,
}

/// Ctrl-C is honoured every this many bytes written (a 1 TiB capture took hours to notice).
const INTERRUPT_EVERY: u64 = 64 << 20;

impl PcapWriter<BufWriter<File>> {
    pub fn create(path: &Path) -> io::Result<Self> {
        Self::with_file(File::create(path)?, path)
    }

    /// Into `f`, pcapng when `path` ends in `.pcapng`.
    pub fn with_file(f: File, path: &Path) -> io::Result<Self> {
        let mut w = PcapWriter::new(BufWriter::with_capacity(1 << 20, f))?;
        w.pcapng = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("pcapng"));
        Ok(w)
    }
}

impl<W: Write> PcapWriter<W> {
    pub fn new(out: W) -> io::Result<Self> {
        Ok(PcapWriter {
            out,
            linktype: LINKTYPE_ETHERNET,
            header_written: false,
            pcapng: false,
            frames: 0,
            bytes: 0,
            last_ts_ns: 0,
            next_check: INTERRUPT_EVERY,
        })
    }

    /// Err (`interrupt::MARK`) when the user asked to stop, asked every `INTERRUPT_EVERY`.
    fn check_interrupt(&mut self) -> io::Result<()> {
        if self.bytes < self.next_check {
            return Ok(());
        }
        self.next_check = self.bytes + INTERRUPT_EVERY;
        if interrupt::requested() {
            return Err(io::Error::new(io::ErrorKind::Interrupted, interrupt::MARK));
        }
        Ok(())
    }

    fn header(&mut self) -> io::Result<()> {
        if self.header_written {
            return Ok(());
        }
        self.header_written = true;
        if self.pcapng {
            let mut h = writer::shb();
            h.extend_from_slice(&writer::idb(self.linktype, SNAPLEN));
            self.bytes += h.len() as u64;
            return self.out.write_all(&h);
        }
        self.bytes += 24;
        // Global header: magic, version 2.4, thiszone, sigfigs, snaplen, linktype.
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_NS.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&SNAPLEN.to_le_bytes());
        h.extend_from_slice(&self.linktype.to_le_bytes());
        self.out.write_all(&h)
    }

    pub fn write_frame(&mut self, ts_ns: u64, frame: &[u8]) -> io::Result<()> {
        self.check_interrupt()?;
        self.header()?;
        if self.pcapng {
            self.bytes += writer::write_epb(&mut self.out, 0, ts_ns, frame, frame.len() as u32, None)?;
            self.frames += 1;
            self.last_ts_ns = ts_ns;
            return Ok(());
        }
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
        rec[8..12].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        rec[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.write_all(&rec)?;
        self.out.write_all(frame)?;
        self.frames += 1;
        self.bytes += 16 + frame.len() as u64;
        self.last_ts_ns = ts_ns;
        Ok(())
    }

    pub fn finish(mut self) -> io::Result<W> {
        self.header()?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Preamble + SFD (8) + FCS (4) + inter-frame gap (12): bytes a frame costs on the wire
/// beyond what a capture records (IEEE 802.3 clause 4).
const WIRE_OVERHEAD: u64 = 24;
/// A mirror port's copy arrives this long after the original (the model).
pub const MIRROR_DELAY_NS: u64 = 1_000;

/// The capture point: paces frames on one link clock and optionally records each twice.
pub struct Tap<W: Write> {
    pub pcap: PcapWriter<W>,
    start_ns: u64,
    /// Link clock in picoseconds since `start_ns` (ps so 10 Gb/s bit times stay exact;
    /// u64 ps lasts 213 days).
    clock_ps: u64,
    ps_per_byte: u64,
    mirror_dup: bool,
    /// Frames written a second time by the mirror port.
    pub mirror_duplicates: u64,
    /// A remote mirror session's tunnel around every frame recorded (`Spec::encap`).
    pub tunnel: Option<crate::frames::Tunnel>,
    /// The tags every frame is recorded with (`Spec::vlan`; inside the tunnel, if any).
    pub vlan: crate::frames::Vlan,
    tagged: Vec<u8>,
}

impl<W: Write> Tap<W> {
    pub fn new(pcap: PcapWriter<W>, start_ns: u64, link_gbps: u64, mirror_dup: bool) -> Self {
        Tap {
            pcap,
            start_ns,
            clock_ps: 0,
            ps_per_byte: 8000 / link_gbps.max(1),
            mirror_dup,
            mirror_duplicates: 0,
            tunnel: None,
            vlan: crate::frames::Vlan::None,
            tagged: Vec::new(),
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.start_ns + self.clock_ps / 1000
    }

    /// Let time pass with nothing on the wire (server latency, think time).
    pub fn idle(&mut self, ns: u64) {
        self.clock_ps += ns * 1000;
    }

    /// Write `frame` as the capture point receives it (tagged and inside the tunnel, if any).
    fn record(&mut self, ts: u64, frame: &[u8]) -> io::Result<()> {
        let frame = if self.vlan == crate::frames::Vlan::None {
            frame
        } else {
            crate::frames::tag_frame(&mut self.tagged, frame, self.vlan.tags());
            &self.tagged[..]
        };
        match self.tunnel.as_mut() {
            Some(t) => self.pcap.write_frame(ts, t.wrap(frame, ts)),
            None => self.pcap.write_frame(ts, frame),
        }
    }

    /// Record one frame at the current time and advance the clock by its serialization time.
    pub fn emit(&mut self, frame: &[u8]) -> io::Result<()> {
        let ts = self.now_ns();
        self.record(ts, frame)?;
        // The link clock paces the mirrored link's frames (with their tags), not the tunnel's.
        let tags = self.vlan.tags().iter().flatten().count() as u64 * 4;
        self.clock_ps += (frame.len() as u64 + tags + WIRE_OVERHEAD) * self.ps_per_byte;
        if self.mirror_dup {
            // The SPAN session copies the same bytes once on ingress and once on egress (a
            // remote session sends each copy in a tunnel packet of its own).
            self.record(ts + MIRROR_DELAY_NS, frame)?;
            self.mirror_duplicates += 1;
            // Keep the file in time order: the next frame comes after the copy.
            self.clock_ps = self
                .clock_ps
                .max((ts - self.start_ns + MIRROR_DELAY_NS + 1) * 1000);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_records() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(1_500_000_000_123, &[1, 2, 3]).unwrap();
        let b = w.finish().unwrap();
        assert_eq!(b.len(), 24 + 16 + 3);
        assert_eq!(u32::from_le_bytes(b[0..4].try_into().unwrap()), MAGIC_NS);
        assert_eq!(
            u32::from_le_bytes(b[20..24].try_into().unwrap()),
            LINKTYPE_ETHERNET
        );
        assert_eq!(u32::from_le_bytes(b[24..28].try_into().unwrap()), 1500);
        assert_eq!(u32::from_le_bytes(b[28..32].try_into().unwrap()), 123);
        assert_eq!(u32::from_le_bytes(b[32..36].try_into().unwrap()), 3);
        assert_eq!(&b[40..], &[1, 2, 3]);
    }

    #[test]
    fn pcapng_holds_the_same_frames() {
        let frames: [(u64, &[u8]); 2] = [(1_500_000_000_123, &[1, 2, 3]), (1_500_000_001_000, &[9; 61])];
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.pcapng = true;
        for (ts, f) in frames {
            w.write_frame(ts, f).unwrap();
        }
        let bytes = w.bytes;
        let b = w.finish().unwrap();
        assert_eq!(b.len() as u64, bytes);
        let pass = smbwire_dissectors::capture::testutil::read_all(smbwire_dissectors::capture::testutil::open_bytes(b).unwrap());
        let got: Vec<(u64, u32, Vec<u8>)> = pass.frames.iter().map(|(i, d)| (i.ts_ns, i.linktype, d.clone())).collect();
        let want: Vec<(u64, u32, Vec<u8>)> = frames.iter().map(|(ts, f)| (*ts, LINKTYPE_ETHERNET, f.to_vec())).collect();
        assert_eq!(got, want);
        assert_eq!(pass.an.iter().count(), 0);
    }

    #[test]
    fn create_chooses_the_format_by_name() {
        let dir = std::env::temp_dir().join(format!("smbwire-synth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, magic) in [("a.pcap", MAGIC_NS.to_le_bytes()), ("b.pcapng", 0x0A0D_0D0Au32.to_le_bytes()), ("c.PCAPNG", 0x0A0D_0D0Au32.to_le_bytes())] {
            let p = dir.join(name);
            let mut w = PcapWriter::create(&p).unwrap();
            w.write_frame(1, &[0; 60]).unwrap();
            w.finish().unwrap();
            assert_eq!(std::fs::read(&p).unwrap()[..4], magic, "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tap_paces_and_mirrors() {
        let mut t = Tap::new(PcapWriter::new(Vec::new()).unwrap(), 1_000, 10, true);
        t.emit(&[0u8; 1226]).unwrap(); // (1226 + 24) B * 0.8 ns = 1000 ns
        t.emit(&[0u8; 60]).unwrap();
        assert_eq!(t.mirror_duplicates, 2);
        let b = t.pcap.finish().unwrap();
        let ts = |off: usize| u32::from_le_bytes(b[off + 4..off + 8].try_into().unwrap());
        let r1 = 24;
        let r2 = r1 + 16 + 1226;
        let r3 = r2 + 16 + 1226;
        assert_eq!((ts(r1), ts(r2), ts(r3)), (1_000, 2_000, 2_001));
    }
}
