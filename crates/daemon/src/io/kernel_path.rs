//! The kernel data path at the daemon's end (relay and client): loading and attaching
//! the eBPF programs before the daemon confines itself (`DataPath`), and the peer list
//! the state machine keeps ([`KernelPeers`]) over the programs' map.
//!
//! What it assumes: Linux 6.6 or later (tc programs attached as links that go with the
//! process), IPv4 arriving on Ethernet interfaces there when the daemon starts (a
//! relay's up; a client's up or down), and
//! at most four local IPv4 addresses the service socket receives on (packets to others
//! go through the daemon; a client lists them again after each network change). It
//! turns IPv4 forwarding on for the Teredo interface alone: the route look-up the
//! encapsulation uses asks for it, and nothing arrives there as IPv4.

use crate::io::netlink::Netlink;
use crate::io::route_watch::{Changed, Listing, RouteWatch};
use crate::io::udp_batch::SendBatch;
use shipworm_kernel_path::{monotonic_ns, Attached, KernelPath, PeerMap, RouteVerdicts, Settings, COUNTERS};
pub use shipworm_kernel_path::{DecapHook, Switch};
use shipworm_proto::transmit::KernelPeers;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// How long a relay's route verdicts are kept at most, for the changes the
/// kernel tells of to nobody (a path MTU it learns, an MTU set by sysctl).
pub const ROUTE_REFRESH: Duration = Duration::from_secs(1);

/// How long the host's routing must stay unchanged before verdicts are kept again: a
/// host whose routes change all the time (a router fed a full table) is listed at most
/// this often, and its packets meanwhile look their routes up.
const ROUTES_SETTLE: Duration = Duration::from_millis(200);

