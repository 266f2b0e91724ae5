//! The Teredo daemons in the lab: shipworm's own roles or Debian's Miredo, started in
//! their namespaces with configuration files written for them, logs kept for reports.

use crate::anycast::Place;
use crate::error::{err, LabError, Result};
use crate::{netns, Lab, SERVER_V4};
use std::fmt;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which implementation plays a role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Impl {
    /// shipworm, from this binary.
    Shipworm(PathBuf),
    /// Debian's `miredo` / `miredo-server`.
    Miredo,
}

impl fmt::Display for Impl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Impl::Shipworm(_) => "shipworm",
            Impl::Miredo => "miredo",
        })
    }
}

/// A running daemon.
pub(crate) struct Peer {
    pub(crate) name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Peer {
    /// Let the daemon outlive the lab object (`--keep`).
    pub(crate) fn detach(&mut self) {
        if let Some(c) = self.child.take() {
            netns::unregister_pid(c.id());
        }
    }

    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGTERM first: both implementations clean their interfaces up on it. Not to
            // a child already reaped: its number may be another process's by now (or
            // a thread of this one).
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            if matches!(c.try_wait(), Ok(None)) {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
            netns::unregister_pid(c.id());
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `n` lines of a log file, for error reports.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Lab {
    pub(crate) fn spawn(&mut self, name: &str, ns: &str, args: &[&str]) -> Result<PathBuf> {
        let log = self.dir().join(format!("{name}.log"));
        let out = std::fs::File::create(&log).map_err(|e| LabError::new(format!("{}: {e}", log.display())))?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .envs(self.daemon_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| LabError::new(e.to_string()))?)
            .stderr(out)
            .spawn()
            .map_err(|e| LabError::new(format!("cannot start {name}: {e}")))?;
        netns::register_pid(child.id());
        self.peers.push(Peer { name: name.to_string(), child: Some(child), log: log.clone() });
        Ok(log)
    }

    pub(crate) fn write_conf(&self, name: &str, text: &str) -> Result<String> {
        let p = self.dir().join(name);
        std::fs::write(&p, text).map_err(|e| LabError::new(format!("{}: {e}", p.display())))?;
        Ok(p.display().to_string())
    }

    /// Fail with the daemon's last log lines if it has exited.
    pub fn check_alive(&mut self, name: &str) -> Result<()> {
        let Some(p) = self.peers.iter_mut().find(|p| p.name == name) else {
            return Ok(());
        };
        if let Some(c) = p.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                return err(format!("{name} exited ({status}):\n{}", tail(&p.log, 15)));
            }
        }
        Ok(())
    }

    /// The process id of the daemon started as `name`, while it runs.
    pub fn peer_pid(&self, name: &str) -> Option<u32> {
        self.peers.iter().find(|p| p.name == name).and_then(|p| p.child.as_ref()).map(Child::id)
    }

