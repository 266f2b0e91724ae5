//! What a daemon tells the service manager that started it (systemd's notify protocol,
//! `sd_notify(3)`): `READY=1` once it serves, a `STATUS=` line a user reads in
//! `systemctl status`, `WATCHDOG=1` from its event loop, `STOPPING=1` on a clean stop.
//! Started by anything else (no `NOTIFY_SOCKET`), it says nothing.
//!
//! The socket is made and connected during set-up: once confined, a daemon may make no
//! new socket, and a sandboxed process may not reach an abstract socket (systemd's
//! usual `@/org/freedesktop/systemd1/notify`) by name — only send on one it holds.
//! The watchdog is fed at a third of `WATCHDOG_USEC`, only by the loop whose stall it
//! must reveal.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

/// What a daemon needs after its drain to close down (interfaces, routes, sockets).
const STOP_MARGIN: Duration = Duration::from_secs(10);

/// The daemon's line to its service manager, or nothing.
#[derive(Debug, Default)]
pub struct ServiceManager {
    sock: Option<UnixDatagram>,
    /// How often to feed the watchdog, when the manager runs one for this process.
    feed_every: Option<Duration>,
    last_feed: Option<Instant>,
    status: String,
}

impl ServiceManager {
    /// From the environment systemd sets: `NOTIFY_SOCKET` (a path, or `@name` for an
    /// abstract socket), `WATCHDOG_USEC` and `WATCHDOG_PID` (the watchdog is ours only
    /// if it names this process, or no process).
    pub fn from_env() -> ServiceManager {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        match var("NOTIFY_SOCKET") {
            Some(path) => ServiceManager::at(&path, var("WATCHDOG_USEC").as_deref(), var("WATCHDOG_PID").as_deref()),
            None => ServiceManager::default(),
        }
    }

    /// Speaking to the manager at `path`, with its watchdog settings as they read in the
    /// environment.
    fn at(path: &str, watchdog_usec: Option<&str>, watchdog_pid: Option<&str>) -> ServiceManager {
        let sock = match connect(path) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("NOTIFY_SOCKET {path}: {e}: the service manager will not hear from this daemon");
                None
            }
        };
        let ours = watchdog_pid.is_none_or(|p| p.trim() == std::process::id().to_string());
        let usec = watchdog_usec.and_then(|v| v.trim().parse::<u64>().ok()).filter(|&u| u > 0);
        let feed_every = usec.filter(|_| ours).map(|u| Duration::from_micros(u / 3));
        ServiceManager { sock, feed_every, last_feed: None, status: String::new() }
    }

    /// A service manager listens (it will start the daemon again when told to).
    pub fn present(&self) -> bool {
        self.sock.is_some()
    }

    /// The daemon serves: ready, and what it is doing.
    pub fn ready(&mut self, status: &str) {
        self.status = status.to_string();
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// What the daemon is doing now (sent only when it changes).
    pub fn status(&mut self, status: &str) {
        if self.status != status {
            self.status = status.to_string();
            self.send(&format!("STATUS={}", one_line(status)));
        }
    }

    /// How often the watchdog wants feeding, if it runs.
    pub fn feed_every(&self) -> Option<Duration> {
        self.feed_every
    }

    /// From the event loop, as often as it turns: feeds the watchdog when due.
    pub fn tick(&mut self, now: Instant) {
        let Some(every) = self.feed_every else { return };
        if self.last_feed.is_none_or(|t| now.saturating_duration_since(t) >= every) {
            self.last_feed = Some(now);
            self.send("WATCHDOG=1");
        }
    }

    /// A clean stop has begun.
    pub fn stopping(&mut self) {
        self.send("STOPPING=1");
    }

    /// A clean stop has begun that goes on forwarding for `drain` first: the manager is
    /// asked to wait that long and a little more before it kills us (systemd's stop
    /// timeout, 90 s by default, would otherwise cut a long `DrainTime` short).
    pub fn stopping_after(&mut self, drain: Duration) {
        let usec = (drain + STOP_MARGIN).as_micros();
        self.send(&format!("STOPPING=1\nEXTEND_TIMEOUT_USEC={usec}"));
    }

    fn send(&self, message: &str) {
        if let Some(s) = &self.sock {
            // Best effort, as sd_notify: a manager that went away or lags changes
            // nothing here.
            let _ = s.send(message.as_bytes());
        }
    }
}

/// A status is one line of the protocol's `KEY=value` list.
fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

fn connect(path: &str) -> std::io::Result<UnixDatagram> {
    let sock = UnixDatagram::unbound()?;
    // A manager that does not read (its queue holds ten datagrams) must never stall the
    // event loop: a message that finds the queue full is dropped.
    sock.set_nonblocking(true)?;
    match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            sock.connect_addr(&addr)?;
        }
        None => sock.connect(path)?,
    }
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manager listening at a fresh path, and the daemon's end made as from the
    /// environment systemd sets.
    fn manager(usec: Option<&str>, pid: Option<&str>) -> (UnixDatagram, ServiceManager, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("shipworm-notify-{}-{usec:?}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let systemd = UnixDatagram::bind(&path).unwrap();
        systemd.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let m = ServiceManager::at(path.to_str().unwrap(), usec, pid);
        (systemd, m, path)
    }

    fn received(s: &UnixDatagram) -> Vec<String> {
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while let Ok(n) = s.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        got
    }

    #[test]
    fn systemd_hears_ready_status_changes_watchdog_and_stopping() {
        let (systemd, mut m, path) = manager(Some("3000000"), None);
        let t0 = Instant::now();
        m.ready("qualifying\nwith 192.0.2.1");
        m.status("qualifying\nwith 192.0.2.1");
        m.status("qualified as 2001:0:c000:201::1");
        // Fed at once, then not again within a third of the watchdog's 3 s.
        m.tick(t0);
        m.tick(t0 + Duration::from_millis(900));
        m.tick(t0 + Duration::from_millis(1000));
        m.stopping();
        // A relay's drain asks for its length and a margin.
        m.stopping_after(Duration::from_secs(300));
        assert_eq!(
            received(&systemd),
            [
                "READY=1\nSTATUS=qualifying with 192.0.2.1",
                "STATUS=qualified as 2001:0:c000:201::1",
                "WATCHDOG=1",
                "WATCHDOG=1",
                "STOPPING=1",
                "STOPPING=1\nEXTEND_TIMEOUT_USEC=310000000"
            ]
        );
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_manager_that_does_not_read_never_stalls_the_daemon() {
        let (systemd, mut m, path) = manager(Some("3000"), None);
        let t0 = Instant::now();
        for i in 0..1000 {
            m.tick(t0 + Duration::from_millis(i));
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "sends blocked on a full queue");
        assert!(received(&systemd).len() <= 1000);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_watchdog_meant_for_another_process_is_not_fed() {
        let (systemd, mut m, path) = manager(Some("1000000"), Some("1"));
        m.tick(Instant::now());
        m.ready("serving");
        assert_eq!(received(&systemd), ["READY=1\nSTATUS=serving"]);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn an_abstract_socket_is_reached_by_its_at_name() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("shipworm-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let systemd = UnixDatagram::bind_addr(&addr).unwrap();
        systemd.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut m = ServiceManager::at(&format!("@{name}"), None, None);
        m.ready("serving");
        assert_eq!(received(&systemd), ["READY=1\nSTATUS=serving"]);
    }

    #[test]
    fn without_a_manager_nothing_is_sent_and_nothing_fails() {
        let mut m = ServiceManager::default();
        m.ready("serving");
        m.tick(Instant::now());
        m.stopping();
    }
}
