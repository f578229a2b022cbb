//! Which kernel to boot: Debian's packaged kernels (downloaded with apt and
//! cached under `target/vm/kernels/`), the host's own, or an image by path;
//! and the kernel modules the tests need from it, dependencies first.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::cmd::{self, find_on_path, is_root};

/// Modules the in-guest tests need when the kernel builds them as modules:
/// veth pairs, the clsact qdisc (`sch_ingress`) and the TC BPF classifier.
pub const WANTED_MODULES: [&str; 3] = ["veth", "sch_ingress", "cls_bpf"];

/// A Debian kernel series: `linux-image-<prefix><N><suffix>`, the newest N wins.
struct DebianSeries {
    spec: &'static str,
    prefix: &'static str,
    suffix: &'static str,
}

/// Debian 12's kernel (6.1), and the 6.12 kernel Debian 12 also ships. The
/// cloud flavour: small, boots under TCG in seconds, has BTF.
const DEBIAN: [DebianSeries; 2] = [
    DebianSeries { spec: "debian-6.1", prefix: "linux-image-6.1.0-", suffix: "-cloud-amd64" },
    DebianSeries { spec: "debian-6.12", prefix: "linux-image-6.12.", suffix: "+deb12-cloud-amd64" },
];

/// The spellings `--kernel` accepts besides a path.
pub fn named_specs() -> Vec<&'static str> {
    DEBIAN.iter().map(|d| d.spec).chain(["host"]).collect()
}

/// A kernel ready to boot.
#[derive(Debug)]
pub struct Kernel {
    /// What it is, e.g. the Debian package name.
    pub detail: String,
    pub image: PathBuf,
    /// `lib/modules/<release>`, where it has one.
    pub modules: Option<PathBuf>,
}

/// Either a kernel, or why this one is skipped (not an error: it is not there).
pub enum Resolved {
    Ready(Kernel),
    Unavailable(String),
}

pub fn resolve(spec: &str, cache: &Path) -> anyhow::Result<Resolved> {
    if let Some(series) = DEBIAN.iter().find(|d| d.spec == spec) {
        return debian(series, cache).map(Resolved::Ready);
    }
    if spec == "host" {
        return Ok(host());
    }
    let image = PathBuf::from(spec);
    if !image.is_file() {
        bail!("--kernel {spec}: no such kernel image; give {} or the path of a bzImage", named_specs().join(", "));
    }
    let modules = modules_beside(&image);
    let detail = match &modules {
        Some(dir) => format!("modules from {}", dir.display()),
        None => "no modules directory found; veth, sch_ingress and cls_bpf must be built in".into(),
    };
    Ok(Resolved::Ready(Kernel { detail, image, modules }))
}

/// `/boot/vmlinuz-$(uname -r)` and `/lib/modules/$(uname -r)`.
fn host() -> Resolved {
    let release = match std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        Ok(release) => release.trim().to_string(),
        Err(e) => return Resolved::Unavailable(format!("cannot tell the host kernel's release: {e}")),
    };
    let image = PathBuf::from(format!("/boot/vmlinuz-{release}"));
    if !image.exists() {
        return Resolved::Unavailable(format!(
            "the host kernel's image is not on this machine ({} does not exist: the kernel was booted from \
             outside, as in a microVM or container). `cargo xtask test` runs everything on the host kernel \
             ({release}) directly",
            image.display()
        ));
    }
    if let Err(e) = std::fs::File::open(&image) {
        return Resolved::Unavailable(format!("{} is not readable ({e}); run as root", image.display()));
    }
    let modules = PathBuf::from(format!("/lib/modules/{release}"));
    let modules = modules.is_dir().then_some(modules);
    Resolved::Ready(Kernel { detail: format!("{release}, {}", image.display()), image, modules })
}

/// For `…/boot/vmlinuz-<release>`: `…/lib/modules/<release>`, else `/lib/modules/<release>`.
fn modules_beside(image: &Path) -> Option<PathBuf> {
    let name = image.file_name()?.to_str()?;
    let release = name.strip_prefix("vmlinuz-").or_else(|| name.strip_prefix("bzImage-"))?;
    let root = image.parent()?.parent()?;
    [root.join("lib/modules").join(release), PathBuf::from("/lib/modules").join(release)]
        .into_iter()
        .find(|dir| dir.is_dir())
}

