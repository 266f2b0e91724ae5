//! BIRD's control socket, held by a small process of its own (`shipworm-bird`), so that
//! the relay holds no connection to BIRD once confined. BIRD's socket takes any
//! command (`disable all`, `down`, `configure`): a relay subverted through a datagram
//! could otherwise withdraw every route of the site. The holder is forked during set-up,
//! keeps the connection and one end of a socket pair, drops root and every capability,
//! confines itself, and understands two requests (a sequence number and one byte):
//! enable and disable the protocols configured (`BirdProtocol`). It ignores stop signals (the relay must still
//! withdraw after a SIGTERM sent to the whole service) and ends when the relay's end
//! closes, disabling the protocols first: a daemon that died (killed, crashed) said
//! nothing to BIRD, and a server's routes are bound to no interface that would go
//! with it. The server announces its addresses through it too.

use crate::io::bird::BirdControl;
use crate::runtime::confinement::FilterMode;
use crate::runtime::syscalls::Role;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::{fork, ForkResult};
use socket2::{Domain, Socket, Type};
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::time::Duration;

/// The requests, one byte each.
const ENABLE: u8 = b'E';
const DISABLE: u8 = b'D';
/// Longest answer text passed back.
const ANSWER_MAX: usize = 512;
/// How long the relay waits for an answer (BIRD's own wait, and some).
const ANSWER_WITHIN: Duration = Duration::from_secs(3);

/// The relay's end of the link to the holder.
pub struct BirdLink {
    sock: Socket,
    /// The last request's number: an answer to an earlier one (late, after a time-out)
    /// is told apart and skipped.
    seq: u8,
}

impl BirdLink {
    /// Connect to BIRD at `path` (the greeting read), then fork the holder, which runs
    /// as `user`, confined with `filter`. Call during set-up: as root, before any thread
    /// starts.
    pub fn start(
        path: &Path,
        protocols: &[String],
        user: Option<&str>,
        filter: FilterMode,
    ) -> Result<BirdLink, String> {
        let bird = BirdControl::connect(path, protocols)?;
        let (ours, theirs) =
            Socket::pair(Domain::UNIX, Type::SEQPACKET, None).map_err(|e| format!("BIRD link socketpair: {e}"))?;
        // SAFETY: the relay has started no thread yet (the caller's promise); the child
        // runs only this module's code and exits without returning.
        match unsafe { fork() } {
            Ok(ForkResult::Parent { .. }) => {
                drop(theirs);
                drop(bird);
                ours.set_read_timeout(Some(ANSWER_WITHIN)).map_err(|e| e.to_string())?;
                Ok(BirdLink { sock: ours, seq: 0 })
            }
            Ok(ForkResult::Child) => {
                drop(ours);
                let code = match holder_main(&theirs, bird, user, filter) {
                    Ok(()) => 0,
                    Err(e) => {
                        tracing::error!("BIRD link: {e}");
                        1
                    }
                };
                std::process::exit(code)
            }
            Err(e) => Err(format!("cannot start the BIRD link: {e}")),
        }
    }

    /// Announce: enable the protocols. BIRD's lines, or why not.
    pub fn enable(&mut self) -> Result<String, String> {
        self.ask(ENABLE)
    }

    /// Withdraw: disable the protocols.
    pub fn disable(&mut self) -> Result<String, String> {
        self.ask(DISABLE)
    }

    fn ask(&mut self, verb: u8) -> Result<String, String> {
        self.seq = self.seq.wrapping_add(1);
        self.sock.send(&[self.seq, verb]).map_err(|e| format!("the BIRD link is gone: {e}"))?;
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 2 + ANSWER_MAX];
        loop {
            let n = self.sock.recv(&mut buf).map_err(|e| format!("the BIRD link did not answer: {e}"))?;
            // SAFETY: recv initialised the first n bytes.
            let bytes: Vec<u8> = buf[..n].iter().map(|b| unsafe { b.assume_init() }).collect();
            match bytes.split_first() {
                Some((&seq, answer)) if seq == self.seq => return decode_answer(answer),
                Some(_) => continue,
                None => return Err("the BIRD link closed".into()),
            }
        }
    }
}

/// `[0 | 1, text…]`: BIRD's line (0) or why not (1).
fn encode_answer(r: &Result<String, String>) -> Vec<u8> {
    let (tag, text) = match r {
        Ok(t) => (0u8, t),
        Err(e) => (1u8, e),
    };
    let mut b = vec![tag];
    b.extend(text.bytes().take(ANSWER_MAX));
    b
}

fn decode_answer(b: &[u8]) -> Result<String, String> {
    match b.split_first() {
        Some((0, text)) => Ok(String::from_utf8_lossy(text).into_owned()),
        Some((1, text)) => Err(String::from_utf8_lossy(text).into_owned()),
        _ => Err("the BIRD link closed".into()),
    }
}

/// The first wait before trying BIRD again once its connection closed (BIRD restarted),
/// doubled after each failed try up to [`RECONNECT_MAX`].
const RECONNECT_FIRST: Duration = Duration::from_millis(500);
const RECONNECT_MAX: Duration = Duration::from_secs(30);

/// The holder's connection to BIRD, made again when BIRD restarts, and what the daemon
/// last asked for: said again to the new BIRD, whose protocols start as its file says.
struct Link {
    bird: Option<BirdControl>,
    /// Where BIRD listens and the protocols told, to connect again.
    target: (std::path::PathBuf, Vec<String>),
    wanted: Option<u8>,
    next_try: Option<std::time::Instant>,
    backoff: Duration,
}

