//! The kernel data path at the daemon's end (relay and client): the `DataPath`
//! directive, and loading and attaching the eBPF programs before the daemon confines
//! itself, here; the peer list the state machine keeps over the programs' map in
//! `peer_list`; a relay's route verdicts following the host's routing in `routes`.
//!
//! What it assumes: Linux 6.6 or later (tc programs attached as links that go with the
//! process), IPv4 arriving on Ethernet interfaces there when the daemon starts (a
//! relay's up; a client's up or down), and
//! at most four local IPv4 addresses the service socket receives on (packets to others
//! go through the daemon; a client lists them again after each network change). It
//! turns IPv4 forwarding on for the Teredo interface alone: the route look-up the
//! encapsulation uses asks for it, and nothing arrives there as IPv4.

use crate::io::netlink::Netlink;
use crate::io::route_watch::RouteWatch;
use shipworm_kernel_path::{monotonic_ns, Attached, KernelPath, Settings, COUNTERS};
pub use shipworm_kernel_path::{DecapHook, Switch};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

mod peer_list;
mod routes;
pub use peer_list::KernelPeerList;
pub use routes::{follow_routes, ROUTE_REFRESH};

/// Where a relay or a client moves its trusted peers' packets (`DataPath`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPath {
    /// In the kernel (eBPF), or the daemon does not start.
    Kernel,
    /// Through the daemon, every packet.
    User,
    /// In the kernel where the programs load and attach; otherwise through the daemon,
    /// with one warning line saying why.
    Auto,
}

impl DataPath {
    /// The directive's value, in any case.
    pub fn parse(v: &str) -> Result<DataPath, String> {
        match v.to_ascii_lowercase().as_str() {
            "kernel" => Ok(DataPath::Kernel),
            "user" => Ok(DataPath::User),
            "auto" => Ok(DataPath::Auto),
            _ => Err("expected kernel, user or auto".into()),
        }
    }
}

/// The programs, attached, and what the status tells of them.
pub struct KernelDataPath {
    /// The links and the maps: no program descriptor stays once attached.
    path: Attached,
    /// Where the decapsulation runs: XDP in the driver on every interface, or tc
    /// ingress on at least one.
    pub decap: DecapHook,
    /// The interfaces the decapsulation is attached to.
    pub interfaces: Vec<String>,
    /// A relay's packets leave straight by their routes, past the host's stack.
    pub direct: bool,
    /// Peers the map refused (full) or map calls that failed.
    pub refused: Arc<AtomicU64>,
    /// The kernel's ids of the programs (read at set-up: the confined relay may not
    /// ask), for the status.
    pub programs: Vec<u32>,
    /// A relay's watch on the host's routing and its Teredo interface's index, for
    /// [`follow_routes`].
    pub routes: Option<(RouteWatch, u32)>,
    /// A relay's (not a client's).
    pub relay: bool,
}

/// What the daemon needs to know to set the kernel path up.
pub struct Want<'a> {
    /// `DataPath`.
    pub mode: DataPath,
    /// A host-specific relay never has one (the kernel cannot tell its served addresses).
    pub host_specific: bool,
    /// A client's: decapsulated packets go into the Teredo interface.
    pub client: bool,
    /// The Teredo interface.
    pub tun: &'a str,
    /// The service socket's address.
    pub local: SocketAddrV4,
    /// The peer cap.
    pub peers: usize,
    /// The Teredo prefix (a client's: the one its addresses take, `Prefix` or the
    /// standard one; only its native peers are told apart by it).
    pub prefix: u32,
    /// The decapsulation at tc ingress even where the driver has XDP (`DecapHook tc`).
    pub decap_tc: bool,
    /// A relay's: straight between interfaces, past the host's IPv6 stack
    /// (`KernelForward direct`).
    pub direct: bool,
}

/// Why the kernel path was not set up, or `Ok(None)` for `DataPath user`.
pub fn start(want: &Want<'_>) -> Result<Option<KernelDataPath>, String> {
    let why_not = match want.mode {
        DataPath::User => return Ok(None),
        // Not a failure to tell of: what it serves is the host's, and few packets.
        DataPath::Auto if want.host_specific => return Ok(None),
        _ if want.host_specific => Err("a host-specific relay has no kernel data path".to_string()),
        _ => attach(want),
    };
    match (why_not, want.mode) {
        (Ok(k), _) => Ok(Some(k)),
        (Err(e), DataPath::Kernel) => Err(format!("DataPath kernel: {e} (or set DataPath user)")),
        (Err(e), _) => {
            tracing::warn!("DataPath auto: {e}; every packet goes through the daemon");
            Ok(None)
        }
    }
}

