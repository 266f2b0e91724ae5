//! The soak: shipworm's relay carrying Teredo→IPv6 traffic at half the rate it was just
//! measured to carry, for an hour (or as long as asked), while spoofed bubbles from
//! never-seen Teredo addresses pour in beside it. Each row (a minute) records what
//! was sent and arrived, the relay's resident memory and its CPU time, and whether it
//! still runs; the report judges the run against the hardening issue's targets: no
//! crash, under 0.1 % lost, memory flat within 5 %.

use crate::buffers::equalize;
use crate::cpus::{self, RELAY_CPU, TRAFFIC_CPU};
use crate::error::Failure;
use crate::measure::{decap_load, introduce, lab_err, trial_sizes, CLIENTS, FLOOD_RATE, FLOOD_SOCKETS, RELAY_PORT};
use crate::rate_search::max_rate;
use crate::relay_config::shipworm_extra;
use crate::stats::median;
use crate::traffic::{new_peer_flood, paced, settled, socket_in, v6, Emulated, Sink, Sockets};
use shipworm::io::socket_buffers::DAEMON_BYTES;
use shipworm_lab::{Impl, Lab, LabSpec, GEN_V4, RELAY_V4, SERVER_V4, SINK_NATIVE_V6};
use std::fmt::Write as _;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

/// Loss the soak allows over the whole run.
const LOSS_TARGET: f64 = 0.001;
/// How far resident memory may stray from its median once the relay's tables are full.
const MEMORY_TARGET: f64 = 0.05;
/// Rate searches the capacity is the median of.
const CAPACITY_SEARCHES: usize = 3;

/// What the soak is asked to do.
pub(crate) struct SoakPlan {
    /// Rows of the run.
    pub(crate) rows: u32,
    /// Length of a row.
    pub(crate) row: Duration,
    /// IPv6 size of the carried packets.
    pub(crate) size: usize,
    /// Rows at the start in which the relay's allocator, buffers and peers settle;
    /// memory is judged after them (the report shows every row).
    pub(crate) warmup: u32,
    /// Short rate trials (quick mode).
    pub(crate) quick: bool,
}

/// One row of the soak.
#[derive(Debug, Clone, Copy)]
struct Row {
    /// Seconds since the load started, at the row's end.
    at: f64,
    sent: u64,
    got: u64,
    rss_mib: f64,
    /// The relay's processes' CPU time over the row.
    cpu: Duration,
}

impl Row {
    fn loss(&self) -> f64 {
        1.0 - self.got as f64 / self.sent.max(1) as f64
    }
}

/// A lab of one shipworm relay carrying emulated clients' traffic to the native host:
/// the traffic generator pinned on its core, the relay on its own, sockets sized alike,
/// the clients introduced to the native host, and a sink counting what arrives.
pub(crate) struct RelayLab {
    pub(crate) lab: Lab,
    pub(crate) emu: Emulated,
    pub(crate) sink: Sink,
    /// The relay's endpoint.
    pub(crate) relay: SocketAddrV4,
    /// The relay host's and the generator's namespaces.
    pub(crate) rly: String,
    pub(crate) gen: String,
    /// The native host's socket the introductions came from (kept open).
    pub(crate) _native: socket2::Socket,
}

/// Build a [`RelayLab`] for `me`; `what` names the run in the line said.
pub(crate) fn relay_lab(me: &Impl, what: &str, say: &mut dyn FnMut(&str)) -> Result<RelayLab, Failure> {
    if cpus::available() {
        cpus::pin_traffic().map_err(Failure::runtime)?;
    }
    let mut lab = Lab::build(&LabSpec { generator: true, ..LabSpec::nats(vec![]) }).map_err(lab_err)?;
    lab.start_server(me).map_err(lab_err)?;
    lab.start_relay_with(me, shipworm_extra()).map_err(lab_err)?;
    let (gen, h6, rly) = (lab.ns("gen"), lab.ns("h6"), lab.ns("rly"));
    equalize(&rly, Some(RELAY_PORT), DAEMON_BYTES, "teredo").map_err(Failure::runtime)?;
    let threads = cpus::pin_host(&rly).map_err(Failure::runtime)?;
    say(&format!("{what}: relay's {threads} threads on CPU {RELAY_CPU}, traffic on CPU {TRAFFIC_CPU}"));
    let emu = Emulated::new(&gen, GEN_V4, SERVER_V4, CLIENTS).map_err(Failure::runtime)?;
    let relay = SocketAddrV4::new(RELAY_V4, RELAY_PORT);
    let _native = introduce(&h6, &emu, relay)?;
    let rx6 = socket_in(&h6, v6(Ipv6Addr::UNSPECIFIED, 9000)).map_err(Failure::runtime)?;
    let sink = Sink::start(vec![rx6]);
    Ok(RelayLab { lab, emu, sink, relay, rly, gen, _native })
}

