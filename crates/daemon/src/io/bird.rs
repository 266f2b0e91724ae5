//! The relay's word to BIRD, the routing daemon that announces the Teredo prefix (RFC 4380
//! §5.4: every relay announces it and routing picks the nearest): "enable" once the relay
//! serves, "disable" when it is asked to stop, so that the announcement is withdrawn while
//! the relay still forwards what is on its way (the drain). BIRD's own route to the prefix
//! is bound to the relay's interface (`route 2001::/32 via "teredo"`): a relay that dies
//! takes its interface with it, and BIRD withdraws without a word from us.
//!
//! The socket is BIRD's command-line one (`birdc` speaks the same): lines of text, each
//! answer a run of lines with a four-digit code, `-` after the code while more follow.
//! It is connected during set-up, as root, since the relay can open nothing once confined.

use shipworm_side_wire::bird_reply;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long BIRD may take to answer (it answers at once; a stuck BIRD must not hold a
/// relay that is stopping).
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Longest answer line we read: BIRD's are short; a longer one is not BIRD.
const LINE_MAX: usize = 4096;

/// Most lines an answer to enable/disable may take (BIRD's take two).
const LINES_MAX: usize = 64;

/// A connection to BIRD's control socket, for the protocols that announce the relay
/// (the Teredo prefix's, and the relays' shared IPv4 address's when they have one).
pub struct BirdControl {
    reader: BufReader<UnixStream>,
    path: PathBuf,
    protocols: Vec<String>,
}

/// A protocol's name as BIRD's grammar takes it unquoted: a letter or `_`, then letters,
/// digits and `_`.
pub fn is_protocol_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}

impl std::os::fd::AsRawFd for BirdControl {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.reader.get_ref().as_raw_fd()
    }
}

