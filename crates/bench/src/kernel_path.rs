//! The kernel data path's figures against issue #41's targets: the relay's whole-core
//! CPU per packet, its rates and its sparse latency beside Miredo's, the kernel's and
//! its own userland path's (measured in the same rounds); the client+relay chain; and
//! the peer map at ten million peers.

use crate::measure::{CpuTrial, EndToEnd, Figures, CPU_SIZE};
use crate::stats::{middle_mean, range};
use shipworm_kernel_path::{monotonic_ns, KernelPath, Settings};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

/// The peer map measured full: its memory and the decapsulating program's time per
/// packet, at a small and at a large size.
#[derive(Debug, Clone, Default)]
pub(crate) struct MapFigures {
    /// (peers, bytes per peer, program ns per packet over random peers: each pass's
    /// middle mean over its own peers)
    pub(crate) sizes: Vec<(usize, f64, Vec<f64>)>,
}

/// The state machines' figures, as the daemon hands them to the programs.
fn contract() -> shipworm_kernel_path::Contract {
    shipworm_proto::kernel_figures::KERNEL_FIGURES.into()
}

fn peer(i: u32) -> Ipv6Addr {
    // Client addresses as a relay sees them: the standard prefix, a server, the rest
    // varying (flags, port and address fields).
    Ipv6Addr::new(0x2001, 0, 0x4136, 0xe378, (i >> 16) as u16, i as u16, 0x3fff, 0xfdd2)
}

/// A frame from peer `i` at its mapping to the relay at 192.0.2.1:3544.
fn frame(i: u32) -> Vec<u8> {
    let inner_len = 40 + 12;
    let mut f = vec![0u8; 14 + 28 + inner_len];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((28 + inner_len) as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&mapping(i).ip().octets());
    ip[16..20].copy_from_slice(&[192, 0, 2, 1]);
    let sum = ip.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum::<u32>();
    let folded = (sum & 0xffff) + (sum >> 16);
    let check = !(((folded & 0xffff) + (folded >> 16)) as u16);
    ip[10..12].copy_from_slice(&check.to_be_bytes());
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&mapping(i).port().to_be_bytes());
    udp[2..4].copy_from_slice(&3544u16.to_be_bytes());
    udp[4..6].copy_from_slice(&((8 + inner_len) as u16).to_be_bytes());
    let v6 = &mut f[42..];
    v6[0] = 0x60;
    v6[4..6].copy_from_slice(&12u16.to_be_bytes());
    v6[6] = 17;
    v6[7] = 64;
    v6[8..24].copy_from_slice(&peer(i).octets());
    v6[24..40].copy_from_slice(&Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 5).octets());
    f
}

fn mapping(i: u32) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(198, 51, (i >> 24) as u8 | 100, (i >> 16) as u8), i as u16 | 1)
}

/// For each size `n`, `passes` times (a pass a round of the bench: the figure's spread):
/// a map loaded afresh and filled with `n` peers (where its memory lands moves the
/// larger map's look-up by up to a third from one load to the next), and the time the
/// decapsulation at tc ingress takes a packet over `probes` peers picked across it (a
/// relay's through the stack: the peer's look-up, which the map's size moves, is the
/// same for a direct one); and the map's bytes per peer.
pub(crate) fn map_figures(
    sizes: &[usize],
    probes: u32,
    passes: u32,
    say: &mut dyn FnMut(&str),
) -> Result<MapFigures, String> {
    let mut out = MapFigures::default();
    for &n in sizes {
        let mut each = Vec::with_capacity(passes as usize);
        let (mut full, mut empty) = (0, 0);
        for pass in 0..passes.max(1) {
            let mut k = KernelPath::load(&Settings::relay(Ipv4Addr::new(192, 0, 2, 1), n as u32, contract()))
                .map_err(|e| e.to_string())?;
            empty = k.peer_map_bytes().map_err(|e| e.to_string())?;
            let peers = k.peers();
            let now = monotonic_ns();
            for i in 0..n as u32 {
                peers.trust(&peer(i), mapping(i), now).map_err(|e| format!("peer {i} of {n}: {e}"))?;
            }
            full = k.peer_map_bytes().map_err(|e| e.to_string())?;
            let step = (n as u32 / probes.max(1)).max(1);
            let mut ns = Vec::with_capacity(probes as usize);
            for j in 0..probes {
                // Spread over the map (a stride coprime with most sizes; a small map's
                // peers come round many times), each pass shifted onto other peers.
                let i = (j.wrapping_mul(step).wrapping_add(j * 7919).wrapping_add(pass * 104_729)) % n as u32;
                let run =
                    k.test_run(shipworm_kernel_path::Program::TcIngress(0), &frame(i)).map_err(|e| e.to_string())?;
                if run.packet.len() + 28 != frame(i).len() {
                    return Err(format!("peer {i}: the program did not decapsulate"));
                }
                ns.push(f64::from(run.nanos));
            }
            each.push(middle_mean(&ns));
        }
        // All of it, the hash buckets made with the map included, over its peers.
        let per_peer = full as f64 / n as f64;
        say(&format!(
            "  peer map of {n}: {full} bytes, {per_peer:.0} a peer ({empty} of them with none), decapsulation {} ns a packet ({} loads)",
            show(fig(&each), 0),
            each.len()
        ));
        out.sizes.push((n, per_peer, each));
    }
    Ok(out)
}