/// Run the soak against the relay `me` and write `out`/report.md; fails (after the
/// report is written) when the relay stopped or a target was missed.
pub(crate) fn soak(me: &Impl, plan: &SoakPlan, out: &Path, say: &mut dyn FnMut(&str)) -> Result<(), Failure> {
    let started = Instant::now();
    let RelayLab { mut lab, emu, sink, relay, rly, gen, _native } = relay_lab(me, "soak", say)?;
    let mut load = decap_load(emu.addrs.clone(), plan.size, relay);

    let (trial, _) = trial_sizes(plan.quick);
    let searched: Vec<f64> = (0..CAPACITY_SEARCHES)
        .map(|_| {
            emu.bubble(relay, SINK_NATIVE_V6);
            max_rate(&mut Sockets { socks: &emu.socks, build: Box::new(&mut load) }, &sink, trial, plan.quick, None)
                .rate as f64
        })
        .collect();
    let capacity = median(&searched);
    let rate = (capacity / 2.0) as u64;
    say(&format!(
        "soak: capacity {capacity:.0} pkt/s of {} B (searches {}), carrying {rate} pkt/s for {} rows of {:?}",
        plan.size,
        searched.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", "),
        plan.rows,
        plan.row
    ));

    let flood_socks = (0..FLOOD_SOCKETS)
        .map(|_| socket_in(&gen, SocketAddr::V4(SocketAddrV4::new(GEN_V4, 0))))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::runtime)?;
    let flood_limit = plan.row * plan.rows + Duration::from_secs(120);
    let flood = new_peer_flood(flood_socks, relay, SINK_NATIVE_V6, FLOOD_RATE, flood_limit);
    let load_start = Instant::now();
    let mut rows = Vec::new();
    let mut stopped = None;
    for i in 1..=plan.rows {
        let (before, cpu0) = (sink.count(), cpus::host_process_time(&rly));
        let sent = paced(&emu.socks, rate, plan.row, &mut load);
        let got = settled(&sink) - before;
        let cpu1 = cpus::host_process_time(&rly);
        if let Err(e) = lab.check_alive("relay") {
            stopped = Some(e.to_string());
            break;
        }
        let rss_mib = cpus::host_rss_mib(&rly).map_err(Failure::runtime)?;
        let cpu = cpu1.map_err(Failure::runtime)?.saturating_sub(cpu0.map_err(Failure::runtime)?);
        let row = Row { at: load_start.elapsed().as_secs_f64(), sent, got, rss_mib, cpu };
        say(&format!(
            "  {i:>3}/{}: sent {sent}, lost {:.4} %, relay {rss_mib:.1} MiB, {:.2} µs CPU/packet",
            plan.rows,
            row.loss() * 100.0,
            per_packet(&row)
        ));
        rows.push(row);
    }
    let flood_rate = flood.stop();
    let kept = lab.log_tail("relay", 5);
    lab.teardown();
    let judged = Judged::of(&rows, plan, stopped.as_deref());
    let report = report(plan, capacity, &searched, rate, flood_rate, &rows, &judged, &kept, started.elapsed());
    std::fs::create_dir_all(out).map_err(|e| Failure::runtime(format!("{}: {e}", out.display())))?;
    let file = out.join("report.md");
    std::fs::write(&file, report).map_err(|e| Failure::runtime(format!("{}: {e}", file.display())))?;
    say(&format!("\nreport: {}", file.display()));
    match judged.missed() {
        None => Ok(()),
        // Quick mode keeps the soak working; its seconds-long rows judge nothing but a stop.
        Some(why) if plan.quick && judged.stopped.is_none() => {
            say(&format!("soak (quick, not judged): {why}"));
            Ok(())
        }
        Some(why) => Err(Failure::runtime(format!("soak: {why} (the report says more)"))),
    }
}

/// The relay's CPU time per packet carried in a row, µs (the flood's work included).
fn per_packet(r: &Row) -> f64 {
    r.cpu.as_secs_f64() * 1e6 / r.got.max(1) as f64
}

/// The run against its targets.
struct Judged<'a> {
    stopped: Option<&'a str>,
    loss: f64,
    /// Memory after the warm-up rows: median, lowest, highest (MiB).
    memory: Option<(f64, f64, f64)>,
    rows_done: usize,
    rows_asked: u32,
}

