//! Log set-up: under systemd, with stderr connected to the journal, records go to
//! journald with their fields (PRIORITY from the level, MESSAGE, the event's own fields,
//! SYSLOG_IDENTIFIER shipworm); otherwise human-readable lines on stderr. `SHIPWORM_LOG`
//! (e.g. `debug`) chooses the level.
//!
//! The journal's socket is opened here, before the daemon confines itself; every record
//! is then one datagram sent to it.

use std::io::IsTerminal;
use tracing_subscriber::prelude::*;
use tracing_subscriber::EnvFilter;

/// The descriptors logging writes to beside stdio (the journal's socket), which a
/// process that closes what it inherited must keep (the interface helper).
static DESCRIPTORS: std::sync::OnceLock<Vec<i32>> = std::sync::OnceLock::new();

/// The descriptors logging writes to beside stdio.
pub fn descriptors() -> &'static [i32] {
    DESCRIPTORS.get().map_or(&[], Vec::as_slice)
}

/// The descriptors open now, asked of each number in turn: listing /proc/self/fd would
/// open one more for the listing, whose number the next socket then takes.
fn open_descriptors() -> Vec<i32> {
    // SAFETY: F_GETFD only reads a descriptor's flags; a closed number answers EBADF.
    (0..1024).filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1).collect()
}

/// Start logging at `default` unless `SHIPWORM_LOG` says otherwise.
pub fn init(default: &str) {
    let filter = || EnvFilter::try_from_env("SHIPWORM_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    if stderr_is_journal() {
        // The journal layer opens a socket of its own and hides it: which descriptor it
        // is shows only as the one that was not there before.
        let before = open_descriptors();
        let layer = tracing_journald::layer();
        let _ = DESCRIPTORS.set(open_descriptors().into_iter().filter(|fd| !before.contains(fd)).collect());
        if let Ok(journal) = layer {
            let journal = journal.with_syslog_identifier("shipworm".into()).with_field_prefix(None);
            if tracing_subscriber::registry().with(filter()).with(journal).try_init().is_ok() {
                return;
            }
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Whether stderr is the stream systemd connected to the journal: `JOURNAL_STREAM` holds
/// its device and inode (`sd_journal_stream_fd(3)`), and a redirection since then (a
/// shell's `2>file`) leaves it naming another file.
fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else { return false };
    // fstat, not a new open: the journal's stream is a socket.
    let Ok(st) = nix::sys::stat::fstat(2) else { return false };
    names(&stream.to_string_lossy(), st.st_dev, st.st_ino)
}

/// Whether `JOURNAL_STREAM`'s `DEVICE:INODE` names the file of `dev` and `ino`.
fn names(stream: &str, dev: u64, ino: u64) -> bool {
    let Some((d, i)) = stream.trim().split_once(':') else { return false };
    d.parse::<u64>().is_ok_and(|d| d == dev) && i.parse::<u64>().is_ok_and(|i| i == ino)
}

/// What became of one input, for the log: a drop at trace level (`SHIPWORM_LOG=trace`),
/// naming the input (`what`, `from`) and the reason. The state machine has counted it
/// already; a disabled level costs a branch on the drop path and nothing on the others.
pub fn outcome(outcome: shipworm_proto::Outcome, what: &str, from: impl std::fmt::Display) {
    if let Err(reason) = outcome {
        tracing::trace!("{what} from {from} dropped: {}", reason.as_str());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journal_is_used_only_while_stderr_is_the_stream_systemd_gave() {
        assert!(names("8:12345", 8, 12345));
        assert!(!names("8:12345", 8, 12346), "stderr redirected to another file");
        assert!(!names("9:12345", 8, 12345));
        assert!(!names("", 8, 12345));
        assert!(!names("8", 8, 12345));
        assert!(!names("x:y", 8, 12345));
    }
}
