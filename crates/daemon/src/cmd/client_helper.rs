//! The client's privileged half, split off as Miredo splits miredo-privproc: a small
//! process that keeps CAP_NET_ADMIN and does nothing but put the qualified address,
//! MTU and default route on the client's own interface and start the hook script, when
//! the client asks over a socketpair (`shipworm_side_wire::helper_request`). It holds no network
//! socket and parses nothing from the network; the client, which parses everything,
//! holds no capability.
//!
//! The hook is started by a third process, forked before the helper confines itself:
//! a program the operator wrote cannot live within the helper's allow-list, so the
//! hook runner has no capability and a deny-list of what no hook needs instead.

use crate::io::netlink::Netlink;
use crate::runtime::confinement::{self, FilterMode};
use crate::runtime::privileges;
use crate::runtime::syscalls::Role;
use crate::runtime::Failure;
use nix::unistd::{fork, ForkResult, Pid};
use shipworm_proto::client::LINK_LOCAL;
use shipworm_side_wire::helper_request::{self as helper_protocol, Request, REQUEST_LEN};
use socket2::{Domain, Socket, Type};
use std::net::Ipv6Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::PathBuf;
use std::time::Duration;

/// How long the client waits for the helper's answer before calling it dead.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// Largest hook environment (names and values) the runner takes.
const HOOK_ENV_MAX: usize = 4096;
/// The variables a hook is given (Miredo's client-hook names).
const HOOK_VARIABLES: &[&str] = &[
    "STATE",
    "IFACE",
    "IFINDEX",
    "ADDRESS",
    "LLADDRESS",
    "MTU",
    "OLD_STATE",
    "OLD_ADDRESS",
    "OLD_LLADDRESS",
    "OLD_MTU",
];

/// What the helper is told at its start (it is forked before the client reads a
/// datagram, so this is trusted).
pub struct HelperSetup {
    /// The interface's name.
    pub interface: String,
    /// The Teredo /32 addresses must be under.
    pub prefix: u32,
    /// Metric of the default route.
    pub metric: u32,
    /// The hook script, if any.
    pub hook: Option<PathBuf>,
    /// The user to run as.
    pub user: Option<String>,
    /// The seccomp mode.
    pub filter: FilterMode,
}

/// The client's end.
pub struct Helper {
    sock: Socket,
    pid: Pid,
}

impl Helper {
    /// Fork the helper (and its hook runner). Call while still root, before any thread
    /// starts and before any network socket is open.
    pub fn start(setup: HelperSetup) -> Result<Helper, Failure> {
        let (ours, theirs) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None)
            .map_err(|e| Failure::runtime(format!("cannot create the interface helper's socketpair: {e}")))?;
        // SAFETY: no other thread runs yet (the caller's promise); the child runs only
        // this crate's code and exits without returning.
        match unsafe { fork() } {
            Ok(ForkResult::Parent { child }) => {
                drop(theirs);
                Ok(Helper { sock: ours, pid: child })
            }
            Ok(ForkResult::Child) => {
                drop(ours);
                let code = match helper_main(theirs, setup) {
                    Ok(()) => 0,
                    Err(e) => {
                        tracing::error!("interface helper: {e}");
                        1
                    }
                };
                std::process::exit(code)
            }
            Err(e) => Err(Failure::runtime(format!("cannot start the interface helper: {e}"))),
        }
    }

    /// The helper's process id.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Readable (EOF) when the helper has gone: the client polls it.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Ask and wait for the answer. `Err(Failure)` when the helper is gone (the client
    /// must stop), `Ok(Err(why))` when it refused or the kernel did.
    pub fn ask(&mut self, request: Request) -> Result<Result<(), String>, Failure> {
        let gone = |e: String| Failure::runtime(format!("the interface helper (pid {}) is gone: {e}", self.pid));
        self.sock.send(&request.encode()).map_err(|e| gone(e.to_string()))?;
        self.sock.set_read_timeout(Some(ANSWER_WITHIN)).map_err(|e| gone(e.to_string()))?;
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 1 + helper_protocol::REPLY_TEXT_MAX];
        let n = self.sock.recv(&mut buf).map_err(|e| gone(e.to_string()))?;
        if n == 0 {
            return Err(gone("it closed its socket".into()));
        }
        // SAFETY: recv initialised the first n bytes.
        let bytes: Vec<u8> = buf[..n].iter().map(|b| unsafe { b.assume_init() }).collect();
        Ok(helper_protocol::decode_reply(&bytes))
    }
}

