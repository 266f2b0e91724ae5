//! shipworm's kernel data path: two eBPF programs that move the packets of peers the
//! relay's or the client's state machine already trusts, and their loader.
//!
//! * `teredo_decap` (XDP at the IPv4 interface; `teredo_ingress` at tc ingress where
//!   the driver has no XDP, and always for a client and a direct relay): a plain IPv6
//!   packet from a trusted peer at its recorded mapping loses its IPv4 and UDP headers
//!   and goes to IPv6 forwarding (relay), straight out of its IPv6 route (a direct
//!   relay), or into the Teredo interface's receive path (client).
//! * `teredo_encap` (tc egress at the Teredo interface): a packet for a trusted peer
//!   heard from within its validity (30 s, [`Contract`]) gets them and leaves by the IPv4 route. A direct relay's
//!   `teredo_ingress` does the same for a native packet as it arrives, when the host
//!   would route it into the Teredo interface.
//!
//! Everything else continues to the socket or the TUN untouched. The state machine stays
//! the only authority: userland fills the peer map ([`PeerMap`]) and the programs only
//! read it (and write a peer's last-heard time). The programs are attached as BPF links
//! owned by this process: when it exits, crashes included, they go.

#[cfg(test)]
mod layout_check;
mod maps;
mod test_run;

pub use maps::{monotonic_ns, Counter, PeerEntry, PeerMap, RouteVerdicts, Switch, COUNTERS, MAP_COMMANDS};
pub use test_run::{run_live, TestRun};

use aya::maps::Map;
use aya::programs::{SchedClassifier, TcAttachType, Xdp, XdpFlags};
use aya::{Ebpf, EbpfLoader};
use maps::{ConfigValue, FrozenValue};
use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `d` in nanoseconds, as the programs' clock counts.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/teredo.bpf.o"));

/// Whether this build has the programs (built with the `programs` feature, the
/// default, which needs clang).
pub fn built() -> bool {
    !OBJECT.is_empty()
}

/// The state machines' figures the programs judge by, handed to them in their
/// configuration at load, so that none is written again in C: whoever loads the
/// programs fills it from `shipworm_proto` (the daemon, the benchmark, the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contract {
    /// A peer is valid while heard from within it (RFC 4380 §5.2.4; `VALIDITY`).
    pub validity: Duration,
    /// A peer's last-heard time is written at most this often (`KERNEL_HEARD_GRAIN`).
    pub heard_grain: Duration,
    /// A client's native peer sent to this long without a word back is tested again by
    /// userland: its packets go up (`RELAY_SILENCE`).
    pub silence: Duration,
    /// The Teredo prefixes' first 32 bits: RFC 4380's and the experimental one.
    pub teredo_prefixes: [[u8; 4]; 2],
}

impl From<(Duration, Duration, Duration, [[u8; 4]; 2])> for Contract {
    /// From `shipworm_proto::kernel_figures::KERNEL_FIGURES`, in its order.
    fn from((validity, heard_grain, silence, teredo_prefixes): (Duration, Duration, Duration, [[u8; 4]; 2])) -> Self {
        Contract { validity, heard_grain, silence, teredo_prefixes }
    }
}

/// What the programs need to know of the relay.
#[derive(Debug, Clone)]
pub struct Settings {
    /// At most this many trusted peers (the relay's peer cap).
    pub peers: u32,
    /// The IPv4 addresses the service socket receives on (at most 4).
    pub local: Vec<Ipv4Addr>,
    /// The encapsulation's source address; `None`: the route's preferred source.
    pub source: Option<Ipv4Addr>,
    /// The service port.
    pub port: u16,
    /// The encapsulation's TTL.
    pub ttl: u8,
    /// The relay's Teredo prefix (the first 32 bits of its clients' addresses); a
    /// client's (its own address's).
    pub prefix: [u8; 4],
    /// A client's: the index of its Teredo interface, where decapsulated packets
    /// arrive (`None`: a relay's, which forwards them).
    pub client_tun: Option<u32>,
    /// A relay's that forwards straight between interfaces, past the host's IPv6
    /// stack (`KernelForward direct`): the index of its Teredo interface, whose routes
    /// tell which native packets are for its clients.
    pub direct_tun: Option<u32>,
    /// A relay's, whichever way it forwards: the index of its Teredo interface, whose
    /// packets to clients are encapsulated (the route to each client's mapping may be
    /// kept, [`Switch::mapping_verdicts`]).
    pub relay_tun: Option<u32>,
    /// The state machines' figures.
    pub contract: Contract,
}

