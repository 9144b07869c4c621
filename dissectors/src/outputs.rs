//! The files a run writes are never the files it reads, nor each other.
//!
//! `analyze a.pcap --annotate a.pcap` would truncate the capture while it is read (the
//! annotator maps it: the process dies of SIGBUS and the capture is lost), `--json a.pcap`
//! would replace it with the report, `--json r.json --html r.json` would keep only one of
//! them. The same file by any name counts (a symbolic or hard link, `./a.pcap`): existing
//! files are compared by device and inode, new ones by their directory's canonical path and
//! their name. What is not a regular file (`-` for standard output, `/dev/null`, a named
//! pipe) is not compared: writing to it destroys nothing.
//!
//! One rule, used by the command line before a run starts (for every output it names,
//! through `smbwire._core.check_outputs`) and by the engine where it opens a file itself
//! (the evidence, the ledger, the annotated capture, a ledger part), so that a caller of the
//! library gets the same refusal.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(PartialEq, Eq)]
enum FileId {
    /// An existing regular file.
    Inode(u64, u64),
    /// A file to be created: its directory's canonical path joined with its name.
    New(PathBuf),
}

fn regular_inode(path: &str) -> Option<(u64, u64)> {
    let m = std::fs::metadata(path).ok()?;
    m.is_file().then(|| (m.dev(), m.ino()))
}

/// What `path` names as an output: `None` for standard output and for what exists and is not
/// a regular file (devices and pipes are written in place; directories are refused by the
/// writers themselves).
fn output_id(path: &str) -> Option<FileId> {
    if path.is_empty() || path == "-" {
        return None;
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Some(FileId::Inode(m.dev(), m.ino())),
        Ok(_) => None,
        Err(_) => {
            let p = Path::new(path);
            let name = p.file_name()?;
            let parent = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
            let dir = std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
            Some(FileId::New(dir.join(name)))
        }
    }
}

/// `Err` with one line when an output (`(option, path)`) is one of `inputs` or another
/// output. Inputs that do not exist or are not regular files are not compared.
pub fn check(outputs: &[(&str, &str)], inputs: &[&str]) -> Result<(), String> {
    let inputs: Vec<(&str, (u64, u64))> = inputs.iter().filter_map(|&p| Some((p, regular_inode(p)?))).collect();
    let mut seen: Vec<(&str, &str, FileId)> = Vec::new();
    for &(opt, path) in outputs {
        let Some(id) = output_id(path) else { continue };
        if let FileId::Inode(dev, ino) = id {
            if let Some((input, _)) = inputs.iter().find(|(_, i)| *i == (dev, ino)) {
                let same = if *input == path { String::new() } else { format!(" ({input})") };
                return Err(format!("{opt} {path}: is an input of this run{same}; smbwire never writes over what it reads"));
            }
        }
        if let Some((o, p, _)) = seen.iter().find(|(_, _, s)| *s == id) {
            return Err(format!("{o} {p} and {opt} {path}: the same file; give each output its own"));
        }
        seen.push((opt, path, id));
    }
    Ok(())
}

/// An output file that takes its final name once complete (`commit`), so an interrupted or
/// failed run leaves no half-written ledger, evidence or annotated capture, and a file of an
/// earlier run at that name stays whole until the new one replaces it (as the command line
/// writes `--json`, `--csv` and `--html`).
///
/// The file is created without a name (`O_TMPFILE`) in the target's directory, so a run that
/// is killed (SIGKILL, the OOM killer, a power cut) leaves nothing behind: the kernel frees
/// an unnamed file with its last descriptor. At `commit` it is linked under a temporary name
/// beside the target (through `/proc/self/fd`) and renamed over it, an instant's window. On a
/// filesystem without `O_TMPFILE` (NFS, some FUSE), or without `/proc`, it is written under a
/// temporary name from the start (`.smbwire-PID-...tmp`, removed if the run ends without
/// `commit`, left only by a killed process). A path naming something that exists and is not
/// a regular file (`/dev/null`, `/dev/stdout`, a named pipe) is written in place: a rename
/// would put a regular file where the device or pipe was. Through a symbolic link, its target
/// is replaced.
pub struct Staged {
    how: How,
}

enum How {
    /// A device, pipe or other non-regular file, written in place.
    InPlace,
    /// A file without a name in `dir` (kept open here, so it lives until `commit` even when
    /// the caller's handle is closed first), to be named `target`.
    Unnamed { file: File, dir: PathBuf, target: PathBuf },
    /// A temporary name beside `target`.
    Named { tmp: PathBuf, target: PathBuf },
    /// Committed or given up.
    Done,
}

