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
use nix::unistd::{fork, ForkResult};
use socket2::{Domain, Socket, Type};
use std::os::fd::AsRawFd;
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

fn holder_main(sock: &Socket, mut bird: BirdControl, user: Option<&str>, filter: FilterMode) -> Result<(), String> {
    crate::runtime::holder::enter(c"shipworm-bird", &[sock.as_raw_fd(), bird.as_raw_fd()], user, filter)?;
    // The daemon's end closed (or took no answer): it stopped, or died (killed,
    // crashed) with no word to BIRD. Withdraw on its behalf (after a clean stop BIRD
    // answers "already disabled"): a dead server would otherwise stay announced.
    let gone = |bird: &mut BirdControl| {
        match bird.disable() {
            Ok(said) => tracing::info!("BIRD link: the daemon is gone; BIRD says \"{said}\""),
            Err(e) => tracing::warn!("BIRD link: the daemon is gone, and withdrawing failed: {e}"),
        }
        Ok(())
    };
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 16];
    loop {
        let n = match sock.recv(&mut buf) {
            Ok(n) if n > 0 => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            _ => return gone(&mut bird),
        };
        // SAFETY: recv initialised the first n bytes.
        let request: Vec<u8> = buf[..n].iter().map(|b| unsafe { b.assume_init() }).collect();
        let (seq, answer) = match request.as_slice() {
            [seq, ENABLE] => (*seq, bird.enable()),
            [seq, DISABLE] => (*seq, bird.disable()),
            _ => (
                request.first().copied().unwrap_or(0),
                Err("refused: the BIRD link takes enable and disable only".into()),
            ),
        };
        let mut reply = vec![seq];
        reply.extend(encode_answer(&answer));
        if sock.send(&reply).is_err() {
            return gone(&mut bird);
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
