//! The maps the programs share with userland, laid out as `bpf/shared.h` declares
//! them, and the three map operations userland performs on them after set-up (look up,
//! update, delete): plain `bpf(2)` calls on a descriptor, safe from any thread, and the
//! only ones the confined daemon keeps.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
/// The `bpf(2)` commands a daemon with a kernel data path keeps after confinement.
pub const MAP_COMMANDS: [u32; 3] = [BPF_MAP_LOOKUP_ELEM as u32, BPF_MAP_UPDATE_ELEM as u32, BPF_MAP_DELETE_ELEM as u32];

/// `struct peer`: one trusted peer's mapping and last reception.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PeerValue {
    pub ip: [u8; 4],
    pub port: [u8; 2],
    pub spare: u16,
    pub heard: u64,
    /// A client's first transmission since `heard`; a direct relay's route verdict,
    /// which only the programs read and write (userland writes 0: none kept).
    pub sent: u64,
}

/// `struct frozen`: what never changes once loaded, written by the loader into the
/// object's read-only data, which it freezes before any program runs.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FrozenValue {
    pub source: [u8; 4],
    pub port: [u8; 2],
    pub ttl: u8,
    pub client: u8,
    pub prefix: [u8; 4],
    pub direct: u8,
    pub spare: [u8; 3],
    pub tun: u32,
    pub slot_key: [u32; 2],
    pub slot_mask: u32,
    pub validity_ns: u64,
    pub heard_grain_ns: u64,
    pub silence_ns: u64,
    pub teredo: [[u8; 4]; 2],
    pub decapsulated: [u8; 6],
    pub spare2: [u8; 2],
}

// SAFETY: plain integers and byte arrays, `repr(C)`, no padding (the checks below and
// the BTF test): any bit pattern is a value, as aya's global data wants.
unsafe impl aya::Pod for FrozenValue {}

/// `struct config`: what the daemon changes while the programs run.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ConfigValue {
    pub local: [[u8; 4]; 4],
    pub own: [u8; 16],
    pub routes: u32,
    pub routes4: u32,
    pub enabled: u8,
    pub l2: u8,
    pub single_path: u8,
    pub spare: u8,
}

// The programs' own build checks each field's offset against these (the test
// `the_shared_layouts_match_the_programs_btf`); the sizes here only keep a quick eye.
const _: () = assert!(std::mem::size_of::<PeerValue>() == 24);
const _: () = assert!(std::mem::size_of::<FrozenValue>() == 72);
const _: () = assert!(std::mem::size_of::<ConfigValue>() == 44);

