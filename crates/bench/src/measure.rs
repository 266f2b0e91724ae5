//! What the benchmark measures in each relay's lab: the rate searches and latency
//! probes over every route, for the relays and the kernel path, and what a lab's
//! figures are. The other measurements have files of their own: CPU per packet
//! (`cpu_trials`), sparse latency (`sparse_latency`), the rate under attack
//! (`under_attack`), the end-to-end chains (`end_to_end`), the peer table alone
//! (`table_bench`).

use crate::buffers::{equalize, TUN_QUEUE};
use crate::cpus::{self, RELAY_CPU};
use crate::error::Failure;
use crate::frame_loads::Senders;
use crate::packets::{ipv6_udp, udp_payload, Ipv6UdpTemplate};
use crate::rate_search::{max_rate, Found};
use crate::report::*;
use crate::stats::*;
use crate::traffic::{latencies, socket_in, v6, Emulated, Load, Probe, Sink};
use shipworm::io::socket_buffers::DAEMON_BYTES;
use shipworm_lab::{Impl, Lab, LabSpec, GEN_NATIVE_V6, GEN_V4, RELAY_V4, SERVER_V4, SINK_NATIVE_V6};
use socket2::Socket;
use std::collections::BTreeMap;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

// Each benchmark beside the rate searches in a file of its own; their names here too, for
// the report and the run.
pub(crate) use crate::cpu_trials::*;
pub(crate) use crate::end_to_end::*;
pub(crate) use crate::sparse_latency::*;
pub(crate) use crate::table_bench::*;
pub(crate) use crate::under_attack::*;

pub(crate) const SIZES: [usize; 3] = [64, 512, 1280];

/// The IPv6 sizes measured: [`SIZES`], or the largest alone in a quick run (judges nothing).
pub(crate) fn sizes(quick: bool) -> &'static [usize] {
    &SIZES[if quick { SIZES.len() - 1 } else { 0 }..]
}

pub(crate) const CLIENTS: usize = 32;
pub(crate) const RELAY_PORT: u16 = 3545;
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

/// A lab with `me`'s server and the relay `imp` (with `extra` configuration lines), its
/// buffers as every relay's, pinned to the relay core.
fn relay_lab(label: &str, imp: &Impl, extra: &str, me: &Impl, say: &mut dyn FnMut(&str)) -> Result<Lab, Failure> {
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
    Ok(lab)
}

/// Where a relay lab's traffic is read: the native host's (Teredo→IPv6), the emulated
/// clients' (IPv6→Teredo), and the generator's own native path through the same relay
/// host, both ways: the kernel's latency in this lab too (a lab's kernel path sits at
/// one of two levels, 9 or 11 µs, so every lab of a round adds to the kernel's figure).
struct Sinks {
    rx6: Socket,
    sink6: Sink,
    sink_emu: Sink,
    gen_out: Socket,
    rx_gen: Socket,
    sink_gen: Sink,
}

impl Sinks {
    fn open(gen: &str, h6: &str, emu: &Emulated) -> Result<Sinks, Failure> {
        let dup = |s: &Socket| s.try_clone().map_err(|e| Failure::runtime(e.to_string()));
        let rx6 = socket_in(h6, v6(Ipv6Addr::UNSPECIFIED, 9000)).map_err(Failure::runtime)?;
        let sink6 = Sink::start(vec![dup(&rx6)?]);
        let sink_emu = Sink::start(emu.socks.iter().map(dup).collect::<Result<_, _>>()?);
        let gen_out = socket_in(gen, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?;
        let rx_gen = socket_in(gen, v6(Ipv6Addr::UNSPECIFIED, 9001)).map_err(Failure::runtime)?;
        let sink_gen = Sink::start(vec![dup(&rx_gen)?]);
        Ok(Sinks { rx6, sink6, sink_emu, gen_out, rx_gen, sink_gen })
    }
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
    let mut lab = relay_lab(label, imp, extra, me, say)?;
    let (gen, h6) = (lab.ns("gen"), lab.ns("h6"));
    let emu = Emulated::new(&gen, GEN_V4, SERVER_V4, CLIENTS).map_err(Failure::runtime)?;
    let relay = SocketAddrV4::new(RELAY_V4, RELAY_PORT);
    let native = introduce(&h6, &emu, relay)?;
    let mut f = Figures::default();
    let Sinks { rx6, sink6, sink_emu, gen_out, rx_gen, sink_gen } = Sinks::open(&gen, &h6, &emu)?;
    let (first, natives, gen_outs) = (emu.addrs[0], std::slice::from_ref(&native), std::slice::from_ref(&gen_out));
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
            load: Box::new(senders.native_load(&emu.addrs, 9002, size)),
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
        max_rate(&mut senders.decap(&emu, key.1, relay), &sink6, trial_sizes(quick).0, quick, hint)
    };
    // Spoofed new peers pour in.
    prepare(Phase::Rate).map_err(Failure::runtime)?;
    under_flood(label, &gen, relay, &mut f, say, &mut || established(UNDER_FLOOD), searches(quick))?;
    senders.check()?;
    // One endpoint makes the relay trust ever more addresses.
    prepare(Phase::Rate).map_err(Failure::runtime)?;
    let established_under_lockout = &mut || established(UNDER_LOCKOUT);
    under_lockout(label, (&gen, &h6, &rly), relay, &mut f, say, established_under_lockout, quick)?;
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
