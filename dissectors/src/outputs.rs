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

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

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
}