impl<'a> Judged<'a> {
    fn of(rows: &[Row], plan: &SoakPlan, stopped: Option<&'a str>) -> Judged<'a> {
        let (sent, got) = rows.iter().fold((0u64, 0u64), |(s, g), r| (s + r.sent, g + r.got));
        let settled: Vec<f64> = rows.iter().skip(plan.warmup as usize).map(|r| r.rss_mib).collect();
        let memory = (!settled.is_empty()).then(|| {
            let lo = settled.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = settled.iter().copied().fold(0.0, f64::max);
            (median(&settled), lo, hi)
        });
        Judged {
            stopped,
            loss: 1.0 - got as f64 / sent.max(1) as f64,
            memory,
            rows_done: rows.len(),
            rows_asked: plan.rows,
        }
    }

    /// Memory's largest departure from its median, as a share of it.
    fn memory_stray(&self) -> Option<f64> {
        self.memory.map(|(m, lo, hi)| ((hi - m).max(m - lo)) / m.max(f64::MIN_POSITIVE))
    }

    /// The first target missed, if any.
    fn missed(&self) -> Option<String> {
        if let Some(why) = self.stopped {
            return Some(format!("the relay stopped: {}", why.lines().next().unwrap_or("")));
        }
        if self.rows_done < self.rows_asked as usize {
            return Some(format!("only {} of {} rows ran", self.rows_done, self.rows_asked));
        }
        if self.loss >= LOSS_TARGET {
            return Some(format!("{:.3} % lost, over the {:.1} % target", self.loss * 100.0, LOSS_TARGET * 100.0));
        }
        match self.memory_stray() {
            Some(s) if s > MEMORY_TARGET => Some(format!(
                "resident memory strayed {:.1} % from its median, over the {:.0} % target",
                s * 100.0,
                MEMORY_TARGET * 100.0
            )),
            _ => None,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    plan: &SoakPlan,
    capacity: f64,
    searched: &[f64],
    rate: u64,
    flood_rate: f64,
    rows: &[Row],
    j: &Judged<'_>,
    relay_log: &str,
    took: Duration,
) -> String {
    let mut r = String::new();
    let yes = |ok: bool| if ok { "yes" } else { "**no**" };
    let _ = writeln!(r, "# Soak: shipworm's relay under load and a flood of new peers\n");
    let _ = writeln!(
        r,
        "{} rows of {} s ({:.1} min in all, {:.1} min with the set-up). One relay worker on its own core; \
         {CLIENTS} emulated Teredo clients send {} B IPv6 packets through it to a native host at half the rate \
         it was just measured to carry with < 0.1 % loss; beside them, spoofed bubbles from never-seen Teredo \
         addresses (a new one each) arrive at {FLOOD_RATE}/s asked, {flood_rate:.0}/s achieved: a relay \
         must drop them without keeping anything (no entry answers to them), so they cost it CPU, not memory.\n",
        plan.rows,
        plan.row.as_secs_f64(),
        plan.row.as_secs_f64() * plan.rows as f64 / 60.0,
        took.as_secs_f64() / 60.0,
        plan.size
    );
    let list = searched.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ");
    let _ = writeln!(r, "- capacity: {capacity:.0} packets/s (median of searches {list}); carried: {rate} packets/s");
    let _ = writeln!(
        r,
        "- relay still running at the end: {}",
        yes(j.stopped.is_none() && j.rows_done as u32 == plan.rows)
    );
    let _ = writeln!(
        r,
        "- lost over the run: {:.4} % (target < {:.1} %: {})",
        j.loss * 100.0,
        LOSS_TARGET * 100.0,
        yes(j.loss < LOSS_TARGET)
    );
    if let (Some((m, lo, hi)), Some(stray)) = (j.memory, j.memory_stray()) {
        let _ = writeln!(
            r,
            "- resident memory after the first {} rows (warm-up): \
             median {m:.1} MiB, {lo:.1}–{hi:.1}, at most {:.2} % from the median (target 5 %: {})",
            plan.warmup,
            stray * 100.0,
            yes(stray <= MEMORY_TARGET)
        );
    }
    if !rows.is_empty() {
        let lo = rows.iter().map(|r| r.rss_mib).fold(f64::INFINITY, f64::min);
        let hi = rows.iter().map(|r| r.rss_mib).fold(0.0, f64::max);
        let _ = writeln!(r, "- resident memory over every row, warm-up included: {lo:.1}–{hi:.1} MiB");
    }
    let cpu: Vec<f64> = rows.iter().map(per_packet).collect();
    if !cpu.is_empty() {
        let lo = cpu.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = cpu.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            r,
            "- the relay's CPU per packet carried (the flood's work included): median {:.2} µs, {lo:.2}–{hi:.2}",
            median(&cpu)
        );
    }
    if let Some(why) = j.stopped {
        let _ = writeln!(r, "\nThe relay stopped:\n\n```\n{why}\n```");
    }
    rows_table(&mut r, rows);
    let _ = writeln!(r, "\nThe relay's last log lines:\n\n```\n{}\n```", relay_log.trim_end());
    r
}

/// Every row's figures.
fn rows_table(r: &mut String, rows: &[Row]) {
    let _ = writeln!(r, "\n| row | at (s) | sent | lost | lost % | relay RSS (MiB) | CPU µs/packet |");
    let _ = writeln!(r, "|---:|---:|---:|---:|---:|---:|---:|");
    for (i, row) in rows.iter().enumerate() {
        let _ = writeln!(
            r,
            "| {} | {:.0} | {} | {} | {:.4} | {:.1} | {:.2} |",
            i + 1,
            row.at,
            row.sent,
            row.sent.saturating_sub(row.got),
            row.loss() * 100.0,
            row.rss_mib,
            per_packet(row)
        );
    }
}