/// A stop asked of the client is the client's business: the helper ends when the
/// client's end of the socket closes.
fn ignore_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1] {
        // SAFETY: setting a disposition to SIG_IGN.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
}

fn set_name(name: &str) {
    let _ = nix::sys::prctl::set_name(&std::ffi::CString::new(name).expect("no NUL"));
}

fn helper_main(sock: Socket, setup: HelperSetup) -> Result<(), String> {
    ignore_stop_signals();
    set_name("shipworm-iface");
    let runner = match &setup.hook {
        Some(hook) => Some(start_hook_runner(hook.clone(), setup.user.as_deref())?),
        None => None,
    };
    let mut keep = vec![sock.as_raw_fd()];
    keep.extend(runner.as_ref().map(|r| r.as_raw_fd()));
    crate::runtime::inherited::close_all_but(&keep);
    let nl = Netlink::new()?;
    let index = nl.link_index(&setup.interface)?;
    privileges::drop_root_keep_net_admin(setup.user.as_deref())?;
    confinement::confine(Role::Helper, false, setup.filter, &[], &[])?;
    let mut state = Configured { nl, index, address: None, mtu: 1280, setup, runner };
    // The client stopped (or died): so does the helper.
    while let Some(bytes) = next_datagram(&sock, REQUEST_LEN + 1, "the client's requests")? {
        let result = match Request::decode(&bytes, state.setup.prefix) {
            Ok(r) => state.apply(r),
            Err(why) => {
                tracing::warn!("interface helper: refused a request: {why}");
                Err(format!("refused: {why}"))
            }
        };
        if sock.send(&helper_protocol::encode_reply(&result)).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// The next datagram (at most `max` bytes), or `None` once the other end has closed.
fn next_datagram(sock: &Socket, max: usize, what: &str) -> Result<Option<Vec<u8>>, String> {
    let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); max];
    loop {
        return match sock.recv(&mut buf) {
            Ok(0) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => Err(format!("reading {what}: {e}")),
            // SAFETY: recv initialised the first n bytes.
            Ok(n) => Ok(Some(buf[..n].iter().map(|b| unsafe { b.assume_init() }).collect())),
        };
    }
}

/// The interface as the helper configured it.
struct Configured {
    nl: Netlink,
    index: u32,
    address: Option<Ipv6Addr>,
    mtu: u32,
    setup: HelperSetup,
    runner: Option<Socket>,
}

impl Configured {
    fn apply(&mut self, r: Request) -> Result<(), String> {
        match r {
            Request::Up { address, mtu } => {
                if self.address == Some(address) && self.mtu == mtu {
                    return Ok(());
                }
                if let Some(old) = self.address {
                    if old != address {
                        self.nl.del_address(self.index, old, 32)?;
                    }
                }
                self.nl.set_link(self.index, true, mtu)?;
                if self.address != Some(address) {
                    self.nl.add_address(self.index, address, 32)?;
                    self.nl.add_route(self.index, Ipv6Addr::UNSPECIFIED, 0, Some(self.setup.metric))?;
                }
                let old = self.address.replace(address);
                let old_mtu = std::mem::replace(&mut self.mtu, mtu);
                self.hook("up", old, old_mtu);
            }
            Request::Down => {
                if let Some(old) = self.address.take() {
                    self.nl.del_address(self.index, old, 32)?;
                    let _ = self.nl.del_route(self.index, Ipv6Addr::UNSPECIFIED, 0, Some(self.setup.metric));
                    self.hook("down", Some(old), self.mtu);
                }
            }
        }
        Ok(())
    }

