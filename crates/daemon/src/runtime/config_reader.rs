//! The configuration reader (`shipworm-conf`): a small process forked during set-up, once
//! the daemon's settings are loaded, that reads the daemon's file again when SIGHUP asks
//! for a reload and judges it against those settings ([`reload`]). The confined server
//! and relay may open no file at all (their seccomp lists have no `openat`), and loading
//! a file may resolve a name (`BindAddress`, `ServerBindAddress`); the reader does both
//! in a process of its own. It drops root and every capability as the other holders do,
//! and Landlock lets it read only beneath the file's directory and where name
//! resolution reads (as the client's). One request a reload (one byte); the answer is
//! the verdict. It ends when the daemon's end of their socket pair closes.

use crate::config::directives::ConfigFile;
use crate::runtime::confinement::{self, FilterMode};
use crate::runtime::reload::{self, SameSettings, Verdict};
use crate::runtime::syscalls::Role;
use nix::unistd::{fork, ForkResult};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest file read: a configuration file is a few hundred bytes; anything near
/// this is not one.
pub const MAX_BYTES: usize = 1 << 20;
/// The longest answer (a reason, or the changed directives' names).
const ANSWER_MAX: usize = 4096;
/// How long the daemon waits for the verdict (a name to resolve may take a while).
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// The request.
const JUDGE: u8 = b'J';

/// The daemon's end of the link to the reader.
pub struct ConfigReader {
    sock: UnixStream,
    path: PathBuf,
}

/// [`ConfigReader::start`] with the file as it is now as the running one (the daemon
/// loaded it a moment ago), its failure as the daemon's.
pub fn start(
    path: &Path,
    user: Option<&str>,
    filter: FilterMode,
    same: SameSettings,
) -> Result<ConfigReader, crate::runtime::Failure> {
    let running = ConfigFile::read(path).map_err(|e| crate::runtime::Failure::usage(e.to_string()))?;
    ConfigReader::start(path, user, filter, running, same).map_err(crate::runtime::Failure::runtime)
}

impl ConfigReader {
    /// Fork the reader of `path`, which runs as `user`, confined with `filter`;
    /// `running` is the file as the daemon loaded it and `same` compares a file's
    /// settings with the daemon's. Call during set-up: as root, before any thread starts.
    pub fn start(
        path: &Path,
        user: Option<&str>,
        filter: FilterMode,
        running: ConfigFile,
        same: SameSettings,
    ) -> Result<ConfigReader, String> {
        // The file's directory as an absolute path: Landlock's rule is made from it.
        let path = std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let (ours, theirs) = UnixStream::pair().map_err(|e| format!("configuration reader socketpair: {e}"))?;
        // SAFETY: the daemon has started no thread yet (the caller's promise); the child
        // runs only this module's code and exits without returning.
        match unsafe { fork() } {
            Ok(ForkResult::Parent { .. }) => {
                drop(theirs);
                ours.set_read_timeout(Some(ANSWER_WITHIN)).map_err(|e| e.to_string())?;
                Ok(ConfigReader { sock: ours, path })
            }
            Ok(ForkResult::Child) => {
                drop(ours);
                let code = match reader_main(theirs, &path, user, filter, &running, &same) {
                    Ok(()) => 0,
                    Err(e) => {
                        tracing::error!("configuration reader: {e}");
                        1
                    }
                };
                std::process::exit(code)
            }
            Err(e) => Err(format!("cannot start the configuration reader: {e}")),
        }
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Read the file again and judge it.
    pub fn judge(&mut self) -> Verdict {
        match self.ask() {
            Ok(v) => v,
            Err(e) => Verdict::Refused(format!("the configuration reader did not answer: {e}")),
        }
    }

    fn ask(&mut self) -> std::io::Result<Verdict> {
        self.sock.write_all(&[JUDGE])?;
        let mut head = [0u8; 3];
        self.sock.read_exact(&mut head)?;
        let len = usize::from(u16::from_le_bytes([head[1], head[2]])).min(ANSWER_MAX);
        let mut body = vec![0u8; len];
        self.sock.read_exact(&mut body)?;
        Ok(decode(head[0], &String::from_utf8_lossy(&body)))
    }
}

/// `[tag, length (u16 LE), text]`: unchanged (0), refused with a reason (1), changed
/// with the directives' names one a line (2).
fn encode(v: &Verdict) -> Vec<u8> {
    let (tag, text) = match v {
        Verdict::Unchanged => (0u8, String::new()),
        Verdict::Refused(why) => (1, why.clone()),
        Verdict::Changed(names) => (2, names.join("\n")),
    };
    let mut end = text.len().min(ANSWER_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut b = vec![tag];
    b.extend_from_slice(&(end as u16).to_le_bytes());
    b.extend_from_slice(&text.as_bytes()[..end]);
    b
}

fn decode(tag: u8, text: &str) -> Verdict {
    match tag {
        0 => Verdict::Unchanged,
        2 => Verdict::Changed(text.lines().map(str::to_string).collect()),
        _ => Verdict::Refused(text.to_string()),
    }
}

fn reader_main(
    mut sock: UnixStream,
    path: &Path,
    user: Option<&str>,
    filter: FilterMode,
    running: &ConfigFile,
    same: &SameSettings,
) -> Result<(), String> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1] {
        // SAFETY: setting a disposition to SIG_IGN.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    let _ = nix::sys::prctl::set_name(c"shipworm-conf");
    crate::runtime::inherited::close_all_but(&[sock.as_raw_fd()]);
    crate::runtime::privileges::drop_root(user)?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"));
    confinement::confine(Role::Reader, false, filter, &[], &[dir])?;
    let mut request = [0u8; 1];
    // Until the daemon's end closes (a read of 0 bytes, or an error).
    while matches!(sock.read(&mut request), Ok(1)) {
        let verdict = match read_capped(path) {
            Ok(bytes) => reload::judge_bytes(running, &bytes, path, same),
            Err(why) => Verdict::Refused(why),
        };
        if sock.write_all(&encode(&verdict)).is_err() {
            break;
        }
    }
    Ok(())
}

/// `path`'s bytes, at most [`MAX_BYTES`] of them (a larger file is refused, not cut).
fn read_capped(path: &Path) -> Result<Vec<u8>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    f.take(MAX_BYTES as u64 + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() > MAX_BYTES {
        return Err(format!("{}: larger than {MAX_BYTES} bytes: not a configuration file", path.display()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verdict_crosses_the_link_as_it_was() {
        for v in [
            Verdict::Unchanged,
            Verdict::Refused("/etc/miredo/miredo.conf:3: unknown directive Foo".into()),
            Verdict::Changed(vec!["BindPort".into(), "ServerAddress".into()]),
        ] {
            let b = encode(&v);
            assert_eq!(decode(b[0], std::str::from_utf8(&b[3..]).unwrap()), v);
        }
        // A long reason is cut at a character's boundary, within the bound.
        let long = Verdict::Refused("é".repeat(ANSWER_MAX));
        let b = encode(&long);
        assert!(b.len() <= 3 + ANSWER_MAX && std::str::from_utf8(&b[3..]).is_ok());
    }
}
