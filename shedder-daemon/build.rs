//! Compiles the eBPF crate for bpfel-unknown-none (nightly, build-std=core,
//! linked by bpf-linker) and leaves the object in OUT_DIR for `include_bytes!`.
fn main() -> anyhow::Result<()> {
    let ebpf = aya_build::Package {
        name: "shedder-ebpf",
        root_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../shedder-ebpf"),
        ..Default::default()
    };
    aya_build::build_ebpf([ebpf], aya_build::Toolchain::Nightly)
}
