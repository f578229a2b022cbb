//! The initramfs archive: cpio in the "newc" format the kernel unpacks, written
//! directly, so that no `cpio` tool, staging directory or root (for the
//! `/dev/console` node) is needed, and every entry is owned by root.
//!
//! Entries are written in path order, which puts every directory before what
//! it holds (the kernel's unpacker needs a file's directory to exist first).

use std::{
    collections::BTreeMap,
    fs::File,
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

/// What one path in the archive is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Dir,
    /// A regular file whose bytes are read from this host path at write time.
    File {
        source: PathBuf,
        mode: u32,
    },
    /// A regular file with these bytes.
    Bytes {
        data: Vec<u8>,
        mode: u32,
    },
    Symlink {
        target: String,
    },
    /// A character device node.
    CharDev {
        major: u32,
        minor: u32,
        mode: u32,
    },
}

/// An archive being assembled: archive path (relative, no leading `/`) to entry.
#[derive(Default)]
pub struct Archive {
    entries: BTreeMap<String, Entry>,
}

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFCHR: u32 = 0o020_000;

impl Archive {
    /// Adds `entry` at `path` (leading `/` optional), creating its parent
    /// directories. A path added twice must be the same entry both times.
    pub fn add(&mut self, path: &str, entry: Entry) -> anyhow::Result<()> {
        let path = path.trim_start_matches('/').trim_end_matches('/');
        if path.is_empty() || path.split('/').any(|part| part.is_empty() || part == "." || part == "..") {
            bail!("invalid archive path {path:?}");
        }
        let mut parent = String::new();
        for part in path.split('/').collect::<Vec<_>>().split_last().map(|(_, dirs)| dirs).unwrap_or_default() {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(part);
            match self.entries.get(&parent) {
                None => {
                    self.entries.insert(parent.clone(), Entry::Dir);
                }
                Some(Entry::Dir) => {}
                Some(other) => bail!("{parent} is {other:?} in the archive, not a directory (adding {path})"),
            }
        }
        match self.entries.get(path) {
            Some(existing) if *existing != entry => {
                bail!("{path} is already in the archive as {existing:?}; cannot add it as {entry:?}")
            }
            _ => {
                self.entries.insert(path.to_string(), entry);
            }
        }
        Ok(())
    }

    /// Writes the archive to `path`; returns its size in bytes.
    pub fn write_to(&self, path: &Path) -> anyhow::Result<u64> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut out = Counting { inner: BufWriter::new(file), written: 0 };
        self.write(&mut out).with_context(|| format!("writing {}", path.display()))?;
        out.inner.flush().with_context(|| format!("writing {}", path.display()))?;
        Ok(out.written)
    }

    fn write(&self, out: &mut Counting<impl Write>) -> anyhow::Result<()> {
        for (ino, (path, entry)) in (1u32..).zip(&self.entries) {
            match entry {
                Entry::Dir => header(out, ino, path, S_IFDIR | 0o755, 2, 0, (0, 0))?,
                Entry::File { source, mode } => {
                    let mut file = File::open(source).with_context(|| format!("opening {}", source.display()))?;
                    let len = file.metadata().with_context(|| format!("reading {}", source.display()))?.len();
                    let size = u32::try_from(len).with_context(|| format!("{} is over 4 GiB", source.display()))?;
                    header(out, ino, path, S_IFREG | (mode & 0o7777), 1, size, (0, 0))?;
                    let copied = io::copy(&mut file, out).with_context(|| format!("copying {}", source.display()))?;
                    if copied != len {
                        bail!("{} changed size while being archived", source.display());
                    }
                    pad(out)?;
                }
                Entry::Bytes { data, mode } => {
                    let size = u32::try_from(data.len()).context("entry over 4 GiB")?;
                    header(out, ino, path, S_IFREG | (mode & 0o7777), 1, size, (0, 0))?;
                    out.write_all(data)?;
                    pad(out)?;
                }
                Entry::Symlink { target } => {
                    let size = u32::try_from(target.len()).context("symlink target too long")?;
                    header(out, ino, path, S_IFLNK | 0o777, 1, size, (0, 0))?;
                    out.write_all(target.as_bytes())?;
                    pad(out)?;
                }
                Entry::CharDev { major, minor, mode } => {
                    header(out, ino, path, S_IFCHR | (mode & 0o7777), 1, 0, (*major, *minor))?
                }
            }
        }
        header(out, 0, "TRAILER!!!", 0, 1, 0, (0, 0))?;
        Ok(())
    }
}

