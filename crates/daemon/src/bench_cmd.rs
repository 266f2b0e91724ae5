//! `shipworm bench`: shipworm's relay, Miredo's relay and the kernel's own forwarding,
//! measured alternately in the same run on the same lab, reported as figures over the
//! rounds and ratios in a markdown report with PNG plots. Numbers are never asserted:
//! `--quick` (in the test command) only keeps the benchmark working.

use crate::bench_buffers::{equalize, TUN_QUEUE};
use crate::bench_cpus::{self, RELAY_CPU, TRAFFIC_CPU};
use crate::bench_traffic::{ipv6_udp, latencies, max_rate, socket_in, v6, Build, Emulated, Flood, Found, Probe, Sink};
use crate::cli::BenchArgs;
use crate::socket_buffers::DAEMON_BYTES;
use crate::Failure;
use shipworm_lab::scenario::{self, Scenario, Side};
use shipworm_lab::traffic::tcp_transfer;
use shipworm_lab::{Impl, Lab, LabSpec, NatKind, GEN_NATIVE_V6, GEN_V4, HOST6_V6, RELAY_V4, SERVER_V4, SINK_NATIVE_V6};
use shipworm_proto::peer_table::{KeyedHash, Peer, PeerTable};
use socket2::Socket;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [64, 512, 1280];
/// shipworm's relay configuration in the bench: one worker, as it picks for itself on
/// the one core the relay host has (see `bench_cpus`).
const SHIPWORM_EXTRA: &str = "RelayThreads 1\n";
const CLIENTS: usize = 32;
const RELAY_PORT: u16 = 3545;
/// Spoofed new-peer bubbles per second while established peers' rate is measured.
const FLOOD_RATE: u64 = 20_000;
/// Sockets the flood leaves by (SO_REUSEPORT spreads them over the relay's workers).
const FLOOD_SOCKETS: usize = 8;
/// The flood's packet size and direction in the rate table.
const UNDER_FLOOD: (&str, usize) = ("Teredo→IPv6 under flood", 64);

