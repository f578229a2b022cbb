//! Code generation for the BPF programs happens in bpf-linker, so a target
//! feature goes to it as a link argument.
//!
//! `allows-misaligned-mem-access`: a header field read from the packet is
//! one load, not one load per byte and the shifts that join them. The
//! verifier accepts misaligned packet reads on every kernel with efficient
//! unaligned access (x86-64 and arm64 among them); stack accesses it still
//! wants aligned, which `lpm.rs` sees to.
fn main() {
    println!("cargo:rustc-link-arg=--cpu-features=+allows-misaligned-mem-access");
}