/// A fresh temporary name in `dir` (the process, the time and a counter: unique enough that a
/// clash means another process's file, and the caller tries the next one).
fn temporary_name(dir: &Path) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    dir.join(format!(".smbwire-{:x}-{nanos:x}-{n}.tmp", std::process::id()))
}

/// `f(name)` with fresh temporary names in `dir` until it does not find the name taken.
fn with_free_name<T>(dir: &Path, mut f: impl FnMut(&Path) -> std::io::Result<T>) -> std::io::Result<(T, PathBuf)> {
    let mut last = None;
    for _ in 0..100 {
        let tmp = temporary_name(dir);
        match f(&tmp) {
            Ok(v) => return Ok((v, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
}

/// The path through which an open file can be linked into a directory: `/proc/self/fd/N`.
fn fd_path(file: &File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// linkat(2) following `/proc/self/fd/N` to the open file (no privilege needed, unlike
/// `AT_EMPTY_PATH`).
fn link_open_file(file: &File, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let from = std::ffi::CString::new(fd_path(file).as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    let to = std::ffi::CString::new(to.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: both are valid NUL-terminated paths for the duration of the call.
    let r = unsafe { libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::AT_SYMLINK_FOLLOW) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Staged {
    /// Opens the file to write to for `path`, with `mode` (before the umask) when created.
    pub fn create(path: &str, mode: u32) -> std::io::Result<(File, Staged)> {
        Staged::create_as(path, mode, true)
    }

    /// `create`, trying an unnamed file first or not (tests: the fallback).
    fn create_as(path: &str, mode: u32, unnamed: bool) -> std::io::Result<(File, Staged)> {
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            let f = OpenOptions::new().write(true).truncate(true).open(path)?;
            return Ok((f, Staged { how: How::InPlace }));
        }
        let target = std::fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path));
        let dir = target.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        let file = OpenOptions::new().write(true).mode(mode).custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC).open(&dir);
        if let (true, Ok(f)) = (unnamed, file) {
            if let Ok(keep) = f.try_clone() {
                if fd_path(&keep).exists() {
                    return Ok((f, Staged { how: How::Unnamed { file: keep, dir, target } }));
                }
            }
        }
        let (f, tmp) = with_free_name(&dir, |tmp| {
            OpenOptions::new().write(true).create_new(true).mode(mode).custom_flags(libc::O_CLOEXEC).open(tmp)
        })?;
        Ok((f, Staged { how: How::Named { tmp, target } }))
    }

    /// Puts the written file in place (its data written out first by the caller).
    pub fn commit(mut self) -> std::io::Result<()> {
        match std::mem::replace(&mut self.how, How::Done) {
            How::Unnamed { file, dir, target } => {
                let ((), tmp) = with_free_name(&dir, |tmp| link_open_file(&file, tmp))?;
                std::fs::rename(&tmp, &target).inspect_err(|_| {
                    let _ = std::fs::remove_file(&tmp);
                })
            }
            How::Named { tmp, target } => std::fs::rename(&tmp, &target).inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            }),
            How::InPlace | How::Done => Ok(()),
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // An unnamed file goes with its last descriptor; a named one is removed.
        if let How::Named { tmp, .. } = std::mem::replace(&mut self.how, How::Done) {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// A buffered `Staged` file whose `flush` commits it: everything written so far goes out and
/// the file takes its final name (writes after that go on into it). The evidence writer
/// flushes once, when the run is complete; a run that ends before that (Ctrl-C, an error)
/// leaves nothing at the path.
pub struct StagedWriter {
    w: BufWriter<File>,
    staged: Option<Staged>,
}

impl StagedWriter {
    pub fn create(path: &str, mode: u32) -> std::io::Result<StagedWriter> {
        let (f, staged) = Staged::create(path, mode)?;
        Ok(StagedWriter { w: BufWriter::new(f), staged: Some(staged) })
    }
}

impl Write for StagedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.w.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.w.write_all(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()?;
        match self.staged.take() {
            Some(s) => s.commit(),
            None => Ok(()),
        }
    }
}

/// `Err` with one line when `path` cannot be an output file: a directory, a directory that
/// does not exist, or one the run may not write in (or an existing file it may not write).
/// `-` (standard output) always can. Asked before a run, so that a long analysis does not end
/// in a refusal; the writers check again when they open.
pub fn check_writable(path: &str) -> Result<(), String> {
    if path == "-" {
        return Ok(());
    }
    let p = Path::new(path);
    if p.is_dir() {
        return Err(format!("{path}: is a directory"));
    }
    let parent = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        let shown = std::path::absolute(parent).unwrap_or_else(|_| parent.to_path_buf());
        return Err(format!("{path}: directory {} does not exist", shown.display()));
    }
    if !may_write(parent) || (p.exists() && !may_write(p)) {
        return Err(format!("{path}: permission denied"));
    }
    Ok(())
}

/// access(2) for writing, as the run's user (root passes, except on read-only mounts).
fn may_write(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else { return false };
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Writes `bytes` as the whole of the output file `path` (the command line's `--json`,
/// `--csv`, `--html`, `--topology-out`): `check_writable` first, then `Staged` (a reader never
/// sees half a file; a device or pipe is written in place; through a symbolic link its target
/// is replaced), created with `mode` before the umask. `Err` with one line
/// ("PATH: cannot write: ...").
pub fn write_whole(path: &str, bytes: &[u8], mode: u32) -> Result<(), String> {
    check_writable(path)?;
    let write = || -> std::io::Result<()> {
        let (mut f, staged) = Staged::create(path, mode)?;
        f.write_all(bytes)?;
        f.flush()?;
        drop(f);
        staged.commit()
    };
    write().map_err(|e| format!("{path}: cannot write: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own, removed when dropped.
    struct Dir(PathBuf);
    impl Dir {
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn dir() -> Dir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("smbwire-outputs-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn s(p: &Path) -> String {
        p.to_str().unwrap().to_string()
    }

    #[test]
    fn an_output_that_is_an_input_by_any_name_is_refused() {
        let d = dir();
        let cap = d.path().join("a.pcap");
        std::fs::write(&cap, b"capture").unwrap();
        let hard = d.path().join("hard.pcap");
        std::fs::hard_link(&cap, &hard).unwrap();
        let soft = d.path().join("soft.pcap");
        std::os::unix::fs::symlink(&cap, &soft).unwrap();
        let dotted = format!("{}/./a.pcap", d.path().display());
        let c = s(&cap);
        for out in [c.clone(), s(&hard), s(&soft), dotted] {
            let e = check(&[("--json", "r.json"), ("--annotate", &out)], &[&c]).unwrap_err();
            assert!(e.starts_with(&format!("--annotate {out}: is an input of this run")), "{e}");
        }
        // The input named differently is named in the message.
        let e = check(&[("--ledger", &s(&hard))], &[&c]).unwrap_err();
        assert!(e.contains(&format!("({c})")), "{e}");
        assert_eq!(std::fs::read(&cap).unwrap(), b"capture");
    }

    #[test]
    fn two_outputs_naming_one_file_are_refused_new_or_existing() {
        let d = dir();
        let new = s(&d.path().join("r.json"));
        let other = format!("{}/sub/../r.json", d.path().display());
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let e = check(&[("--json", &new), ("--html", &other)], &[]).unwrap_err();
        assert_eq!(e, format!("--json {new} and --html {other}: the same file; give each output its own"));
        std::fs::write(&new, b"{}").unwrap();
        assert!(check(&[("--csv", &new), ("--evidence", &other)], &[]).is_err());
        // A relative name and the absolute one.
        let cwd = std::env::current_dir().unwrap();
        let rel = s(&cwd.join("smbwire-outputs-test-none.json"));
        assert!(check(&[("--json", "smbwire-outputs-test-none.json"), ("--html", &rel)], &[]).is_err());
    }

    fn names_in(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_staged_file_appears_whole_at_commit_and_not_at_all_without() {
        // Unnamed until its commit (O_TMPFILE, on this test's filesystem), and with a temporary
        // name beside the target where the filesystem has no O_TMPFILE.
        for unnamed in [true, false] {
            let d = dir();
            let out = s(&d.path().join("ledger.parquet"));
            std::fs::write(&out, b"earlier run").unwrap();
            let (mut f, staged) = Staged::create_as(&out, 0o600, unnamed).unwrap();
            assert_eq!(matches!(staged.how, How::Unnamed { .. }), unnamed);
            f.write_all(b"new").unwrap();
            assert_eq!(std::fs::read(&out).unwrap(), b"earlier run", "the earlier file stays whole meanwhile");
            // While written, an unnamed file leaves nothing a kill could leave behind.
            assert_eq!(names_in(d.path()).len(), if unnamed { 1 } else { 2 });
            drop(staged); // interrupted
            assert_eq!(names_in(d.path()), ["ledger.parquet"]);
            assert_eq!(std::fs::read(&out).unwrap(), b"earlier run");
            let (mut f, staged) = Staged::create_as(&out, 0o600, unnamed).unwrap();
            f.write_all(b"new").unwrap();
            // The writer's handle closed before the commit (as the ledger's Parquet writer does):
            // the unnamed file lives on in the one `Staged` keeps.
            drop(f);
            staged.commit().unwrap();
            assert_eq!(std::fs::read(&out).unwrap(), b"new");
            assert_eq!(names_in(d.path()), ["ledger.parquet"]);
            assert_eq!(std::fs::metadata(&out).unwrap().mode() & 0o777, 0o600);
            // A new path, committed: the file and nothing else.
            let fresh = s(&d.path().join("fresh.json"));
            let (mut f, staged) = Staged::create_as(&fresh, 0o644, unnamed).unwrap();
            f.write_all(b"{}").unwrap();
            staged.commit().unwrap();
            assert_eq!(std::fs::read(&fresh).unwrap(), b"{}");
            assert_eq!(names_in(d.path()), ["fresh.json", "ledger.parquet"]);
        }
    }

    #[test]
    fn a_staged_writer_commits_at_its_flush_and_through_links_replaces_the_target() {
        let d = dir();
        let real = d.path().join("real.jsonl");
        std::fs::write(&real, b"old").unwrap();
        let link = d.path().join("link.jsonl");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut w = StagedWriter::create(&s(&link), 0o644).unwrap();
        w.write_all(b"line 1\n").unwrap();
        assert_eq!(std::fs::read(&real).unwrap(), b"old");
        w.flush().unwrap();
        w.write_all(b"line 2\n").unwrap();
        drop(w);
        assert_eq!(std::fs::read(&real).unwrap(), b"line 1\nline 2\n");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays a link");
        assert_eq!(names_in(d.path()), ["link.jsonl", "real.jsonl"]);
        // Dropped before its flush: nothing at a new path, nothing left beside it.
        let new = s(&d.path().join("new.jsonl"));
        let mut w = StagedWriter::create(&new, 0o644).unwrap();
        w.write_all(&[7u8; 100_000]).unwrap();
        drop(w);
        assert_eq!(names_in(d.path()), ["link.jsonl", "real.jsonl"]);
    }

    #[test]
    fn devices_are_written_in_place() {
        use std::os::unix::fs::FileTypeExt;
        let (mut f, staged) = Staged::create("/dev/null", 0o644).unwrap();
        f.write_all(b"x").unwrap();
        staged.commit().unwrap();
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    }

    #[test]
    fn distinct_files_streams_and_devices_pass() {
        let d = dir();
        let cap = s(&d.path().join("a.pcap"));
        std::fs::write(&cap, b"x").unwrap();
        let outs = [
            ("--json", "-".to_string()),
            ("--evidence", "-".to_string()),
            ("--csv", "/dev/null".to_string()),
            ("--html", "/dev/null".to_string()),
            ("--ledger", s(&d.path().join("l.parquet"))),
            ("--annotate", s(&d.path().join("a.pcapng"))),
        ];
        let outs: Vec<(&str, &str)> = outs.iter().map(|(o, p)| (*o, p.as_str())).collect();
        check(&outs, &[&cap, "-", "/nonexistent/input.pcap", "/dev/null"]).unwrap();
        check(&[], &[&cap]).unwrap();
    }

    #[test]
    fn what_cannot_be_an_output_is_one_line() {
        let d = dir();
        let dp = s(d.path());
        assert_eq!(check_writable(&dp).unwrap_err(), format!("{dp}: is a directory"));
        let missing = format!("{dp}/no/such/r.json");
        assert_eq!(check_writable(&missing).unwrap_err(), format!("{missing}: directory {dp}/no/such does not exist"));
        check_writable("-").unwrap();
        check_writable("/dev/null").unwrap();
        check_writable(&format!("{dp}/new.json")).unwrap();
        let e = write_whole(&missing, b"{}", 0o666).unwrap_err();
        assert!(e.ends_with("does not exist"), "{e}");
        assert!(write_whole("/dev/full", b"{}", 0o666).unwrap_err().starts_with("/dev/full: cannot write: No space left on device"));
    }

    #[test]
    fn a_whole_output_replaces_an_earlier_one_and_leaves_nothing_beside() {
        let d = dir();
        let out = s(&d.path().join("r.json"));
        std::fs::write(&out, b"earlier").unwrap();
        write_whole(&out, b"{\"new\": 1}\n", 0o666).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"{\"new\": 1}\n");
        assert_eq!(names_in(d.path()), ["r.json"]);
        write_whole("/dev/null", b"x", 0o666).unwrap();
    }
}