    /// Hand the hook's variables to the runner (Miredo's client-hook names).
    fn hook(&self, state: &str, old: Option<Ipv6Addr>, old_mtu: u32) {
        let Some(runner) = &self.runner else { return };
        let mut env = vec![
            ("STATE", state.to_string()),
            ("IFACE", self.setup.interface.clone()),
            ("IFINDEX", self.index.to_string()),
            ("LLADDRESS", LINK_LOCAL.to_string()),
            ("MTU", self.mtu.to_string()),
        ];
        if let Some(a) = self.address {
            env.push(("ADDRESS", a.to_string()));
        }
        match old {
            Some(o) => env.extend([
                ("OLD_ADDRESS", o.to_string()),
                ("OLD_LLADDRESS", LINK_LOCAL.to_string()),
                ("OLD_STATE", "up".to_string()),
                ("OLD_MTU", old_mtu.to_string()),
            ]),
            None => env.push(("OLD_STATE", "down".to_string())),
        }
        let blob: Vec<u8> = env.iter().flat_map(|(k, v)| format!("{k}={v}\0").into_bytes()).collect();
        if let Err(e) = runner.send(&blob) {
            tracing::warn!(
                "hook {}: the hook runner is gone: {e}",
                self.setup.hook.as_deref().unwrap_or(std::path::Path::new("")).display()
            );
        }
    }
}

/// Fork the hook runner: no capability, the service user, and a deny-list filter its
/// hooks inherit. It reads one environment per datagram and starts the hook with it.
fn start_hook_runner(hook: PathBuf, user: Option<&str>) -> Result<Socket, String> {
    let (ours, theirs) =
        Socket::pair(Domain::UNIX, Type::SEQPACKET, None).map_err(|e| format!("hook runner socketpair: {e}"))?;
    // SAFETY: the helper is single-threaded here.
    match unsafe { fork() } {
        Ok(ForkResult::Parent { .. }) => Ok(ours),
        Ok(ForkResult::Child) => {
            drop(ours);
            crate::runtime::inherited::close_all_but(&[theirs.as_raw_fd()]);
            set_name("shipworm-hook");
            let code = match hook_runner_main(&theirs, &hook, user) {
                Ok(()) => 0,
                Err(e) => {
                    tracing::error!("hook runner: {e}");
                    1
                }
            };
            std::process::exit(code)
        }
        Err(e) => Err(format!("cannot start the hook runner: {e}")),
    }
}

fn hook_runner_main(sock: &Socket, hook: &std::path::Path, user: Option<&str>) -> Result<(), String> {
    privileges::drop_root(user)?;
    confinement::confine_hook_runner()?;
    let mut children: Vec<std::process::Child> = Vec::new();
    while let Some(mut bytes) = next_datagram(sock, HOOK_ENV_MAX + 1, "the helper's requests")? {
        children.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_))));
        bytes.truncate(HOOK_ENV_MAX);
        let mut cmd = std::process::Command::new(hook);
        cmd.env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").stdin(std::process::Stdio::null());
        for pair in bytes.split(|&b| b == 0).filter(|p| !p.is_empty()) {
            let text = String::from_utf8_lossy(pair);
            match text.split_once('=') {
                Some((k, v)) if HOOK_VARIABLES.contains(&k) => {
                    cmd.env(k, v);
                }
                _ => tracing::warn!("hook runner: ignored a variable that is not a hook's"),
            }
        }
        match cmd.spawn() {
            Ok(child) => children.push(child),
            Err(e) => tracing::warn!("hook {}: {e}", hook.display()),
        }
    }
    Ok(())
}