    /// Send `signal` to the daemon started as `name`.
    pub fn signal_peer(&mut self, name: &str, signal: nix::sys::signal::Signal) -> Result<()> {
        let p =
            self.peers.iter_mut().find(|p| p.name == name).ok_or_else(|| LabError::new(format!("no daemon {name}")))?;
        let c = p.child.as_mut().ok_or_else(|| LabError::new(format!("{name} is not running")))?;
        // Not to a child already reaped: its number may be another process's by now.
        if !matches!(c.try_wait(), Ok(None)) {
            return err(format!("{name} is not running"));
        }
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), signal)
            .map_err(|e| LabError::new(format!("signal {name}: {e}")))
    }

    /// Send `signal` to the daemon started as `name` and to every process it forked
    /// (Miredo's privileged parent and its unprivileged tunnel process, say): the whole
    /// daemon dies at once, as when its host fails.
    pub fn signal_peer_tree(&mut self, name: &str, signal: nix::sys::signal::Signal) -> Result<()> {
        let p = self.peers.iter().find(|p| p.name == name).ok_or_else(|| LabError::new(format!("no daemon {name}")))?;
        let root = p.child.as_ref().ok_or_else(|| LabError::new(format!("{name} is not running")))?.id();
        // Parent of every process, from /proc/PID/stat ("pid (comm) state ppid …").
        let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
            .map_err(|e| LabError::new(format!("/proc: {e}")))?
            .filter_map(|d| {
                let pid: u32 = d.ok()?.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
                Some((pid, ppid))
            })
            .collect();
        let mut tree = vec![root];
        let mut i = 0;
        while i < tree.len() {
            let parent = tree[i];
            tree.extend(parents.iter().filter(|&&(_, pp)| pp == parent).map(|&(pid, _)| pid));
            i += 1;
        }
        for pid in tree {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
        }
        Ok(())
    }

    /// Whether the daemon started as `name` has exited (and then how).
    pub fn exited(&mut self, name: &str) -> Option<std::process::ExitStatus> {
        let p = self.peers.iter_mut().find(|p| p.name == name)?;
        p.child.as_mut()?.try_wait().ok().flatten()
    }

    /// The log of a daemon started earlier.
    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        self.peers.iter().find(|p| p.name == name).map(|p| tail(&p.log, lines)).unwrap_or_default()
    }

    /// Wait until something in `ns` listens on UDP `port`.
    fn wait_udp(&mut self, name: &str, ns: &str, port: u16, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        let filter = format!("sport = :{port}");
        while Instant::now() < deadline {
            self.check_alive(name)?;
            if !netns::exec(ns, &["ss", "-Hlun", &filter])?.trim().is_empty() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        err(format!("{name} did not open UDP port {port} within {within:?}:\n{}", self.log_tail(name, 15)))
    }

    /// Start the Teredo server on 192.0.2.1 / 192.0.2.2.
    pub fn start_server(&mut self, imp: &Impl) -> Result<()> {
        self.start_server_on("server", "srv", SERVER_V4, imp, "")
    }

    /// Start the server with extra configuration lines.
    pub fn start_server_with(&mut self, imp: &Impl, extra: &str) -> Result<()> {
        self.start_server_on("server", "srv", SERVER_V4, imp, extra)
    }

    /// Start the second server on 192.0.2.5 / .6 (a lab built with `second_server`).
    pub fn start_server_b(&mut self, imp: &Impl) -> Result<()> {
        self.start_server_on("server_b", "srvb", crate::SERVER_B_V4, imp, "")
    }

    pub(crate) fn start_server_on(
        &mut self,
        name: &str,
        short: &str,
        addr: std::net::Ipv4Addr,
        imp: &Impl,
        extra: &str,
    ) -> Result<()> {
        let ns = self.ns(short);
        let conf =
            self.write_conf(&format!("{name}.conf"), &format!("# lab server\nServerBindAddress {addr}\n{extra}"))?;
        let pid = self.dir().join(format!("{name}.pid"));
        let pid_arg = pid.display().to_string();
        match imp {
            Impl::Shipworm(bin) => {
                let bin = bin.display().to_string();
                let control = self.daemon_socket(name).display().to_string();
                self.spawn(name, &ns, &[&bin, "server", "-c", &conf, "-p", &pid_arg, "--control", &control])?
            }
            Impl::Miredo => self.spawn(name, &ns, &["miredo-server", "-f", "-p", &pid_arg, "-c", &conf])?,
        };
        self.wait_udp(name, &ns, 3544, Duration::from_secs(10))?;
        self.check_pidfile(name, &pid)
    }

    /// Every daemon takes Miredo's `-p FILE`: the file must hold the daemon's pid once it
    /// serves (`ip netns exec` execs the daemon, so the child's pid is the daemon's).
    fn check_pidfile(&self, name: &str, path: &Path) -> Result<()> {
        let want = self.peers.iter().find(|p| p.name == name).and_then(|p| p.child.as_ref()).map(Child::id);
        let got = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse::<u32>().ok());
        if got.is_some() && got == want {
            Ok(())
        } else {
            err(format!("{name} did not write its pid {want:?} to {}: found {got:?}", path.display()))
        }
    }

    /// Start the relay on 192.0.2.10, routing 2001::/32 for the native side.
    pub fn start_relay(&mut self, imp: &Impl) -> Result<()> {
        self.start_relay_with(imp, "")
    }

    /// Start the relay with extra configuration lines (shipworm's own directives).
    pub fn start_relay_with(&mut self, imp: &Impl, extra: &str) -> Result<()> {
        self.start_relay_at(Place::A, imp, extra)
    }

    /// Start a relay at `place` (relay A is the lab's relay; B exists in a lab with a
    /// routed core), bound to the place's address (port 3545, so that its packets are
    /// told from the server's), with extra configuration lines.
    pub fn start_relay_at(&mut self, place: Place, imp: &Impl, extra: &str) -> Result<()> {
        let (name, short) = (place.daemon(), place.short());
        // Relays sharing an anycast address serve from it.
        let addr = self.relay_anycast_v4.unwrap_or(place.v4());
        let ns = self.ns(short);
        // shipworm's relay moves trusted peers' packets in the kernel unless the case
        // says otherwise: a kernel path that fails to load fails the case. It forwards
        // them directly, past the relay host's stack (nothing in the lab filters there),
        // unless the case says otherwise.
        let data_path = match imp {
            Impl::Shipworm(_) if !extra.contains("DataPath") && !extra.contains("KernelForward") => {
                "DataPath kernel\nKernelForward direct\n"
            }
            Impl::Shipworm(_) if !extra.contains("DataPath") => "DataPath kernel\n",
            _ => "",
        };
        let conf = self.write_conf(
            &format!("{name}.conf"),
            &format!(
                "# lab relay\nRelayType cone\nInterfaceName teredo\nBindAddress {addr}\nBindPort 3545\n{data_path}{extra}"
            ),
        )?;
        let pid = self.dir().join(format!("{name}.pid"));
        let pid_arg = pid.display().to_string();
        match imp {
            Impl::Shipworm(bin) => {
                let bin = bin.display().to_string();
                let control = self.daemon_socket(name).display().to_string();
                self.spawn(name, &ns, &[&bin, "relay", "-c", &conf, "-p", &pid_arg, "--control", &control])?;
            }
            Impl::Miredo => {
                self.spawn(name, &ns, &["miredo", "-f", "-p", &pid_arg, "-c", &conf])?;
            }
        }
        self.wait_udp(name, &ns, 3545, Duration::from_secs(10))?;
        self.wait_route(name, &ns, "2001::/32", Duration::from_secs(10))?;
        if matches!(imp, Impl::Shipworm(_)) {
            self.wait_control(name, Duration::from_secs(10))?;
        }
        self.check_pidfile(name, &pid)
    }

    /// Waits until daemon `name`'s status socket is there: a relay serves (its port
    /// bound, its route in) a moment before it answers `shipworm status` (a case asked
    /// in that moment once, in the whole suite under load).
    fn wait_control(&mut self, name: &str, within: Duration) -> Result<()> {
        let (path, deadline) = (self.daemon_socket(name), Instant::now() + within);
        while !path.exists() {
            if Instant::now() > deadline {
                return err(format!("{name}: no status socket at {} after {within:?}", path.display()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Start shipworm as a host-specific relay (`RelayType host`, RFC 4380 §5.5) on
    /// the relay host, for its own addresses only.
    pub fn start_host_relay(&mut self, imp: &Impl) -> Result<()> {
        let (name, ns, addr) = ("relay", self.ns("rly"), crate::RELAY_V4);
        let conf = self.write_conf(
            "relay.conf",
            &format!(
                "# lab host-specific relay\nRelayType host\nInterfaceName teredo\nBindAddress {addr}\nBindPort 3545\n"
            ),
        )?;
        let pid = self.dir().join("relay.pid");
        let pid_arg = pid.display().to_string();
        let Impl::Shipworm(bin) = imp else {
            return err("Miredo has no host-specific relay");
        };
        let bin = bin.display().to_string();
        let control = self.daemon_socket(name).display().to_string();
        self.spawn(name, &ns, &[&bin, "relay", "-c", &conf, "-p", &pid_arg, "--control", &control])?;
        self.wait_udp(name, &ns, 3545, Duration::from_secs(10))?;
        self.wait_route(name, &ns, "2001::/32", Duration::from_secs(10))?;
        self.wait_control(name, Duration::from_secs(10))?;
        self.check_pidfile(name, &pid)
    }

    fn wait_route(&mut self, name: &str, ns: &str, prefix: &str, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            self.check_alive(name)?;
            if netns::exec(ns, &["ip", "-6", "route", "show", prefix])?.contains("dev") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        err(format!("{name} did not route {prefix} within {within:?}:\n{}", self.log_tail(name, 15)))
    }

    /// Start the Teredo client of `client` (an index into [`Lab::clients`]).
    pub fn start_client(&mut self, client: usize, imp: &Impl) -> Result<()> {
        self.start_client_with(client, imp, "")
    }

    /// Start a client with extra configuration lines (shipworm's own directives).
    pub fn start_client_with(&mut self, client: usize, imp: &Impl, extra: &str) -> Result<()> {
        self.start_client_to(client, imp, &SERVER_V4.to_string(), extra)
    }

    /// Start a client whose `ServerAddress` is `server` (an address or a name), with
    /// extra configuration lines.
    pub fn start_client_to(&mut self, client: usize, imp: &Impl, server: &str, extra: &str) -> Result<()> {
        let ns = self.clients[client].ns.clone();
        let name = format!("client{client}");
        // UPnP is the user's choice (its XML comes from any host on the LAN): the lab
        // makes it behind the boxes that offer nothing else.
        let upnp = if self.clients[client].nat.igd() == Some(false) { "PortMapping upnp\n" } else { "" };
        // As the relay: trusted peers' packets in the kernel unless the case says not.
        let data_path = match imp {
            Impl::Shipworm(_) if !extra.contains("DataPath") => "DataPath kernel\n",
            _ => "",
        };
        let conf = self.write_conf(
            &format!("{name}.conf"),
            &format!(
                "# lab client\nRelayType client\nInterfaceName teredo\nServerAddress {server}\n{upnp}{data_path}{extra}"
            ),
        )?;
        match imp {
            Impl::Shipworm(bin) => {
                let bin = bin.display().to_string();
                let control = self.status_socket(client).display().to_string();
                self.spawn(&name, &ns, &[&bin, "client", "-c", &conf, "--control", &control]).map(drop)
            }
            Impl::Miredo => {
                let pid = self.dir().join(format!("{name}.pid")).display().to_string();
                self.spawn(&name, &ns, &["miredo", "-f", "-p", &pid, "-c", &conf]).map(drop)
            }
        }
    }

    /// Where a shipworm client of the lab answers `shipworm status`.
    pub fn status_socket(&self, client: usize) -> PathBuf {
        self.daemon_socket(&format!("client{client}"))
    }

    /// Where the lab's shipworm daemon `name` ("server", "server_b", "relay", "client0")
    /// answers `shipworm status`.
    pub fn daemon_socket(&self, name: &str) -> PathBuf {
        self.dir().join(format!("{name}.sock"))
    }

    /// The status document of a shipworm client (None for Miredo, or not yet up).
    pub fn client_status(&self, client: usize) -> Option<serde_json::Value> {
        self.daemon_status(&self.status_socket(client))
    }

    /// The status document of the lab's shipworm relay (relay A).
    pub fn relay_status(&self) -> Option<serde_json::Value> {
        self.daemon_status(&self.daemon_socket("relay"))
    }

    fn daemon_status(&self, socket: &std::path::Path) -> Option<serde_json::Value> {
        use std::io::Read;
        let mut s = std::os::unix::net::UnixStream::connect(socket).ok()?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Wait for `client` to have a global Teredo address on its interface. A shipworm
    /// client told `SymmetricNatSupport no` that finds a symmetric NAT says so and
    /// claims no address: reported as an error at once.
    pub fn wait_qualified(&mut self, client: usize, within: Duration) -> Result<Ipv6Addr> {
        let ns = self.clients[client].ns.clone();
        let name = format!("client{client}");
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            self.check_alive(&name)?;
            // Qualified: the address, and the default route through the interface (a
            // client may set them one after the other; Miredo's does), else a first
            // packet sent at once finds no route.
            if let Some(a) = teredo_address(&ns).filter(|_| routes_through_teredo(&ns)) {
                // Behind a gateway that maps ports, a shipworm client asks for its mapping
                // once qualified (on a thread of its own): the case starts when it holds
                // it, as a user's later traffic would find it.
                let mapping_pending = self.clients[client].nat.igd().is_some()
                    && self
                        .client_status(client)
                        .is_some_and(|st| st["port_mapping"].is_null() && st["role"] == "client");
                if !mapping_pending {
                    return Ok(a);
                }
            }
            if let Some(st) = self.client_status(client) {
                if st["nat"] == "symmetric" && st["address"].is_null() {
                    return err("the client reports a symmetric NAT and claims no Teredo address");
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        err(format!("client {client} did not qualify within {within:?}:\n{}", self.log_tail(&name, 15)))
    }
}

/// Whether `ns` has its default IPv6 route through the Teredo interface.
pub fn routes_through_teredo(ns: &str) -> bool {
    netns::exec(ns, &["ip", "-6", "route", "show", "default", "dev", "teredo"]).is_ok_and(|out| !out.trim().is_empty())
}

/// The global 2001::/32 address on interface `teredo` in `ns`, if any.
pub fn teredo_address(ns: &str) -> Option<Ipv6Addr> {
    let out = netns::exec(ns, &["ip", "-6", "-o", "addr", "show", "dev", "teredo", "scope", "global"]).ok()?;
    out.split_whitespace()
        .skip_while(|w| *w != "inet6")
        .nth(1)
        .and_then(|a| a.split('/').next())
        .and_then(|a| a.parse().ok())
}