/// Keeps a relay's route verdicts (`tun`: its Teredo interface) to the host's
/// routing until `stop`, each family's on its own: void at once when the kernel tells
/// of a change to it, kept again once that routing has stayed unchanged a while, of
/// the kinds it allows (`RouteWatch::verdicts_allowed`,
/// `RouteWatch::mapping_verdicts_allowed`), and renewed every [`ROUTE_REFRESH`]. A
/// generation that cannot be moved leaves verdicts that may be wrong: the programs are
/// turned off then; if that fails too, the relay stops (`halt`) and this says why.
pub fn follow_routes(
    watch: &mut RouteWatch,
    switch: &Switch,
    tun: u32,
    stop: &AtomicBool,
    halt: &AtomicBool,
) -> Result<(), String> {
    // How soon a stop is noticed at the latest: the owner wakes the watch when it stops
    // it or fails (`RouteWatch::stopped_by`), so this is only a backstop.
    const STOP_CHECK: Duration = Duration::from_secs(30);
    let start = Instant::now();
    let (mut ipv6, mut ipv4) = (Following::<RouteVerdicts>::new(start), Following::<bool>::new(start));
    // A relay through the host's stack keeps no IPv6 verdict, and a kernel that may
    // preempt the programs none of the mappings' (per CPU): their routing is not even
    // listed then.
    let follow6 = switch.most_route_verdicts() > RouteVerdicts::None;
    let preempts = switch.most_route_verdicts() < RouteVerdicts::ClientsAndDestinations;
    let follow4 = switch.may_keep_mapping_verdicts();
    if !follow4 && shipworm_kernel_path::preempts_programs() {
        tracing::info!("kernel data path: {MAPPINGS_NOT_ON_RT}");
    }
    let tell4 = |keep: bool| switch.mapping_verdicts(keep);
    let tell6 = |keep: RouteVerdicts| switch.route_verdicts(keep);
    while !stop.load(Ordering::Relaxed) && !halt.load(Ordering::Relaxed) {
        let now = Instant::now();
        let wait_of = |follow: bool, wait: Duration| if follow { wait } else { Duration::MAX };
        let wait = wait_of(follow6, ipv6.wait(now)).min(wait_of(follow4, ipv4.wait(now)));
        let changed = watch.changed_within(STOP_CHECK.min(wait));
        let now = Instant::now();
        // A change heard is voided at once, before either family is listed; while one
        // family's routing is listed (a full table takes a while), the other's
        // verdicts are voided at once on a change to it, and renewed when due.
        if let Err(e) = ipv6.meanwhile(changed.ipv6 && follow6, tell6) {
            return cannot_void(switch, halt, &e);
        }
        if let Err(e) = ipv4.meanwhile(changed.ipv4 && follow4, tell4) {
            return cannot_void(switch, halt, &e);
        }
        let mut failed = None;
        let keep6 = ipv6.step(changed.ipv6 || !follow6, now, || {
            let mut meanwhile = |c: Changed| ipv4.meanwhile_noting(c.ipv4 && follow4, tell4, &mut failed);
            watch.verdicts_allowed(tun, stop, &mut meanwhile).map(|allowed| ipv6_verdicts_said(allowed, preempts))
        });
        if let Some(e) = failed.take() {
            return cannot_void(switch, halt, &e);
        }
        if let Some(keep) = keep6 {
            if let Err(e) = tell6(keep) {
                return cannot_void(switch, halt, &e);
            }
        }
        // The rest of a listing given up on is the socket's until the next wait drains
        // it: the kernel lists one at a time on a socket.
        if ipv6.gave_up {
            continue;
        }
        let keep4 = ipv4.step(changed.ipv4 || !follow4, now, || {
            let mut meanwhile = |c: Changed| ipv6.meanwhile_noting(c.ipv6 && follow6, tell6, &mut failed);
            watch.mapping_verdicts_allowed(stop, &mut meanwhile).map(mapping_verdicts_said)
        });
        if let Some(e) = failed.take() {
            return cannot_void(switch, halt, &e);
        }
        if let Some(keep) = keep4 {
            if let Err(e) = tell4(keep) {
                return cannot_void(switch, halt, &e);
            }
        }
    }
    // Nobody watches the routing from here on: nothing is kept.
    let failed = (ipv6.keeping != RouteVerdicts::None && switch.route_verdicts(RouteVerdicts::None).is_err())
        | (ipv4.keeping && switch.mapping_verdicts(false).is_err());
    if failed && switch.turn_off().is_err() {
        return Err("kernel data path: on stopping, the programs' route verdicts could not be voided, nor the programs turned off".into());
    }
    Ok(())
}

/// The programs' verdicts could not be voided (`e`): turned off, or if that fails too,
/// the relay stops.
fn cannot_void(switch: &Switch, halt: &AtomicBool, e: &std::io::Error) -> Result<(), String> {
    match switch.turn_off() {
        Ok(()) => {
            tracing::error!(
                "kernel data path: the programs' route verdicts could not be voided ({e}); turned off, every packet now goes through the daemon"
            );
            Ok(())
        }
        Err(off) => {
            halt.store(true, Ordering::Relaxed);
            Err(format!(
                "kernel data path: the programs' route verdicts could not be voided ({e}), nor the programs turned off ({off}): stopping"
            ))
        }
    }
}

/// Which IPv6 verdicts to keep of those the host's routing allows, and what the log
/// says of it.
fn ipv6_verdicts_said(allowed: RouteVerdicts, preempts: bool) -> (RouteVerdicts, String) {
    match allowed {
        RouteVerdicts::ClientsAndDestinations if preempts => (
            RouteVerdicts::Clients,
            "route verdicts kept, for clients only: this kernel may preempt a program for another on the same CPU (PREEMPT_RT), and native destinations' verdicts are kept per CPU, so each packet from a client looks its route up".into(),
        ),
        RouteVerdicts::ClientsAndDestinations => (
            allowed,
            "route verdicts kept, for clients and native destinations: the host's IPv6 routing depends on a packet's destination alone".into(),
        ),
        RouteVerdicts::Clients => (
            allowed,
            "route verdicts kept, for clients only: a multipath route shares flows among next hops, so each packet from a client looks its route up".into(),
        ),
        RouteVerdicts::None => (
            allowed,
            "no IPv6 route verdicts kept: the host's IPv6 routing may depend on more than a packet's destination (policy rules, routes by source, nexthop objects listed without their next hops, or multipath through the Teredo interface), so each packet looks its IPv6 route up".into(),
        ),
    }
}

