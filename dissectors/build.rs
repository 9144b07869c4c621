//! Compiles the eBPF capture program (`bpf/smbwire.bpf.c`) into `OUT_DIR/smbwire.bpf.o`,
//! embedded by `live::ebpf` with `include_bytes!`; and fingerprints the engine's sources
//! (`SMBWIRE_BUILD_ID`, `crate::BUILD_ID`).
//!
//! Needs clang (BPF target) and libbpf's headers (Debian: clang, libbpf-dev). Without them the
//! crate still builds: the `smbwire_bpf` cfg stays off and the live capture falls back to
//! AF_PACKET, saying why.

use std::env;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every file under `dir`, sorted by path.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// `SMBWIRE_BUILD_ID`: 16 hex digits over the crate version and the engine's sources (this
/// crate's `src/`, the eBPF program, the workspace's Cargo.lock). Two builds of the same
/// sources agree; `--dask` parts and workers of another build are refused with it, which the
/// package version (0.1.0 on every build) could not do.
fn build_id(manifest: &Path) {
    let mut paths = Vec::new();
    for dir in ["src", "../bpf"] {
        files(&manifest.join(dir), &mut paths);
        println!("cargo::rerun-if-changed={}", manifest.join(dir).display());
    }
    paths.push(manifest.join("../Cargo.lock"));
    println!("cargo::rerun-if-changed={}", manifest.join("../Cargo.lock").display());
    paths.sort();
    // SipHash with fixed zero keys: the same in every build by the same compiler.
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    h.write(env::var("CARGO_PKG_VERSION").unwrap_or_default().as_bytes());
    for p in &paths {
        h.write(p.strip_prefix(manifest).unwrap_or(p).to_string_lossy().as_bytes());
        h.write(&std::fs::read(p).unwrap_or_default());
    }
    println!("cargo::rustc-env=SMBWIRE_BUILD_ID={:016x}", h.finish());
}

fn main() {
    build_id(&PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()));
    println!("cargo::rustc-check-cfg=cfg(smbwire_bpf)");
    let bpf_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../bpf");
    let src = bpf_dir.join("smbwire.bpf.c");
    println!("cargo::rerun-if-changed={}", src.display());
    println!("cargo::rerun-if-env-changed=SMBWIRE_CLANG");
    println!(
        "cargo::rerun-if-changed={}",
        bpf_dir.join("smbwire.h").display()
    );
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("smbwire.bpf.o");
    let clang = env::var("SMBWIRE_CLANG").unwrap_or_else(|_| "clang".to_string());
    // linux/bpf.h includes asm/types.h, which Debian keeps under the multiarch directory.
    let multiarch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86_64-linux-gnu",
        Ok("aarch64") => "aarch64-linux-gnu",
        _ => "",
    };
    let mut cmd = Command::new(&clang);
    cmd.args(["-O2", "-g", "-target", "bpf", "-Wall"]);
    if !multiarch.is_empty() {
        cmd.arg(format!("-I/usr/include/{multiarch}"));
    }
    cmd.arg("-c").arg(&src).arg("-o").arg(&out);
    match cmd.output() {
        Ok(o) if o.status.success() => println!("cargo::rustc-cfg=smbwire_bpf"),
        Ok(o) => println!(
            "cargo::warning=eBPF program not built ({clang} failed): {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .unwrap_or("")
        ),
        Err(e) => println!("cargo::warning=eBPF program not built ({clang}: {e})"),
    }
}
