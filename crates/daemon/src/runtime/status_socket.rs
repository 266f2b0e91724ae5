//! `shipworm status`: a running daemon answers on a local socket with one JSON
//! document; this module holds both ends.

use crate::runtime::Failure;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// Where daemons put their status sockets.
pub const DIR: &str = "/run/shipworm";

/// The default socket path for interface `iface`.
pub fn default_path(iface: &str) -> PathBuf {
    Path::new(DIR).join(format!("{iface}.sock"))
}

/// The daemon's end: a non-blocking listener anyone on the host may read from.
pub struct StatusListener {
    listener: UnixListener,
    path: PathBuf,
}

impl StatusListener {
    /// Bind at `path` (made before privileges are dropped).
    pub fn bind(path: &Path) -> Result<StatusListener, Failure> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Failure::runtime(format!("cannot create {}: {e}", dir.display())))?;
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)
            .map_err(|e| Failure::runtime(format!("cannot create the status socket {}: {e}", path.display())))?;
        listener.set_nonblocking(true).map_err(|e| Failure::runtime(e.to_string()))?;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666));
        Ok(StatusListener { listener, path: path.to_path_buf() })
    }

    /// Answer every waiting request with `json()`.
    pub fn serve(&self, json: impl Fn() -> String) {
        while let Ok((mut s, _)) = self.listener.accept() {
            let _ = s.set_nonblocking(false);
            let _ = s.set_write_timeout(Some(std::time::Duration::from_millis(200)));
            let _ = s.write_all(json().as_bytes());
        }
    }
}

impl std::os::fd::AsFd for StatusListener {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.listener.as_fd()
    }
}

impl Drop for StatusListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The client's end: fetch the document from `path`, or from the only socket in
/// [`DIR`] when no path is given.
pub fn fetch(path: Option<&Path>) -> Result<serde_json::Value, Failure> {
    let path = match path {
        Some(p) => p.to_path_buf(),
        None => {
            let found: Vec<PathBuf> = std::fs::read_dir(DIR)
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                        .collect()
                })
                .unwrap_or_default();
            match found.len() {
                1 => found.into_iter().next().expect("one"),
                0 => {
                    return Err(Failure::runtime(format!(
                        "no shipworm daemon is running (no socket in {DIR}); start `shipworm client`, or pass --socket"
                    )))
                }
                _ => {
                    return Err(Failure::usage(format!(
                        "several daemons run ({}); pick one with --socket",
                        found.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                    )))
                }
            }
        }
    };
    let mut s = UnixStream::connect(&path).map_err(|e| {
        Failure::runtime(format!("cannot reach the daemon at {}: {e} (is it running?)", path.display()))
    })?;
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(2)));
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| Failure::runtime(format!("reading {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| Failure::runtime(format!("the daemon sent something that is not JSON: {e}")))
}
