//! Miredo's `-p FILE`: the daemon's process id, written once set up and removed again
//! when it stops cleanly (whatever the outcome of the run).

use crate::runtime::Failure;
use std::path::{Path, PathBuf};

/// A written pid file; dropping it removes the file.
#[derive(Debug)]
pub struct PidFile(Option<PathBuf>);

impl PidFile {
    /// Write this process's id to `path`, if one is given.
    pub fn create(path: Option<&Path>) -> Result<PidFile, Failure> {
        if let Some(p) = path {
            std::fs::write(p, format!("{}\n", std::process::id()))
                .map_err(|e| Failure::runtime(format!("cannot write the pid file {}: {e}", p.display())))?;
        }
        Ok(PidFile(path.map(Path::to_path_buf)))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_holds_our_pid_and_goes_away_with_the_guard() {
        let path = std::env::temp_dir().join(format!("shipworm-pidfile-test-{}", std::process::id()));
        let guard = PidFile::create(Some(&path)).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{}\n", std::process::id()));
        drop(guard);
        assert!(!path.exists());
        assert!(PidFile::create(Some(Path::new("/nonexistent-dir/x.pid"))).unwrap_err().message.contains("pid file"));
    }
}