/// Whether to keep the verdicts on the routes to clients' mappings, and what the log
/// says of it.
fn mapping_verdicts_said(allowed: bool) -> (bool, String) {
    if allowed {
        (true, "route verdicts kept for clients' mappings: no IPv4 route shares flows among next hops".into())
    } else {
        (false, "no route verdicts kept for clients' mappings: an IPv4 route shares flows among next hops (by the neighbours' state too, which nobody announces), so each packet to a client looks its IPv4 route up".into())
    }
}

/// Why a kernel that may preempt the programs keeps no mapping's verdict.
const MAPPINGS_NOT_ON_RT: &str = "no route verdicts kept for clients' mappings: this kernel may preempt a program for another on the same CPU (PREEMPT_RT), and they are kept per CPU, so each packet to a client looks its IPv4 route up";

/// One family's route verdicts as the relay follows the host's routing of it.
struct Following<K> {
    /// What the programs keep now (`K::default()`: nothing).
    keeping: K,
    /// Since when the routing has been changing: listed once it has stood still.
    unsettled: Option<Instant>,
    next_refresh: Instant,
    /// What the log last said of it, so that it says each thing once.
    said: Option<String>,
    /// Its last `step` gave a listing up before the kernel had sent all of it.
    gave_up: bool,
}

impl<K: Copy + PartialEq + Default> Following<K> {
    /// A listing is due from the start: nothing is kept until it says so.
    fn new(now: Instant) -> Following<K> {
        Following {
            keeping: K::default(),
            unsettled: Some(now.checked_sub(ROUTES_SETTLE).unwrap_or(now)),
            next_refresh: now + ROUTE_REFRESH,
            said: None,
            gave_up: false,
        }
    }

    /// How long until it has something to do.
    fn wait(&self, now: Instant) -> Duration {
        match self.unsettled {
            Some(since) => (since + ROUTES_SETTLE).saturating_duration_since(now),
            None if self.keeping != K::default() => self.next_refresh.saturating_duration_since(now),
            None => Duration::MAX,
        }
    }

    /// While the other family's routing is listed: told at once what is to be voided on
    /// a change to this one (`changed`), and renewed when due, by `tell`.
    fn meanwhile(&mut self, changed: bool, tell: impl FnOnce(K) -> std::io::Result<()>) -> std::io::Result<()> {
        let now = Instant::now();
        let nothing = K::default();
        if changed {
            self.unsettled = Some(now);
        }
        if self.keeping == nothing || !(changed || now >= self.next_refresh) {
            return Ok(());
        }
        if changed {
            self.keeping = nothing;
        }
        self.next_refresh = now + ROUTE_REFRESH;
        tell(self.keeping)
    }

    /// [`Following::meanwhile`] as a listing's hook: false (the listing ends) once
    /// telling failed, the failure kept in `failed` for the caller.
    fn meanwhile_noting(
        &mut self,
        changed: bool,
        tell: impl FnOnce(K) -> std::io::Result<()>,
        failed: &mut Option<std::io::Error>,
    ) -> bool {
        match self.meanwhile(changed, tell) {
            Ok(()) => true,
            Err(e) => {
                failed.get_or_insert(e);
                false
            }
        }
    }