impl Settings {
    /// A relay's on `local`, port 3544, with room for `peers`, the standard prefix and
    /// no Teredo interface named: the programs as the tests and the benchmark load them.
    pub fn relay(local: Ipv4Addr, peers: u32, contract: Contract) -> Settings {
        Settings {
            peers,
            local: vec![local],
            source: None,
            port: 3544,
            ttl: 64,
            prefix: [0x20, 0x01, 0, 0],
            client_tun: None,
            direct_tun: None,
            relay_tun: None,
            contract,
        }
    }
}

/// Why the kernel data path is not there.
#[derive(Debug)]
pub enum Error {
    /// This build has no programs (clang was missing when it was built).
    NotBuilt,
    /// The kernel refused the programs or their maps.
    Load(String),
    /// A program could not be attached to an interface.
    Attach { program: &'static str, interface: String, cause: String },
    /// A map operation failed.
    Map(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotBuilt => {
                write!(f, "this shipworm was built without its kernel data path (--no-default-features)")
            }
            Error::Load(cause) => write!(f, "the kernel refused the eBPF programs: {cause}"),
            Error::Attach { program, interface, cause } => {
                write!(f, "cannot attach {program} to {interface}: {cause}")
            }
            Error::Map(e) => write!(f, "eBPF map: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// Where the decapsulation runs on an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecapHook {
    /// XDP in the driver, before any socket buffer is built.
    Xdp,
    /// tc ingress, on the socket buffer (drivers without XDP, or when told).
    Tc,
}

/// One of the programs, for [`KernelPath::test_run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// `teredo_decap` (XDP).
    DecapXdp,
    /// `teredo_ingress` (tc ingress), run as if the frame arrived on interface `.0`
    /// (0: the test run's loopback).
    TcIngress(u32),
    /// The same on a train the kernel joined on receive: interface `.0`, pieces of
    /// `.1` bytes of payload.
    TcIngressTrain(u32, u32),
    /// `teredo_encap` (tc egress), run on an Ethernet frame.
    Encap,
    /// The same, leaving by interface `.0` (a relay's Teredo interface).
    EncapOn(u32),
    /// `teredo_guard` (tc ingress of the Teredo interface), run on an Ethernet frame.
    Guard,
}

/// The slots a direct relay keeps native destinations' route verdicts in, 48 bytes
/// each (and as many of 40 bytes for its clients' mappings' IPv4 routes),
/// allocated at load for each CPU the kernel counts as possible (a per-CPU map
/// has a copy for each): this many shared out among them, a power of two a CPU within
/// [`DESTINATION_SLOTS_PER_CPU`]'s bounds (so 2,048 a CPU up to 8 CPUs, at most this
/// many in all up to 64, 256 a CPU beyond).
pub const DESTINATION_SLOTS: u32 = 16384;

/// The fewest and the most slots a CPU.
pub const DESTINATION_SLOTS_PER_CPU: (u32, u32) = (256, 2048);

/// A CPU's destination slots, for `cpus` possible CPUs.
pub fn destination_slots(cpus: usize) -> u32 {
    let each = (DESTINATION_SLOTS / u32::try_from(cpus.max(1)).unwrap_or(u32::MAX))
        .clamp(DESTINATION_SLOTS_PER_CPU.0, DESTINATION_SLOTS_PER_CPU.1);
    1 << (31 - each.leading_zeros())
}

/// The loaded programs and their maps. Dropping it detaches the programs.
pub struct KernelPath {
    bpf: Ebpf,
    /// What `attach_*` attached: the program and its link, for [`KernelPath::keep_links`].
    links: Vec<(&'static str, LinkId)>,
    maps: Maps,
}

/// A link made by `attach_*`.
enum LinkId {
    Xdp(aya::programs::xdp::XdpLinkId),
    Tc(aya::programs::tc::SchedClassifierLinkId),
}

/// The maps' descriptors and what the daemon keeps of the programs' settings: all it
/// needs once the programs are attached.
pub struct Maps {
    peers: PeerMap,
    counters: OwnedFd,
    cpus: usize,
    switch: Switch,
}

/// The programs once attached, as the daemon keeps them while it runs: their links and
/// the maps' descriptors, no program descriptor (a confined process has no use for
/// one, and seccomp lets it make no call on one).
pub struct Attached {
    /// Held for their closing: while a link is open its program stays attached, and it
    /// closes with the process.
    _links: Vec<Box<dyn std::any::Any + Send + Sync>>,
    /// The kernel's ids of the programs attached.
    programs: Vec<u32>,
    maps: Maps,
}

impl Attached {
    /// The kernel's ids of the programs attached (`bpftool prog show id N`): gone once
    /// the process is.
    pub fn program_ids(&self) -> &[u32] {
        &self.programs
    }
}

impl std::ops::Deref for KernelPath {
    type Target = Maps;
    fn deref(&self) -> &Maps {
        &self.maps
    }
}

impl std::ops::Deref for Attached {
    type Target = Maps;
    fn deref(&self) -> &Maps {
        &self.maps
    }
}

fn map_fd(bpf: &Ebpf, name: &str) -> Result<OwnedFd, Error> {
    let data = match bpf.map(name) {
        Some(Map::HashMap(d) | Map::Array(d) | Map::PerCpuArray(d)) => d,
        _ => return Err(Error::Load(format!("the object has no map {name}"))),
    };
    data.fd().as_fd().try_clone_to_owned().map_err(Error::Map)
}

impl KernelPath {
    /// Load the programs and create their maps (nothing is attached yet). Needs
    /// CAP_BPF and CAP_NET_ADMIN (or root).
    pub fn load(settings: &Settings) -> Result<KernelPath, Error> {
        if !built() {
            return Err(Error::NotBuilt);
        }
        let direct = settings.direct_tun.is_some() && settings.client_tun.is_none();
        let cpus = aya::util::nr_cpus().map_err(|(path, e)| Error::Load(format!("{path}: {e}")))?;
        let relay_tun = if settings.client_tun.is_none() { settings.direct_tun.or(settings.relay_tun) } else { None };
        // Mappings' verdicts are per CPU, as destinations': a relay's that knows its
        // Teredo interface, on a kernel that does not preempt the programs.
        let mappings = relay_tun.is_some() && !preempts_programs();
        // The same count of slots for mappings as for destinations (the keyed hash's
        // mask is shared).
        // (None kept, none allocated, where the kernel may preempt the programs.)
        let slots = if mappings { destination_slots(cpus) } else { 1 };
        let frozen = FrozenValue {
            source: settings.source.map_or([0; 4], |a| a.octets()),
            port: settings.port.to_be_bytes(),
            ttl: settings.ttl,
            client: u8::from(settings.client_tun.is_some()),
            prefix: settings.prefix,
            direct: u8::from(direct),
            spare: [0; 3],
            tun: settings.client_tun.or(relay_tun).unwrap_or(0),
            slot_key: random_key()?,
            slot_mask: slots - 1,
            validity_ns: nanos(settings.contract.validity),
            heard_grain_ns: nanos(settings.contract.heard_grain),
            silence_ns: nanos(settings.contract.silence),
            teredo: settings.contract.teredo_prefixes,
            decapsulated: decapsulated_mark()?,
            spare2: [0; 2],
        };
        let mut bpf = EbpfLoader::new()
            .set_global("frozen", &frozen, true)
            .set_max_entries("peers", settings.peers.max(1))
            .set_max_entries("destinations", if direct { slots } else { 1 })
            .set_max_entries("mapping_routes", slots)
            .load(OBJECT)
            .map_err(|e| Error::Load(e.to_string()))?;
        for (name, program) in bpf.programs_mut() {
            let loaded = match program {
                aya::programs::Program::Xdp(p) => p.load(),
                aya::programs::Program::SchedClassifier(p) => p.load(),
                _ => continue,
            };
            loaded.map_err(|e| Error::Load(format!("{name}: {}", verifier_cause(&e))))?;
        }
        let peers = PeerMap { fd: Arc::new(map_fd(&bpf, "peers")?), client: settings.client_tun.is_some() };
        let (config, counters) = (Arc::new(map_fd(&bpf, "config")?), map_fd(&bpf, "counters")?);
        let value = ConfigValue {
            local: maps::local_slots(&settings.local),
            own: [0; 16],
            // No route verdict kept until whoever watches the host's routing says so
            // (`Switch::route_verdicts`).
            routes: 0,
            routes4: 0,
            enabled: 1,
            l2: 0,
            single_path: 0,
            spare: 0,
        };
        // A kernel that preempts the programs could let two of them share one CPU's
        // destination verdicts.
        let most = if direct && !preempts_programs() {
            RouteVerdicts::ClientsAndDestinations
        } else if direct {
            RouteVerdicts::Clients
        } else {
            RouteVerdicts::None
        };
        let switch = Switch {
            fd: config,
            settings: Arc::new(Mutex::new(value)),
            frozen,
            generation: Arc::default(),
            most,
            mappings,
        };
        switch.set_address(None).map_err(Error::Map)?;
        Ok(KernelPath { bpf, links: Vec::new(), maps: Maps { peers, counters, cpus, switch } })
    }

    /// Attach the decapsulation to the IPv4 interface `ifindex`, `name`: XDP in the
    /// driver where it has it (unless `tc` is asked, or this is a direct relay's, whose
    /// packets only tc can send out of another), tc ingress otherwise. A client's: tc
    /// ingress always (only tc can hand a packet to its Teredo interface), and XDP in
    /// the driver where it has it, a client's `tc` ignored (XDP decapsulates before GRO,
    /// so that a TCP flow's segments reach the host joined).
    pub fn attach_decap(&mut self, ifindex: u32, name: &str, tc: bool) -> Result<DecapHook, Error> {
        let client = self.client();
        let tc = !client && (tc || self.direct());
        let xdp: &mut Xdp = self.program("teredo_decap")?;
        let mut hook = DecapHook::Tc;
        if !tc {
            if let Ok(id) = xdp.attach_to_if_index(ifindex, XdpFlags::DRV_MODE) {
                self.links.push(("teredo_decap", LinkId::Xdp(id)));
                if !client {
                    return Ok(DecapHook::Xdp);
                }
                hook = DecapHook::Xdp;
            }
        }
        // A client's XDP link comes first, so that it goes first: the links are dropped
        // in order and a killed process's descriptors closed in ascending order, and
        // XDP's marked packets must not outlive the tc program that hands them on (they
        // would reach the host on the Ethernet interface). Before the client has an
        // address, which it has not at load, XDP moves nothing.
        let attached = self.attach_tc(
            "teredo_ingress",
            name,
            TcAttachType::Ingress,
            if client {
                "teredo_decap (tc ingress, after XDP in the driver)"
            } else {
                "teredo_decap (XDP in the driver, or tc ingress)"
            },
        );
        if let Err(e) = attached {
            if hook == DecapHook::Xdp {
                if let Some(("teredo_decap", LinkId::Xdp(id))) = self.links.pop() {
                    let xdp: &mut Xdp = self.program("teredo_decap")?;
                    let _ = xdp.detach(id);
                }
            }
            return Err(e);
        }
        Ok(hook)
    }

    /// Attach the encapsulating program to the Teredo interface's egress (tcx), and the
    /// guard to its ingress: before IPv4 forwarding goes on for the interface (the
    /// caller's next step), nothing but IPv6 enters the host from it.
    pub fn attach_encap(&mut self, tun: &str) -> Result<(), Error> {
        self.attach_tc("teredo_encap", tun, TcAttachType::Egress, "teredo_encap (tc egress)")?;
        self.attach_tc("teredo_guard", tun, TcAttachType::Ingress, "teredo_guard (tc ingress of the Teredo interface)")
    }

    /// Attach tc program `name` at `interface`'s `hook`, its link kept; `what` names it
    /// in an error.
    fn attach_tc(
        &mut self,
        name: &'static str,
        interface: &str,
        hook: TcAttachType,
        what: &'static str,
    ) -> Result<(), Error> {
        let tc: &mut SchedClassifier = self.program(name)?;
        let id = tc.attach(interface, hook).map_err(|e| Error::Attach {
            program: what,
            interface: interface.to_owned(),
            cause: e.to_string(),
        })?;
        self.links.push((name, LinkId::Tc(id)));
        Ok(())
    }

    /// What stays once everything is attached: the links and the maps. Every program's
    /// own descriptor is closed (an attached one stays in the kernel through its link;
    /// one never attached is gone).
    pub fn keep_links(mut self) -> Result<Attached, Error> {
        let mut links = Vec::with_capacity(self.links.len());
        let mut programs = Vec::new();
        for (name, id) in std::mem::take(&mut self.links) {
            let program = self.bpf.program(name).and_then(|p| p.info().ok()).map(|i| i.id());
            programs.extend(program.filter(|id| !programs.contains(id)));
            let taken: Result<Box<dyn std::any::Any + Send + Sync>, _> = match id {
                LinkId::Xdp(id) => self.program::<Xdp>(name)?.take_link(id).map(|l| Box::new(l) as _),
                LinkId::Tc(id) => self.program::<SchedClassifier>(name)?.take_link(id).map(|l| Box::new(l) as _),
            };
            links.push(taken.map_err(|e| Error::Load(format!("{name}'s link: {e}")))?);
        }
        let KernelPath { bpf, maps, .. } = self;
        drop(bpf);
        Ok(Attached { _links: links, programs, maps })
    }

    fn program<'a, T>(&'a mut self, name: &'static str) -> Result<&'a mut T, Error>
    where
        &'a mut T: TryFrom<&'a mut aya::programs::Program>,
    {
        self.bpf
            .program_mut(name)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| Error::Load(format!("the object has no program {name}")))
    }

    /// The kernel's ids of the loaded programs (`bpftool prog show id N`): gone once
    /// the process and its links are.
    pub fn program_ids(&self) -> Vec<u32> {
        self.bpf.programs().filter_map(|(_, p)| p.info().ok()).map(|i| i.id()).collect()
    }

    /// Run `program` once on the Ethernet frame `packet` in the kernel
    /// (`BPF_PROG_TEST_RUN`), nothing attached: for tests (the encapsulation is told
    /// to expect the Ethernet header a Teredo interface does not have).
    pub fn test_run(&mut self, program: Program, packet: &[u8]) -> io::Result<TestRun> {
        let encap = matches!(program, Program::Encap | Program::EncapOn(_));
        self.maps.switch.change(|s| s.l2 = u8::from(encap))?;
        let (name, ifindex, gso_size) = match program {
            Program::DecapXdp => ("teredo_decap", 0, 0),
            Program::TcIngress(ifindex) => ("teredo_ingress", ifindex, 0),
            Program::TcIngressTrain(ifindex, gso_size) => ("teredo_ingress", ifindex, gso_size),
            Program::Encap => ("teredo_encap", 0, 0),
            Program::EncapOn(ifindex) => ("teredo_encap", ifindex, 0),
            Program::Guard => ("teredo_guard", 0, 0),
        };
        let program = self.bpf.program(name).ok_or_else(|| io::Error::other("no such program"))?;
        let fd = program.fd().map_err(io::Error::other)?;
        test_run::run(fd.as_fd(), packet, ifindex, gso_size)
    }
}

impl Maps {
    /// The programs' settings after set-up.
    pub fn switch(&self) -> Switch {
        self.switch.clone()
    }

    fn client(&self) -> bool {
        self.switch.frozen.client == 1
    }

    fn direct(&self) -> bool {
        self.switch.frozen.direct == 1
    }

    /// The peer map, for the state machines' adapter.
    pub fn peers(&self) -> PeerMap {
        self.peers.clone()
    }

    /// Every counter summed over the CPUs, in [`Counter::ALL`]'s order.
    pub fn counters(&self) -> io::Result<[u64; COUNTERS]> {
        let mut out = [0u64; COUNTERS];
        let mut per_cpu = vec![0u64; self.cpus];
        for (i, slot) in out.iter_mut().enumerate() {
            let key = (i as u32).to_ne_bytes();
            let buf: &mut [u64] = &mut per_cpu;
            // A per-CPU look-up writes one 8-byte value per possible CPU.
            let found = maps::lookup_slice(&self.counters, &key, buf)?;
            if found {
                *slot = per_cpu.iter().sum();
            }
        }
        Ok(out)
    }

    /// Bytes the kernel says the peer map takes now (its `memlock` in fdinfo).
    pub fn peer_map_bytes(&self) -> io::Result<u64> {
        let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", self.peers.fd.as_raw_fd()))?;
        text.lines()
            .find_map(|l| l.strip_prefix("memlock:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| io::Error::other("no memlock line in the map's fdinfo"))
    }
}

/// A secret for the programs (the slot hash's key, a client's decapsulation mark), from
/// the kernel's random source.
fn random_key() -> Result<[u32; 2], Error> {
    let mut b = [0u8; 8];
    // SAFETY: the buffer is 8 writable bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        return Err(Error::Load(format!("getrandom: {}", io::Error::last_os_error())));
    }
    Ok([u32::from_ne_bytes([b[0], b[1], b[2], b[3]]), u32::from_ne_bytes([b[4], b[5], b[6], b[7]])])
}

/// A client's mark on what its XDP decapsulation took out of the tunnel: a random
/// unicast, locally administered Ethernet address.
fn decapsulated_mark() -> Result<[u8; 6], Error> {
    let [a, b] = random_key()?;
    let (a, b) = (a.to_ne_bytes(), b.to_ne_bytes());
    Ok([(a[0] & 0xfc) | 0x02, a[1], a[2], a[3], b[0], b[1]])
}

/// Whether this kernel may preempt a running program for another on the same CPU: a
/// PREEMPT_RT kernel, which its version string names (the -rt patches also say so in
/// /sys/kernel/realtime).
#[doc(hidden)]
pub fn preempts_programs() -> bool {
    // SAFETY: uname fills the zeroed struct it is given.
    let version = unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return true; // unknown: assume the worst
        }
        std::ffi::CStr::from_ptr(u.version.as_ptr()).to_string_lossy().into_owned()
    };
    version.contains("PREEMPT_RT") || std::fs::read_to_string("/sys/kernel/realtime").is_ok_and(|v| v.trim() == "1")
}

fn verifier_cause(e: &aya::programs::ProgramError) -> String {
    // The verifier's log is long; its last lines say what it refused.
    let text = e.to_string();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(6)..].join(" / ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CPU's destination slots: a power of two, at most 2,048, and 16,384 in all
    /// unless that would leave a CPU fewer than 256 (hosts that count hundreds of
    /// possible CPUs, as many virtual machines do).
    #[test]
    fn destination_slots_share_a_bounded_memory_among_the_cpus() {
        for (cpus, each) in
            [(1, 2048), (2, 2048), (8, 2048), (12, 1024), (16, 1024), (64, 256), (240, 256), (4096, 256)]
        {
            assert_eq!(destination_slots(cpus), each, "{cpus} CPUs");
        }
        for cpus in 1..=1024 {
            let each = destination_slots(cpus);
            assert!(each.is_power_of_two(), "{cpus} CPUs: {each}");
            assert!(each as usize * cpus <= (DESTINATION_SLOTS as usize).max(256 * cpus), "{cpus} CPUs: {each} each");
        }
    }

    /// What never changes is frozen before any program runs (#60, 6): an update of the
    /// programs' read-only data, which holds the encapsulation's source and the
    /// interface decapsulated packets go into, is refused to everyone, the loading
    /// process included; the run-time settings' map still takes one. Loaded from a
    /// writable map, as the settings were before, the update passes and this fails.
    #[test]
    fn the_frozen_settings_refuse_every_update() {
        // SAFETY: geteuid has no preconditions.
        if !built() || unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var("SHIPWORM_E2E").map_or(true, |v| v != "required") || !built());
            eprintln!("skipped: needs the programs and root");
            return;
        }
        let settings = Settings::relay(
            Ipv4Addr::new(192, 0, 2, 1),
            16,
            Contract {
                validity: Duration::from_secs(30),
                heard_grain: Duration::from_millis(100),
                silence: Duration::from_secs(1),
                teredo_prefixes: [[0x20, 1, 0, 0], [0x3f, 0xfe, 0x83, 0x1f]],
            },
        );
        let path = KernelPath::load(&settings).unwrap_or_else(|e| panic!("{e}"));
        let rodata = map_fd(&path.bpf, ".rodata").expect("the programs' read-only data");
        let mut evil = path.maps.switch.frozen;
        evil.tun = 1;
        evil.source = [203, 0, 113, 66];
        let refused = maps::update(&rodata, &0u32.to_ne_bytes(), &evil);
        assert_eq!(refused.map_err(|e| e.raw_os_error()), Err(Some(libc::EPERM)), "the frozen settings took an update");
        path.maps
            .switch
            .set_address(Some("2001:0:c000:201::1".parse().unwrap()))
            .expect("the run-time settings take one");
    }
}