impl Link {
    /// `verb` on BIRD (connected again first if it went); a failure drops the connection
    /// (an answer that came late would be read as the next command's otherwise).
    fn ask(&mut self, verb: u8) -> Result<String, String> {
        self.wanted = Some(verb);
        if self.bird.is_none() {
            self.bird = Some(self.connect()?);
        }
        let bird = self.bird.as_mut().expect("connected");
        let answer = if verb == ENABLE { bird.enable() } else { bird.disable() };
        if answer.is_err() {
            self.lost();
        }
        answer
    }

    fn connect(&self) -> Result<BirdControl, String> {
        BirdControl::connect(&self.target.0, &self.target.1)
    }

    /// The connection is gone: try again after the back-off.
    fn lost(&mut self) {
        self.bird = None;
        self.next_try = Some(std::time::Instant::now() + self.backoff);
    }

    /// A try at BIRD again, when due: connected, it is told what the daemon last asked.
    fn retry(&mut self) {
        if self.next_try.is_none_or(|t| std::time::Instant::now() < t) {
            return;
        }
        match self.connect() {
            Ok(bird) => {
                self.bird = Some(bird);
                self.next_try = None;
                self.backoff = RECONNECT_FIRST;
                let Some(verb) = self.wanted else { return };
                match self.ask(verb) {
                    Ok(said) => tracing::info!("BIRD link: BIRD is back; told it again: \"{said}\""),
                    Err(e) => tracing::warn!("BIRD link: BIRD is back but did not take it: {e}"),
                }
            }
            Err(e) => {
                self.backoff = (self.backoff * 2).min(RECONNECT_MAX);
                self.next_try = Some(std::time::Instant::now() + self.backoff);
                tracing::debug!("BIRD link: {e}; next try in {:?}", self.backoff);
            }
        }
    }
}

fn holder_main(sock: &Socket, bird: BirdControl, user: Option<&str>, filter: FilterMode) -> Result<(), String> {
    let keep = [sock.as_raw_fd(), bird.as_raw_fd()];
    let target = bird.target();
    // To connect again once it runs as its user: the group of BIRD's socket (Debian's:
    // `bird`, mode 0660), never root's.
    let group = std::fs::metadata(&target.0).ok().map(|m| std::os::unix::fs::MetadataExt::gid(&m));
    let groups: Vec<nix::unistd::Gid> = group.filter(|&g| g != 0).map(nix::unistd::Gid::from_raw).into_iter().collect();
    crate::runtime::holder::enter_as(Role::BirdLink, c"shipworm-bird", &keep, (user, &groups), filter)?;
    let mut link = Link { bird: Some(bird), target, wanted: None, next_try: None, backoff: RECONNECT_FIRST };
    // The daemon's end closed (or took no answer): it stopped, or died (killed,
    // crashed) with no word to BIRD. Withdraw on its behalf (after a clean stop BIRD
    // answers "already disabled"): a dead server would otherwise stay announced.
    let gone = |link: &mut Link| {
        match link.ask(DISABLE) {
            Ok(said) => tracing::info!("BIRD link: the daemon is gone; BIRD says \"{said}\""),
            Err(e) => tracing::warn!("BIRD link: the daemon is gone, and withdrawing failed: {e}"),
        }
        Ok(())
    };
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 16];
    loop {
        // BIRD restarting closes its end: seen while waiting for the daemon, and BIRD
        // tried again on the back-off's schedule.
        let wait = link.next_try.map(|t| t.saturating_duration_since(std::time::Instant::now()));
        let mut fds = vec![PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
        let bird_fd = link.bird.as_ref().map(|b| b.as_raw_fd());
        // SAFETY: the descriptor belongs to `link.bird`, alive across the poll.
        let bird_fd = bird_fd.map(|fd| unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) });
        if let Some(fd) = bird_fd {
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
        }
        let timeout = wait.map_or(PollTimeout::NONE, |w| PollTimeout::try_from(w).unwrap_or(PollTimeout::MAX));
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(format!("BIRD link: poll: {e}")),
        }
        let daemon_said = fds[0].revents().is_some_and(|r| !r.is_empty());
        let bird_said = fds.get(1).and_then(|f| f.revents()).is_some_and(|r| !r.is_empty());
        drop(fds);
        if bird_said && link.bird.as_ref().is_some_and(BirdControl::closed_or_unasked) {
            tracing::warn!("BIRD link: BIRD closed its control socket (restarted?); connecting again");
            link.lost();
        }
        link.retry();
        if !daemon_said {
            continue;
        }
        let n = match sock.recv(&mut buf) {
            Ok(n) if n > 0 => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            _ => return gone(&mut link),
        };
        // SAFETY: recv initialised the first n bytes.
        let request: Vec<u8> = buf[..n].iter().map(|b| unsafe { b.assume_init() }).collect();
        let (seq, answer) = match request.as_slice() {
            [seq, verb @ (ENABLE | DISABLE)] => (*seq, link.ask(*verb)),
            _ => (
                request.first().copied().unwrap_or(0),
                Err("refused: the BIRD link takes enable and disable only".into()),
            ),
        };
        let mut reply = vec![seq];
        reply.extend(encode_answer(&answer));
        if sock.send(&reply).is_err() {
            return gone(&mut link);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_and_are_capped() {
        assert_eq!(decode_answer(&encode_answer(&Ok("teredo: enabled".into()))), Ok("teredo: enabled".into()));
        assert_eq!(decode_answer(&encode_answer(&Err("no".into()))), Err("no".into()));
        assert_eq!(encode_answer(&Ok("x".repeat(10_000))).len(), 1 + ANSWER_MAX);
        assert!(decode_answer(&[]).is_err() && decode_answer(&[7, 1]).is_err());
    }
}
