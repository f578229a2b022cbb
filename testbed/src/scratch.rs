//! A directory for a test's files (a config, a control socket), removed on drop.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::netns::unique_name;

pub struct ScratchDir {
    dir: PathBuf,
}

impl ScratchDir {
    pub fn new(prefix: &str) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(unique_name(prefix));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self { dir })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes `contents` to `name` in the directory and returns its path.
    pub fn write(&self, name: &str, contents: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(name);
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
