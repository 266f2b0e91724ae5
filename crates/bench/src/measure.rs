//! What the benchmark measures in each lab: the relays' and the kernel path's rates
//! and latencies, the end-to-end chains through a NAT, the peer table.

use crate::buffers::{equalize, TUN_QUEUE};
use crate::cpus::{self, RELAY_CPU};
use crate::error::Failure;
use crate::frame_loads::Senders;
use crate::packets::{ipv6_udp, udp_payload, Ipv6UdpTemplate};
use crate::rate_search::{max_rate, Found};
use crate::report::*;
use crate::stats::*;
use crate::traffic::{
    latencies, lock_out, new_peer_flood, settled, socket_in, sparse_latencies, v6, Emulated, Load, Probe, Sink, Sockets,
};
use shipworm::io::socket_buffers::DAEMON_BYTES;
use shipworm_lab::traffic::tcp_transfer;
use shipworm_lab::{Impl, Lab, LabSpec, GEN_NATIVE_V6, GEN_V4, HOST6_V6, RELAY_V4, SERVER_V4, SINK_NATIVE_V6};
use shipworm_proto::peer_table::{KeyedHash, Peer, PeerTable};
use shipworm_proto::relay::RelayConfig;
use socket2::Socket;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

pub(crate) const SIZES: [usize; 3] = [64, 512, 1280];

/// The IPv6 sizes measured: [`SIZES`], or the largest alone in a quick run (judges nothing).
pub(crate) fn sizes(quick: bool) -> &'static [usize] {
    &SIZES[if quick { SIZES.len() - 1 } else { 0 }..]
}

pub(crate) const CLIENTS: usize = 32;
pub(crate) const RELAY_PORT: u16 = 3545;
/// Spoofed new-peer bubbles per second while established peers' rate is measured.
pub(crate) const FLOOD_RATE: u64 = 20_000;
/// Sockets the flood leaves by (SO_REUSEPORT spreads them over the relay's workers).
pub(crate) const FLOOD_SOCKETS: usize = 8;
/// The flood's packet size and direction in the rate table.
pub(crate) const UNDER_FLOOD: (&str, usize) = ("Teredo→IPv6 under flood", 64);
/// The lock-out pattern's packets per second (native packets and bubbles).
pub(crate) const LOCKOUT_RATE: u64 = 20_000;
/// Teredo addresses, all embedding one endpoint, the lock-out pattern makes trusted; a
/// tenth in a quick run (its figures judge nothing, and making them trusted is most of
/// the pattern's time).
pub(crate) fn lockout_addresses(quick: bool) -> u64 {
    if quick {
        6_500
    } else {
        65_000
    }
}
/// The established peers' rate under the lock-out pattern, in the rate table.
pub(crate) const UNDER_LOCKOUT: (&str, usize) = ("Teredo→IPv6 under lock-out", 64);