/// One newc header and the name after it, padded to 4 bytes.
fn header(
    out: &mut Counting<impl Write>,
    ino: u32,
    name: &str,
    mode: u32,
    nlink: u32,
    size: u32,
    (rdev_major, rdev_minor): (u32, u32),
) -> io::Result<()> {
    let name_size = name.len() as u32 + 1;
    // magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor,
    // rdevmajor, rdevminor, namesize, check
    write!(
        out,
        "070701{ino:08x}{mode:08x}{:08x}{:08x}{nlink:08x}{:08x}{size:08x}{:08x}{:08x}{rdev_major:08x}{rdev_minor:08x}{name_size:08x}{:08x}",
        0, 0, 0, 0, 0, 0
    )?;
    out.write_all(name.as_bytes())?;
    out.write_all(&[0])?;
    pad(out)
}

/// Zeroes up to the next multiple of 4 bytes.
fn pad(out: &mut Counting<impl Write>) -> io::Result<()> {
    let n = (4 - out.written % 4) % 4;
    out.write_all(&[0u8; 3][..n as usize])
}

/// A writer that knows how many bytes went through it (for alignment).
struct Counting<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(archive: &Archive) -> Vec<u8> {
        let mut out = Counting { inner: Vec::new(), written: 0 };
        archive.write(&mut out).unwrap();
        out.inner
    }

    /// (name, mode, filesize, rdevmajor, rdevminor, data) of each record.
    fn parse(mut bytes: &[u8]) -> Vec<(String, u32, u32, u32, u32, Vec<u8>)> {
        let mut records = Vec::new();
        let mut offset = 0usize;
        loop {
            assert_eq!(offset % 4, 0, "records start 4-byte aligned");
            let head = std::str::from_utf8(&bytes[..110]).unwrap();
            assert_eq!(&head[..6], "070701");
            let field = |i: usize| u32::from_str_radix(&head[6 + 8 * i..14 + 8 * i], 16).unwrap();
            let (mode, size, rmaj, rmin) = (field(1), field(6), field(9), field(10));
            let namesize = field(11) as usize;
            let name = std::str::from_utf8(&bytes[110..110 + namesize - 1]).unwrap().to_string();
            assert_eq!(bytes[110 + namesize - 1], 0, "names end in NUL");
            let data_at = (110 + namesize).next_multiple_of(4);
            let data = bytes[data_at..data_at + size as usize].to_vec();
            let next = (data_at + size as usize).next_multiple_of(4);
            offset += next;
            bytes = &bytes[next.min(bytes.len())..];
            if name == "TRAILER!!!" {
                assert!(bytes.is_empty(), "nothing after the trailer");
                return records;
            }
            records.push((name, mode, size, rmaj, rmin, data));
        }
    }

    #[test]
    fn writes_parents_first_with_modes_sizes_and_alignment() {
        let mut a = Archive::default();
        a.add("/opt/shedder/init.sh", Entry::Bytes { data: b"#!/bin/sh\n".to_vec(), mode: 0o755 }).unwrap();
        a.add("var/run", Entry::Symlink { target: "../run".into() }).unwrap();
        a.add("dev/console", Entry::CharDev { major: 5, minor: 1, mode: 0o600 }).unwrap();
        a.add("opt/a-b", Entry::Bytes { data: vec![1, 2, 3, 4, 5], mode: 0o644 }).unwrap();
        let records = parse(&bytes_of(&a));
        let names: Vec<&str> = records.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(
            names,
            ["dev", "dev/console", "opt", "opt/a-b", "opt/shedder", "opt/shedder/init.sh", "var", "var/run"]
        );
        let by_name = |n: &str| records.iter().find(|r| r.0 == n).unwrap().clone();
        assert_eq!(by_name("opt").1, 0o040_755);
        assert_eq!(by_name("opt/shedder/init.sh").1, 0o100_755);
        assert_eq!(by_name("opt/shedder/init.sh").5, b"#!/bin/sh\n");
        assert_eq!(by_name("opt/a-b").5, vec![1, 2, 3, 4, 5]);
        assert_eq!(by_name("var/run").1, 0o120_777);
        assert_eq!(by_name("var/run").5, b"../run");
        let console = by_name("dev/console");
        assert_eq!((console.1, console.2, console.3, console.4), (0o020_600, 0, 5, 1));
    }

    #[test]
    fn refuses_conflicts_and_bad_paths() {
        let mut a = Archive::default();
        a.add("bin/x", Entry::Symlink { target: "busybox".into() }).unwrap();
        a.add("bin/x", Entry::Symlink { target: "busybox".into() }).unwrap();
        assert!(a.add("bin/x", Entry::Dir).is_err());
        assert!(a.add("bin/x/y", Entry::Dir).is_err(), "a symlink is no parent directory");
        assert!(a.add("../etc", Entry::Dir).is_err());
        assert!(a.add("/", Entry::Dir).is_err());
        assert_eq!(a.entries.get("bin"), Some(&Entry::Dir));
    }
}