/// Makes `Counter` from the list in `counter_list.rs` (build.rs makes the C enum from
/// the same list).
macro_rules! counters {
    ($($(#[$doc:meta])* $variant:ident = ($c:literal, $direction:literal, $outcome:literal),)*) => {
        /// `enum counter`: what became of each Teredo packet the programs looked at.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u32)]
        pub enum Counter {
            $($(#[$doc])* $variant,)*
        }

        /// How many counters there are.
        pub const COUNTERS: usize = [$($c),*].len();

        impl Counter {
            /// Every counter, in the programs' order.
            pub const ALL: [Counter; COUNTERS] = [$(Counter::$variant),*];

            /// (direction, outcome) as metrics and status name them.
            pub fn labels(self) -> (&'static str, &'static str) {
                match self {
                    $(Counter::$variant => ($direction, $outcome),)*
                }
            }

            /// Its name in the programs (`enum counter`).
            pub fn c_name(self) -> &'static str {
                match self {
                    $(Counter::$variant => $c,)*
                }
            }
        }
    };
}
include!("counter_list.rs");

#[repr(C)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

fn map_call(cmd: libc::c_long, fd: &OwnedFd, key: *const u8, value: *const u8) -> io::Result<()> {
    let attr = ElemAttr { map_fd: fd.as_raw_fd() as u32, _pad: 0, key: key as u64, value: value as u64, flags: 0 };
    // SAFETY: attr points to a bpf_attr prefix of the size given; key and value point
    // to buffers of the map's key and value sizes (the callers' types), which the
    // kernel reads or, for a look-up, writes.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, &attr as *const ElemAttr, std::mem::size_of::<ElemAttr>()) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub(crate) fn lookup<V: Copy>(fd: &OwnedFd, key: &[u8], value: &mut V) -> io::Result<bool> {
    match map_call(BPF_MAP_LOOKUP_ELEM, fd, key.as_ptr(), (value as *mut V).cast::<u8>()) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

pub(crate) fn update<V: Copy>(fd: &OwnedFd, key: &[u8], value: &V) -> io::Result<()> {
    map_call(BPF_MAP_UPDATE_ELEM, fd, key.as_ptr(), (value as *const V).cast::<u8>())
}

/// The peer map: what the relay's state machine trusts, for the programs. Cloned
/// freely (one descriptor shared); every call is one system call.
#[derive(Debug, Clone)]
pub struct PeerMap {
    pub(crate) fd: Arc<OwnedFd>,
    /// A client's map (whose entries tell an unanswered transmission).
    pub(crate) client: bool,
}

impl PeerMap {
    /// `peer` is trusted at `mapped` and was heard from at `heard` (CLOCK_MONOTONIC).
    /// Fails with `E2BIG` when the map is full. An update that fails takes the peer's
    /// entry out, so that no older mapping outlives it; if that fails too, the error
    /// says so (`ErrorKind::Other`, "stale").
    pub fn trust(&self, peer: &Ipv6Addr, mapped: SocketAddrV4, heard: u64) -> io::Result<()> {
        let v = PeerValue { ip: mapped.ip().octets(), port: mapped.port().to_be_bytes(), spare: 0, heard, sent: 0 };
        update(&self.fd, &peer.octets(), &v).map_err(|e| match self.forget(peer) {
            Ok(_) => e,
            Err(gone) => io::Error::other(format!("stale: {e}, and taking the old entry out failed: {gone}")),
        })
    }

    /// `peer` is trusted no more. False if it was not in the map.
    pub fn forget(&self, peer: &Ipv6Addr) -> io::Result<bool> {
        match map_call(BPF_MAP_DELETE_ELEM, &self.fd, peer.octets().as_ptr(), std::ptr::null()) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `peer`'s entry.
    pub fn get(&self, peer: &Ipv6Addr) -> io::Result<Option<PeerEntry>> {
        let mut v = PeerValue::default();
        Ok(lookup(&self.fd, &peer.octets(), &mut v)?.then(|| PeerEntry {
            mapped: SocketAddrV4::new(Ipv4Addr::from(v.ip), u16::from_be_bytes(v.port)),
            heard: v.heard,
            unanswered: (self.client && v.sent > v.heard).then_some(v.sent),
        }))
    }
}

/// One peer as the map holds it (times in CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerEntry {
    /// Its mapping.
    pub mapped: SocketAddrV4,
    /// Its last reception.
    pub heard: u64,
    /// A client's first transmission to it since then, if there was one.
    pub unanswered: Option<u64>,
}

/// The programs' settings after set-up (map updates, which a confined daemon may
/// still make): their on/off switch, and what a client's network changes move.
#[derive(Debug, Clone)]
pub struct Switch {
    pub(crate) fd: Arc<OwnedFd>,
    pub(crate) settings: Arc<Mutex<ConfigValue>>,
    /// What the programs were loaded with, frozen (a copy: the kernel's is read-only).
    pub(crate) frozen: FrozenValue,
    /// The last generation of the host's routes handed out ([`Switch::route_verdicts`]).
    pub(crate) generation: Arc<std::sync::atomic::AtomicU32>,
    /// The most the programs may keep ([`Switch::most_route_verdicts`]).
    pub(crate) most: RouteVerdicts,
    /// Whether they may keep mappings' verdicts ([`Switch::may_keep_mapping_verdicts`]).
    pub(crate) mappings: bool,
}

impl Switch {
    /// Changes the settings: what is kept here is what the programs read, so a change
    /// the map refused is not kept.
    pub(crate) fn change(&self, how: impl FnOnce(&mut ConfigValue)) -> io::Result<()> {
        let mut s = self.settings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut changed = *s;
        how(&mut changed);
        update(&self.fd, &0u32.to_ne_bytes(), &changed)?;
        *s = changed;
        Ok(())
    }

    /// Turn the programs off for good: every packet goes to userland (what a daemon
    /// does when it can no longer keep the peer map to what it trusts).
    pub fn turn_off(&self) -> io::Result<()> {
        self.change(|s| s.enabled = 0)
    }

    /// Whether the programs move packets (not turned off).
    pub fn is_on(&self) -> bool {
        self.settings.lock().unwrap_or_else(std::sync::PoisonError::into_inner).enabled != 0
    }

    /// The client's Teredo address (`None` while it has none: nothing moves).
    pub fn set_address(&self, own: Option<Ipv6Addr>) -> io::Result<()> {
        self.change(|s| s.own = own.map_or([0; 16], |a| a.octets()))
    }

    /// The IPv4 addresses the service socket receives on (the first four).
    pub fn set_local(&self, local: &[Ipv4Addr]) -> io::Result<()> {
        self.change(|s| s.local = local_slots(local))
    }

    /// Every verdict on an IPv6 route a direct relay's programs keep is void from now
    /// on; they keep new ones (under a new generation of the host's IPv6 routes) of the
    /// kinds `keep` names, within [`Switch::most_route_verdicts`]. Nothing is kept
    /// until this is first called with more than [`RouteVerdicts::None`]: whoever says
    /// so watches the host's routing.
    pub fn route_verdicts(&self, keep: RouteVerdicts) -> io::Result<()> {
        let keep = keep.min(self.most);
        let next = self.next_generation();
        self.change(|s| {
            s.routes = if keep == RouteVerdicts::None { 0 } else { next };
            s.single_path = u8::from(keep == RouteVerdicts::ClientsAndDestinations);
        })
    }

    /// Every verdict a relay's programs keep on the IPv4 route to a client's
    /// mapping is void from now on; they keep new ones if `keep` says so (under a new
    /// generation of the host's IPv4 routes) and they may
    /// ([`Switch::may_keep_mapping_verdicts`]).
    pub fn mapping_verdicts(&self, keep: bool) -> io::Result<()> {
        let keep = keep && self.mappings;
        let next = self.next_generation();
        self.change(|s| s.routes4 = if keep { next } else { 0 })
    }

    /// A generation not handed out before, never 0 (which keeps nothing).
    fn next_generation(&self) -> u32 {
        use std::sync::atomic::Ordering;
        let next = self.generation.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if next == 0 {
            self.generation.fetch_add(1, Ordering::Relaxed).wrapping_add(1)
        } else {
            next
        }
    }

    /// The kinds of route verdicts the programs keep now (none while they are off).
    pub fn kept_route_verdicts(&self) -> RouteVerdicts {
        let s = self.settings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match (s.enabled, s.routes, s.single_path) {
            (0, _, _) | (_, 0, _) => RouteVerdicts::None,
            (_, _, 0) => RouteVerdicts::Clients,
            _ => RouteVerdicts::ClientsAndDestinations,
        }
    }

    /// Whether the programs keep the IPv4 routes to clients' mappings now (false while
    /// they are off).
    pub fn keeps_mapping_verdicts(&self) -> bool {
        let s = self.settings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        s.enabled != 0 && s.routes4 != 0
    }

    /// The slot the programs keep a mapping's IPv4 route verdict in, on each CPU (as
    /// [`Switch::destination_slot`]).
    #[doc(hidden)]
    pub fn mapping_slot(&self, addr: Ipv4Addr) -> u32 {
        self.slot_of(&[addr.octets()])
    }

    /// The slot the programs keep destination `addr`'s route verdict in, on each CPU:
    /// their keyed hash, for tests that make two destinations share a slot.
    #[doc(hidden)]
    pub fn destination_slot(&self, addr: &Ipv6Addr) -> u32 {
        let o = addr.octets();
        self.slot_of(&[
            [o[0], o[1], o[2], o[3]],
            [o[4], o[5], o[6], o[7]],
            [o[8], o[9], o[10], o[11]],
            [o[12], o[13], o[14], o[15]],
        ])
    }

    /// The programs' keyed slot hash over an address's words (as they lie in memory).
    fn slot_of(&self, words: &[[u8; 4]]) -> u32 {
        let s = &self.frozen;
        let mut h = (u64::from(s.slot_key[0]) << 32) | u64::from(s.slot_key[1]);
        for w in words {
            h = (h ^ u64::from(u32::from_ne_bytes(*w))).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^= h >> 29;
        }
        ((h >> 32) as u32) & s.slot_mask
    }

    /// Whether the programs may keep verdicts on the routes to clients' mappings: a
    /// relay's (either way of forwarding), unless the kernel may preempt them (a
    /// mapping's verdict is one CPU's, as a destination's).
    pub fn may_keep_mapping_verdicts(&self) -> bool {
        self.mappings
    }

    /// The most the programs may keep, whatever the host's routing: a destination's
    /// verdicts are one CPU's, read and written by the one program that runs there at
    /// a time, which a kernel that preempts them (PREEMPT_RT) does not promise.
    pub fn most_route_verdicts(&self) -> RouteVerdicts {
        self.most
    }
}

/// The route verdicts a direct relay's programs keep ([`Switch::route_verdicts`]): each
/// is exact while the host's routing stays as it was when the verdict was taken, and
/// depends on no more than what the verdict is kept by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum RouteVerdicts {
    /// None: each packet looks its route up.
    #[default]
    None,
    /// Each client's, by destination and arriving interface: a native packet's route
    /// into the Teredo interface and its MTU.
    Clients,
    /// Each client's, and each native destination's (its way out, next hop and MTU,
    /// for clients' packets arriving on an interface): only while no route splits
    /// flows among next hops.
    ClientsAndDestinations,
}

impl RouteVerdicts {
    /// As the status says it.
    pub fn name(self) -> &'static str {
        match self {
            RouteVerdicts::None => "none",
            RouteVerdicts::Clients => "clients",
            RouteVerdicts::ClientsAndDestinations => "clients and destinations",
        }
    }
}

pub(crate) fn local_slots(local: &[Ipv4Addr]) -> [[u8; 4]; 4] {
    let mut slots = [[0u8; 4]; 4];
    for (slot, a) in slots.iter_mut().zip(local) {
        *slot = a.octets();
    }
    slots
}

/// CLOCK_MONOTONIC in nanoseconds: the programs' clock (`bpf_ktime_get_ns`).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

pub(crate) fn lookup_slice(fd: &OwnedFd, key: &[u8], values: &mut [u64]) -> io::Result<bool> {
    match map_call(BPF_MAP_LOOKUP_ELEM, fd, key.as_ptr(), values.as_mut_ptr().cast::<u8>()) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}