/// One implementation's figures for one round.
#[derive(Debug, Default, Clone)]
pub(crate) struct Figures {
    /// (direction, size) → packets per second under 0.1 % loss, one per search.
    pub(crate) rate: BTreeMap<(&'static str, usize), Vec<f64>>,
    /// (direction, size) → latencies in µs.
    pub(crate) latency: BTreeMap<(&'static str, usize), Vec<f64>>,
    /// (direction, size) → the kernel path's latencies in µs, probed in this relay's lab
    /// in turns with the relay's own (none for the kernel itself).
    pub(crate) beside: BTreeMap<(&'static str, usize), Vec<f64>>,
    /// Spoofed bubbles per second the flood achieved.
    pub(crate) flood: f64,
    /// Packets per second the lock-out pattern achieved.
    pub(crate) lockout: f64,
    /// The relay's resident memory (MiB) before and after the lock-out pattern.
    pub(crate) lockout_rss: Option<(f64, f64)>,
    /// (direction, size) → how many of its searches the generator held: their lowest
    /// failing rate failed only because the sender fell short, the path losing nothing.
    pub(crate) held: BTreeMap<(&'static str, usize), usize>,
    /// (direction, offered rate) → CPU per packet delivered, one per trial.
    pub(crate) cpu: BTreeMap<(&'static str, u64), Vec<CpuTrial>>,
    /// (direction, size) → latencies in µs with a probe every [`SPARSE_GAP`], as a call
    /// or a ping sends (no worker kept spinning by the probe before).
    pub(crate) sparse: BTreeMap<(&'static str, usize), Vec<f64>>,
    /// The same on the kernel path in this relay's lab, in turn with the relay's.
    pub(crate) sparse_beside: BTreeMap<(&'static str, usize), Vec<f64>>,
    /// The rate searches' generator, as `FrameSender::kind` says it.
    pub(crate) generator: Option<String>,
}

/// The gap between two sparse latency probes.
pub(crate) const SPARSE_GAP: Duration = Duration::from_millis(5);

/// Sparse probes a lab sends on each path of [`CPU_SIZE`].
const SPARSE_PROBES: usize = 200;

/// Latency with a probe every [`SPARSE_GAP`] on every route of [`CPU_SIZE`], the
/// kernel path beside it in turn.
fn sparse_latency(
    label: &str,
    routes: &mut [Route<'_>],
    quick: bool,
    prepare: &dyn Fn(Phase) -> Result<(), String>,
    f: &mut Figures,
    say: &mut dyn FnMut(&str),
) -> Result<(), Failure> {
    // The quick run (the test command's) leaves it out: it judges nothing.
    if quick {
        return Ok(());
    }
    prepare(Phase::Latency).map_err(Failure::runtime)?;
    let mut medians = Vec::new();
    for p in routes.iter_mut().filter(|p| p.key.1 == CPU_SIZE) {
        let mut probes: Vec<&mut Probe<'_>> = std::iter::once(&mut p.probe).chain(p.beside.as_mut()).collect();
        let mut got = sparse_latencies(&mut probes, SPARSE_PROBES, SPARSE_GAP).into_iter();
        let own = got.next().unwrap_or_default();
        medians.push(format!("{} {:.1}", p.key.0, median(&own)));
        f.sparse.entry(p.key).or_default().extend(own);
        if let Some(k) = got.next() {
            medians.push(format!("(kernel {:.1})", median(&k)));
            f.sparse_beside.entry(p.key).or_default().extend(k);
        }
    }
    say(&format!("  {label} sparse latency medians (µs, a probe every 5 ms): {}", medians.join(", ")));
    Ok(())
}

/// One fixed-rate trial's cost: CPU time over the packets it delivered.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CpuTrial {
    /// The relay's processes, µs per packet (0 for the kernel path, which has none).
    pub(crate) process_us: f64,
    /// The relay host's whole core (process, and the kernel's work for it), µs per packet.
    pub(crate) core_us: f64,
    /// Packets delivered over packets sent.
    pub(crate) delivered: f64,
}

/// Offered rates of the CPU trials, packets per second.
pub(crate) const CPU_RATES: [u64; 2] = [50_000, 100_000];
/// IPv6 size of the CPU trials' packets.
pub(crate) const CPU_SIZE: usize = 1280;

/// CPU per packet on every route of [`CPU_SIZE`] at each of [`CPU_RATES`]: a paced
/// trial (1 s; 200 ms quick) while the relay host's core time and its processes' time
/// are read before and after. The host's core is its own (the traffic runs on the
/// other), so its busy time is the host's work; CPU time a busy-polling relay spends
/// waiting counts, as its users pay it.
pub(crate) fn cpu_trials(
    label: &str,
    routes: &mut [Route<'_>],
    host_ns: &str,
    quick: bool,
    prepare: &dyn Fn(Phase) -> Result<(), String>,
    f: &mut Figures,
    say: &mut dyn FnMut(&str),
) -> Result<(), Failure> {
    let dur = if quick { Duration::from_millis(200) } else { Duration::from_secs(1) };
    for p in routes.iter_mut().filter(|p| p.key.1 == CPU_SIZE) {
        for rate in CPU_RATES {
            prepare(Phase::Rate).map_err(Failure::runtime)?;
            let before = settled(p.sink);
            let (t0, idle0, proc0) = (Instant::now(), cpus::relay_core_idle(), cpus::host_process_time(host_ns));
            let sent = p.load.paced(rate, dur);
            p.load.failure().map_or(Ok(()), |e| Err(Failure::runtime(e)))?;
            let got = settled(p.sink) - before;
            let (t1, idle1, proc1) = (Instant::now(), cpus::relay_core_idle(), cpus::host_process_time(host_ns));
            let per_packet = |d: Duration| d.as_secs_f64() * 1e6 / got.max(1) as f64;
            let (idle0, idle1) = (idle0.map_err(Failure::runtime)?, idle1.map_err(Failure::runtime)?);
            let busy = (t1 - t0).saturating_sub(idle1.saturating_sub(idle0));
            let ran = proc1.map_err(Failure::runtime)?.saturating_sub(proc0.map_err(Failure::runtime)?);
            let t = CpuTrial {
                process_us: per_packet(ran),
                core_us: per_packet(busy),
                delivered: got as f64 / sent.max(1) as f64,
            };
            say(&format!(
                "  {label} {} {rate} pkt/s offered: {:.2} µs/packet process, {:.2} µs/packet core, {:.1} % delivered",
                p.key.0,
                t.process_us,
                t.core_us,
                t.delivered * 100.0
            ));
            f.cpu.entry((p.key.0, rate)).or_default().push(t);
        }
    }
    Ok(())
}

impl Figures {
    /// Files a rate search's result under `key`.
    pub(crate) fn file_rate(&mut self, key: (&'static str, usize), found: Found) {
        self.rate.entry(key).or_default().push(found.rate as f64);
        if found.held_by_sender {
            *self.held.entry(key).or_default() += 1;
        }
    }
}

/// How a log line marks a rate the generator held.
pub(crate) fn held_mark(found: Found) -> &'static str {
    if found.held_by_sender {
        " (the generator's: it fell short, nothing was lost)"
    } else {
        ""
    }
}

/// (direction, size) → the rate of the earlier rounds ([`rate_of`]), where the rate
/// searches of this round start from.
pub(crate) type Hints = BTreeMap<(&'static str, usize), u64>;

/// The hints for the next round from an implementation's rounds so far.
pub(crate) fn hints(runs: &[Figures]) -> Hints {
    let keys: std::collections::BTreeSet<_> = runs.iter().flat_map(|f| f.rate.keys().copied()).collect();
    keys.into_iter().map(|k| (k, rate_of(runs, k) as u64)).collect()
}

/// One implementation's client and relay chain through a NAT, over every end-to-end
/// round (a fresh lab each: one lab's transfers and searches moved together).
pub(crate) struct EndToEnd {
    pub(crate) name: &'static str,
    /// Seconds from client start to an address, one per round.
    pub(crate) qualify_secs: Vec<f64>,
    /// Median steady ping6 round trip of each round ([`e2e_pings`] echoes), ms.
    pub(crate) ping_ms: Vec<f64>,
    /// The same trip without the tunnel, in each round's lab (none in quick runs): the
    /// client host's IPv4 round trip to the relay host, plus the relay host's IPv6
    /// round trip to the native host, less one round trip to its own loopback (the
    /// echo's turn in the pinging and the answering stacks, counted twice by the two
    /// parts and once by the chain), ms.
    pub(crate) native_ms: Vec<f64>,
    /// TCP Mbit/s, every transfer client → native and back.
    pub(crate) tcp: (Vec<f64>, Vec<f64>),
    /// TCP Mbit/s of [`TCP_STREAMS`] connections at once, client → native and back.
    pub(crate) tcp_streams: (Vec<f64>, Vec<f64>),
    /// UDP packets/s under 0.1 % loss, client → native and back, every search of every round.
    pub(crate) udp: (Vec<f64>, Vec<f64>),
}

/// A figure's two directions over the rounds ([`middle_mean`]).
pub(crate) fn both_ways((out, back): &(Vec<f64>, Vec<f64>)) -> (f64, f64) {
    (middle_mean(out), middle_mean(back))
}

pub(crate) fn lab_err(e: impl std::fmt::Display) -> Failure {
    Failure::runtime(format!("bench: {e}"))
}

/// Trial length for rate searches, and probes per route in each lab. A path's
/// capacity wanders from one search to the next whatever the trials' length, so more
/// searches rather than longer trials narrow a figure.
pub(crate) fn trial_sizes(quick: bool) -> (Duration, usize) {
    if quick {
        (Duration::from_millis(100), 100)
    } else {
        (Duration::from_millis(150), 4_000)
    }
}

/// "once", "twice", "3 times": how often something was done, for the report.
pub(crate) fn times(n: usize) -> String {
    match n {
        1 => "once".into(),
        2 => "twice".into(),
        n => format!("{n} times"),
    }
}

/// Rate searches of each route in each lab, in turn over the routes.
pub(crate) fn searches(quick: bool) -> usize {
    if quick {
        1
    } else {
        2
    }
}

/// One direction and size through the thing measured: the sink that counts arrivals,
/// its load (live frames), the path its latency probes
/// take, and the same direction's native path through the same relay host, probed in
/// turns with it.
pub(crate) struct Route<'a> {
    pub(crate) key: (&'static str, usize),
    pub(crate) sink: &'a Sink,
    pub(crate) load: Box<dyn Load + 'a>,
    pub(crate) probe: Probe<'a>,
    pub(crate) beside: Option<Probe<'a>>,
}

/// What a lab measures next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Rate,
    Latency,
}

/// Every route's rate, searched in turn; after each search a block of latency probes on
/// every route, so a route's probes are spread over the whole measurement rather than
/// taken in one burst: the machine's state (which core, a neighbour's load) shifts a
/// burst's median by a microsecond or two, as much as the relay under test adds.
/// `prepare` runs before each search and block (the relays' peers stay fresh, the
/// relay host's receive work goes where the phase wants it: [`cpus::steer`]).
pub(crate) fn measure_routes(
    label: &str,
    routes: &mut [Route<'_>],
    quick: bool,
    hints: &Hints,
    prepare: &dyn Fn(Phase) -> Result<(), String>,
    f: &mut Figures,
    say: &mut dyn FnMut(&str),
) -> Result<(), Failure> {
    let (dur, lat_n) = trial_sizes(quick);
    let blocks = routes.len() * searches(quick);
    for i in 0..blocks {
        prepare(Phase::Rate).map_err(Failure::runtime)?;
        let p = &mut routes[i % routes.len()];
        let found = max_rate(&mut *p.load, p.sink, dur, quick, hints.get(&p.key).copied());
        p.load.failure().map_or(Ok(()), |e| Err(Failure::runtime(e)))?;
        f.file_rate(p.key, found);
        prepare(Phase::Latency).map_err(Failure::runtime)?;
        for p in routes.iter_mut() {
            // Block i's share of lat_n, so the shares add up to lat_n exactly.
            let n = lat_n * (i + 1) / blocks - lat_n * i / blocks;
            let mut probes: Vec<&mut Probe<'_>> = std::iter::once(&mut p.probe).chain(p.beside.as_mut()).collect();
            let mut got = latencies(&mut probes, n).into_iter();
            f.latency.entry(p.key).or_default().extend(got.next().unwrap_or_default());
            if let Some(k) = got.next() {
                f.beside.entry(p.key).or_default().extend(k);
            }
        }
        let (dir, size) = routes[i % routes.len()].key;
        say(&format!("  {label} {dir} {size:>4} B: {:>9} pkt/s{}", found.rate, held_mark(found)));
    }
    // This round's latency medians, so a run's log shows how far rounds differ.
    let medians: Vec<String> = routes
        .iter()
        .map(|p| format!("{} {} B {:.1}", p.key.0, p.key.1, median(f.latency.get(&p.key).map_or(&[][..], |v| &v[..]))))
        .collect();
    say(&format!("  {label} latency medians (µs): {}", medians.join(", ")));
    if !f.beside.is_empty() {
        let beside: Vec<String> = routes
            .iter()
            .map(|p| {
                format!("{} {} B {:.1}", p.key.0, p.key.1, median(f.beside.get(&p.key).map_or(&[][..], |v| &v[..])))
            })
            .collect();
        say(&format!("  {label}'s lab, kernel path (µs): {}", beside.join(", ")));
    }
    Ok(())
}

/// Probes of IPv6 size `size` on the native path to `to`, through the relay host's
/// kernel, arriving on `rx` (which `sink` shares).
pub(crate) fn native_probe<'a>(
    tx: &'a [Socket],
    rx: &'a Socket,
    sink: &'a Sink,
    to: SocketAddr,
    size: usize,
) -> Probe<'a> {
    let build = move |seq: u64, buf: &mut [u8]| (udp_payload(buf, size, seq), to, 0);
    Probe { tx, rx, seq_at: 0, sink, build: Box::new(build) }
}

/// Packets in a row for one emulated client, both ways: decapsulation load leaves by
/// one client's socket a sendmmsg batch at a time, and encapsulation load arrives at
/// one client's socket in runs the sink reads in a few calls (a packet per client in
/// turn left it a packet or two per socket and call).
pub(crate) const RUN: u64 = 64;

/// The emulated client load packet `seq` is for.
pub(crate) fn client_of(seq: u64) -> usize {
    ((seq / RUN) % CLIENTS as u64) as usize
}

/// Decapsulation load of `size`-byte packets from the emulated clients `addrs` to the
/// native sink, in runs of [`RUN`] per client.
pub(crate) fn decap_load(
    addrs: Vec<Ipv6Addr>,
    size: usize,
    relay: SocketAddrV4,
) -> impl FnMut(u64, &mut [u8]) -> (usize, SocketAddr, usize) {
    let packets: Vec<Ipv6UdpTemplate> =
        addrs.iter().map(|&a| Ipv6UdpTemplate::new(size, a, SINK_NATIVE_V6, 9000)).collect();
    move |seq, buf| {
        let i = client_of(seq);
        (packets[i].fill(buf, seq), SocketAddr::V4(relay), i)
    }
}

/// Searches a rate `n` times with `search` (from the earlier rounds' hint) while spoofed
/// bubbles from never-seen Teredo addresses pour from the generator to `relay`, and
/// files them and the flood's rate in `f`.
pub(crate) fn under_flood(
    label: &str,
    gen: &str,
    relay: SocketAddrV4,
    f: &mut Figures,
    say: &mut dyn FnMut(&str),
    search: &mut dyn FnMut() -> Found,
    n: usize,
) -> Result<(), Failure> {
    let flood_socks = (0..FLOOD_SOCKETS)
        .map(|_| socket_in(gen, SocketAddr::V4(SocketAddrV4::new(GEN_V4, 0))))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::runtime)?;
    let flood = new_peer_flood(flood_socks, relay, SINK_NATIVE_V6, FLOOD_RATE, Duration::from_secs(120));
    let found: Vec<Found> = (0..n).map(|_| search()).collect();
    f.flood = flood.stop();
    let rates = file_searches(f, UNDER_FLOOD, &found);
    say(&format!(
        "  {label} {:>4} B under a flood of {:.0} new-peer bubbles/s: Teredo→IPv6 {}",
        UNDER_FLOOD.1,
        f.flood,
        rates.join(",")
    ));
    Ok(())
}

/// Files `found` under `key` in `f`; the rates, as progress shows them.
fn file_searches(f: &mut Figures, key: (&'static str, usize), found: &[Found]) -> Vec<String> {
    for &one in found {
        f.file_rate(key, one);
    }
    found.iter().map(|one| format!("{:>9} pkt/s{}", one.rate, held_mark(*one))).collect()
}

/// Searches a rate `n` times with `search` while the lock-out pattern runs against
/// `relay` (from one endpoint in `gen`, its native packets from `h6`), and files them,
/// the pattern's rate and the relay's memory before and after in `f`.
pub(crate) fn under_lockout(
    label: &str,
    (gen, h6, rly): (&str, &str, &str),
    relay: SocketAddrV4,
    f: &mut Figures,
    say: &mut dyn FnMut(&str),
    search: &mut dyn FnMut() -> Found,
    quick: bool,
) -> Result<(), Failure> {
    let (n, addresses) = (searches(quick), lockout_addresses(quick));
    let mapped = socket_in(gen, SocketAddr::V4(SocketAddrV4::new(GEN_V4, 0))).map_err(Failure::runtime)?;
    let native = socket_in(h6, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?;
    let before = cpus::host_rss_mib(rly).map_err(Failure::runtime)?;
    let pattern = lock_out(mapped, native, relay, addresses, LOCKOUT_RATE, Duration::from_secs(180));
    // Every address made trusted before the first search, and kept so throughout.
    std::thread::sleep(Duration::from_secs_f64(2.2 * addresses as f64 / LOCKOUT_RATE as f64));
    let found: Vec<Found> = (0..n).map(|_| search()).collect();
    let after = cpus::host_rss_mib(rly).map_err(Failure::runtime)?;
    f.lockout = pattern.stop();
    f.lockout_rss = Some((before, after));
    let rates = file_searches(f, UNDER_LOCKOUT, &found);
    say(&format!(
        "  {label} {:>4} B under the lock-out pattern ({:.0} pkt/s, {addresses} addresses of one endpoint; relay memory {before:.0} → {after:.0} MiB): Teredo→IPv6 {}",
        UNDER_LOCKOUT.1,
        f.lockout,
        rates.join(",")
    ));
    Ok(())
}

/// Measure the Teredo relay `imp` (shipworm or Miredo), with `extra` configuration lines.
pub(crate) fn measure_relay(
    label: &str,
    imp: &Impl,
    extra: &str,
    me: &Impl,
    quick: bool,
    hints: &Hints,
    say: &mut dyn FnMut(&str),
) -> Result<Figures, Failure> {
    let mut lab = Lab::build(&LabSpec { generator: true, ..LabSpec::nats(vec![]) }).map_err(lab_err)?;
    lab.start_server(me).map_err(lab_err)?;
    lab.start_relay_with(imp, extra).map_err(lab_err)?;
    let given = equalize(&lab.ns("rly"), Some(RELAY_PORT), DAEMON_BYTES, "teredo").map_err(Failure::runtime)?;
    let mib: Vec<String> = given.iter().map(|&b| format!("{:.0}", b as f64 / f64::from(1 << 20))).collect();
    let threads = cpus::pin_host(&lab.ns("rly")).map_err(Failure::runtime)?;
    say(&format!(
        "  {label}: UDP receive buffers {} MiB, TUN queues {TUN_QUEUE} packets, {threads} threads on CPU {RELAY_CPU}",
        mib.join(" + ")
    ));
    let (gen, h6) = (lab.ns("gen"), lab.ns("h6"));
    let emu = Emulated::new(&gen, GEN_V4, SERVER_V4, CLIENTS).map_err(Failure::runtime)?;
    let relay = SocketAddrV4::new(RELAY_V4, RELAY_PORT);
    let native = introduce(&h6, &emu, relay)?;
    let (dur, _) = trial_sizes(quick);
    let mut f = Figures::default();
    let rx6 = socket_in(&h6, v6(Ipv6Addr::UNSPECIFIED, 9000)).map_err(Failure::runtime)?;
    let sink6 = Sink::start(vec![rx6.try_clone().map_err(|e| Failure::runtime(e.to_string()))?]);
    let emu_socks: Vec<Socket> = emu.socks.iter().map(|s| s.try_clone().expect("dup")).collect();
    let sink_emu = Sink::start(emu_socks);
    let addrs = emu.addrs.clone();
    // The native path through the same relay host, both ways: the kernel's latency in
    // this lab too (a lab's kernel path sits at one of two levels, 9 or 11 µs, so
    // every lab of a round adds to the kernel's figure).
    let gen_out = socket_in(&gen, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?;
    let rx_gen = socket_in(&gen, v6(Ipv6Addr::UNSPECIFIED, 9001)).map_err(Failure::runtime)?;
    let sink_gen = Sink::start(vec![rx_gen.try_clone().map_err(|e| Failure::runtime(e.to_string()))?]);
    let (first, natives, gen_outs) = (addrs[0], std::slice::from_ref(&native), std::slice::from_ref(&gen_out));
    let senders = Senders::of(&lab)?;
    f.generator = Some(senders.kind());
    let mut routes = Vec::new();
    for &size in sizes(quick) {
        routes.push(Route {
            key: ("Teredo→IPv6", size),
            sink: &sink6,
            load: Box::new(senders.decap(&emu, size, relay)),
            // Probes: one flow, from the first client.
            probe: Probe {
                tx: &emu.socks,
                rx: &rx6,
                seq_at: 0,
                sink: &sink6,
                build: Box::new(move |seq: u64, buf: &mut [u8]| {
                    (ipv6_udp(buf, size, first, SINK_NATIVE_V6, 9000, seq), SocketAddr::V4(relay), 0)
                }),
            },
            beside: Some(native_probe(gen_outs, &rx6, &sink6, v6(SINK_NATIVE_V6, 9000), size)),
        });
        routes.push(Route {
            key: ("IPv6→Teredo", size),
            sink: &sink_emu,
            load: Box::new(senders.native_load(&addrs, 9002, size)),
            // Probes all go to the first client, whose socket the prober reads.
            probe: Probe {
                tx: natives,
                rx: &emu.socks[0],
                seq_at: 48,
                sink: &sink_emu,
                build: Box::new(move |seq: u64, buf: &mut [u8]| (udp_payload(buf, size, seq), v6(first, 9002), 0)),
            },
            beside: Some(native_probe(natives, &rx_gen, &sink_gen, v6(GEN_NATIVE_V6, 9001), size)),
        });
    }
    // The emulated clients keep their entries fresh.
    let rly = lab.ns("rly");
    let prepare = |phase: Phase| {
        emu.bubble(relay, SINK_NATIVE_V6);
        cpus::steer(&rly, phase == Phase::Rate)
    };
    measure_routes(label, &mut routes, quick, hints, &prepare, &mut f, say)?;
    cpu_trials(label, &mut routes, &rly, quick, &prepare, &mut f, say)?;
    sparse_latency(label, &mut routes, quick, &prepare, &mut f, say)?;
    drop(routes);
    // The established clients' rate, searched under each attack in turn.
    let established = |key: (&'static str, usize)| {
        let hint = hints.get(&key).copied();
        max_rate(&mut senders.decap(&emu, key.1, relay), &sink6, dur, quick, hint)
    };
    // Spoofed new peers pour in.
    prepare(Phase::Rate).map_err(Failure::runtime)?;
    under_flood(label, &gen, relay, &mut f, say, &mut || established(UNDER_FLOOD), searches(quick))?;
    senders.check()?;
    // One endpoint makes the relay trust ever more addresses.
    prepare(Phase::Rate).map_err(Failure::runtime)?;
    let hosts = (gen.as_str(), h6.as_str(), rly.as_str());
    under_lockout(label, hosts, relay, &mut f, say, &mut || established(UNDER_LOCKOUT), quick)?;
    senders.check()?;
    drop((sink6, sink_emu, sink_gen));
    lab.teardown();
    Ok(f)
}

/// Makes the relay at `relay` learn every emulated client of `emu`: a native packet from
/// host `h6` to each makes it bubble them, their bubbles make them trusted. The native
/// socket, for more packets that way.
pub(crate) fn introduce(h6: &str, emu: &Emulated, relay: SocketAddrV4) -> Result<Socket, Failure> {
    let native = socket_in(h6, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?;
    for a in &emu.addrs {
        let _ = native.send_to(&[0u8; 16], &v6(*a, 9002).into());
    }
    std::thread::sleep(Duration::from_millis(300));
    emu.bubble(relay, SINK_NATIVE_V6);
    std::thread::sleep(Duration::from_millis(200));
    Ok(native)
}

/// End-to-end rounds: each builds a fresh lab per implementation, alternately, for two
/// TCP transfers and two UDP rate searches each way, the relay and the client with equal
/// buffers (Miredo's client on its defaults spread 39-80 k packets/s native→client
/// over ten rounds). One lab's figures stuck together and
/// moved by a fifth to a third from run to run, even as the median of five transfers.
pub(crate) fn e2e_rounds(quick: bool) -> usize {
    if quick {
        1
    } else {
        6
    }
}

/// Echoes each way in an end-to-end round's ping6: 20, or 5 in a quick run (0.2 s apart,
/// they were two thirds of its chains' time).
pub(crate) fn e2e_pings(quick: bool) -> u32 {
    if quick {
        5
    } else {
        20
    }
}

/// Bytes in each end-to-end TCP transfer.
pub(crate) fn e2e_bytes(quick: bool) -> usize {
    if quick {
        2_000_000
    } else {
        20_000_000
    }
}

/// TCP through a client and relay chain, both ways: two transfers of `bytes` each way
/// to and from the client at `client` (after the buffers were made equal; the
/// scenario's own transfer came before), each checked
/// intact, in Mbit/s.
pub(crate) fn e2e_tcp(lab: &Lab, client: Ipv6Addr, bytes: usize) -> Result<([f64; 2], [f64; 2]), Failure> {
    let (cns, h6) = (lab.clients[0].ns.clone(), lab.ns("h6"));
    let once = |from: &str, to: &str, addr: Ipv6Addr| -> Result<f64, Failure> {
        let t = tcp_transfer(from, to, addr, bytes, Duration::from_secs(30)).map_err(lab_err)?;
        if !t.intact {
            return Err(Failure::runtime(format!(
                "bench: TCP {from} → {to}: the bytes that arrived differ from those sent"
            )));
        }
        Ok(t.mbit_per_s())
    };
    let out = [once(&cns, &h6, HOST6_V6)?, once(&cns, &h6, HOST6_V6)?];
    let back = [once(&h6, &cns, client)?, once(&h6, &cns, client)?];
    Ok((out, back))
}

/// Connections of the parallel TCP transfers.
pub(crate) const TCP_STREAMS: usize = 4;

/// TCP through a client and relay chain, both ways, with [`TCP_STREAMS`] connections
/// at once carrying `bytes` between them, each checked intact: Mbit/s of all their
/// bytes over the time the slowest took.
pub(crate) fn e2e_tcp_streams(lab: &Lab, client: Ipv6Addr, bytes: usize) -> Result<(f64, f64), Failure> {
    let (cns, h6) = (lab.clients[0].ns.clone(), lab.ns("h6"));
    let once = |from: &str, to: &str, addr: Ipv6Addr| -> Result<f64, Failure> {
        let each = bytes / TCP_STREAMS;
        let all: Vec<_> = std::thread::scope(|s| {
            let running: Vec<_> = (0..TCP_STREAMS)
                .map(|_| s.spawn(|| tcp_transfer(from, to, addr, each, Duration::from_secs(30))))
                .collect();
            running.into_iter().map(|h| h.join().map_err(|_| Failure::runtime("a TCP stream panicked"))).collect()
        });
        let (mut total, mut slowest) = (0u64, 0f64);
        for t in all {
            let t = t?.map_err(lab_err)?;
            if !t.intact {
                return Err(Failure::runtime(format!(
                    "bench: TCP ×{TCP_STREAMS} {from} → {to}: the bytes that arrived differ from those sent"
                )));
            }
            total += t.bytes;
            slowest = slowest.max(t.secs);
        }
        Ok(total as f64 * 8.0 / slowest.max(1e-9) / 1e6)
    };
    Ok((once(&cns, &h6, HOST6_V6)?, once(&h6, &cns, client)?))
}

/// UDP through a client and relay chain, both ways: the highest rate under 0.1 % loss
/// for 512-byte IPv6 packets, [`searches`] of each way, in turn, each starting from
/// `hints` (the median of this chain's earlier rounds, as the relays' searches do). The
/// lab is the one a scenario left running.
pub(crate) fn e2e_udp(
    lab: &Lab,
    client: Ipv6Addr,
    hints: [Option<u64>; 2],
    quick: bool,
) -> Result<(Vec<f64>, Vec<f64>), Failure> {
    let (cns, h6) = (lab.clients[0].ns.clone(), lab.ns("h6"));
    let (dur, _) = trial_sizes(quick);
    let ways = [(&cns, &h6, HOST6_V6), (&h6, &cns, client)];
    let mut tx = Vec::new();
    let mut sinks = Vec::new();
    for (from_ns, to_ns, _) in ways {
        tx.push(socket_in(from_ns, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?);
        sinks.push(Sink::start(vec![socket_in(to_ns, v6(Ipv6Addr::UNSPECIFIED, 9010)).map_err(Failure::runtime)?]));
    }
    let keep_alive = socket_in(&cns, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?;
    let mut rates: [Vec<f64>; 2] = Default::default();
    for _ in 0..searches(quick) {
        for (k, &(_, _, to)) in ways.iter().enumerate() {
            let mut build = |seq: u64, buf: &mut [u8]| (udp_payload(buf, 512, seq), v6(to, 9010), 0);
            // The client renews its peer entries first (they lapse 30 s after its last
            // packet, and native→client traffic alone would not renew them).
            let _ = keep_alive.send_to(&[0u8; 8], &v6(HOST6_V6, 9011).into());
            std::thread::sleep(Duration::from_millis(50));
            let found = max_rate(
                &mut Sockets { socks: std::slice::from_ref(&tx[k]), build: Box::new(&mut build) },
                &sinks[k],
                dur,
                quick,
                hints[k],
            );
            rates[k].push(found.rate as f64);
        }
    }
    let [up, down] = rates;
    Ok((up, down))
}

/// The same traffic forwarded by the relay host's kernel, no tunnel, and its
/// decapsulation-size rate under the relays' flood.
pub(crate) fn measure_kernel(quick: bool, hints: &Hints, say: &mut dyn FnMut(&str)) -> Result<Figures, Failure> {
    let mut lab = Lab::build(&LabSpec { generator: true, ..LabSpec::nats(vec![]) }).map_err(lab_err)?;
    let (gen, h6) = (lab.ns("gen"), lab.ns("h6"));
    let mut f = Figures::default();
    let out = socket_in(&gen, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?;
    let back = socket_in(&h6, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?;
    let rx_h6 = socket_in(&h6, v6(Ipv6Addr::UNSPECIFIED, 9000)).map_err(Failure::runtime)?;
    let rx_gen = socket_in(&gen, v6(Ipv6Addr::UNSPECIFIED, 9001)).map_err(Failure::runtime)?;
    let dup = |s: &Socket| s.try_clone().map_err(|e| Failure::runtime(e.to_string()));
    let sink_h6 = Sink::start(vec![dup(&rx_h6)?]);
    let sink_gen = Sink::start(vec![dup(&rx_gen)?]);
    let senders = Senders::of(&lab)?;
    f.generator = Some(senders.kind());
    let mut routes = Vec::new();
    for &size in sizes(quick) {
        for (dir, sock, sink, rx, to) in [
            ("Teredo→IPv6", &out, &sink_h6, &rx_h6, v6(SINK_NATIVE_V6, 9000)),
            ("IPv6→Teredo", &back, &sink_gen, &rx_gen, v6(GEN_NATIVE_V6, 9001)),
        ] {
            let tx = std::slice::from_ref(sock);
            // The load from where the relay's comes from, the probes from sockets.
            let load = if dir == "Teredo→IPv6" {
                senders.generator_load(size)
            } else {
                senders.native_load(&[GEN_NATIVE_V6], 9001, size)
            };
            routes.push(Route {
                key: (dir, size),
                sink,
                load: Box::new(load),
                probe: native_probe(tx, rx, sink, to, size),
                beside: None,
            });
        }
    }
    let rly = lab.ns("rly");
    let prepare = |phase: Phase| cpus::steer(&rly, phase == Phase::Rate);
    measure_routes("kernel", &mut routes, quick, hints, &prepare, &mut f, say)?;
    cpu_trials("kernel", &mut routes, &rly, quick, &prepare, &mut f, say)?;
    sparse_latency("kernel", &mut routes, quick, &prepare, &mut f, say)?;
    drop(routes);
    // The reference under the same flood: sending it costs the traffic core as much
    // here as beside a relay. The bubbles end at a socket on the relay host nobody
    // reads, which drops them once its small buffer is full (no ICMP errors back).
    cpus::steer(&rly, true).map_err(Failure::runtime)?;
    let relay = SocketAddrV4::new(RELAY_V4, RELAY_PORT);
    let hole = socket_in(&rly, SocketAddr::V4(relay)).map_err(Failure::runtime)?;
    hole.set_recv_buffer_size(4096).map_err(|e| Failure::runtime(e.to_string()))?;
    let (dur, _) = trial_sizes(quick);
    under_flood(
        "kernel",
        &gen,
        relay,
        &mut f,
        say,
        &mut || {
            max_rate(&mut senders.generator_load(UNDER_FLOOD.1), &sink_h6, dur, quick, hints.get(&UNDER_FLOOD).copied())
        },
        searches(quick),
    )?;
    senders.check()?;
    drop((sink_h6, sink_gen));
    lab.teardown();
    Ok(f)
}

/// What one thread does with a peer table of `peers` entries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TableFigures {
    pub(crate) peers: usize,
    /// Insertions per second, filling an empty table.
    pub(crate) insert_per_s: f64,
    /// Look-ups of present keys per second, in a shuffled order, a batch at a time (keys
    /// hashed and their lines fetched ahead, as the relay does with a received batch).
    pub(crate) lookup_per_s: f64,
    /// The same look-ups one at a time, nothing fetched ahead.
    pub(crate) single_lookup_per_s: f64,
    /// Look-ups of absent keys per second, in a shuffled order, batched.
    pub(crate) miss_per_s: f64,
    /// Resident memory the filled table added, per peer.
    pub(crate) bytes_per_peer: f64,
    /// Bytes of one entry's hot line.
    pub(crate) entry_bytes: usize,
}

impl std::fmt::Display for TableFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "peers={} insert_per_s={:.0} lookup_per_s={:.0} miss_per_s={:.0} bytes_per_peer={:.0}",
            self.peers, self.insert_per_s, self.lookup_per_s, self.miss_per_s, self.bytes_per_peer
        )
    }
}

/// Rounds of the peer-table measurement per size.
pub(crate) const TABLE_ROUNDS: usize = 3;

/// Keys a batched look-up hashes and fetches ahead before looking any up (a received
/// batch's worth).
pub(crate) const LOOKUP_AHEAD: usize = 16;

/// Peer table, on one thread, set up as a relay's (keyed hash, per-address cap):
/// `n` insertions into an empty table, then a look-up of every key in a shuffled order
/// (batched, then one at a time), then as many of absent keys; memory from the resident
/// set before and after filling (the shuffled orders are made after).
pub(crate) fn peer_table(n: usize) -> TableFigures {
    let rss = || -> f64 {
        std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<f64>().ok()))
            .unwrap_or(0.0)
            * 4096.0
    };
    let before = rss();
    let now = Duration::from_secs(1000);
    let defaults = RelayConfig::default();
    let mut t = PeerTable::new(n, defaults.idle, KeyedHash::new(1, 2)).with_address_cap(defaults.per_address);
    // Distinct clients: each address embeds an IPv4 address of its own.
    let addr = |i: usize| Ipv6Addr::new(0x2001, 0, 0x0102, 0x0304, 0, (i >> 32) as u16, (i >> 16) as u16, i as u16);
    let m = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 1);
    let t0 = Instant::now();
    for i in 0..n {
        let _ = t.insert(Peer::new(addr(i), m, now), now);
    }
    let insert_per_s = n as f64 / t0.elapsed().as_secs_f64();
    let bytes_per_peer = (rss() - before).max(0.0) / n.max(1) as f64;
    // A Fisher-Yates shuffle by xorshift: look-ups in an order the table cannot predict.
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let batched = |offset: usize| {
        let t1 = Instant::now();
        // A pipeline: the key LOOKUP_AHEAD places on is hashed and its line fetched
        // while this one is looked up, as the relay does over a received batch.
        let mut keys = [t.key(&Ipv6Addr::UNSPECIFIED); LOOKUP_AHEAD];
        let key_of = |i: u32| t.key(&addr(offset + i as usize));
        for (k, &i) in keys.iter_mut().zip(&order) {
            *k = key_of(i);
            t.prefetch(k);
        }
        let mut found = 0;
        for (j, _) in order.iter().enumerate() {
            let slot = j % LOOKUP_AHEAD;
            found += usize::from(t.get_keyed(&keys[slot]).is_some());
            if let Some(&next) = order.get(j + LOOKUP_AHEAD) {
                keys[slot] = key_of(next);
                t.prefetch(&keys[slot]);
            }
        }
        (n as f64 / t1.elapsed().as_secs_f64(), found)
    };
    let (lookup_per_s, found) = batched(0);
    assert_eq!(found, n, "every inserted peer is found");
    let (miss_per_s, found) = batched(n);
    assert_eq!(found, 0, "no absent peer is found");
    let t1 = Instant::now();
    let found = order.iter().filter(|&&i| t.get(&addr(i as usize)).is_some()).count();
    let single_lookup_per_s = n as f64 / t1.elapsed().as_secs_f64();
    assert_eq!(found, n, "every inserted peer is found, one at a time too");
    TableFigures {
        peers: n,
        insert_per_s,
        lookup_per_s,
        single_lookup_per_s,
        miss_per_s,
        bytes_per_peer,
        entry_bytes: t.entry_bytes(),
    }
}

/// CPUs online (not those this process may use: the bench holds itself to one).
pub(crate) fn online_cpus() -> libc::c_long {
    // SAFETY: sysconf takes and returns plain integers.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{} × {cpu}, Linux {}", online_cpus(), kernel.trim())
}

/// Files a relay lab's figures under `label`, and the kernel path's latencies probed in
/// the same lab under the kernel's, as a lab of its own without rates: the kernel path's
/// level is a lab's (9 or 11 µs), so three labs a round make a steadier figure than one.
pub(crate) fn file_relay(runs: &mut BTreeMap<&'static str, Vec<Figures>>, label: &'static str, mut f: Figures) {
    let beside = std::mem::take(&mut f.beside);
    if !beside.is_empty() {
        runs.entry("kernel").or_default().push(Figures { latency: beside, ..Figures::default() });
    }
    runs.entry(label).or_default().push(f);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_table_line_names_every_figure_and_finds_what_it_inserted() {
        // peer_table asserts that every inserted key is found and no absent one is.
        let f = peer_table(5000);
        assert_eq!(f.peers, 5000);
        assert!(f.insert_per_s > 0.0 && f.lookup_per_s > 0.0 && f.miss_per_s > 0.0);
        let line = f.to_string();
        for key in ["peers=5000 ", "insert_per_s=", "lookup_per_s=", "miss_per_s=", "bytes_per_peer="] {
            assert!(line.contains(key), "{line}");
        }
    }
}