/// Linux `need` or later (the tc links: 6.6; the route look-up's preferred source, for
/// a service socket bound to no address in particular: 6.7).
fn kernel_at_least(need: (u32, u32)) -> Result<(), String> {
    // SAFETY: uname fills the struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return Err(format!("uname: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: release is a NUL-terminated string uname wrote.
    let text = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }.to_string_lossy().into_owned();
    let mut parts = text.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) >= need {
        Ok(())
    } else {
        Err(format!(
            "Linux {text} is older than {}.{} (tc programs as links: 6.6; the route's preferred source, for a socket bound to no address: 6.7)",
            need.0, need.1
        ))
    }
}

/// The state machines' figures the programs judge by.
fn contract() -> shipworm_kernel_path::Contract {
    shipworm_proto::kernel_figures::KERNEL_FIGURES.into()
}

/// The decapsulation on every Ethernet interface that takes it: their names and the
/// hooks it runs at. Refused where none does.
fn attach_decap(path: &mut KernelPath, nl: &Netlink, want: &Want<'_>) -> Result<(Vec<String>, Vec<DecapHook>), String> {
    let (mut interfaces, mut modes, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    // A client's interfaces that are down too: a phone's second radio comes up when it
    // moves, and its packets are the client's to carry.
    for (index, name) in nl.ethernet_links(want.client)? {
        // A relay's decapsulated packets arrive there as IPv6: an interface without it
        // would drop them (a client's go into the Teredo interface).
        let v6_off = std::fs::read_to_string(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"));
        if !want.client && v6_off.is_ok_and(|v| v.trim() == "1") {
            refused.push(format!("{name} has IPv6 disabled"));
            continue;
        }
        match path.attach_decap(index, &name, want.decap_tc) {
            Ok(m) => {
                interfaces.push(name);
                modes.push(m);
            }
            Err(e) => refused.push(e.to_string()),
        }
    }
    if interfaces.is_empty() {
        let none = if want.client { "no Ethernet interface" } else { "no Ethernet interface is up" };
        return Err(if refused.is_empty() { none.to_string() } else { refused.join("; ") });
    }
    for r in refused {
        tracing::warn!("{r}: IPv4 arriving there goes through the daemon");
    }
    Ok((interfaces, modes))
}

fn attach(want: &Want<'_>) -> Result<KernelDataPath, String> {
    kernel_at_least(if want.local.ip().is_unspecified() { (6, 7) } else { (6, 6) })?;
    let nl = Netlink::new()?;
    let local: Vec<Ipv4Addr> = if want.local.ip().is_unspecified() {
        nl.ipv4_subnets()?.into_iter().map(|(a, _)| a).filter(|a| !a.is_loopback()).take(4).collect()
    } else {
        vec![*want.local.ip()]
    };
    let settings = Settings {
        peers: u32::try_from(want.peers).unwrap_or(u32::MAX),
        local,
        source: Some(*want.local.ip()).filter(|a| !a.is_unspecified()),
        port: want.local.port(),
        ttl: 64,
        prefix: want.prefix.to_be_bytes(),
        client_tun: None,
        direct_tun: None,
        relay_tun: None,
        contract: contract(),
    };
    // A relay's programs keep the route to each client's mapping (a direct relay's,
    // each peer's IPv6 route too) until told the host's routing changed: subscribed
    // before they load, so that no change comes between. (A relay through the stack
    // on a kernel that may preempt the programs keeps nothing: no watch.)
    let keeps = want.direct || !shipworm_kernel_path::preempts_programs();
    if !want.client && !keeps {
        tracing::info!("kernel data path: no route verdicts kept: this kernel may preempt a program for another on the same CPU (PREEMPT_RT), and a relay through the host's stack keeps only clients' mappings' verdicts, per CPU, so each packet to a client looks its IPv4 route up");
    }
    let watch = if want.client || !keeps { None } else { Some(RouteWatch::new()?) };
    let tun = nl.link_index(want.tun)?;
    let routes = watch.map(|w| (w, tun));
    let settings = Settings {
        client_tun: want.client.then_some(tun),
        direct_tun: (want.direct && !want.client).then_some(tun),
        relay_tun: (!want.client).then_some(tun),
        ..settings
    };
    let mut path = KernelPath::load(&settings).map_err(|e| e.to_string())?;
    let (interfaces, modes) = attach_decap(&mut path, &nl, want)?;
    path.attach_encap(want.tun).map_err(|e| e.to_string())?;
    // The encapsulation's route look-up is made as if a packet arrived on the Teredo
    // interface, which the kernel refuses where IPv4 forwarding is off: on for it alone,
    // once its guard (attached with the encapsulation) lets nothing but IPv6 in.
    nl.enable_ipv4_forwarding(tun)?;
    let decap = if modes.contains(&DecapHook::Tc) { DecapHook::Tc } else { DecapHook::Xdp };
    let path = path.keep_links().map_err(|e| e.to_string())?;
    let programs = path.program_ids().to_vec();
    let direct = want.direct && !want.client;
    Ok(KernelDataPath {
        path,
        decap,
        interfaces,
        direct,
        refused: Arc::new(AtomicU64::new(0)),
        programs,
        routes,
        relay: !want.client,
    })
}

impl KernelDataPath {
    /// The peer list for one worker; `now` is the relay's clock now.
    pub fn peers(&self, now: Duration) -> KernelPeerList {
        let base = monotonic_ns().saturating_sub(u64::try_from(now.as_nanos()).unwrap_or(u64::MAX));
        KernelPeerList { map: self.path.peers(), base, refused: self.refused.clone(), switch: self.path.switch() }
    }

    /// The programs' settings that change after set-up (a client's address and local
    /// addresses).
    pub fn switch(&self) -> Switch {
        self.path.switch()
    }

    /// The programs' counters, in [`Counter::ALL`]'s order (zeros if the map cannot be
    /// read).
    pub fn counters(&self) -> [u64; COUNTERS] {
        self.path.counters().unwrap_or([0; COUNTERS])
    }

    /// One line for the log.
    pub fn describe(&self) -> String {
        format!(
            "kernel data path: decapsulation {} on {}, encapsulation at tc egress of the Teredo interface{}",
            match self.decap {
                DecapHook::Xdp => "by XDP in the driver",
                DecapHook::Tc => "at tc ingress (on one interface at least)",
            },
            self.interfaces.join(", "),
            if self.direct {
                "; forwarding directly: trusted peers' packets leave by their routes as they arrive, past the host's IPv6 stack and its firewall"
            } else {
                ""
            }
        )
    }

    /// How a relay's packets are forwarded, as the status names it.
    pub fn forward_name(&self) -> &'static str {
        if self.direct {
            "direct"
        } else {
            "stack"
        }
    }

    /// Where the decapsulation runs, as the status names it.
    pub fn decap_name(&self) -> &'static str {
        match self.decap {
            DecapHook::Xdp => "xdp",
            DecapHook::Tc => "tc",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::udp_batch::SendBatch;
    use std::net::Ipv6Addr;

    /// Where the programs cannot be set up (here: no such Teredo interface), `DataPath
    /// kernel` refuses to start with the cause and the way out, `auto` goes on without
    /// them, and `user` never tries; a host-specific relay has none, said only when asked.
    #[test]
    fn each_data_path_mode_meets_a_kernel_path_that_cannot_be_set_up_as_documented() {
        let want = |mode, host_specific| Want {
            mode,
            host_specific,
            client: false,
            tun: "no-such-teredo",
            local: SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 3544),
            peers: 16,
            prefix: 0x2001_0000,
            decap_tc: false,
            direct: false,
        };
        let refused = start(&want(DataPath::Kernel, false)).err().expect("DataPath kernel refuses");
        assert!(refused.starts_with("DataPath kernel: ") && refused.ends_with(" (or set DataPath user)"), "{refused}");
        // The cause: the missing interface, or on a kernel before 6.6 its version.
        assert!(refused.contains("no-such-teredo") || refused.contains("is older than"), "{refused}");
        assert!(start(&want(DataPath::Auto, false)).expect("auto goes on").is_none());
        assert!(start(&want(DataPath::User, false)).expect("user").is_none());
        let host = start(&want(DataPath::Kernel, true)).err().expect("refused");
        assert!(host.contains("host-specific relay has no kernel data path"), "{host}");
        assert!(start(&want(DataPath::Auto, true)).expect("quietly").is_none());
    }

    /// A peer enters the kernel's list only once what the send batch held has left: a
    /// waiting peer's queue, pushed just before its listing, is on its way before the
    /// kernel may send the peer anything.
    #[test]
    fn a_peer_is_listed_only_after_the_batched_datagrams_have_left() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: loading the programs needs root");
            return;
        }
        let path = KernelPath::load(&Settings::relay(Ipv4Addr::new(192, 0, 2, 1), 16, contract()))
            .expect("the programs load (root, a kernel with BPF)");
        let mut list = KernelPeerList { map: path.peers(), base: 0, refused: Arc::default(), switch: path.switch() };
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let std::net::SocketAddr::V4(to) = rx.local_addr().unwrap() else { unreachable!() };
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut batch = SendBatch::new(tx, 8, 2048);
        batch.push(to, b"queued");
        let peer: Ipv6Addr = "2001:0:4136:e378:8000:63bf:3fff:fdd2".parse().unwrap();
        list.trust_after(&mut batch, &peer, SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 45), 40000), Duration::ZERO);
        assert!(batch.is_empty(), "the batch went first");
        let mut got = [0u8; 16];
        assert_eq!(rx.recv(&mut got).map(|n| got[..n].to_vec()).ok(), Some(b"queued".to_vec()));
        assert!(list.seen(&peer).is_some(), "then listed");
        // Nothing batched: listed all the same.
        let other: Ipv6Addr = "2001:0:4136:e378:8000:63bf:3fff:fdd3".parse().unwrap();
        list.trust_after(&mut batch, &other, SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 45), 40001), Duration::ZERO);
        assert!(list.seen(&other).is_some());
    }
}
