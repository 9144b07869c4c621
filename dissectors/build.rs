//! Compiles the eBPF capture program (`bpf/smbwire.bpf.c`) into `OUT_DIR/smbwire.bpf.o`,
//! embedded by `live::ebpf` with `include_bytes!`.
//!
//! Needs clang (BPF target) and libbpf's headers (Debian: clang, libbpf-dev). Without them the
//! crate still builds: the `smbwire_bpf` cfg stays off and the live capture falls back to
//! AF_PACKET, saying why.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
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