/// One implementation's figures for one round.
#[derive(Debug, Default, Clone)]
struct Figures {
    /// (direction, size) → packets per second under 0.1 % loss, one per search.
    rate: BTreeMap<(&'static str, usize), Vec<f64>>,
    /// (direction, size) → latencies in µs.
    latency: BTreeMap<(&'static str, usize), Vec<f64>>,
    /// (direction, size) → the kernel path's latencies in µs, probed in this relay's lab
    /// in turns with the relay's own (none for the kernel itself).
    beside: BTreeMap<(&'static str, usize), Vec<f64>>,
    /// Spoofed bubbles per second the flood achieved.
    flood: f64,
    /// (direction, size) → how many of its searches the generator held: their lowest
    /// failing rate failed only because the sender fell short, the path losing nothing.
    held: BTreeMap<(&'static str, usize), usize>,
}

impl Figures {
    /// Files a rate search's result under `key`.
    fn file_rate(&mut self, key: (&'static str, usize), found: Found) {
        self.rate.entry(key).or_default().push(found.rate as f64);
        if found.held_by_sender {
            *self.held.entry(key).or_default() += 1;
        }
    }
}

/// How a log line marks a rate the generator held.
fn held_mark(found: Found) -> &'static str {
    if found.held_by_sender {
        " (the generator's: it fell short, nothing was lost)"
    } else {
        ""
    }
}

/// (direction, size) → the rate of the earlier rounds ([`rate_of`]), where the rate
/// searches of this round start from.
type Hints = BTreeMap<(&'static str, usize), u64>;

/// The hints for the next round from an implementation's rounds so far.
fn hints(runs: &[Figures]) -> Hints {
    let keys: std::collections::BTreeSet<_> = runs.iter().flat_map(|f| f.rate.keys().copied()).collect();
    keys.into_iter().map(|k| (k, rate_of(runs, k) as u64)).collect()
}

/// One implementation's client and relay chain through a NAT, over every end-to-end
/// round (a fresh lab each: one lab's transfers and searches moved together).
struct EndToEnd {
    name: &'static str,
    /// Seconds from client start to an address, one per round.
    qualify_secs: Vec<f64>,
    /// Median steady ping6 round trip of the first round (the one with 20 echoes), ms.
    ping_ms: f64,
    /// TCP Mbit/s, every transfer client → native and back.
    tcp: (Vec<f64>, Vec<f64>),
    /// UDP packets/s under 0.1 % loss, client → native and back, every search of every round.
    udp: (Vec<f64>, Vec<f64>),
}

/// A figure's two directions over the rounds ([`middle_mean`]).
fn both_ways((out, back): &(Vec<f64>, Vec<f64>)) -> (f64, f64) {
    (middle_mean(out), middle_mean(back))
}

/// The UDP payload of a native packet of IPv6 size `size` (≥ 56) carrying `seq`, built
/// in `buf`; its length (the kernel adds the 48 bytes of IPv6 and UDP headers).
fn udp_payload(buf: &mut [u8], size: usize, seq: u64) -> usize {
    buf[..8].copy_from_slice(&seq.to_be_bytes());
    buf[8..size - 48].fill(0x5a);
    size - 48
}

/// A figure over rounds or searches: the mean of all but the highest and the lowest
/// ninth, at least one each (of two or fewer, of all). Not their median: a path's
/// rounds fall at two levels a lab apart (85 and 108 k packets/s, the kernel path's 9
/// and 11 µs), and with nine rounds the median jumps from one level to the other when
/// one round does, while this moves by a ninth of the gap; dropping the ends still
/// keeps a stalled round from counting. Two runs of the same binary put 5 of 36 ratios
/// beyond ±15 % with medians; resampling their rounds predicts 2.1 ratios beyond per
/// pair of runs with medians, 0.7 with this.
fn middle_mean(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let cut = (v.len() / 9).max(1);
    let middle = if v.len() > 2 { &v[cut..v.len() - cut] } else { &v[..] };
    middle.iter().sum::<f64>() / middle.len() as f64
}

/// The median; of an even count, the mean of the middle two (with a handful of rounds,
/// taking the upper one alone made the figure needlessly jumpy).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(f64::NAN)
}

fn lab_err(e: impl std::fmt::Display) -> Failure {
    Failure::runtime(format!("bench: {e}"))
}

/// Trial length for rate searches, and probes per route in each lab (36 000 a run).
/// A path's capacity wanders by about a tenth from one search to the next, whatever
/// the trials' length (eight searches each of 300, 200 and 100 ms trials spread 7-14 %
/// alike), so more searches rather than longer trials narrow a figure: with 150 ms
/// trials, two searches a round made a run 13.1-13.6 min, against 12.5 with one of
/// 300 ms.
fn trial_sizes(quick: bool) -> (Duration, usize) {
    if quick {
        (Duration::from_millis(100), 100)
    } else {
        (Duration::from_millis(150), 4_000)
    }
}

/// "once", "twice", "3 times": how often something was done, for the report.
fn times(n: usize) -> String {
    match n {
        1 => "once".into(),
        2 => "twice".into(),
        n => format!("{n} times"),
    }
}

/// Rate searches of each route in each lab, in turn over the routes.
fn searches(quick: bool) -> usize {
    if quick {
        1
    } else {
        2
    }
}

/// One direction and size through the thing measured: the sockets its load leaves by,
/// the sink that counts arrivals, what the load carries, the path its latency probes
/// take, and the same direction's native path through the same relay host, probed in
/// turns with it.
struct Route<'a> {
    key: (&'static str, usize),
    tx: &'a [Socket],
    sink: &'a Sink,
    load: Box<Build<'a>>,
    probe: Probe<'a>,
    beside: Option<Probe<'a>>,
}

/// What a lab measures next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Rate,
    Latency,
}

/// Every route's rate, searched in turn; after each search a block of latency probes on
/// every route, so a route's probes are spread over the whole measurement rather than
/// taken in one burst: the machine's state (which core, a neighbour's load) shifts a
/// burst's median by a microsecond or two, as much as the relay under test adds.
/// `prepare` runs before each search and block (the relays' peers stay fresh, the
/// relay host's receive work goes where the phase wants it: [`bench_cpus::steer`]).
fn measure_routes(
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
        let found = max_rate(p.tx, p.sink, dur, quick, hints.get(&p.key).copied(), &mut *p.load);
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
fn native_probe<'a>(tx: &'a [Socket], rx: &'a Socket, sink: &'a Sink, to: SocketAddr, size: usize) -> Probe<'a> {
    let build = move |seq: u64, buf: &mut [u8]| (udp_payload(buf, size, seq), to, 0);
    Probe { tx, rx, seq_at: 0, sink, build: Box::new(build) }
}

/// Packets in a row for one emulated client, both ways: decapsulation load leaves by
/// one client's socket a sendmmsg batch at a time, and encapsulation load arrives at
/// one client's socket in runs the sink reads in a few calls (a packet per client in
/// turn left it a packet or two per socket and call).
const RUN: u64 = 64;

/// The emulated client load packet `seq` is for.
fn client_of(seq: u64) -> usize {
    ((seq / RUN) % CLIENTS as u64) as usize
}

/// Decapsulation load of `size`-byte packets from the emulated clients `addrs` to the
/// native sink, in runs of [`RUN`] per client.
fn decap_load(
    addrs: Vec<Ipv6Addr>,
    size: usize,
    relay: SocketAddrV4,
) -> impl FnMut(u64, &mut [u8]) -> (usize, SocketAddr, usize) {
    move |seq, buf| {
        let i = client_of(seq);
        (ipv6_udp(buf, size, addrs[i], SINK_NATIVE_V6, 9000, seq), SocketAddr::V4(relay), i)
    }
}

/// Searches a rate `n` times with `search` (from the earlier rounds' hint) while spoofed
/// bubbles from never-seen Teredo addresses pour from the generator to `relay`, and
/// files them and the flood's rate in `f`.
fn under_flood(
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
    let flood = Flood::start(flood_socks, relay, SINK_NATIVE_V6, FLOOD_RATE, Duration::from_secs(120));
    let found: Vec<Found> = (0..n).map(|_| search()).collect();
    f.flood = flood.stop();
    for &one in &found {
        f.file_rate(UNDER_FLOOD, one);
    }
    let rates: Vec<String> = found.iter().map(|one| format!("{:>9} pkt/s{}", one.rate, held_mark(*one))).collect();
    say(&format!(
        "  {label} {:>4} B under a flood of {:.0} new-peer bubbles/s: Teredo→IPv6 {}",
        UNDER_FLOOD.1,
        f.flood,
        rates.join(",")
    ));
    Ok(())
}

/// Measure the Teredo relay `imp` (shipworm or Miredo), with `extra` configuration lines.
fn measure_relay(
    label: &str,
    imp: &Impl,
    extra: &str,
    me: &Impl,
    quick: bool,
    hints: &Hints,
    say: &mut dyn FnMut(&str),
) -> Result<Figures, Failure> {
    let mut lab = Lab::build(&LabSpec { nats: vec![], second_server: false, generator: true }).map_err(lab_err)?;
    lab.start_server(me).map_err(lab_err)?;
    lab.start_relay_with(imp, extra).map_err(lab_err)?;
    let given = equalize(&lab.ns("rly"), Some(RELAY_PORT), DAEMON_BYTES, "teredo").map_err(Failure::runtime)?;
    let mib: Vec<String> = given.iter().map(|&b| format!("{:.0}", b as f64 / f64::from(1 << 20))).collect();
    let threads = bench_cpus::pin_host(&lab.ns("rly")).map_err(Failure::runtime)?;
    say(&format!(
        "  {label}: UDP receive buffers {} MiB, TUN queues {TUN_QUEUE} packets, {threads} threads on CPU {RELAY_CPU}",
        mib.join(" + ")
    ));
    let (gen, h6) = (lab.ns("gen"), lab.ns("h6"));
    let emu = Emulated::new(&gen, GEN_V4, SERVER_V4, CLIENTS).map_err(Failure::runtime)?;
    let relay = SocketAddrV4::new(RELAY_V4, RELAY_PORT);
    // The relay learns every emulated client: native packets make it bubble them, their
    // bubbles make them trusted.
    let native = socket_in(&h6, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?;
    for a in &emu.addrs {
        let _ = native.send_to(&[0u8; 16], &v6(*a, 9002).into());
    }
    std::thread::sleep(Duration::from_millis(300));
    emu.bubble(relay, SINK_NATIVE_V6);
    std::thread::sleep(Duration::from_millis(200));
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
    let mut routes = Vec::new();
    for size in SIZES {
        routes.push(Route {
            key: ("Teredo→IPv6", size),
            tx: &emu.socks,
            sink: &sink6,
            load: Box::new(decap_load(addrs.clone(), size, relay)),
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
        let a = addrs.clone();
        routes.push(Route {
            key: ("IPv6→Teredo", size),
            tx: natives,
            sink: &sink_emu,
            load: Box::new(move |seq: u64, buf: &mut [u8]| {
                (udp_payload(buf, size, seq), v6(a[client_of(seq)], 9002), 0)
            }),
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
        bench_cpus::steer(&rly, phase == Phase::Rate)
    };
    measure_routes(label, &mut routes, quick, hints, &prepare, &mut f, say)?;
    drop(routes);
    // Established peers while spoofed new peers pour in.
    prepare(Phase::Rate).map_err(Failure::runtime)?;
    under_flood(
        label,
        &gen,
        relay,
        &mut f,
        say,
        &mut || {
            let hint = hints.get(&UNDER_FLOOD).copied();
            max_rate(&emu.socks, &sink6, dur, quick, hint, &mut decap_load(addrs.clone(), UNDER_FLOOD.1, relay))
        },
        searches(quick),
    )?;
    drop((sink6, sink_emu, sink_gen));
    lab.teardown();
    Ok(f)
}

/// End-to-end rounds: each builds a fresh lab per implementation, alternately, for two
/// TCP transfers and two UDP rate searches each way, the relay and the client with equal
/// buffers (Miredo's client on its defaults spread 39-80 k packets/s native→client
/// over ten rounds). One lab's figures stuck together and
/// moved by a fifth to a third from run to run, even as the median of five transfers.
fn e2e_rounds(quick: bool) -> usize {
    if quick {
        1
    } else {
        6
    }
}

/// Bytes in each end-to-end TCP transfer.
fn e2e_bytes(quick: bool) -> usize {
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
fn e2e_tcp(lab: &Lab, client: Ipv6Addr, bytes: usize) -> Result<([f64; 2], [f64; 2]), Failure> {
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

/// UDP through a client and relay chain, both ways: the highest rate under 0.1 % loss
/// for 512-byte IPv6 packets, [`searches`] of each way, in turn, each starting from
/// `hints` (the median of this chain's earlier rounds, as the relays' searches do). The
/// lab is the one a scenario left running.
fn e2e_udp(lab: &Lab, client: Ipv6Addr, hints: [Option<u64>; 2], quick: bool) -> Result<(Vec<f64>, Vec<f64>), Failure> {
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
            let found = max_rate(std::slice::from_ref(&tx[k]), &sinks[k], dur, quick, hints[k], &mut build);
            rates[k].push(found.rate as f64);
        }
    }
    let [up, down] = rates;
    Ok((up, down))
}

/// The same traffic forwarded by the relay host's kernel, no tunnel, and its
/// decapsulation-size rate under the relays' flood.
fn measure_kernel(quick: bool, hints: &Hints, say: &mut dyn FnMut(&str)) -> Result<Figures, Failure> {
    let mut lab = Lab::build(&LabSpec { nats: vec![], second_server: false, generator: true }).map_err(lab_err)?;
    let (gen, h6) = (lab.ns("gen"), lab.ns("h6"));
    let mut f = Figures::default();
    let out = socket_in(&gen, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?;
    let back = socket_in(&h6, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?;
    let rx_h6 = socket_in(&h6, v6(Ipv6Addr::UNSPECIFIED, 9000)).map_err(Failure::runtime)?;
    let rx_gen = socket_in(&gen, v6(Ipv6Addr::UNSPECIFIED, 9001)).map_err(Failure::runtime)?;
    let dup = |s: &Socket| s.try_clone().map_err(|e| Failure::runtime(e.to_string()));
    let sink_h6 = Sink::start(vec![dup(&rx_h6)?]);
    let sink_gen = Sink::start(vec![dup(&rx_gen)?]);
    let mut routes = Vec::new();
    for size in SIZES {
        for (dir, sock, sink, rx, to) in [
            ("Teredo→IPv6", &out, &sink_h6, &rx_h6, v6(SINK_NATIVE_V6, 9000)),
            ("IPv6→Teredo", &back, &sink_gen, &rx_gen, v6(GEN_NATIVE_V6, 9001)),
        ] {
            let native = move |seq: u64, buf: &mut [u8]| (udp_payload(buf, size, seq), to, 0);
            let tx = std::slice::from_ref(sock);
            routes.push(Route {
                key: (dir, size),
                tx,
                sink,
                // Load and probes alike: native packets to the sink.
                load: Box::new(native),
                probe: native_probe(tx, rx, sink, to, size),
                beside: None,
            });
        }
    }
    let rly = lab.ns("rly");
    measure_routes(
        "kernel",
        &mut routes,
        quick,
        hints,
        &|phase| bench_cpus::steer(&rly, phase == Phase::Rate),
        &mut f,
        say,
    )?;
    drop(routes);
    // The reference under the same flood: sending it costs the traffic core as much
    // here as beside a relay. The bubbles end at a socket on the relay host nobody
    // reads, which drops them once its small buffer is full (no ICMP errors back).
    bench_cpus::steer(&rly, true).map_err(Failure::runtime)?;
    let relay = SocketAddrV4::new(RELAY_V4, RELAY_PORT);
    let hole = socket_in(&rly, SocketAddr::V4(relay)).map_err(Failure::runtime)?;
    hole.set_recv_buffer_size(4096).map_err(|e| Failure::runtime(e.to_string()))?;
    let (dur, _) = trial_sizes(quick);
    let to = v6(SINK_NATIVE_V6, 9000);
    let mut native = move |seq: u64, buf: &mut [u8]| (udp_payload(buf, UNDER_FLOOD.1, seq), to, 0);
    under_flood(
        "kernel",
        &gen,
        relay,
        &mut f,
        say,
        &mut || {
            max_rate(std::slice::from_ref(&out), &sink_h6, dur, quick, hints.get(&UNDER_FLOOD).copied(), &mut native)
        },
        searches(quick),
    )?;
    drop((sink_h6, sink_gen));
    lab.teardown();
    Ok(f)
}

/// Peer table: insertions and look-ups per second, and memory, at `n` peers.
fn peer_table(n: usize) -> (f64, f64, f64) {
    let rss = || -> f64 {
        std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<f64>().ok()))
            .unwrap_or(0.0)
            * 4096.0
    };
    let before = rss();
    let now = Duration::from_secs(1000);
    let mut t = PeerTable::new(n, Duration::from_secs(300), KeyedHash::new(1, 2));
    let addr = |i: usize| Ipv6Addr::new(0x2001, 0, 0x0102, 0x0304, 0, (i >> 32) as u16, (i >> 16) as u16, i as u16);
    let m = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 1);
    let t0 = Instant::now();
    for i in 0..n {
        let _ = t.insert(Peer::new(addr(i), m, now), now);
    }
    let ins = n as f64 / t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut found = 0;
    for i in 0..n {
        found += usize::from(t.get(&addr(i.wrapping_mul(7919) % n)).is_some());
    }
    let look = n as f64 / t1.elapsed().as_secs_f64();
    assert_eq!(found, n);
    (ins, look, (rss() - before).max(0.0))
}

/// CPUs online (not those this process may use: the bench holds itself to one).
fn online_cpus() -> libc::c_long {
    // SAFETY: sysconf takes and returns plain integers.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }
}

fn machine() -> String {
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

/// Run the benchmark.
pub fn run(args: &BenchArgs) -> Result<(), Failure> {
    let me = Impl::Shipworm(std::env::current_exe().map_err(|e| Failure::runtime(e.to_string()))?);
    let miredo = std::path::Path::new("/usr/sbin/miredo").exists();
    let rounds = if args.quick { 1 } else { args.rounds.max(1) };
    let started = Instant::now();
    let mut say = |l: &str| println!("{l}");
    if bench_cpus::available() {
        bench_cpus::pin_traffic().map_err(Failure::runtime)?;
        say(&format!("traffic on CPU {TRAFFIC_CPU}, each relay host on CPU {RELAY_CPU}"));
    } else {
        say("one core: traffic and relay share it");
    }
    let mut runs: BTreeMap<&'static str, Vec<Figures>> = BTreeMap::new();
    for round in 1..=rounds {
        say(&format!("round {round}/{rounds} (at {:.0} s)", started.elapsed().as_secs_f64()));
        // Each implementation's searches start from its earlier rounds' rate.
        let hints_of =
            |runs: &BTreeMap<&str, Vec<Figures>>, label: &str| runs.get(label).map_or_else(Hints::new, |r| hints(r));
        let h = hints_of(&runs, "shipworm");
        let s = measure_relay("shipworm", &me, SHIPWORM_EXTRA, &me, args.quick, &h, &mut say)?;
        file_relay(&mut runs, "shipworm", s);
        if miredo {
            let h = hints_of(&runs, "miredo");
            let m = measure_relay("miredo", &Impl::Miredo, "", &me, args.quick, &h, &mut say)?;
            file_relay(&mut runs, "miredo", m);
        }
        let k = measure_kernel(args.quick, &hints_of(&runs, "kernel"), &mut say)?;
        runs.entry("kernel").or_default().push(k);
    }
    say(&format!("peer table (at {:.0} s)", started.elapsed().as_secs_f64()));
    let sizes: Vec<usize> = if args.quick { vec![100_000] } else { vec![1_000_000, 10_000_000] };
    let tables: Vec<(usize, (f64, f64, f64))> = sizes.iter().map(|&n| (n, peer_table(n))).collect();
    say(&format!("end to end through a NAT (at {:.0} s)", started.elapsed().as_secs_f64()));
    let bytes = e2e_bytes(args.quick);
    let mut chains: Vec<(&'static str, Impl)> = vec![("shipworm", me.clone())];
    if miredo {
        chains.push(("miredo", Impl::Miredo));
    }
    let mut e2e: Vec<EndToEnd> = chains
        .iter()
        .map(|(name, _)| EndToEnd {
            name,
            qualify_secs: vec![],
            ping_ms: f64::NAN,
            tcp: Default::default(),
            udp: Default::default(),
        })
        .collect();
    let rounds_e2e = e2e_rounds(args.quick);
    for round in 0..rounds_e2e {
        for ((name, imp), e) in chains.iter().zip(&mut e2e) {
            let s = Scenario {
                nat: NatKind::PortRestricted,
                server: me.clone(),
                relay: imp.clone(),
                client: imp.clone(),
                transfer_bytes: bytes,
                // The round-trip figure comes from the first round; later ones only check.
                pings: if round == 0 { 20 } else { 3 },
                keep_on_failure: false,
                first: Side::Client,
            };
            let (lab, o) = scenario::run(&s, &mut |_| {}).map_err(lab_err)?;
            // The same buffers for both chains, as for the relays measured alone.
            equalize(&lab.ns("rly"), Some(RELAY_PORT), DAEMON_BYTES, "teredo").map_err(Failure::runtime)?;
            equalize(&lab.clients[0].ns, None, DAEMON_BYTES, "teredo").map_err(Failure::runtime)?;
            // The relay's and the client's hosts share the core the relays had alone above.
            bench_cpus::pin_host(&lab.ns("rly")).map_err(Failure::runtime)?;
            bench_cpus::pin_host(&lab.clients[0].ns).map_err(Failure::runtime)?;
            let (out, back) = e2e_tcp(&lab, o.address, bytes)?;
            let hint = |v: &[f64]| (!v.is_empty()).then(|| median(v) as u64);
            let (up, down) = e2e_udp(&lab, o.address, [hint(&e.udp.0), hint(&e.udp.1)], args.quick)?;
            drop(lab);
            if round == 0 {
                e.ping_ms = o.ping_out.steady_median_ms().unwrap_or(f64::NAN);
            }
            e.qualify_secs.push(o.qualify_secs);
            e.tcp.0.extend(out);
            e.tcp.1.extend(back);
            let rates = |v: &[f64]| v.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ");
            let (up_s, down_s) = (rates(&up), rates(&down));
            e.udp.0.extend(up);
            e.udp.1.extend(down);
            say(&format!(
                "  {name} ({}/{rounds_e2e}): TCP client→native {:.0}, {:.0} Mbit/s, native→client {:.0}, {:.0} Mbit/s; UDP client→native {up_s} pkt/s, native→client {down_s} pkt/s",
                round + 1,
                out[0],
                out[1],
                back[0],
                back[1]
            ));
        }
    }
    let ratios_file = args.out.join("ratios.tsv");
    let previous = read_compared(&ratios_file);
    let (mut report, compared) = report(&runs, &tables, &e2e, args.quick, started.elapsed());
    report.push_str(&repeatability(previous.as_ref(), &compared));
    write_report(&args.out, &report, &runs)?;
    std::fs::write(&ratios_file, compared.to_tsv())
        .map_err(|e| Failure::runtime(format!("{}: {e}", ratios_file.display())))?;
    println!("\nreport: {}", args.out.join("report.md").display());
    Ok(())
}

/// Files a relay lab's figures under `label`, and the kernel path's latencies probed in
/// the same lab under the kernel's, as a lab of its own without rates: the kernel path's
/// level is a lab's (9 or 11 µs), so three labs a round make a steadier figure than one.
fn file_relay(runs: &mut BTreeMap<&'static str, Vec<Figures>>, label: &'static str, mut f: Figures) {
    let beside = std::mem::take(&mut f.beside);
    if !beside.is_empty() {
        runs.entry("kernel").or_default().push(Figures { latency: beside, ..Figures::default() });
    }
    runs.entry(label).or_default().push(f);
}

/// A path's rate over every search of every round ([`middle_mean`]).
fn rate_of(runs: &[Figures], key: (&'static str, usize)) -> f64 {
    middle_mean(&runs.iter().filter_map(|f| f.rate.get(&key)).flatten().copied().collect::<Vec<_>>())
}

/// In how many of the searches of `key`'s rate the generator held it, of how many.
fn held_searches(runs: &[Figures], key: (&'static str, usize)) -> (usize, usize) {
    let searched = runs.iter().filter_map(|f| f.rate.get(&key)).map(Vec::len).sum();
    (runs.iter().filter_map(|f| f.held.get(&key)).sum(), searched)
}

/// Each lab's median latency on `key`, the labs that measured it.
fn lab_medians(runs: &[Figures], key: (&'static str, usize)) -> Vec<f64> {
    runs.iter().filter_map(|f| f.latency.get(&key)).filter(|v| !v.is_empty()).map(|v| median(v)).collect()
}

/// The mean over the labs of each lab's median latency on `key`.
fn lat_mid(runs: &[Figures], key: (&'static str, usize)) -> f64 {
    mean_and_error(&lab_medians(runs, key)).0
}

/// The mean, and its standard error from the spread of the values (NaN under two).
fn mean_and_error(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, if v.len() < 2 { f64::NAN } else { (var / n).sqrt() })
}

fn all_lat(runs: &[Figures], key: (&'static str, usize)) -> Vec<f64> {
    runs.iter().filter_map(|f| f.latency.get(&key)).flatten().copied().collect()
}

/// The latency shipworm adds over the kernel path, as a share of what Miredo adds, from
/// the labs' medians of each (shipworm, Miredo, kernel), with its standard error.
///
/// A quotient of differences, (14 − 10) / (27 − 10), magnifies the labs' noise about
/// fourfold: with nine labs each, its 90 % interval spans ±7–19 %, so two runs may
/// differ by more than 15 % where every latency ratio stays within 7 %. The error says
/// how far it is pinned down; it is carried to first order from each mean's.
fn added(s: &[f64], m: &[f64], k: &[f64]) -> (f64, f64) {
    let ((s, es), (m, em), (k, ek)) = (mean_and_error(s), mean_and_error(m), mean_and_error(k));
    let d = m - k;
    let q = (s - k) / d;
    let var = (es / d).powi(2) + (q / d * em).powi(2) + ((s - m) / (d * d) * ek).powi(2);
    (q, var.sqrt())
}

/// Half the width of a 90 % interval, in standard errors.
const Z90: f64 = 1.645;

/// What two runs of the bench compare: the ratios of the figures, and the figures derived
/// from several (a quotient of differences), each with its standard error.
#[derive(Debug, Default)]
struct Compared {
    ratios: Vec<(String, f64)>,
    derived: Vec<(String, f64, f64)>,
}

impl Compared {
    /// One line per figure: name, value and, for a derived one, its standard error.
    fn to_tsv(&self) -> String {
        let ratios = self.ratios.iter().map(|(k, v)| format!("{k}\t{v}\n"));
        ratios.chain(self.derived.iter().map(|(k, v, e)| format!("{k}\t{v}\t{e}\n"))).collect()
    }

    fn from_tsv(text: &str) -> Compared {
        let mut c = Compared::default();
        for line in text.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
            match (f.len(), num(1), num(2)) {
                (2, Some(v), _) => c.ratios.push((f[0].to_string(), v)),
                (3, Some(v), Some(e)) => c.derived.push((f[0].to_string(), v, e)),
                _ => {}
            }
        }
        c
    }
}

/// The figures of an earlier run written to the same folder, if any.
fn read_compared(path: &Path) -> Option<Compared> {
    Some(Compared::from_tsv(&std::fs::read_to_string(path).ok()?))
}

/// How far each ratio moved since the earlier run in the same folder, and whether each
/// derived figure stayed within what its error allows.
fn repeatability(previous: Option<&Compared>, now: &Compared) -> String {
    let Some(previous) = previous else {
        return "\n## Repeatability\n\nNo earlier run in this folder: run the same command again to compare.\n".into();
    };
    let mut changes: Vec<(f64, &str, f64, f64)> = now
        .ratios
        .iter()
        .filter_map(|(k, v)| {
            let (_, old) = previous.ratios.iter().find(|(pk, _)| pk == k)?;
            (old.is_finite() && v.is_finite() && *old != 0.0).then(|| ((v / old - 1.0).abs(), k.as_str(), *old, *v))
        })
        .collect();
    changes.sort_by(|a, b| b.0.total_cmp(&a.0));
    let within = changes.iter().filter(|c| c.0 <= 0.15).count();
    let mut r = format!(
        "\n## Repeatability\n\nAgainst the earlier run in this folder: {within} of {} ratios within ±15 %.",
        changes.len()
    );
    let moved: Vec<String> = changes
        .iter()
        .filter(|c| c.0 > 0.15)
        .map(|(d, k, old, new)| format!("{k}: {old:.2} → {new:.2} ({:+.0} %)", d * 100.0 * (new - old).signum()))
        .collect();
    if !moved.is_empty() {
        let _ = write!(r, " Moved more: {}.", moved.join("; "));
    }
    // A derived figure agrees with the earlier run's when their difference lies within
    // the 90 % interval of a difference of two such figures.
    let derived: Vec<(bool, String)> = now
        .derived
        .iter()
        .filter_map(|(k, v, e)| {
            let (_, old, oe) = previous.derived.iter().find(|(pk, ..)| pk == k)?;
            let allowed = Z90 * (e * e + oe * oe).sqrt();
            (v.is_finite() && old.is_finite() && allowed.is_finite()).then(|| {
                let agree = (v - old).abs() <= allowed;
                (
                    agree,
                    format!(
                        "{k}: {old:.2} → {new:.2} ({:+.0} %, ±{:.0} % allowed)",
                        (v / old - 1.0) * 100.0,
                        allowed / old * 100.0,
                        new = v
                    ),
                )
            })
        })
        .collect();
    if !derived.is_empty() {
        let _ = write!(
            r,
            "\n\nDerived figures (quotients of differences, each with its error from its labs' spread): {} of {} agree with the earlier run within the 90 % interval of their difference.",
            derived.iter().filter(|d| d.0).count(),
            derived.len()
        );
        let off: Vec<&str> = derived.iter().filter(|d| !d.0).map(|d| d.1.as_str()).collect();
        if !off.is_empty() {
            let _ = write!(r, " Beyond it: {}.", off.join("; "));
        }
        let all: Vec<&str> = derived.iter().map(|d| d.1.as_str()).collect();
        let _ = write!(r, "\n\n{}.", all.join("; "));
    }
    r.push('\n');
    r
}

/// The report, and every ratio and derived figure in it by name (for the repeatability
/// check).
fn report(
    runs: &BTreeMap<&'static str, Vec<Figures>>,
    tables: &[(usize, (f64, f64, f64))],
    e2e: &[EndToEnd],
    quick: bool,
    took: Duration,
) -> (String, Compared) {
    let mut compared = Compared::default();
    let ratios = &mut compared.ratios;
    let mut r = String::new();
    let _ = writeln!(r, "# shipworm benchmark\n");
    let _ = writeln!(
        r,
        "Machine: {}. Mode: {}. Run time {:.0} s. shipworm, Miredo{} and the kernel were measured alternately in the same run, in the same namespace lab; rates are the most packets per second a {} ms trial delivered with < 0.1 % loss (the rate actually sent, which a starved sender may leave short of the rate asked; a rate that fails gets a second trial; the first round searches from 40 000 packets/s, later ones bisect 0.6–1.4 times the earlier rounds' figure); each lab searches each rate {}, in turn over the routes, and a figure is the mean of all its searches without the highest and the lowest ninth (a path's capacity wanders by about a tenth from one search to the next, so more searches, not longer trials, narrow it); every relay ran with the same buffers: UDP sockets of {} MiB (shipworm asks for that itself; Miredo's, which keeps the system default, were given it) and TUN queues of {TUN_QUEUE} packets; latencies are one packet at a time, in {} blocks spread over each measurement; ratios are the quotients of the figures shown.\n",
        machine(),
        if quick { "quick (short trials: figures are rough)" } else { "full" },
        took.as_secs_f64(),
        if runs.contains_key("miredo") { "" } else { " (not installed: skipped)" },
        trial_sizes(quick).0.as_millis(),
        times(searches(quick)),
        (2 * DAEMON_BYTES) >> 20,
        2 * SIZES.len() * searches(quick)
    );
    let _ = writeln!(r, "## Relay packet rate (packets/s delivered with < 0.1 % loss)\n");
    let _ =
        writeln!(r, "| direction | IPv6 size | shipworm | Miredo | kernel | shipworm / Miredo | shipworm / kernel |");
    let _ = writeln!(r, "|---|---|---|---|---|---|---|");
    let get = |name: &str, key| runs.get(name).map(|v| rate_of(v, key)).unwrap_or(f64::NAN);
    for dir in ["Teredo→IPv6", "IPv6→Teredo"] {
        for size in SIZES {
            let (s, m, k) = (get("shipworm", (dir, size)), get("miredo", (dir, size)), get("kernel", (dir, size)));
            // Quotients of the figures shown: rounds are not paired, because a round's
            // implementations were measured minutes apart and their noise is their own
            // (pairing them moved the ratios more between runs, not less).
            let (sm, sk) = (s / m, s / k);
            let _ = writeln!(r, "| {dir} | {size} | {s:.0} | {m:.0} | {k:.0} | {sm:.2} | {sk:.2} |");
            ratios.push((format!("rate {dir} {size} B shipworm/Miredo"), sm));
            ratios.push((format!("rate {dir} {size} B shipworm/kernel"), sk));
        }
    }
    // Where the generator, not the path, set a figure.
    let mut held: Vec<String> = Vec::new();
    for (name, v) in runs {
        for dir in ["Teredo→IPv6", "IPv6→Teredo"] {
            for size in SIZES {
                if let (n @ 1.., all) = held_searches(v, (dir, size)) {
                    held.push(format!("{name} {dir} {size} B in {n} of {all} searches"));
                }
            }
        }
    }
    let _ = writeln!(
        r,
        "\nHeld by the generator (the search's lowest failing rate failed only because the sender fell short of it, nothing lost: the figure is the generator's, and the path may carry more): {}.",
        if held.is_empty() { "none".to_string() } else { held.join("; ") }
    );
    let _ = writeln!(r, "\nThe kernel column is the generator and sink alone, through the relay host's kernel: it bounds what the generator can show. {}\n", if bench_cpus::available() { format!("The relay host (its processes, and during rate searches the receive work of its interfaces through RPS: for the kernel, its forwarding) ran on CPU {RELAY_CPU}, the traffic (generator, sinks, probes) on CPU {TRAFFIC_CPU}: each relay had one core to itself, so shipworm ran one worker (`{}`). Latency probes leave the receive work on the core that sent (an interrupt between cores cost about 20 µs a packet on the machine this was written on).", SHIPWORM_EXTRA.trim()) } else { "Generator, sink and relay shared the machine's one core.".to_string() });
    let flood = |name: &str| {
        let measured = runs.get(name).into_iter().flatten().filter(|f| f.rate.contains_key(&UNDER_FLOOD));
        middle_mean(&measured.map(|f| f.flood).collect::<Vec<_>>())
    };
    let _ = writeln!(
        r,
        "### Established peers under a flood of new peers\n\nTeredo→IPv6, {}-byte packets from {CLIENTS} established clients, while spoofed bubbles from never-seen Teredo addresses (embedded mapping = the socket they leave by) arrive from {FLOOD_SOCKETS} sockets at the rate shown. The kernel row is native traffic through the relay host's kernel under the same flood, the reference as above (the bubbles end at a socket nobody reads on the relay host). Sending the flood costs the traffic core too, so under it the generator reaches less: \"held by the generator\" counts the searches that stopped because the sender fell short with nothing lost, where the rate under flood is the generator's and not the relay's.\n\n| implementation | flood (bubbles/s) | rate under flood | held by the generator | rate without | under / without |\n|---|---|---|---|---|---|",
        UNDER_FLOOD.1
    );
    for name in ["shipworm", "miredo", "kernel"] {
        if !runs.get(name).is_some_and(|v| v.iter().any(|f| f.rate.contains_key(&UNDER_FLOOD))) {
            continue;
        }
        let (with, without) = (get(name, UNDER_FLOOD), get(name, ("Teredo→IPv6", UNDER_FLOOD.1)));
        let kept = with / without;
        let (held, all) = runs.get(name).map_or((0, 0), |v| held_searches(v, UNDER_FLOOD));
        let _ = writeln!(
            r,
            "| {name} | {:.0} | {with:.0} | {held} of {all} searches | {without:.0} | {kept:.2} |",
            flood(name)
        );
        ratios.push((format!("flood {name} under/without"), kept));
    }
    let (s, m, k) = (get("shipworm", UNDER_FLOOD), get("miredo", UNDER_FLOOD), get("kernel", UNDER_FLOOD));
    let _ = writeln!(r, "\nRate under the flood: shipworm / Miredo {:.2}, shipworm / kernel {:.2}.", s / m, s / k);
    ratios.push(("rate under flood shipworm/Miredo".into(), s / m));
    ratios.push(("rate under flood shipworm/kernel".into(), s / k));
    let _ = writeln!(r);
    let _ = writeln!(r, "## Latency per traversal (µs, one packet at a time)\n\nMedian: each lab's median, averaged over the labs (a lab sets its level: the kernel path sat at 9.1 µs in some labs and 11 µs in others, so one median of all probes jumped between the two). The kernel path was probed in every lab, its own and each relay's (there in turns of 200 probes with the relay's), so its figure averages three labs a round. p99: of all probes. Added: the latency shipworm adds over the kernel path as a share of what Miredo adds, (shipworm − kernel) / (Miredo − kernel), ± its 90 % interval from the spread of the labs; a quotient of differences, it magnifies their noise about fourfold, so it is a derived figure, not one of the ratios checked for ±15 % below.\n");
    let _ = writeln!(r, "| direction | IPv6 size | shipworm median / p99 | Miredo median / p99 | kernel median / p99 | shipworm / Miredo | shipworm / kernel | added: shipworm / Miredo ± 90 % |");
    let _ = writeln!(r, "|---|---|---|---|---|---|---|---|");
    for dir in ["Teredo→IPv6", "IPv6→Teredo"] {
        for size in SIZES {
            let l = |name: &str| runs.get(name).map(|v| all_lat(v, (dir, size))).unwrap_or_default();
            let (s, m, k) = (l("shipworm"), l("miredo"), l("kernel"));
            let mid = |name: &str| runs.get(name).map_or(f64::NAN, |v| lat_mid(v, (dir, size)));
            let (ms, mm, mk) = (mid("shipworm"), mid("miredo"), mid("kernel"));
            let labs = |name: &str| runs.get(name).map(|v| lab_medians(v, (dir, size))).unwrap_or_default();
            let (added, error) = added(&labs("shipworm"), &labs("miredo"), &labs("kernel"));
            let (sm, sk) = (ms / mm, ms / mk);
            ratios.push((format!("latency {dir} {size} B shipworm/Miredo"), sm));
            ratios.push((format!("latency {dir} {size} B shipworm/kernel"), sk));
            compared.derived.push((format!("latency added {dir} {size} B shipworm/Miredo"), added, error));
            let _ = writeln!(
                r,
                "| {dir} | {size} | {ms:.1} / {:.1} | {mm:.1} / {:.1} | {mk:.1} / {:.1} | {sm:.2} | {sk:.2} | {added:.2} ± {} |",
                pct(&s, 0.99),
                pct(&m, 0.99),
                pct(&k, 0.99),
                // One lab has no spread to tell the interval from.
                if error.is_finite() { format!("{:.2}", Z90 * error) } else { "—".into() }
            );
        }
    }
    let _ = writeln!(
        r,
        "\nProbes answered: {}.",
        runs.iter()
            .map(|(n, v)| format!("{n} {}", v.iter().flat_map(|f| f.latency.values()).map(Vec::len).sum::<usize>()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(r, "\n(For context, the seed papers measured NICI-Teredo 7.8/9.0 µs, 6WIND 13.5/14.6 µs and Miredo 30.5/33.1 µs per traversal on 2004 hardware.)\n");
    let _ = writeln!(r, "![rate](rate.png)\n\n![latency](latency.png)\n");
    let _ = writeln!(r, "## Peer table\n\n| peers | insertions/s | look-ups/s | memory |\n|---|---|---|---|");
    for (n, (i, l, m)) in tables {
        let _ = writeln!(r, "| {n} | {i:.0} | {l:.0} | {:.0} MiB ({:.0} B/peer) |", m / 1048576.0, m / *n as f64);
    }
    let _ = writeln!(r, "\n## End to end through a port-restricted NAT (client and relay of the same implementation, shipworm server)\n");
    let _ = writeln!(r, "| implementation | qualification | ping6 median | TCP client→native | TCP native→client | UDP client→native | UDP native→client |\n|---|---|---|---|---|---|---|");
    for e in e2e {
        let ((tcp_up, tcp_down), (up, down)) = (both_ways(&e.tcp), both_ways(&e.udp));
        let _ = writeln!(
            r,
            "| {} | {:.0} ms | {:.2} ms | {tcp_up:.0} Mbit/s | {tcp_down:.0} Mbit/s | {up:.0} pkt/s | {down:.0} pkt/s |",
            e.name,
            median(&e.qualify_secs) * 1000.0,
            e.ping_ms,
        );
    }
    if let [sw, mi] = e2e {
        let (st, su, mt, mu) = (both_ways(&sw.tcp), both_ways(&sw.udp), both_ways(&mi.tcp), both_ways(&mi.udp));
        ratios.push(("e2e TCP client→native shipworm/Miredo".into(), st.0 / mt.0));
        ratios.push(("e2e TCP native→client shipworm/Miredo".into(), st.1 / mt.1));
        ratios.push(("e2e UDP client→native shipworm/Miredo".into(), su.0 / mu.0));
        ratios.push(("e2e UDP native→client shipworm/Miredo".into(), su.1 / mu.1));
    }
    let rounds = e2e_rounds(quick);
    let _ = writeln!(r, "\nEnd-to-end rounds: {rounds}, each with a fresh lab per implementation, alternately; the relay and the client of both chains ran with the buffers the relays above had. Qualification: median of the rounds; ping6: the first round's 20 echoes. TCP: the transfers of {} MB each way, two per round, their mean without the highest and the lowest, as for the relays. UDP: 512-byte IPv6 packets, the most delivered with < 0.1 % loss, searched {} each way per round, in turn, their mean without the highest and the lowest ninth (from the second round on, each search starts from the median of the earlier rounds, as the relays' do).", e2e_bytes(quick) / 1_000_000, times(searches(quick)));
    (r, compared)
}

fn write_report(dir: &Path, report: &str, runs: &BTreeMap<&'static str, Vec<Figures>>) -> Result<(), Failure> {
    use plotters::prelude::*;
    std::fs::create_dir_all(dir).map_err(|e| Failure::runtime(format!("{}: {e}", dir.display())))?;
    std::fs::write(dir.join("report.md"), report).map_err(|e| Failure::runtime(e.to_string()))?;
    let colors = [("shipworm", RED), ("miredo", BLUE), ("kernel", BLACK)];
    // Rate against packet size.
    let svg = dir.join("rate.svg");
    {
        let root = SVGBackend::new(&svg, (900, 500)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| Failure::runtime(e.to_string()))?;
        let top = runs.values().flatten().flat_map(|f| f.rate.values().flatten().copied()).fold(1.0, f64::max) * 1.1;
        let mut c = ChartBuilder::on(&root)
            .caption("highest rate with < 0.1 % loss", ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..1344f64, 0f64..top)
            .map_err(|e| Failure::runtime(e.to_string()))?;
        c.configure_mesh()
            .x_desc("IPv6 packet size (bytes)")
            .y_desc("packets/s")
            .draw()
            .map_err(|e| Failure::runtime(e.to_string()))?;
        for (name, color) in colors {
            let Some(v) = runs.get(name) else { continue };
            for (dir, style) in [("Teredo→IPv6", color.stroke_width(2)), ("IPv6→Teredo", color.stroke_width(1))] {
                let pts: Vec<(f64, f64)> = SIZES.iter().map(|&s| (s as f64, rate_of(v, (dir, s)))).collect();
                c.draw_series(LineSeries::new(pts, style))
                    .map_err(|e| Failure::runtime(e.to_string()))?
                    .label(format!("{name} {dir}"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            }
        }
        c.configure_series_labels()
            .background_style(WHITE)
            .border_style(BLACK)
            .draw()
            .map_err(|e| Failure::runtime(e.to_string()))?;
        root.present().map_err(|e| Failure::runtime(e.to_string()))?;
    }
    // Latency histograms, 1280-byte packets, decapsulation.
    let svg2 = dir.join("latency.svg");
    {
        let root = SVGBackend::new(&svg2, (900, 500)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| Failure::runtime(e.to_string()))?;
        let key = ("Teredo→IPv6", 1280);
        let hi =
            runs.values().map(|v| pct(&all_lat(v, key), 0.99)).filter(|x| x.is_finite()).fold(10.0, f64::max) * 1.2;
        let bins = 60usize;
        let hist = |v: &[f64]| -> Vec<(f64, f64)> {
            let mut h = vec![0f64; bins];
            for &x in v {
                let b = ((x / hi) * bins as f64) as usize;
                if b < bins {
                    h[b] += 1.0;
                }
            }
            let n = v.len().max(1) as f64;
            h.iter().enumerate().map(|(i, c)| ((i as f64 + 0.5) * hi / bins as f64, c / n * 100.0)).collect()
        };
        let top = runs.values().flat_map(|v| hist(&all_lat(v, key))).map(|p| p.1).fold(1.0, f64::max) * 1.1;
        let mut c = ChartBuilder::on(&root)
            .caption("latency per traversal, Teredo→IPv6, 1280-byte packets", ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..hi, 0f64..top)
            .map_err(|e| Failure::runtime(e.to_string()))?;
        c.configure_mesh().x_desc("µs").y_desc("% of packets").draw().map_err(|e| Failure::runtime(e.to_string()))?;
        for (name, color) in colors {
            let Some(v) = runs.get(name) else { continue };
            c.draw_series(LineSeries::new(hist(&all_lat(v, key)), color.stroke_width(2)))
                .map_err(|e| Failure::runtime(e.to_string()))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        c.configure_series_labels()
            .background_style(WHITE)
            .border_style(BLACK)
            .draw()
            .map_err(|e| Failure::runtime(e.to_string()))?;
        root.present().map_err(|e| Failure::runtime(e.to_string()))?;
    }
    for s in [&svg, &svg2] {
        let png = s.with_extension("png");
        let ok = std::process::Command::new("rsvg-convert")
            .arg("-o")
            .arg(&png)
            .arg(s)
            .status()
            .map(|st| st.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("note: rsvg-convert (apt-get install librsvg2-bin) is needed to turn {} into PNG", s.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ratios `report` gives, by name.
    fn ratios_of(runs: &BTreeMap<&'static str, Vec<Figures>>) -> BTreeMap<String, f64> {
        report(runs, &[], &[], false, Duration::ZERO).1.ratios.into_iter().collect()
    }

    #[test]
    fn a_ratio_is_the_quotient_of_the_figures_in_the_table() {
        let key = ("Teredo→IPv6", 64);
        let fig = |rate: f64, lat: &[f64]| {
            let mut f = Figures::default();
            f.rate.insert(key, vec![rate]);
            f.latency.insert(key, lat.to_vec());
            f
        };
        let mut runs = BTreeMap::new();
        // Rounds from a real run: paired round by round, the outlier rounds (100 / 28.7)
        // would make it 2.11; the columns say 114 and 56 (the mean of the middle three).
        let sw = [125.4, 126.5, 110.0, 100.0, 106.8];
        let mi = [47.5, 60.0, 70.0, 28.7, 61.2];
        runs.insert("shipworm", sw.iter().map(|&r| fig(r, &[14.0, 15.0, 16.0])).collect::<Vec<_>>());
        runs.insert("miredo", mi.iter().map(|&r| fig(r, &[29.0, 30.0, 31.0])).collect::<Vec<_>>());
        runs.insert("kernel", sw.iter().map(|_| fig(100.0, &[9.0, 10.0, 11.0])).collect::<Vec<_>>());
        let (text, _) = report(&runs, &[], &[], false, Duration::ZERO);
        assert!(text.contains("| Teredo→IPv6 | 64 | 114 | 56 | 100 | 2.03 | 1.14 |"), "{text}");
        let r = ratios_of(&runs);
        let (s, m) = ((106.8 + 110.0 + 125.4) / 3.0, (47.5 + 60.0 + 61.2) / 3.0);
        assert!((r["rate Teredo→IPv6 64 B shipworm/Miredo"] - s / m).abs() < 1e-12);
        assert_eq!(r["latency Teredo→IPv6 64 B shipworm/kernel"], 1.5);
        // shipworm adds 5 µs to the kernel's 10, Miredo 20: a derived figure, not a ratio,
        // shown with its interval (nil here: every lab measured the same).
        assert!(!r.contains_key("latency added Teredo→IPv6 64 B shipworm/Miredo"));
        let (text, compared) = report(&runs, &[], &[], false, Duration::ZERO);
        assert_eq!(compared.derived[0], ("latency added Teredo→IPv6 64 B shipworm/Miredo".to_string(), 0.25, 0.0));
        assert!(text.contains("| 2.03 | 1.14 |") && text.contains("| 0.50 | 1.50 | 0.25 ± 0.00 |"), "{text}");
    }

    #[test]
    fn the_latency_added_carries_each_labs_spread_into_its_error() {
        // Labs from a real run (decapsulation, 512 B): shipworm 13.4–14.6 µs, Miredo
        // 25.5–29.3, the kernel path 9.1–11.7.
        let s = [13.4, 14.0, 13.3, 14.2, 14.0, 14.4, 14.6, 14.0, 13.8];
        let m = [28.9, 26.0, 29.3, 25.6, 27.3, 28.3, 25.5, 25.8, 27.0];
        let k = [9.4, 10.5, 11.4, 11.0, 10.6, 11.3, 10.5, 9.2, 10.9, 11.3, 11.1, 9.3, 10.8, 9.2, 11.1, 9.3, 10.2, 9.3];
        let (q, e) = added(&s, &m, &k);
        let (ms, mm, mk) = (mean_and_error(&s).0, mean_and_error(&m).0, mean_and_error(&k).0);
        assert!((q - (ms - mk) / (mm - mk)).abs() < 1e-12);
        // Pinned down to about a tenth either way (90 %), where each latency is to 2–3 %.
        assert!((0.05..0.15).contains(&(Z90 * e / q)), "{q} ± {e}");
        // Each input's spread counts: labs all alike leave no error; a noisier Miredo or
        // kernel path leaves more.
        assert_eq!(added(&[14.0; 9], &[27.0; 9], &[10.0; 18]).1, 0.0);
        let wide_m: Vec<f64> = m.iter().map(|x| 2.0 * x - mm).collect();
        let wide_k: Vec<f64> = k.iter().map(|x| 2.0 * x - mk).collect();
        assert!(added(&s, &wide_m, &k).1 > e && added(&s, &m, &wide_k).1 > e);
        // Under two labs there is no spread to tell the error from.
        assert!(added(&[14.0], &[27.0], &[10.0]).1.is_nan());
    }

    #[test]
    fn a_latency_is_the_mean_of_the_rounds_medians() {
        let key = ("IPv6→Teredo", 512);
        let fig = |lat: &[f64]| {
            let mut f = Figures::default();
            f.latency.insert(key, lat.to_vec());
            f
        };
        // Three labs at 9 µs and two at 11, each round's probes tight around its level:
        // the median of all probes says 9.1, as if the 11-µs labs had not been; with a
        // third of those it would jump to 10.
        let rounds: Vec<Figures> = [9.0, 11.0, 9.0, 11.0, 9.0].iter().map(|&l| fig(&[l - 0.1, l, l + 0.1])).collect();
        assert!((median(&all_lat(&rounds, key)) - 9.1).abs() < 1e-9);
        assert!((lat_mid(&rounds, key) - 9.8).abs() < 1e-9);
        // Rounds that did not measure it are left out.
        let mut with_gaps = rounds.clone();
        with_gaps.push(Figures::default());
        assert!((lat_mid(&with_gaps, key) - 9.8).abs() < 1e-9);
        // The report's kernel column, and the ratios, use it.
        let mut runs = BTreeMap::new();
        runs.insert("kernel", rounds);
        runs.insert("shipworm", (0..5).map(|_| fig(&[14.6, 14.7, 14.8])).collect());
        let (text, ratios) = report(&runs, &[], &[], false, Duration::ZERO);
        assert!(text.contains("| IPv6→Teredo | 512 | 14.7 / 14.8 | NaN / NaN | 9.8 / 11.1 |"), "{text}");
        let sk = ratios.ratios.iter().find(|(k, _)| k == "latency IPv6→Teredo 512 B shipworm/kernel").unwrap().1;
        assert!((sk - 1.5).abs() < 1e-9);
    }

    #[test]
    fn the_flood_ratio_is_each_implementations_rate_under_flood_over_its_rate_without() {
        let fig = |with: f64, without: f64| {
            let mut f = Figures::default();
            f.rate.insert(UNDER_FLOOD, vec![with]);
            f.rate.insert(("Teredo→IPv6", UNDER_FLOOD.1), vec![without]);
            f.flood = 20_000.0;
            f
        };
        let mut runs = BTreeMap::new();
        let mut held = fig(95.0, 110.0);
        held.held.insert(UNDER_FLOOD, 1);
        runs.insert("shipworm", vec![fig(90.0, 100.0), held, fig(40.0, 105.0)]);
        runs.insert("miredo", vec![fig(50.0, 100.0), fig(60.0, 100.0), fig(70.0, 100.0)]);
        // The kernel's figures also hold the relay labs' kernel-path latencies, which
        // have no rates: the flood figure is of the labs that measured it.
        let mut no_flood = fig(0.0, 120.0);
        no_flood.rate.remove(&UNDER_FLOOD);
        runs.insert("kernel", vec![fig(100.0, 120.0), no_flood, fig(100.0, 120.0)]);
        // The middle round of three each: shipworm 90 of 105, Miredo 60 of 100.
        let r = ratios_of(&runs);
        assert!((r["flood shipworm under/without"] - 90.0 / 105.0).abs() < 1e-12);
        assert!((r["flood miredo under/without"] - 0.6).abs() < 1e-12);
        assert!((r["flood kernel under/without"] - 100.0 / 120.0).abs() < 1e-12);
        assert!((r["rate under flood shipworm/Miredo"] - 1.5).abs() < 1e-12);
        assert!((r["rate under flood shipworm/kernel"] - 0.9).abs() < 1e-12);
        let (text, _) = report(&runs, &[], &[], false, Duration::ZERO);
        assert!(text.contains("| shipworm | 20000 | 90 | 1 of 3 searches | 105 | 0.86 |"), "{text}");
        assert!(text.contains("| kernel | 20000 | 100 | 0 of 2 searches | 120 | 0.83 |"), "{text}");
    }

    #[test]
    fn the_report_names_the_rates_the_generator_held() {
        let key = ("IPv6→Teredo", 512);
        let fig = |held: bool| {
            let mut f = Figures::default();
            f.rate.insert(key, vec![80_000.0]);
            if held {
                f.held.insert(key, 1);
            }
            f
        };
        let mut runs = BTreeMap::new();
        // A round searches each rate twice: both searches count, held or not.
        let mut twice = fig(true);
        twice.file_rate(key, Found { rate: 80_000, held_by_sender: true });
        runs.insert("shipworm", vec![twice, fig(false), fig(true)]);
        runs.insert("miredo", vec![fig(false), fig(false), fig(false)]);
        let (text, _) = report(&runs, &[], &[], false, Duration::ZERO);
        assert!(text.contains("nothing lost: the figure is the generator's, and the path may carry more): shipworm IPv6→Teredo 512 B in 3 of 4 searches."), "{text}");
        runs.insert("shipworm", vec![fig(false)]);
        let (text, _) = report(&runs, &[], &[], false, Duration::ZERO);
        assert!(text.contains("may carry more): none."), "{text}");
    }

    #[test]
    fn the_kernel_path_probed_in_a_relay_lab_counts_toward_the_kernel_latency_not_its_rate() {
        let key = ("Teredo→IPv6", 64);
        let mut runs = BTreeMap::new();
        let mut kernel = Figures::default();
        kernel.rate.insert(key, vec![120_000.0]);
        kernel.latency.insert(key, vec![9.0, 9.1, 9.2]);
        runs.entry("kernel").or_insert_with(Vec::new).push(kernel);
        let mut relay = Figures::default();
        relay.rate.insert(key, vec![100_000.0]);
        relay.latency.insert(key, vec![14.0, 14.1, 14.2]);
        relay.beside.insert(key, vec![11.0, 11.1, 11.2]);
        file_relay(&mut runs, "shipworm", relay);
        // The kernel's latency: the mean of its lab (9.1) and the relay's lab (11.1).
        assert!((lat_mid(&runs["kernel"], key) - 10.1).abs() < 1e-9);
        // Its rate is its own lab's alone, and its next search starts from it.
        assert_eq!(rate_of(&runs["kernel"], key), 120_000.0);
        assert_eq!(hints(&runs["kernel"]).get(&key), Some(&120_000));
        // The relay's own figures are filed as they were, without the kernel's probes.
        assert_eq!(runs["shipworm"].len(), 1);
        assert!(runs["shipworm"][0].beside.is_empty());
        assert!((lat_mid(&runs["shipworm"], key) - 14.1).abs() < 1e-9);
    }

    #[test]
    fn a_figure_over_rounds_at_two_levels_moves_by_a_step_when_one_round_changes_level() {
        // Nine rounds, five at 108 k and four at 87 k; then one of the five at 87 k.
        let before = [108.0, 87.0, 108.0, 87.0, 108.0, 87.0, 108.0, 87.0, 108.0];
        let mut after = before;
        after[0] = 87.0;
        // A median would jump from 108 to 87 (-19 %); this moves by a seventh of the gap.
        assert_eq!((median(&before), median(&after)), (108.0, 87.0));
        let (b, a) = (middle_mean(&before), middle_mean(&after));
        assert!((b - (108.0 * 4.0 + 87.0 * 3.0) / 7.0).abs() < 1e-9, "{b}");
        assert!((a / b - 1.0).abs() < 0.04, "{a} {b}");
        // A round that stalled (an 87 k round at 20 k) is the one left out at the bottom:
        // the figure stays where it was.
        let mut stalled = before;
        stalled[3] = 20.0;
        assert!((middle_mean(&stalled) - b).abs() < 1e-9);
        // Eighteen searches (two a round): two stalled ones, both left out.
        let mut searches: Vec<f64> = before.iter().chain(&before).copied().collect();
        let (s, stalled_twice) = (middle_mean(&searches), {
            searches[1] = 20.0;
            searches[3] = 25.0;
            middle_mean(&searches)
        });
        assert!((s - (108.0 * 8.0 + 87.0 * 6.0) / 14.0).abs() < 1e-9, "{s}");
        assert!((stalled_twice - s).abs() < 1e-9, "{stalled_twice}");
        // Two rounds or fewer: their mean; none: no figure.
        assert_eq!(middle_mean(&[4.0, 6.0]), 5.0);
        assert!(middle_mean(&[]).is_nan());
    }

    #[test]
    fn load_comes_in_runs_for_one_client_and_every_client_takes_its_turn() {
        let clients: Vec<usize> = (0..RUN * CLIENTS as u64 * 2).map(client_of).collect();
        for (k, run) in clients.chunks(RUN as usize).enumerate() {
            assert!(run.iter().all(|&c| c == k % CLIENTS), "run {k}: {run:?}");
        }
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn repeatability_names_what_moved_more_than_fifteen_percent() {
        let c = |ratios: &[(&str, f64)]| Compared {
            ratios: ratios.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            derived: Vec::new(),
        };
        let old = c(&[("a", 1.0), ("b", 2.0), ("gone", 5.0)]);
        let new = c(&[("a", 1.1), ("b", 1.0), ("new", 3.0)]);
        let r = repeatability(Some(&old), &new);
        assert!(r.contains("1 of 2 ratios within ±15 %"), "{r}");
        assert!(r.contains("b: 2.00 → 1.00 (-50 %)"), "{r}");
        assert!(!r.contains("a:") && !r.contains("Derived"), "{r}");
        assert!(repeatability(None, &new).contains("No earlier run"));
    }

    #[test]
    fn a_derived_figure_agrees_with_the_earlier_run_within_the_interval_of_a_difference() {
        let c = |q: f64, e: f64| Compared {
            ratios: vec![("r".to_string(), 1.0)],
            derived: vec![("added".to_string(), q, e)],
        };
        // A real pair (decapsulation, 512 B): 0.215 ± 0.013, then 0.261 ± 0.022
        // (standard errors). The difference, 0.046, is beyond 1.645 × 0.026 = 0.042.
        let r = repeatability(Some(&c(0.215, 0.013)), &c(0.261, 0.022));
        assert!(r.contains("1 of 1 ratios within ±15 %"), "{r}");
        assert!(
            r.contains("0 of 1 agree") && r.contains("Beyond it: added: 0.21 → 0.26 (+21 %, ±20 % allowed)"),
            "{r}"
        );
        // Errors half again as large allow it.
        let r = repeatability(Some(&c(0.215, 0.02)), &c(0.261, 0.033));
        assert!(r.contains("1 of 1 agree") && !r.contains("Beyond"), "{r}");
        // A figure without an error (a single lab) is not compared.
        let r = repeatability(Some(&c(0.215, f64::NAN)), &c(0.261, 0.02));
        assert!(!r.contains("Derived"), "{r}");
    }

    #[test]
    fn ratios_and_derived_figures_survive_the_file_and_old_files_still_read() {
        let c = Compared {
            ratios: vec![("rate a".to_string(), 1.5)],
            derived: vec![("latency added b".to_string(), 0.25, 0.0125)],
        };
        let back = Compared::from_tsv(&c.to_tsv());
        assert_eq!((back.ratios, back.derived), (c.ratios.clone(), c.derived.clone()));
        // A file of an earlier version: every line a ratio; bad lines are skipped.
        let old = Compared::from_tsv("a\t1.5\nbad line\nb\tNaN\nc\tx\n");
        assert_eq!(old.ratios.len(), 2);
        assert_eq!(old.ratios[0], ("a".to_string(), 1.5));
        assert!(old.derived.is_empty());
        let dir = std::env::temp_dir().join(format!("shipworm-ratios-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("r.tsv"), c.to_tsv()).unwrap();
        assert_eq!(read_compared(&dir.join("r.tsv")).unwrap().derived.len(), 1);
        assert!(read_compared(&dir.join("none.tsv")).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn end_to_end_udp_figures_count_every_search_of_every_round_without_the_ends() {
        // Six rounds of two searches each way; one stalled search and one lucky one
        // are left out, the other ten all count (not one search a round).
        let chain = |name: &'static str, up: Vec<f64>, down: Vec<f64>| EndToEnd {
            name,
            qualify_secs: vec![0.06],
            ping_ms: 0.3,
            tcp: (vec![400.0; 12], vec![500.0; 12]),
            udp: (up, down),
        };
        let mut sw_up = vec![90_000.0; 5];
        sw_up.extend([60_000.0; 5]);
        sw_up.extend([10_000.0, 200_000.0]);
        let sw = chain("shipworm", sw_up, vec![100_000.0; 12]);
        let mi = chain("miredo", vec![50_000.0; 12], vec![50_000.0; 12]);
        let (text, compared) = report(&BTreeMap::new(), &[], &[sw, mi], false, Duration::ZERO);
        assert!(
            text.contains("| shipworm | 60 ms | 0.30 ms | 400 Mbit/s | 500 Mbit/s | 75000 pkt/s | 100000 pkt/s |"),
            "{text}"
        );
        assert!(text.contains("searched twice each way per round"), "{text}");
        let r: BTreeMap<_, _> = compared.ratios.iter().cloned().collect();
        assert!((r["e2e UDP client→native shipworm/Miredo"] - 1.5).abs() < 1e-12);
        assert!((r["e2e UDP native→client shipworm/Miredo"] - 2.0).abs() < 1e-12);
    }
}