/// One figure: its middle mean and range over the trials.
fn fig(v: &[f64]) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let (lo, hi) = range(v);
    Some((middle_mean(v), lo, hi))
}

fn show(f: Option<(f64, f64, f64)>, digits: usize) -> String {
    f.map_or("—".into(), |(m, lo, hi)| format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})"))
}

/// A row's verdict: met, met within the spread, or not.
fn verdict(ratio: (f64, f64, f64), target: f64, at_most: bool) -> &'static str {
    let (m, lo, hi) = ratio;
    let ok = |x: f64| if at_most { x <= target } else { x >= target };
    if ok(m) {
        "met"
    } else if ok(if at_most { lo } else { hi }) {
        "met within the spread"
    } else {
        "not met"
    }
}

/// The section, appended to `r`.
pub(crate) fn section(
    r: &mut String,
    runs: &BTreeMap<&'static str, Vec<Figures>>,
    e2e: &[EndToEnd],
    map: Option<&MapFigures>,
) {
    let _ = writeln!(r, "## Kernel data path (issue #41's targets)\n");
    let how = if crate::relay_config::forwards_through_stack() {
        "`KernelForward stack` (the default): its programs take trusted peers' packets at tc ingress, on the relay host's core after receive steering, where this table counts them, and hand them to the host's IPv6 stack, which forwards them (the kernel column is that stack's forwarding alone)"
    } else {
        "`KernelForward direct`: its programs take trusted peers' packets at tc ingress, on the relay host's core after receive steering, where this table counts them, and send them out of their routes themselves, past the host's IPv6 stack (the kernel column is that stack's forwarding)"
    };
    let _ = writeln!(r, "shipworm's relay ran `DataPath kernel` with {how}; \"shipworm user\" is the same relay with `DataPath user`, measured in the same rounds. CPU is the relay host's whole core (busy time, softirq included) per packet delivered, 1280-byte packets offered at 100 000 a second. Each figure: the mean without the highest and lowest ninth, its range in brackets; a ratio's range is the range of shipworm's trials over the other's mean. A target counts as met when the ratio is within its range of it.\n");
    let _ = writeln!(r, "| figure | shipworm | shipworm user | Miredo | kernel | ratio | target | verdict |");
    let _ = writeln!(r, "|---|---|---|---|---|---|---|---|");
    cpu_rows(r, runs);
    rate_rows(r, runs);
    sparse_rows(r, runs);
    chain_rows(r, e2e);
    if let Some(map) = map {
        map_rows(r, runs, map);
    }
    let _ = writeln!(r);
}

/// One implementation's CPU trials at `key` (direction, offered rate): the core's µs a
/// packet.
fn cpu_trials(runs: &BTreeMap<&'static str, Vec<Figures>>, name: &str, key: (&'static str, u64)) -> Vec<f64> {
    runs.get(name)
        .into_iter()
        .flatten()
        .filter_map(|f| f.cpu.get(&key))
        .flatten()
        .map(|t: &CpuTrial| t.core_us)
        .collect()
}