    /// What the programs are to keep from now on, if they are to be told (each telling
    /// voids what they kept): nothing at once on a change (`changed`); what `list`
    /// allows (with what the log says of it) once the routing has stood still; the
    /// same again when due for renewal.
    fn step(&mut self, changed: bool, now: Instant, list: impl FnOnce() -> Result<(K, String), Listing>) -> Option<K> {
        let nothing = K::default();
        self.gave_up = false;
        let keep = if changed {
            self.unsettled = Some(now);
            if self.keeping == nothing {
                return None;
            }
            nothing
        } else if self.unsettled.is_some_and(|since| now >= since + ROUTES_SETTLE) {
            self.unsettled = None;
            let listed = list();
            self.gave_up = listed.is_err();
            let (keep, say, warn) = match listed {
                Ok((keep, say)) => (keep, say, false),
                Err(Listing::Changed) => {
                    self.unsettled = Some(now);
                    (nothing, String::new(), false)
                }
                // Listed again in a while, or on the next change.
                Err(Listing::Failed(e)) => {
                    self.unsettled = Some(now + ROUTE_REFRESH);
                    (nothing, format!("{e}; each packet looks its route up meanwhile"), true)
                }
            };
            if !say.is_empty() && self.said.as_deref() != Some(say.as_str()) {
                if warn {
                    tracing::warn!("kernel data path: {say}");
                } else {
                    tracing::info!("kernel data path: {say}");
                }
                self.said = Some(say);
            }
            if keep == nothing && self.keeping == nothing {
                return None;
            }
            keep
        } else if self.keeping != nothing && now >= self.next_refresh {
            self.keeping
        } else {
            return None;
        };
        self.next_refresh = now + ROUTE_REFRESH;
        self.keeping = keep;
        Some(keep)
    }
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

/// [`KernelPeers`] for a node's output with a `batch` ([`SendBatch`], its service
/// socket's) and a `kernel` (`Option<KernelPeerList>`): the list's calls, a listing
/// letting the batch go first ([`KernelPeerList::trust_after`]).
#[macro_export]
macro_rules! kernel_peers_after_sends {
    ($output:ty) => {
        impl shipworm_proto::transmit::KernelPeers for $output {
            fn trust(&mut self, peer: &std::net::Ipv6Addr, mapped: std::net::SocketAddrV4, heard: std::time::Duration) {
                if let Some(k) = &mut self.kernel {
                    k.trust_after(&mut self.batch, peer, mapped, heard);
                }
            }
            fn forget(&mut self, peer: &std::net::Ipv6Addr) {
                if let Some(k) = &mut self.kernel {
                    shipworm_proto::transmit::KernelPeers::forget(k, peer);
                }
            }
            fn heard_and_sent(
                &mut self,
                peer: &std::net::Ipv6Addr,
            ) -> Option<(std::time::Duration, Option<std::time::Duration>)> {
                shipworm_proto::transmit::KernelPeers::heard_and_sent(self.kernel.as_mut()?, peer)
            }
        }
    };
}

/// The state machine's view of the programs' map: its clock converted to the kernel's.
pub struct KernelPeerList {
    map: PeerMap,
    /// CLOCK_MONOTONIC at the relay's time zero.
    base: u64,
    refused: Arc<AtomicU64>,
    switch: Switch,
}

impl KernelPeerList {
    /// [`KernelPeers::trust`] for a node that batches its service socket's datagrams in
    /// `batch`: what it holds leaves first, so that a waiting peer's queue, sent just
    /// before its listing, is not overtaken by what the kernel sends the peer next.
    pub fn trust_after(&mut self, batch: &mut SendBatch, peer: &Ipv6Addr, mapped: SocketAddrV4, heard: Duration) {
        if !batch.is_empty() {
            batch.flush();
        }
        self.trust(peer, mapped, heard);
    }

    /// The map may hold a peer we no longer trust, at a mapping we no longer know:
    /// the programs are turned off, and every packet goes through the daemon.
    fn lost(&self, why: &str) {
        let off = self.switch.turn_off();
        tracing::error!(
            "kernel data path: {why}; turned off ({}), every packet now goes through the daemon",
            off.map_or_else(|e| format!("which failed too: {e}"), |()| "done".to_string())
        );
    }
}

impl KernelPeers for KernelPeerList {
    fn trust(&mut self, peer: &Ipv6Addr, mapped: SocketAddrV4, heard: Duration) {
        let at = self.base.saturating_add(u64::try_from(heard.as_nanos()).unwrap_or(u64::MAX));
        if let Err(e) = self.map.trust(peer, mapped, at) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            if e.kind() == std::io::ErrorKind::Other {
                self.lost(&format!("{peer}: {e}"));
            }
        }
    }

