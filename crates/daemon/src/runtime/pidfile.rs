//! Miredo's `-p FILE`: the daemon's process id, written once set up and removed again
//! when it stops cleanly (whatever the outcome of the run).
//!
//! Written as root, so never through a link: the file is opened without following one
//! (a link planted at the path makes the daemon refuse, it does not write through it).
//! The open file is kept: after root is given up the daemon may no longer remove the
//! file from its directory, and then it empties it instead, so no stale id is left to
//! be taken for a running daemon.

use crate::runtime::Failure;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A written pid file; dropping it removes the file (or empties it).
#[derive(Debug)]
pub struct PidFile(Option<(PathBuf, File)>);

impl PidFile {
    /// Write this process's id to `path`, if one is given.
    pub fn create(path: Option<&Path>) -> Result<PidFile, Failure> {
        let Some(p) = path else { return Ok(PidFile(None)) };
        let fail = |e: std::io::Error| {
            let why =
                if e.raw_os_error() == Some(libc::ELOOP) { "it is a symbolic link".to_string() } else { e.to_string() };
            Failure::runtime(format!("cannot write the pid file {}: {why}", p.display()))
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(p)
            .map_err(fail)?;
        if !f.metadata().map_err(fail)?.is_file() {
            return Err(Failure::runtime(format!("the pid file {} is not a regular file", p.display())));
        }
        f.write_all(format!("{}\n", std::process::id()).as_bytes()).map_err(fail)?;
        Ok(PidFile(Some((p.to_path_buf(), f))))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Some((p, f)) = &self.0 {
            release(p, f, |p| std::fs::remove_file(p));
        }
    }
}

/// Remove the pid file at `p` with `remove`, or, if that fails, empty it through `f`.
fn release(p: &Path, f: &File, remove: impl FnOnce(&Path) -> std::io::Result<()>) {
    if remove(p).is_err() {
        let _ = f.set_len(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("shipworm-pidfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_file_holds_our_pid_and_goes_away_with_the_guard() {
        let d = scratch("plain");
        let path = d.join("x.pid");
        std::fs::write(&path, "99999\n").unwrap(); // stale, from a crash
        let guard = PidFile::create(Some(&path)).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{}\n", std::process::id()));
        drop(guard);
        assert!(!path.exists());
        assert!(PidFile::create(Some(Path::new("/nonexistent-dir/x.pid"))).unwrap_err().message.contains("pid file"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_link_at_the_path_is_refused_and_its_target_untouched() {
        let d = scratch("link");
        let target = d.join("passwd");
        std::fs::write(&target, "root:x:0:0\n").unwrap();
        let path = d.join("x.pid");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let e = PidFile::create(Some(&path)).unwrap_err();
        assert!(e.message.contains("symbolic link"), "{}", e.message);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "root:x:0:0\n");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_file_that_cannot_be_removed_is_emptied() {
        let d = scratch("sealed");
        let path = d.join("x.pid");
        let mut guard = PidFile::create(Some(&path)).unwrap();
        let (p, f) = guard.0.take().unwrap();
        // As after the privilege drop: the directory refuses to let the entry go.
        release(&p, &f, |_| Err(std::io::Error::from_raw_os_error(libc::EACCES)));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "", "no stale id left");
        let _ = std::fs::remove_dir_all(&d);
    }
}