impl BirdControl {
    /// Connect and read BIRD's greeting.
    pub fn connect(path: &Path, protocols: &[String]) -> Result<BirdControl, String> {
        let stream = UnixStream::connect(path).map_err(|e| {
            format!(
                "cannot reach BIRD at {}: {e} (is bird running, and BirdSocket its control socket?)",
                path.display()
            )
        })?;
        stream.set_read_timeout(Some(ANSWER_WITHIN)).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(ANSWER_WITHIN)).map_err(|e| e.to_string())?;
        let mut bird =
            BirdControl { reader: BufReader::new(stream), path: path.to_path_buf(), protocols: protocols.to_vec() };
        let greeting = bird.answer().map_err(|e| format!("BIRD at {}: {e}", path.display()))?;
        if !greeting.starts_with("BIRD") {
            return Err(format!("{} does not greet like BIRD: {greeting:?}", path.display()));
        }
        Ok(bird)
    }

    /// Where BIRD listens, and the protocols told: what a new connection needs (after
    /// BIRD restarted).
    pub fn target(&self) -> (PathBuf, Vec<String>) {
        (self.path.clone(), self.protocols.clone())
    }

    /// Whether BIRD closed its end or said something nobody asked (the socket is
    /// readable between commands): either way this connection is done with.
    pub fn closed_or_unasked(&self) -> bool {
        let mut byte = [0u8; 1];
        // SAFETY: a non-blocking peek into a one-byte buffer we own.
        let n =
            unsafe { libc::recv(self.as_raw_fd(), byte.as_mut_ptr().cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
        n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock
    }

    /// Announce: enable the protocols that carry the Teredo prefix (and the shared
    /// address). BIRD's lines, e.g. "teredo: enabled" (or "already enabled").
    pub fn enable(&mut self) -> Result<String, String> {
        self.command("enable")
    }

    /// Withdraw: disable those protocols.
    pub fn disable(&mut self) -> Result<String, String> {
        self.command("disable")
    }

    /// `verb` on each protocol in turn, all of them tried: the answers joined, or the
    /// first error.
    fn command(&mut self, verb: &str) -> Result<String, String> {
        let protocols = self.protocols.clone();
        let answers: Vec<Result<String, String>> = protocols.iter().map(|p| self.command_one(verb, p)).collect();
        let mut said = Vec::new();
        for a in answers {
            said.push(a?);
        }
        Ok(said.join("; "))
    }

    fn command_one(&mut self, verb: &str, protocol: &str) -> Result<String, String> {
        let line = format!("{verb} {protocol}\n");
        let what = format!("BIRD at {}: {verb} {protocol}", self.path.display());
        let context = |e: String| format!("{what}: {e}");
        self.reader.get_mut().write_all(line.as_bytes()).map_err(|e| context(e.to_string()))?;
        let said = self.answer().map_err(context)?;
        // "enable x" on a name BIRD does not know is a syntax error (code 9001), and so
        // fails above; an answer that names no protocol at all is not what we asked.
        if !said.contains(&format!("{protocol}:")) {
            return Err(context(format!("unexpected answer {said:?}")));
        }
        Ok(said)
    }

    /// Read one answer: its lines' texts joined, or the error BIRD gave (codes 8xxx and
    /// 9xxx are errors). Lines are read as bytes and parsed by
    /// `shipworm_side_wire::bird_reply`: whatever is at the other end cannot make this panic.
    fn answer(&mut self) -> Result<String, String> {
        let mut text: Vec<String> = Vec::new();
        for _ in 0..LINES_MAX {
            let mut line = Vec::new();
            let n = std::io::Read::take(&mut self.reader, LINE_MAX as u64)
                .read_until(b'\n', &mut line)
                .map_err(|e| format!("reading its answer: {e}"))?;
            if n == 0 {
                return Err("it closed the connection".into());
            }
            let reply = bird_reply::parse_line(&line)
                .map_err(|_| format!("not an answer of BIRD's: {:?}", String::from_utf8_lossy(&line)))?;
            if reply.is_error() {
                return Err(format!("BIRD refused: {}", reply.text));
            }
            if !reply.text.trim().is_empty() {
                text.push(reply.text.trim().to_string());
            }
            if !reply.more {
                return Ok(text.join("; "));
            }
        }
        Err(format!("an answer of more than {LINES_MAX} lines is not BIRD's"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixListener;

    /// A stand-in for BIRD on a socket in a fresh directory: greets, then answers each
    /// line with `answer(line)`; returns the socket's path and what it was told.
    fn fake_bird(answer: fn(&str) -> String) -> (PathBuf, std::thread::JoinHandle<Vec<String>>) {
        let dir = std::env::temp_dir().join(format!(
            "shipworm-bird-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bird.ctl");
        let listener = UnixListener::bind(&path).unwrap();
        let handle = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(b"0001 BIRD 2.0.12 ready.\n").unwrap();
            let mut told = Vec::new();
            let mut buf = [0u8; 512];
            loop {
                let n = s.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    return told;
                }
                let line = String::from_utf8_lossy(&buf[..n]).trim_end().to_string();
                s.write_all(answer(&line).as_bytes()).unwrap();
                told.push(line);
            }
        });
        (path, handle)
    }

    #[test]
    fn enable_and_disable_say_what_bird_did() {
        // BIRD 2.0.12's own answers, as read from its socket.
        let (path, bird) = fake_bird(|line| match line {
            "enable teredo" => "0011-teredo: enabled\n0000 \n".into(),
            "disable teredo" => "0009-teredo: disabled\n0000 \n".into(),
            _ => "9001 syntax error\n".into(),
        });
        let mut c = BirdControl::connect(&path, &["teredo".to_string()]).unwrap();
        assert_eq!(c.enable().unwrap(), "teredo: enabled");
        assert_eq!(c.disable().unwrap(), "teredo: disabled");
        drop(c);
        assert_eq!(bird.join().unwrap(), ["enable teredo", "disable teredo"]);
    }

    /// Relays sharing an IPv4 address announce it beside the prefix: both protocols
    /// go together, each asked in turn, and one refused is the answer's error even when
    /// the other went.
    #[test]
    fn two_protocols_are_enabled_and_disabled_together() {
        let (path, bird) = fake_bird(|line| match line {
            "enable teredo" => "0011-teredo: enabled\n0000 \n".into(),
            "enable teredo4" => "0011-teredo4: enabled\n0000 \n".into(),
            "disable teredo" => "0009-teredo: disabled\n0000 \n".into(),
            _ => "9001 syntax error\n".into(),
        });
        let mut c = BirdControl::connect(&path, &["teredo".to_string(), "teredo4".to_string()]).unwrap();
        assert_eq!(c.enable().unwrap(), "teredo: enabled; teredo4: enabled");
        let e = c.disable().unwrap_err();
        assert!(e.contains("disable teredo4") && e.contains("syntax error"), "{e}");
        drop(c);
        assert_eq!(bird.join().unwrap(), ["enable teredo", "enable teredo4", "disable teredo", "disable teredo4"]);
    }

    #[test]
    fn a_protocol_bird_does_not_know_is_an_error_that_names_it() {
        let (path, _bird) = fake_bird(|_| {
            "9001 syntax error, unexpected CF_SYM_UNDEFINED, expecting CF_SYM_KNOWN or TEXT or ALL\n".into()
        });
        let mut c = BirdControl::connect(&path, &["nosuch".to_string()]).unwrap();
        let e = c.disable().unwrap_err();
        assert!(e.contains("disable nosuch") && e.contains("syntax error"), "{e}");
    }

    #[test]
    fn a_multibyte_character_after_the_code_is_an_error_not_a_panic() {
        // The separator's place holds the first byte of "é": slicing the line there
        // panicked and took the relay down (#40, 9).
        let (path, _bird) = fake_bird(|_| "0011é x\n".into());
        let mut c = BirdControl::connect(&path, &["teredo".to_string()]).unwrap();
        let e = c.enable().unwrap_err();
        assert!(e.contains("not an answer of BIRD's"), "{e}");
    }

    #[test]
    fn no_bird_at_the_path_says_so_and_how_to_fix_it() {
        let e = BirdControl::connect(Path::new("/nonexistent/bird.ctl"), &["teredo".to_string()]).err().unwrap();
        assert!(e.contains("/nonexistent/bird.ctl") && e.contains("is bird running"), "{e}");
    }

    #[test]
    fn a_silent_or_endless_peer_is_not_waited_for_forever() {
        // Greets, then says nothing: the answer times out.
        let (path, _bird) = fake_bird(|_| String::new());
        let mut c = BirdControl::connect(&path, &["teredo".to_string()]).unwrap();
        let started = std::time::Instant::now();
        assert!(c.enable().is_err());
        assert!(started.elapsed() < ANSWER_WITHIN * 2);
        // A line longer than any of BIRD's is refused, not gathered.
        let (path, _bird) = fake_bird(|_| "0011-".to_string() + &"x".repeat(LINE_MAX * 4));
        let mut c = BirdControl::connect(&path, &["teredo".to_string()]).unwrap();
        assert!(c.enable().is_err());
        // So is an answer that never ends.
        let (path, _bird) = fake_bird(|_| "0011-teredo: enabled\n".repeat(LINES_MAX * 4));
        let mut c = BirdControl::connect(&path, &["teredo".to_string()]).unwrap();
        assert!(c.enable().unwrap_err().contains("more than"));
    }

    #[test]
    fn protocol_names_are_what_birds_grammar_takes_unquoted() {
        for ok in ["teredo", "teredo_static", "_t1"] {
            assert!(is_protocol_name(ok), "{ok}");
        }
        for bad in ["", "1teredo", "teredo\ndisable all", "a b", "t-1"] {
            assert!(!is_protocol_name(bad), "{bad:?}");
        }
    }
}