/// One implementation's rate searches at `key` (direction, size).
fn rate_trials(runs: &BTreeMap<&'static str, Vec<Figures>>, name: &str, key: (&'static str, usize)) -> Vec<f64> {
    runs.get(name).into_iter().flatten().filter_map(|f| f.rate.get(&key)).flatten().copied().collect()
}

/// Sparse latency: each lab's median (`beside`: the kernel's, probed in the same lab).
fn sparse_medians(
    runs: &BTreeMap<&'static str, Vec<Figures>>,
    name: &str,
    key: (&'static str, usize),
    beside: bool,
) -> Vec<f64> {
    runs.get(name)
        .into_iter()
        .flatten()
        .filter_map(|f| if beside { f.sparse_beside.get(&key) } else { f.sparse.get(&key) })
        .map(|v| crate::stats::median(v))
        .collect()
}

/// shipworm's figure over another's: the ratio of the means, and the range of
/// shipworm's trials over the other's mean.
fn ratio_of(s: &[f64], o: &[f64]) -> Option<(f64, f64, f64)> {
    let (sm, slo, shi) = fig(s)?;
    let (om, _, _) = fig(o)?;
    Some((sm / om, slo / om, shi / om))
}

/// CPU per packet against Miredo and the kernel.
fn cpu_rows(r: &mut String, runs: &BTreeMap<&'static str, Vec<Figures>>) {
    for dir in ["Teredo→IPv6", "IPv6→Teredo"] {
        let key = (dir, 100_000);
        let (s, u, m, k) = (
            cpu_trials(runs, "shipworm", key),
            cpu_trials(runs, "shipworm-user", key),
            cpu_trials(runs, "miredo", key),
            cpu_trials(runs, "kernel", key),
        );
        let cells =
            format!("{} | {} | {} | {}", show(fig(&s), 2), show(fig(&u), 2), show(fig(&m), 2), show(fig(&k), 2));
        if let Some(q) = ratio_of(&s, &m) {
            let _ = writeln!(
                r,
                "| CPU µs/packet {dir}, vs Miredo | {cells} | {} | ≤ 0.33 | {} |",
                show(Some(q), 2),
                verdict(q, 1.0 / 3.0, true)
            );
        }
        if let Some(q) = ratio_of(&s, &k) {
            let _ = writeln!(
                r,
                "| CPU µs/packet {dir}, vs the kernel | {cells} | {} | ≤ 1 | {} |",
                show(Some(q), 2),
                verdict(q, 1.0, true)
            );
        }
    }
}

/// Rates against the kernel's own forwarding.
fn rate_rows(r: &mut String, runs: &BTreeMap<&'static str, Vec<Figures>>) {
    for dir in ["Teredo→IPv6", "IPv6→Teredo"] {
        let key = (dir, CPU_SIZE);
        let (s, u, m, k) = (
            rate_trials(runs, "shipworm", key),
            rate_trials(runs, "shipworm-user", key),
            rate_trials(runs, "miredo", key),
            rate_trials(runs, "kernel", key),
        );
        if let Some(q) = ratio_of(&s, &k) {
            // A rate the generator held is its ceiling, not the path's: a verdict short of
            // the target says how often either side's searches ended there.
            let held = |name: &str| runs.get(name).map_or((0, 0), |v| crate::report::held_searches(v, key));
            let ((sh, sn), (kh, kn)) = (held("shipworm"), held("kernel"));
            let mut said = verdict(q, 1.0, false).to_string();
            if said == "not met" && sh + kh > 0 {
                said = format!(
                    "not met: the generator's ceiling in {sh} of shipworm's {sn} searches and {kh} of the kernel's {kn}"
                );
            }
            let _ = writeln!(
                r,
                "| rate packets/s {dir}, vs the kernel | {} | {} | {} | {} | {} | ≥ 1 | {said} |",
                show(fig(&s), 0),
                show(fig(&u), 0),
                show(fig(&m), 0),
                show(fig(&k), 0),
                show(Some(q), 2),
            );
        }
    }
}

/// Sparse latency over the kernel's.
fn sparse_rows(r: &mut String, runs: &BTreeMap<&'static str, Vec<Figures>>) {
    for dir in ["Teredo→IPv6", "IPv6→Teredo"] {
        let key = (dir, CPU_SIZE);
        let (s, sk) = (sparse_medians(runs, "shipworm", key, false), sparse_medians(runs, "shipworm", key, true));
        let (u, m) = (sparse_medians(runs, "shipworm-user", key, false), sparse_medians(runs, "miredo", key, false));
        if let (Some(a), Some(b)) = (fig(&s), fig(&sk)) {
            let added: Vec<f64> = s.iter().zip(&sk).map(|(x, y)| x - y).collect();
            let d = fig(&added).unwrap_or((a.0 - b.0, a.0 - b.0, a.0 - b.0));
            let _ = writeln!(
                r,
                "| sparse latency µs {dir} (a probe every 5 ms), over the kernel | {} | {} | {} | {} | +{} µs | ≤ +2 µs | {} |",
                show(Some(a), 1),
                show(fig(&u), 1),
                show(fig(&m), 1),
                show(Some(b), 1),
                show(Some(d), 1),
                verdict(d, 2.0, true)
            );
        }
    }
}

/// The client and relay chain: TCP, round trips.
fn chain_rows(r: &mut String, e2e: &[EndToEnd]) {
    let chain = |name: &str| e2e.iter().find(|e| e.name == name);
    if let (Some(s), Some(m)) = (chain("shipworm"), chain("miredo")) {
        for (way, pick) in [("client→native", 0usize), ("native→client", 1)] {
            let get = |e: &EndToEnd| if pick == 0 { e.tcp.0.clone() } else { e.tcp.1.clone() };
            if let Some(q) = ratio_of(&get(s), &get(m)) {
                let _ = writeln!(
                    r,
                    "| chain TCP Mbit/s {way}, vs Miredo | {} | — | {} | — | {} | ≥ 5 | {} |",
                    show(fig(&get(s)), 0),
                    show(fig(&get(m)), 0),
                    show(Some(q), 2),
                    verdict(q, 5.0, false)
                );
            }
        }
        // Round trips: each round's, the chain's and the same path's without the tunnel
        // measured in the same lab, the added time the difference, round by round.
        let trips = |e: &EndToEnd| fig(&e.ping_ms);
        if let (Some(st), Some(mt)) = (trips(s), trips(m)) {
            let _ = writeln!(
                r,
                "| chain round trip ms (ping6 through client and relay, the whole trip) | {} | — | {} | — | {:.2} | — | — |",
                show(Some(st), 3),
                show(Some(mt), 3),
                st.0 / mt.0,
            );
        }
        let added = |e: &EndToEnd| -> Vec<f64> { e.ping_ms.iter().zip(&e.native_ms).map(|(t, n)| t - n).collect() };
        let (added_s, added_m) = (added(s), added(m));
        if let (Some(a), Some(b)) = (fig(&added_s), fig(&added_m)) {
            // Below zero is the rounds' noise about nothing added: a ratio of nothing.
            let q = (a.0.max(0.0) / b.0, a.1.max(0.0) / b.0, a.2.max(0.0) / b.0);
            let natives = |e: &EndToEnd| show(fig(&e.native_ms), 3);
            let _ = writeln!(
                r,
                "| chain added round trip ms (each round's trip less the same path's without the tunnel, in the same lab: {} and {} ms) | {} | — | {} | — | {} | ≤ 0.33 | {} |",
                natives(s),
                natives(m),
                show(Some(a), 3),
                show(Some(b), 3),
                show(Some(q), 2),
                verdict(q, 1.0 / 3.0, true)
            );
        }
    }
}

/// The peer map's bytes a peer and look-up cost at its sizes.
fn map_rows(r: &mut String, runs: &BTreeMap<&'static str, Vec<Figures>>, map: &MapFigures) {
    for (n, bytes, ns) in &map.sizes {
        let _ = writeln!(r, "| peer map of {n}: bytes per peer (all the map's memory over its peers); decapsulation ns per packet over peers across it | {bytes:.0} B; {} ns | — | — | — | — | ≤ 128 B | {} |", show(fig(ns), 0), if *bytes <= 128.0 { "met" } else { "not met" });
    }
    if let (Some((small, _, t0)), Some((large, _, t1))) = (map.sizes.first(), map.sizes.last()) {
        // The rate a core gives is the inverse of its time per packet: the large map's
        // extra look-up time, added to the whole core's per-packet cost measured above.
        // Its range: each pass over the large map against the small map's mean and
        // the core's, as the other ratios take theirs.
        let core = fig(&cpu_trials(runs, "shipworm", ("Teredo→IPv6", 100_000))).map_or(f64::NAN, |f| f.0 * 1000.0);
        let small_mean = fig(t0).map_or(f64::NAN, |f| f.0);
        let ratios: Vec<f64> = t1.iter().map(|a| core / (core + (a - small_mean).max(0.0))).collect();
        if let Some(q) = fig(&ratios) {
            let _ = writeln!(r, "| rate with {large} peers over the rate with {small} (the core's time per packet, {core:.0} ns, plus the larger map's extra look-up time, a fresh map a round) | — | — | — | — | {} | ≥ 0.8 | {} |", show(Some(q), 2), verdict(q, 0.8, false));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(rate: f64, held: usize) -> Figures {
        let key = ("Teredo→IPv6", CPU_SIZE);
        let mut f = Figures::default();
        f.rate.insert(key, vec![rate, rate]);
        f.held.insert(key, held);
        f
    }

    fn rate_row(shipworm: Figures, kernel: Figures) -> String {
        let runs = BTreeMap::from([("shipworm", vec![shipworm]), ("kernel", vec![kernel])]);
        let mut r = String::new();
        section(&mut r, &runs, &[], None);
        r.lines().find(|l| l.starts_with("| rate packets/s Teredo→IPv6")).expect("the rate row").to_string()
    }

    /// The chain's added round trip is each round's trip less that round's path without
    /// the tunnel, with its spread; a round below zero counts as nothing added.
    #[test]
    fn the_chains_added_round_trip_is_taken_round_by_round() {
        let chain = |name: &'static str, trips: Vec<f64>, natives: Vec<f64>| EndToEnd {
            name,
            qualify_secs: vec![0.06],
            ping_ms: trips,
            native_ms: natives,
            tcp: (vec![400.0; 2], vec![500.0; 2]),
            tcp_streams: (vec![900.0], vec![1200.0]),
            udp: (vec![1.0], vec![1.0]),
        };
        let e2e = [
            chain("shipworm", vec![0.110, 0.120, 0.100], vec![0.108, 0.115, 0.105]),
            chain("miredo", vec![0.230, 0.250, 0.240], vec![0.110, 0.115, 0.120]),
        ];
        let mut r = String::new();
        section(&mut r, &BTreeMap::new(), &e2e, None);
        let row = r.lines().find(|l| l.starts_with("| chain added round trip")).expect("the row");
        // Shipworm: 0.002, 0.005, −0.005; Miredo: 0.120, 0.135, 0.120 (three rounds: the
        // middle one is the figure).
        assert!(row.contains("| 0.002 (-0.005–0.005) | — | 0.120 (0.120–0.135) |"), "{row}");
        assert!(row.ends_with("| 0.02 (0.00–0.04) | ≤ 0.33 | met |"), "{row}");
    }

    /// The peer map measured as the full run does, small: every probe decapsulated at
    /// tc ingress, a time for each pass.
    #[test]
    fn the_peer_map_is_measured_in_every_pass() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: loading the programs needs root");
            return;
        }
        let m = map_figures(&[1_000], 500, 3, &mut |_| {}).expect("measured");
        let (n, per_peer, each) = &m.sizes[0];
        assert_eq!((*n, each.len()), (1_000, 3));
        assert!(*per_peer > 16.0 && *per_peer < 4096.0, "{per_peer} bytes a peer");
        assert!(each.iter().all(|&t| t > 0.0 && t < 1e6), "{each:?}");
    }

    #[test]
    fn a_rate_short_of_the_kernels_says_when_the_generator_held_it() {
        let row = rate_row(rates(400_000.0, 1), rates(440_000.0, 2));
        assert!(
            row.ends_with("| not met: the generator's ceiling in 1 of shipworm's 2 searches and 2 of the kernel's 2 |"),
            "{row}"
        );
        // Short without the generator holding either: plainly not met.
        let row = rate_row(rates(400_000.0, 0), rates(440_000.0, 0));
        assert!(row.ends_with("| not met |"), "{row}");
        // Met: the generator's share is not the verdict's business.
        let row = rate_row(rates(450_000.0, 2), rates(440_000.0, 2));
        assert!(row.ends_with("| met |"), "{row}");
    }
}
