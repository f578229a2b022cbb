//! The systemd guest's root filesystem: Debian 12 built from packages by
//! mmdebstrap, written into an ext4 image, and cached under
//! `target/vm/rootfs/` by its recipe (suite, variant, packages, size), so a
//! rerun with the same recipe reuses it. The guest never writes to the image
//! (qemu gives it a temporary overlay).

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::Context as _;

use crate::cmd;

/// Debian 12, the release whose kernel (6.1) the guest boots.
const SUITE: &str = "bookworm";
/// Essential packages and apt only; the rest is named.
const VARIANT: &str = "minbase";
/// systemd as PID 1 (and systemd-analyze); iproute2 for the guest's network
/// namespace and veth pair; kmod's insmod for the kernel's modules.
const PACKAGES: [&str; 3] = ["systemd", "iproute2", "kmod"];
/// The image's size; the tree takes about 200 MiB, the package installs a few more.
const IMAGE_MIB: u32 = 1024;

/// The recipe, as text: what the cache is keyed by, and kept beside the image.
fn recipe() -> String {
    format!("suite {SUITE}\nvariant {VARIANT}\npackages {}\nimage ext4 {IMAGE_MIB} MiB\n", PACKAGES.join(","))
}

/// FNV-1a, 64 bits: a key that stays the same across Rust releases (std's
/// hasher makes no such promise).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3))
}

/// The image for the current recipe under `cache`, built first if missing.
pub fn ensure(cache: &Path) -> anyhow::Result<PathBuf> {
    let recipe = recipe();
    let dir = cache.join(format!("{SUITE}-{:016x}", fnv1a(&recipe)));
    let image = dir.join("rootfs.img");
    if image.is_file() {
        println!("vm: root filesystem: cached in {} ({})", image.display(), recipe.trim().replace('\n', "; "));
        return Ok(image);
    }
    let started = Instant::now();
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    let tree = partial.join("tree");
    std::fs::create_dir_all(&partial).with_context(|| format!("creating {}", partial.display()))?;
    cmd::run(
        Command::new("mmdebstrap")
            .arg(format!("--variant={VARIANT}"))
            .arg(format!("--include={}", PACKAGES.join(",")))
            .args([SUITE])
            .arg(&tree),
    )
    .context("building the root filesystem (mmdebstrap needs root and the Debian mirror)")?;
    let built = partial.join("rootfs.img");
    cmd::run(
        Command::new("mke2fs")
            .args(["-q", "-t", "ext4", "-L", "shedder-vm", "-d"])
            .arg(&tree)
            .arg(&built)
            .arg(format!("{IMAGE_MIB}M")),
    )?;
    std::fs::remove_dir_all(&tree).with_context(|| format!("removing {}", tree.display()))?;
    std::fs::write(partial.join("recipe.txt"), &recipe)?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&partial, &dir).with_context(|| format!("moving {} to {}", partial.display(), dir.display()))?;
    println!("vm: root filesystem: built in {} s, {}", started.elapsed().as_secs(), image.display());
    Ok(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_key_follows_the_recipe() {
        // The published FNV-1a test vectors.
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        assert!(recipe().contains("packages systemd,iproute2,kmod"));
        assert_ne!(fnv1a(&recipe()), fnv1a(&recipe().replace("kmod", "kmod,dbus")));
    }
}