/// The newest package of `series`, downloaded and unpacked under `cache`
/// once; later runs use the unpacked copy.
fn debian(series: &DebianSeries, cache: &Path) -> anyhow::Result<Kernel> {
    let package = match newest_package(series)? {
        Some(package) => package,
        None => match newest_cached(series, cache) {
            Some(package) => {
                println!("vm: apt knows no {}N{} package; using the cached {package}", series.prefix, series.suffix);
                package
            }
            None => bail!(
                "apt knows no {}N{} package (run `apt-get update`; this needs Debian 12's package lists)",
                series.prefix,
                series.suffix
            ),
        },
    };
    let release = package.strip_prefix("linux-image-").expect("package names start with linux-image-").to_string();
    let dir = cache.join(&package);
    let complete = dir.join(".unpacked");
    if !complete.exists() {
        unpack(&package, cache, &dir)?;
        std::fs::write(&complete, b"").with_context(|| format!("writing {}", complete.display()))?;
    } else {
        println!("vm: {package}: cached in {}", dir.display());
    }
    let image = dir.join("boot").join(format!("vmlinuz-{release}"));
    if !image.is_file() {
        bail!("{package} unpacked, but it has no {}", image.display());
    }
    let modules = dir.join("lib/modules").join(&release);
    let version = std::fs::read_to_string(dir.join(".version")).unwrap_or_default();
    let detail = format!("{package} {}", version.trim()).trim_end().to_string();
    Ok(Kernel { detail, image, modules: modules.is_dir().then_some(modules) })
}

/// The N of `linux-image-<prefix>N<suffix>`, if `name` is one.
fn series_number(series: &DebianSeries, name: &str) -> Option<u64> {
    name.strip_prefix(series.prefix)?.strip_suffix(series.suffix)?.parse().ok()
}

/// The newest `series` package that apt knows; refreshes the package lists
/// once (as root) when it knows none.
fn newest_package(series: &DebianSeries) -> anyhow::Result<Option<String>> {
    if find_on_path("apt-cache").is_none() {
        return Ok(None);
    }
    let search = || -> anyhow::Result<Option<String>> {
        let pattern = format!("^{}[0-9]+{}$", regex_escape(series.prefix), regex_escape(series.suffix));
        let out = cmd::output(Command::new("apt-cache").args(["search", "--names-only", &pattern]))?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter_map(|name| Some((series_number(series, name)?, name.to_string())))
            .max()
            .map(|(_, name)| name))
    };
    if let Some(found) = search()? {
        return Ok(Some(found));
    }
    if is_root() {
        println!("vm: apt knows no {}N{} package; refreshing the package lists", series.prefix, series.suffix);
        cmd::run(Command::new("apt-get").arg("update"))?;
        return search();
    }
    Ok(None)
}

fn regex_escape(s: &str) -> String {
    s.chars().flat_map(|c| if "+.".contains(c) { vec!['\\', c] } else { vec![c] }).collect()
}

/// The newest already-unpacked package of `series` in `cache`.
fn newest_cached(series: &DebianSeries, cache: &Path) -> Option<String> {
    std::fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| cache.join(name).join(".unpacked").exists())
        .filter_map(|name| Some((series_number(series, &name)?, name)))
        .max()
        .map(|(_, name)| name)
}

/// `apt-get download` and `dpkg-deb -x` into `dir`.
fn unpack(package: &str, cache: &Path, dir: &Path) -> anyhow::Result<()> {
    let downloads = cache.join("downloads");
    std::fs::create_dir_all(&downloads).with_context(|| format!("creating {}", downloads.display()))?;
    let download = || {
        // As root, apt would drop to its _apt user, who cannot write here.
        cmd::run(
            Command::new("apt-get")
                .args(["-o", "APT::Sandbox::User=root", "download", package])
                .current_dir(&downloads),
        )
    };
    if let Err(e) = download() {
        if !is_root() {
            return Err(e).context(format!("downloading {package} (refreshing the package lists may need root)"));
        }
        println!("vm: download failed ({e:#}); refreshing the package lists and retrying");
        cmd::run(Command::new("apt-get").arg("update"))?;
        download()?;
    }
    let deb = std::fs::read_dir(&downloads)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(".deb"))
        })
        .with_context(|| format!("apt-get download left no {package}_*.deb in {}", downloads.display()))?;
    let partial = cache.join(format!("{package}.partial"));
    let _ = std::fs::remove_dir_all(&partial);
    cmd::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial))?;
    let version = cmd::output(Command::new("dpkg-deb").arg("-f").arg(&deb).arg("Version"))?;
    std::fs::write(partial.join(".version"), version.trim())?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&partial, dir).with_context(|| format!("moving {} to {}", partial.display(), dir.display()))?;
    std::fs::remove_file(&deb).with_context(|| format!("removing {}", deb.display()))?;
    Ok(())
}

/// Modules to load, in order, and what was noticed on the way.
#[derive(Debug, Default)]
pub struct ModulePlan {
    /// (name, host path of the `.ko`, possibly compressed).
    pub load: Vec<(String, PathBuf)>,
    pub notes: Vec<String>,
}

/// `veth` and `veth.ko.xz` both name `veth`; `sch-ingress` is `sch_ingress`.
fn module_name(file_name: &str) -> Option<String> {
    let stem = file_name.split_once(".ko").filter(|(_, rest)| matches!(*rest, "" | ".xz" | ".zst" | ".gz"))?.0;
    Some(stem.replace('-', "_"))
}