    fn forget(&mut self, peer: &Ipv6Addr) {
        if let Err(e) = self.map.forget(peer) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            self.lost(&format!("{peer} could not be taken out of the peer map: {e}"));
        }
    }

    fn heard_and_sent(&mut self, peer: &Ipv6Addr) -> Option<(Duration, Option<Duration>)> {
        let entry = self.map.get(peer).ok()??;
        let ours = |at: u64| Duration::from_nanos(at.saturating_sub(self.base));
        Some((ours(entry.heard), entry.unanswered.map(ours)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(list.heard(&peer).is_some(), "then listed");
        // Nothing batched: listed all the same.
        let other: Ipv6Addr = "2001:0:4136:e378:8000:63bf:3fff:fdd3".parse().unwrap();
        list.trust_after(&mut batch, &other, SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 45), 40001), Duration::ZERO);
        assert!(list.heard(&other).is_some());
    }

    /// One family's verdicts: kept once its routing has stood still and the listing
    /// allows them, void at once on a change, renewed each second; and, while the
    /// other family's routing is listed, voided at once on a change and renewed when
    /// due all the same.
    #[test]
    fn each_familys_verdicts_are_voided_at_once_and_renewed_on_time_even_while_the_other_lists() {
        let t0 = Instant::now();
        let mut f = Following::<bool>::new(t0);
        let allow = || Ok((true, "kept".to_string()));
        assert_eq!(f.step(false, t0, allow), Some(true), "listed at the start, kept");
        assert_eq!(f.step(false, t0 + Duration::from_millis(500), allow), None, "nothing due");
        assert_eq!(f.step(false, t0 + ROUTE_REFRESH, allow), Some(true), "renewed");
        let changed = t0 + ROUTE_REFRESH + Duration::from_millis(10);
        assert_eq!(f.step(true, changed, allow), Some(false), "void at once");
        assert_eq!(f.step(false, changed + Duration::from_millis(100), allow), None, "not settled");
        let settled = changed + ROUTES_SETTLE;
        assert_eq!(f.step(false, settled, allow), Some(true), "settled, listed again");
        // While the other family lists: nothing to tell before the renewal is due...
        let mut told = Vec::new();
        f.meanwhile(false, |k| {
            told.push(k);
            Ok(())
        })
        .unwrap();
        assert!(told.is_empty(), "told {told:?} before the renewal was due");
        // ...renewed once due (the clock is the real one here: the renewal is made
        // due by hand)...
        f.next_refresh = Instant::now();
        f.meanwhile(false, |k| {
            told.push(k);
            Ok(())
        })
        .unwrap();
        // ...and voided at once on a change, then left alone until listed again.
        f.meanwhile(true, |k| {
            told.push(k);
            Ok(())
        })
        .unwrap();
        f.meanwhile(true, |k| {
            told.push(k);
            Ok(())
        })
        .unwrap();
        assert_eq!(told, [true, false]);
        assert!(!f.keeping && f.unsettled.is_some());
        // A failure to tell is the caller's.
        let mut g = Following::<RouteVerdicts>::new(t0);
        g.step(false, t0, || Ok((RouteVerdicts::Clients, String::new())));
        assert!(g.meanwhile(true, |_| Err(std::io::Error::other("refused"))).is_err());
        // A listing that fails keeps nothing and is tried again a second later.
        let mut h = Following::<bool>::new(t0);
        assert_eq!(h.step(false, t0, || Err(Listing::Failed("no".into()))), None);
        assert_eq!(h.step(false, t0 + ROUTES_SETTLE + Duration::from_millis(1), allow), None, "too soon");
        assert_eq!(h.step(false, t0 + ROUTE_REFRESH + ROUTES_SETTLE, allow), Some(true));
    }
}
