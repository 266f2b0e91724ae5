//! `shipworm status`: a running daemon answers on a local socket with one JSON
//! document; this module holds both ends.

use crate::runtime::Failure;
use std::io::{Read, Write};
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
    /// Bind at `path` (made before privileges are dropped). An old socket there is
    /// removed, anything else refused; the socket is created with its final mode
    /// (umask), never changed by path afterwards, so nobody can swap a link in between
    /// and have root change the mode of another file.
    pub fn bind(path: &Path) -> Result<StatusListener, Failure> {
        use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
        let fail = |what: String| Failure::runtime(what);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => {
                let _ = std::fs::remove_file(path);
            }
            Ok(_) => {
                return Err(fail(format!(
                    "{} exists and is not a socket: remove it or choose another --socket",
                    path.display()
                )))
            }
            Err(_) => {}
        }
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o111));
        let bound = UnixListener::bind(path);
        nix::sys::stat::umask(old);
        let listener = bound.map_err(|e| fail(format!("cannot create the status socket {}: {e}", path.display())))?;
        listener.set_nonblocking(true).map_err(|e| fail(e.to_string()))?;
        Ok(StatusListener { listener, path: path.to_path_buf() })
    }

    /// Answer the requests waiting now with `json()`, at most [`ANSWERS_PER_CALL`]: a
    /// local flood of connections cannot hold the event loop.
    pub fn serve(&self, json: impl Fn() -> String) {
        for _ in 0..ANSWERS_PER_CALL {
            let Ok((mut s, _)) = self.listener.accept() else { return };
            // The answer fits the socket's buffer: written without waiting on a reader
            // that does not read.
            let _ = s.set_nonblocking(true);
            let _ = s.write_all(json().as_bytes());
        }
    }
}

/// Status requests answered per turn of a daemon's event loop.
pub const ANSWERS_PER_CALL: usize = 8;

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
        None => the_live_socket(Path::new(DIR))?,
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

/// The one socket in `dir` a daemon answers on. Sockets nobody listens on (left by a
/// daemon that was killed) are passed over: they are not daemons.
fn the_live_socket(dir: &Path) -> Result<PathBuf, Failure> {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "sock")).collect()
        })
        .unwrap_or_default();
    let (live, stale): (Vec<PathBuf>, Vec<PathBuf>) = found.into_iter().partition(|p| UnixStream::connect(p).is_ok());
    let list = |v: &[PathBuf]| v.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    match live.len() {
        1 => Ok(live.into_iter().next().expect("one")),
        0 if stale.is_empty() => Err(Failure::runtime(format!(
            "no shipworm daemon is running (no socket in {}); start `shipworm client`, or pass --socket",
            dir.display()
        ))),
        0 => Err(Failure::runtime(format!(
            "no shipworm daemon is running (nothing answers on {}: left by daemons that did not stop cleanly)",
            list(&stale)
        ))),
        _ => Err(Failure::usage(format!("several daemons run ({}); pick one with --socket", list(&live)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("shipworm-status-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_link_or_a_file_at_the_path_is_refused_and_left_alone() {
        let d = scratch("link");
        let victim = d.join("victim");
        std::fs::write(&victim, "secret").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let path = d.join("x.sock");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let e = StatusListener::bind(&path).err().expect("refused");
        assert!(e.message.contains("not a socket"), "{}", e.message);
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the link's target keeps its mode");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "a file").unwrap();
        assert!(StatusListener::bind(&path).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a file");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_socket_is_born_readable_by_all_and_an_old_one_is_replaced() {
        let d = scratch("mode");
        let path = d.join("x.sock");
        let first = StatusListener::bind(&path).unwrap();
        std::mem::forget(first); // as a crashed daemon leaves it
        let l = StatusListener::bind(&path).unwrap();
        let mode = std::fs::symlink_metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666);
        l.serve(|| "{\"ok\":true}".into());
        drop(l);
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn status_tells_live_daemons_from_the_sockets_dead_ones_left() {
        let d = scratch("live");
        // Two daemons killed: their sockets stay, nobody listens (a listener closed
        // without its file removed, as a SIGKILL leaves it).
        for name in ["a.sock", "b.sock"] {
            drop(std::os::unix::net::UnixListener::bind(d.join(name)).unwrap());
        }
        let e = the_live_socket(&d).unwrap_err();
        assert!(e.message.starts_with("no shipworm daemon is running (nothing answers on"), "{}", e.message);
        let live = StatusListener::bind(&d.join("c.sock")).unwrap();
        assert_eq!(the_live_socket(&d).unwrap(), d.join("c.sock"), "the one live daemon among the stale sockets");
        let other = StatusListener::bind(&d.join("e.sock")).unwrap();
        let e = the_live_socket(&d).unwrap_err();
        assert!(e.message.starts_with("several daemons run") && !e.message.contains("a.sock"), "{}", e.message);
        drop((live, other));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_flood_of_requests_is_answered_a_few_at_a_time() {
        let d = scratch("flood");
        let path = d.join("x.sock");
        let l = StatusListener::bind(&path).unwrap();
        let waiting: Vec<UnixStream> = (0..3 * ANSWERS_PER_CALL).map(|_| UnixStream::connect(&path).unwrap()).collect();
        let answered = std::cell::Cell::new(0);
        l.serve(|| {
            answered.set(answered.get() + 1);
            "{}".into()
        });
        assert_eq!(answered.get(), ANSWERS_PER_CALL);
        l.serve(|| {
            answered.set(answered.get() + 1);
            "{}".into()
        });
        assert_eq!(answered.get(), 2 * ANSWERS_PER_CALL);
        drop(waiting);
        let _ = std::fs::remove_dir_all(&d);
    }
}