/// The `depends=` list from a module's `.modinfo` strings.
fn depends_of(module: &[u8]) -> Vec<String> {
    const KEY: &[u8] = b"depends=";
    module
        .split(|b| *b == 0)
        .find_map(|s| s.strip_prefix(KEY))
        .map(|deps| {
            String::from_utf8_lossy(deps).split(',').filter(|d| !d.is_empty()).map(|d| d.replace('-', "_")).collect()
        })
        .unwrap_or_default()
}

/// The module's bytes, decompressed (busybox `insmod` takes plain `.ko`).
pub fn module_bytes(path: &Path) -> anyhow::Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        "xz"
    } else if name.ends_with(".zst") {
        "zstd"
    } else if name.ends_with(".gz") {
        "gzip"
    } else {
        return std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    };
    let out = Command::new(tool)
        .arg("-dc")
        .arg(path)
        .output()
        .with_context(|| format!("running {tool} to decompress {} (is {tool} installed?)", path.display()))?;
    if !out.status.success() {
        bail!("{tool} -dc {}: {}", path.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(out.stdout)
}

/// What to `insmod` for [`WANTED_MODULES`]: those built as modules, each
/// after its dependencies (from the modules' own `depends=`, since a package
/// unpacked with `dpkg-deb -x` has no `modules.dep`).
pub fn plan_modules(kernel: &Kernel) -> anyhow::Result<ModulePlan> {
    let mut plan = ModulePlan::default();
    let Some(dir) = &kernel.modules else {
        plan.notes
            .push(format!("no modules directory for this kernel; assuming {} are built in", WANTED_MODULES.join(", ")));
        return Ok(plan);
    };
    let builtin: BTreeSet<String> = std::fs::read_to_string(dir.join("modules.builtin"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| module_name(l.rsplit('/').next()?))
        .collect();
    let mut files = BTreeMap::new();
    index_modules(&dir.join("kernel"), &mut files)?;
    let mut seen = BTreeSet::new();
    for name in WANTED_MODULES {
        add_module(name, &builtin, &files, &mut seen, &mut plan)?;
    }
    Ok(plan)
}

fn index_modules(dir: &Path, files: &mut BTreeMap<String, PathBuf>) -> anyhow::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            index_modules(&path, files)?;
        } else if let Some(name) = entry.file_name().to_str().and_then(module_name) {
            files.insert(name, path);
        }
    }
    Ok(())
}

fn add_module(
    name: &str,
    builtin: &BTreeSet<String>,
    files: &BTreeMap<String, PathBuf>,
    seen: &mut BTreeSet<String>,
    plan: &mut ModulePlan,
) -> anyhow::Result<()> {
    if !seen.insert(name.to_string()) {
        return Ok(());
    }
    if builtin.contains(name) {
        plan.notes.push(format!("{name} is built in"));
        return Ok(());
    }
    let Some(path) = files.get(name) else {
        plan.notes.push(format!("{name}: neither built in nor found as a module; the tests needing it will fail"));
        return Ok(());
    };
    for dep in depends_of(&module_bytes(path)?) {
        add_module(&dep, builtin, files, seen, plan)?;
    }
    plan.load.push((name.to_string(), path.clone()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_and_dependencies() {
        assert_eq!(module_name("veth.ko").as_deref(), Some("veth"));
        assert_eq!(module_name("sch-ingress.ko.zst").as_deref(), Some("sch_ingress"));
        assert_eq!(module_name("modules.order"), None);
        assert_eq!(module_name("x.kobj"), None);
        let modinfo = b"\x7fELF...\0license=GPL\0depends=libcrc32c,nf-conntrack\0vermagic=6.1.0\0";
        assert_eq!(depends_of(modinfo), ["libcrc32c", "nf_conntrack"]);
        assert!(depends_of(b"\0depends=\0retpoline=Y\0").is_empty());
        assert!(depends_of(b"no modinfo at all").is_empty());
    }

    #[test]
    fn picks_the_newest_package_of_a_series() {
        let s = &DEBIAN[0];
        assert_eq!(series_number(s, "linux-image-6.1.0-57-cloud-amd64"), Some(57));
        assert_eq!(series_number(s, "linux-image-6.1.0-57-cloud-amd64-dbg"), None);
        assert_eq!(series_number(s, "linux-image-6.1.0-57-amd64"), None);
        assert_eq!(series_number(&DEBIAN[1], "linux-image-6.12.117+deb12-cloud-amd64"), Some(117));
        assert_eq!(regex_escape("6.12.+deb12"), "6\\.12\\.\\+deb12");
    }

    #[test]
    fn unknown_kernels_are_an_error_naming_the_choices() {
        let Err(e) = resolve("/nonexistent/vmlinuz", Path::new("/nonexistent")) else { panic!("resolved") };
        assert!(e.to_string().contains("debian-6.1, debian-6.12, host"), "{e}");
    }
}
