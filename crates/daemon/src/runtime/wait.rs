//! Waiting for a daemon's descriptors: poll with a timeout, where a signal's interruption
//! is an ordinary wake-up (the loop then looks at its stop and report flags).

use crate::runtime::Failure;
use nix::poll::{poll, PollFd, PollTimeout};
use std::time::Duration;

/// Wait until one of `fds` is ready or `timeout` passes (rounded up to a millisecond,
/// so a loop never spins on a sub-millisecond rest). Returns whether any is ready.
pub fn readable(fds: &mut [PollFd<'_>], timeout: Duration) -> Result<bool, Failure> {
    let ms = i32::try_from(timeout.as_millis().saturating_add(1)).unwrap_or(i32::MAX);
    match poll(fds, PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(Failure::runtime(format!("poll: {e}"))),
    }
}

/// Which of `fds` are ready now, without waiting. Returns whether any is.
pub fn readable_now(fds: &mut [PollFd<'_>]) -> Result<bool, Failure> {
    match poll(fds, PollTimeout::ZERO) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(Failure::runtime(format!("poll: {e}"))),
    }
}

/// Read and forget what a non-blocking wake-up socket holds (its bytes only say "look
/// again"), so that it stops being readable.
pub fn take_wake_ups(sock: &std::os::unix::net::UnixStream) {
    let mut buf = [0u8; 64];
    while matches!(std::io::Read::read(&mut &*sock, &mut buf), Ok(n) if n > 0) {}
}
