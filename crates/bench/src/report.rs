//! The report: figures and ratios in markdown, the ratios file and the repeatability
//! check against the earlier run in the same folder.

use crate::buffers::TUN_QUEUE;
use crate::cpus::{self, RELAY_CPU, TRAFFIC_CPU};
use crate::measure::*;
use crate::stats::*;
use shipworm::io::socket_buffers::DAEMON_BYTES;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// A path's rate over every search of every round ([`middle_mean`]).
pub(crate) fn rate_of(runs: &[Figures], key: (&'static str, usize)) -> f64 {
    middle_mean(&runs.iter().filter_map(|f| f.rate.get(&key)).flatten().copied().collect::<Vec<_>>())
}

/// In how many of the searches of `key`'s rate the generator held it, of how many.
pub(crate) fn held_searches(runs: &[Figures], key: (&'static str, usize)) -> (usize, usize) {
    let searched = runs.iter().filter_map(|f| f.rate.get(&key)).map(Vec::len).sum();
    (runs.iter().filter_map(|f| f.held.get(&key)).sum(), searched)
}

/// Each lab's median latency on `key`, the labs that measured it.
pub(crate) fn lab_medians(runs: &[Figures], key: (&'static str, usize)) -> Vec<f64> {
    runs.iter().filter_map(|f| f.latency.get(&key)).filter(|v| !v.is_empty()).map(|v| median(v)).collect()
}

/// The mean over the labs of each lab's median latency on `key`.
pub(crate) fn lat_mid(runs: &[Figures], key: (&'static str, usize)) -> f64 {
    mean_and_error(&lab_medians(runs, key)).0
}

pub(crate) fn all_lat(runs: &[Figures], key: (&'static str, usize)) -> Vec<f64> {
    runs.iter().filter_map(|f| f.latency.get(&key)).flatten().copied().collect()
}

/// What two runs of the bench compare: the ratios of the figures, and the figures derived
/// from several (a quotient of differences), each with its standard error.
#[derive(Debug, Default)]
pub(crate) struct Compared {
    pub(crate) ratios: Vec<(String, f64)>,
    pub(crate) derived: Vec<(String, f64, f64)>,
}

impl Compared {
    /// One line per figure: name, value and, for a derived one, its standard error.
    pub(crate) fn to_tsv(&self) -> String {
        let ratios = self.ratios.iter().map(|(k, v)| format!("{k}\t{v}\n"));
        ratios.chain(self.derived.iter().map(|(k, v, e)| format!("{k}\t{v}\t{e}\n"))).collect()
    }

    pub(crate) fn from_tsv(text: &str) -> Compared {
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
pub(crate) fn read_compared(path: &Path) -> Option<Compared> {
    Some(Compared::from_tsv(&std::fs::read_to_string(path).ok()?))
}

/// How far each ratio moved since the earlier run in the same folder, and whether each
/// derived figure stayed within what its error allows.
pub(crate) fn repeatability(previous: Option<&Compared>, now: &Compared) -> String {
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
                        (allowed / old * 100.0).abs(),
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
pub(crate) fn report(
    runs: &BTreeMap<&'static str, Vec<Figures>>,
    tables: &[TableFigures],
    e2e: &[EndToEnd],
    quick: bool,
    took: Duration,
) -> (String, Compared) {
    let mut compared = Compared::default();
    let mut r = String::new();
    intro_section(&mut r, runs, quick, took);
    rate_section(&mut r, runs, quick, &mut compared.ratios);
    flood_section(&mut r, runs, &mut compared.ratios);
    lockout_section(&mut r, runs, quick, &mut compared.ratios);
    cpu_section(&mut r, runs, &mut compared.ratios);
    latency_section(&mut r, runs, quick, &mut compared);
    table_section(&mut r, tables);
    e2e_section(&mut r, e2e, quick, &mut compared.ratios);
    (r, compared)
}

/// A figure of the rate searches: `name`'s rate for `key` (NaN: not measured).
fn rate_figure(runs: &BTreeMap<&'static str, Vec<Figures>>, name: &str, key: (&'static str, usize)) -> f64 {
    runs.get(name).map(|v| rate_of(v, key)).unwrap_or(f64::NAN)
}

/// The title and the method.
fn intro_section(r: &mut String, runs: &BTreeMap<&'static str, Vec<Figures>>, quick: bool, took: Duration) {
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
        2 * sizes(quick).len() * searches(quick)
    );
}

/// The relays' packet rates, and what held them.
fn rate_section(
    r: &mut String,
    runs: &BTreeMap<&'static str, Vec<Figures>>,
    quick: bool,
    ratios: &mut Vec<(String, f64)>,
) {
    let get = |name: &str, key| rate_figure(runs, name, key);
    let _ = writeln!(r, "## Relay packet rate (packets/s delivered with < 0.1 % loss)\n");
    let _ =
        writeln!(r, "| direction | IPv6 size | shipworm | Miredo | kernel | shipworm / Miredo | shipworm / kernel |");
    let _ = writeln!(r, "|---|---|---|---|---|---|---|");
    for dir in ["Teredo→IPv6", "IPv6→Teredo"] {
        for &size in sizes(quick) {
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
            for &size in sizes(quick) {
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
    let _ = writeln!(r, "\nThe kernel column is the same load forwarded by the relay host's kernel, no tunnel: the reference. The rate searches' load is whole frames, handed to the relay host's interface by the switch's port towards it, sent on the traffic core by {}. {}\n", generators(runs), if cpus::available() { format!("The relay host (its processes, and during rate searches the receive work of its interfaces through RPS: for the kernel, its forwarding) ran on CPU {RELAY_CPU}, the traffic (generator, sinks, probes) on CPU {TRAFFIC_CPU}: each relay had one core to itself, so shipworm ran one worker (`{}`). Latency probes leave the receive work on the core that sent (an interrupt between cores cost about 20 µs a packet on the machine this was written on).", crate::relay_config::shipworm_extra().lines().collect::<Vec<_>>().join("`, `")) } else { "Generator, sink and relay shared the machine's one core.".to_string() });
}

/// Established peers' rate under a flood of new peers.
fn flood_section(r: &mut String, runs: &BTreeMap<&'static str, Vec<Figures>>, ratios: &mut Vec<(String, f64)>) {
    let get = |name: &str, key| rate_figure(runs, name, key);
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
}

/// Established peers' rate under the lock-out pattern, and the relay's memory.
fn lockout_section(
    r: &mut String,
    runs: &BTreeMap<&'static str, Vec<Figures>>,
    quick: bool,
    ratios: &mut Vec<(String, f64)>,
) {
    let get = |name: &str, key| rate_figure(runs, name, key);
    let _ = writeln!(
        r,
        "\n### Established peers under the lock-out pattern\n\nThe same established clients' Teredo→IPv6 rate ({}-byte packets) while one IPv4 endpoint makes the relay trust {} Teredo addresses that all embed it (differing in server field and random bits: a native packet to each, then its bubble from the endpoint) and keeps every one fresh, at {LOCKOUT_RATE} packets a second in all — the pattern that filled a table of never-replaceable trusted entries. Memory: the relay host's processes, resident, before the pattern and after the searches under it.\n\n| implementation | pattern (pkt/s) | rate under it | held by the generator | rate without | under / without | relay memory |\n|---|---|---|---|---|---|---|",
        UNDER_LOCKOUT.1,
        lockout_addresses(quick)
    );
    for name in ["shipworm", "miredo"] {
        let measured: Vec<&Figures> =
            runs.get(name).into_iter().flatten().filter(|f| f.rate.contains_key(&UNDER_LOCKOUT)).collect();
        if measured.is_empty() {
            continue;
        }
        let (with, without) = (get(name, UNDER_LOCKOUT), get(name, ("Teredo→IPv6", UNDER_LOCKOUT.1)));
        let kept = with / without;
        let (held, all) = runs.get(name).map_or((0, 0), |v| held_searches(v, UNDER_LOCKOUT));
        let pattern = middle_mean(&measured.iter().map(|f| f.lockout).collect::<Vec<_>>());
        let rss: Vec<(f64, f64)> = measured.iter().filter_map(|f| f.lockout_rss).collect();
        let before = middle_mean(&rss.iter().map(|m| m.0).collect::<Vec<_>>());
        let after = middle_mean(&rss.iter().map(|m| m.1).collect::<Vec<_>>());
        let _ = writeln!(
            r,
            "| {name} | {pattern:.0} | {with:.0} | {held} of {all} searches | {without:.0} | {kept:.2} | {before:.0} → {after:.0} MiB |"
        );
        ratios.push((format!("lock-out {name} under/without"), kept));
    }
    let _ = writeln!(r);
}

/// Latency per traversal, and what shipworm adds over the kernel.
fn latency_section(r: &mut String, runs: &BTreeMap<&'static str, Vec<Figures>>, quick: bool, compared: &mut Compared) {
    let ratios = &mut compared.ratios;
    let _ = writeln!(r, "## Latency per traversal (µs, one packet at a time)\n\nMedian: each lab's median, averaged over the labs (a lab sets its level: the kernel path sat at 9.1 µs in some labs and 11 µs in others, so one median of all probes jumped between the two). The kernel path was probed in every lab, its own and each relay's (there in turns of 200 probes with the relay's), so its figure averages three labs a round. p99: of all probes. Added: the latency shipworm adds over the kernel path as a share of what Miredo adds, (shipworm − kernel) / (Miredo − kernel), ± its 90 % interval from the spread of the labs; a quotient of differences, it magnifies their noise about fourfold, so it is a derived figure, not one of the ratios checked for ±15 % below.\n");
    let _ = writeln!(r, "| direction | IPv6 size | shipworm median / p99 | Miredo median / p99 | kernel median / p99 | shipworm / Miredo | shipworm / kernel | added: shipworm / Miredo ± 90 % |");
    let _ = writeln!(r, "|---|---|---|---|---|---|---|---|");
    for dir in ["Teredo→IPv6", "IPv6→Teredo"] {
        for &size in sizes(quick) {
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
}

/// The peer table's own figures.
fn table_section(r: &mut String, tables: &[TableFigures]) {
    let _ = writeln!(r, "## Peer table\n\nOne thread, a table set up as a relay's (keyed hash, an entry of {} bytes, one cache line, per-address cap): insertions filling an empty table, then look-ups of every key in a shuffled order — batched as the relay's data path does once its table outgrows the caches (each key hashed and its line fetched {LOOKUP_AHEAD} look-ups ahead), and one at a time — then as many of absent keys, batched; memory is the resident set the filled table added, per-address counts included (`shipworm-bench peer-table --peers N` prints one such line). Median of {TABLE_ROUNDS} rounds, a fresh table each, with their range.\n\n| peers | insertions/s | look-ups/s batched | look-ups/s one at a time | misses/s | memory |\n|---|---|---|---|---|---|", tables.first().map_or(64, |t| t.entry_bytes));
    let mut sizes: Vec<usize> = tables.iter().map(|t| t.peers).collect();
    sizes.dedup();
    for n in sizes {
        let of = |f: fn(&TableFigures) -> f64| -> String {
            let v: Vec<f64> = tables.iter().filter(|t| t.peers == n).map(f).collect();
            let (lo, hi) = range(&v);
            let m = median(&v);
            if v.len() > 1 {
                format!("{:.2} M ({:.2}–{:.2})", m / 1e6, lo / 1e6, hi / 1e6)
            } else {
                format!("{:.2} M", m / 1e6)
            }
        };
        let bytes: Vec<f64> = tables.iter().filter(|t| t.peers == n).map(|t| t.bytes_per_peer).collect();
        let (lo, hi) = range(&bytes);
        let b = median(&bytes);
        let _ = writeln!(
            r,
            "| {n} | {} | {} | {} | {} | {:.0} MiB ({b:.0} B/peer, {lo:.0}–{hi:.0}) |",
            of(|t| t.insert_per_s),
            of(|t| t.lookup_per_s),
            of(|t| t.single_lookup_per_s),
            of(|t| t.miss_per_s),
            b * n as f64 / 1048576.0,
        );
    }
}

/// End to end through a port-restricted NAT.
fn e2e_section(r: &mut String, e2e: &[EndToEnd], quick: bool, ratios: &mut Vec<(String, f64)>) {
    let _ = writeln!(r, "\n## End to end through a port-restricted NAT (client and relay of the same implementation, shipworm server)\n");
    let _ = writeln!(r, "| implementation | qualification | ping6 median | TCP client→native | TCP native→client | TCP ×{TCP_STREAMS} client→native | TCP ×{TCP_STREAMS} native→client | UDP client→native | UDP native→client |\n|---|---|---|---|---|---|---|---|---|");
    // A figure and the range of what it summarises.
    let spread = |v: &[f64], f: f64| {
        let (lo, hi) = range(v);
        if v.len() > 1 {
            format!("{f:.0} ({lo:.0}–{hi:.0})")
        } else {
            format!("{f:.0}")
        }
    };
    for e in e2e {
        let ((tcp_up, tcp_down), (up, down)) = (both_ways(&e.tcp), both_ways(&e.udp));
        let (s_up, s_down) = both_ways(&e.tcp_streams);
        let _ = writeln!(
            r,
            "| {} | {:.0} ms | {:.2} ms | {} Mbit/s | {} Mbit/s | {} Mbit/s | {} Mbit/s | {up:.0} pkt/s | {down:.0} pkt/s |",
            e.name,
            median(&e.qualify_secs) * 1000.0,
            middle_mean(&e.ping_ms),
            spread(&e.tcp.0, tcp_up),
            spread(&e.tcp.1, tcp_down),
            spread(&e.tcp_streams.0, s_up),
            spread(&e.tcp_streams.1, s_down),
        );
    }
    if let [sw, mi] = e2e {
        let (st, su, mt, mu) = (both_ways(&sw.tcp), both_ways(&sw.udp), both_ways(&mi.tcp), both_ways(&mi.udp));
        let (s4, m4) = (both_ways(&sw.tcp_streams), both_ways(&mi.tcp_streams));
        ratios.push(("e2e TCP client→native shipworm/Miredo".into(), st.0 / mt.0));
        ratios.push(("e2e TCP native→client shipworm/Miredo".into(), st.1 / mt.1));
        ratios.push((format!("e2e TCP ×{TCP_STREAMS} client→native shipworm/Miredo"), s4.0 / m4.0));
        ratios.push((format!("e2e TCP ×{TCP_STREAMS} native→client shipworm/Miredo"), s4.1 / m4.1));
        ratios.push(("e2e UDP client→native shipworm/Miredo".into(), su.0 / mu.0));
        ratios.push(("e2e UDP native→client shipworm/Miredo".into(), su.1 / mu.1));
    }
    let rounds = e2e_rounds(quick);
    let _ = writeln!(r, "\nEnd-to-end rounds: {rounds}, each with a fresh lab per implementation, alternately; the relay and the client of both chains ran with the buffers the relays above had. Qualification: median of the rounds; ping6: each round's {} echoes, the mean of the rounds' steady medians without the highest and the lowest ninth. TCP: the transfers of {} MB each way, two per round, their mean without the highest and the lowest, as for the relays (the range of the transfers in brackets); ×{TCP_STREAMS}: the same bytes over {TCP_STREAMS} connections at once, one such transfer each way per round, all their bytes over the time the slowest took. UDP: 512-byte IPv6 packets, the most delivered with < 0.1 % loss, searched {} each way per round, in turn, their mean without the highest and the lowest ninth (from the second round on, each search starts from the median of the earlier rounds, as the relays' do).", e2e_pings(quick), e2e_bytes(quick) / 1_000_000, times(searches(quick)));
}

/// CPU per packet at fixed offered rates: each implementation's relay process and its
/// host's whole core, the figure over its trials with their range, and shipworm's as a
/// share of Miredo's.
fn cpu_section(r: &mut String, runs: &BTreeMap<&'static str, Vec<Figures>>, ratios: &mut Vec<(String, f64)>) {
    let trials = |name: &str, key: (&'static str, u64)| -> Vec<CpuTrial> {
        runs.get(name).into_iter().flatten().filter_map(|f| f.cpu.get(&key)).flatten().copied().collect()
    };
    let fig = |v: &[CpuTrial], pick: fn(&CpuTrial) -> f64| -> (f64, String) {
        let x: Vec<f64> = v.iter().map(pick).collect();
        if x.is_empty() {
            return (f64::NAN, "—".into());
        }
        let m = middle_mean(&x);
        let (lo, hi) = range(&x);
        (m, if x.len() > 1 { format!("{m:.2} ({lo:.2}–{hi:.2})") } else { format!("{m:.2}") })
    };
    let _ = writeln!(r, "## CPU per packet ({CPU_SIZE}-byte IPv6 packets at fixed offered rates)\n\nµs of CPU per packet delivered, over one trial a round of each rate: the relay's processes (their threads' run time), and the relay host's whole core (busy time of the core the host was pinned to, the kernel's receive, TUN and routing work for it included; the traffic ran on the other core). The mean of the trials without the highest and lowest ninth, their range in brackets. The kernel row is the native path forwarded by the relay host's kernel: the cost of the packet's trip through a host, no tunnel.\n");
    let _ = writeln!(r, "| direction | offered (packets/s) | shipworm process | shipworm core | Miredo process | Miredo core | kernel core | process: shipworm / Miredo | core: shipworm / Miredo | delivered (shipworm, Miredo) |");
    let _ = writeln!(r, "|---|---|---|---|---|---|---|---|---|---|");
    for dir in ["Teredo→IPv6", "IPv6→Teredo"] {
        for rate in CPU_RATES {
            let (s, m, k) =
                (trials("shipworm", (dir, rate)), trials("miredo", (dir, rate)), trials("kernel", (dir, rate)));
            if s.is_empty() {
                continue;
            }
            let ((sp, sp_t), (sc, sc_t)) = (fig(&s, |t| t.process_us), fig(&s, |t| t.core_us));
            let ((mp, mp_t), (mc, mc_t)) = (fig(&m, |t| t.process_us), fig(&m, |t| t.core_us));
            let (_, kc_t) = fig(&k, |t| t.core_us);
            let delivered = |v: &[CpuTrial]| middle_mean(&v.iter().map(|t| t.delivered * 100.0).collect::<Vec<_>>());
            let _ = writeln!(
                r,
                "| {dir} | {rate} | {sp_t} | {sc_t} | {mp_t} | {mc_t} | {kc_t} | {:.2} | {:.2} | {:.1} %, {:.1} % |",
                sp / mp,
                sc / mc,
                delivered(&s),
                delivered(&m)
            );
            ratios.push((format!("CPU/packet process {dir} {rate} pkt/s shipworm/Miredo"), sp / mp));
            ratios.push((format!("CPU/packet core {dir} {rate} pkt/s shipworm/Miredo"), sc / mc));
        }
    }
    let _ = writeln!(r);
}

/// The rate searches' generators, as the runs say them (one, unless a run differed).
fn generators(runs: &BTreeMap<&'static str, Vec<Figures>>) -> String {
    let mut said: Vec<&str> = runs.values().flatten().filter_map(|f| f.generator.as_deref()).collect();
    said.sort_unstable();
    said.dedup();
    if said.is_empty() {
        "no generator (no rate search ran)".into()
    } else {
        said.join("; and ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_search::Found;

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
            ping_ms: vec![0.3],
            native_ms: vec![0.1],
            tcp: (vec![400.0; 12], vec![500.0; 12]),
            tcp_streams: (vec![900.0, 1000.0, 1100.0], vec![1200.0; 3]),
            udp: (up, down),
        };
        let mut sw_up = vec![90_000.0; 5];
        sw_up.extend([60_000.0; 5]);
        sw_up.extend([10_000.0, 200_000.0]);
        let sw = chain("shipworm", sw_up, vec![100_000.0; 12]);
        let mi = chain("miredo", vec![50_000.0; 12], vec![50_000.0; 12]);
        let (text, compared) = report(&BTreeMap::new(), &[], &[sw, mi], false, Duration::ZERO);
        assert!(
            text.contains("| shipworm | 60 ms | 0.30 ms | 400 (400–400) Mbit/s | 500 (500–500) Mbit/s | 1000 (900–1100) Mbit/s | 1200 (1200–1200) Mbit/s | 75000 pkt/s | 100000 pkt/s |"),
            "{text}"
        );
        assert!(text.contains("searched twice each way per round"), "{text}");
        let r: BTreeMap<_, _> = compared.ratios.iter().cloned().collect();
        assert!((r["e2e UDP client→native shipworm/Miredo"] - 1.5).abs() < 1e-12);
        assert!((r["e2e UDP native→client shipworm/Miredo"] - 2.0).abs() < 1e-12);
    }

    #[test]
    fn cpu_per_packet_is_the_middle_of_the_trials_with_their_range_and_its_ratio() {
        let trial = |process_us, core_us| CpuTrial { process_us, core_us, delivered: 1.0 };
        let mut runs: BTreeMap<&'static str, Vec<Figures>> = BTreeMap::new();
        for (name, p, c) in [("shipworm", [1.0, 2.0, 3.0], [2.0, 3.0, 4.0]), ("miredo", [4.0; 3], [6.0; 3])] {
            for i in 0..3 {
                let mut f = Figures::default();
                f.cpu.insert(("Teredo→IPv6", 100_000), vec![trial(p[i], c[i])]);
                runs.entry(name).or_default().push(f);
            }
        }
        let (text, compared) = report(&runs, &[], &[], false, Duration::ZERO);
        assert!(text.contains("| Teredo→IPv6 | 100000 | 2.00 (1.00–3.00) | 3.00 (2.00–4.00) | 4.00 (4.00–4.00) | 6.00 (6.00–6.00) | — | 0.50 | 0.50 |"), "{text}");
        let r: BTreeMap<_, _> = compared.ratios.iter().cloned().collect();
        assert!((r["CPU/packet process Teredo→IPv6 100000 pkt/s shipworm/Miredo"] - 0.5).abs() < 1e-12);
        assert!((r["CPU/packet core Teredo→IPv6 100000 pkt/s shipworm/Miredo"] - 0.5).abs() < 1e-12);
        assert!(!text.contains("| Teredo→IPv6 | 50000 |"), "no trials, no row");
    }
}
