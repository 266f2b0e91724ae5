//! The relay's rate while a local user floods its status socket (mode 0666: anyone on
//! the host may ask). Worker 0 answers status requests between batches; the document
//! is rendered at most once per period and served as a copy, so a flood should cost the
//! relay an accept and a write per request, not a walk of its tables under their locks.
//! Each round searches the relay's highest clean rate twice, once quiet and once under
//! the flood, in alternating order, and measures the relay's CPU time per packet at a
//! fixed rate (half the first quiet search's) both ways: the rate search moves in steps
//! of some 4 %, the CPU time shows what the flood costs below that. The report gives
//! each figure, the ratios per round and their spread. A figure, not an assertion.

use crate::cpus;
use crate::error::Failure;
use crate::measure::{decap_load, lab_err, machine, trial_sizes, CLIENTS};
use crate::rate_search::max_rate;
use crate::soak::{relay_lab, RelayLab};
use crate::stats::{median, range};
use crate::traffic::{paced, settled, Sockets};
use shipworm_lab::{Impl, SINK_NATIVE_V6};
use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Status requests asked per second: a local user's loop of connect() and read, paced
/// so that the flood's own CPU (on the traffic generator's core) stays small.
const REQUESTS_PER_S: u64 = 2000;
/// The longest a flood runs, whatever happens to the bench.
const FLOOD_LIMIT: Duration = Duration::from_secs(300);
/// IPv6 size of the packets carried.
const SIZE: usize = 1280;
/// The smallest CPU time per packet a ratio is taken to (µs).
const CPU_GRAIN_US: f64 = 0.01;
/// How long the fixed rate runs for its CPU figure.
const CPU_RUN: Duration = Duration::from_secs(2);

/// One round: the rates found quiet and flooded (packets/s), and the flood's achieved
/// request rate.
struct Round {
    quiet: f64,
    flooded: f64,
    requests_per_s: f64,
    /// The relay's CPU µs per packet at the fixed rate, quiet and flooded.
    cpu_quiet: f64,
    cpu_flooded: f64,
}

/// Run `rounds` rounds against the relay `me`; write `out`/report.md.
pub(crate) fn status_flood(
    me: &Impl,
    rounds: usize,
    quick: bool,
    out: &Path,
    say: &mut dyn FnMut(&str),
) -> Result<(), Failure> {
    let RelayLab { mut lab, emu, sink, relay, rly, _native, .. } =
        relay_lab(me, "status flood (the flood on the traffic's CPU)", say)?;
    let mut load = decap_load(emu.addrs.clone(), SIZE, relay);
    let status = lab.daemon_socket("relay");
    let (trial, _) = trial_sizes(quick);
    let mut fixed_rate = None;
    // One side of a round: (highest clean rate, CPU µs per packet at the fixed rate,
    // status answers read per second).
    let mut measure = |flood: bool| -> Result<(f64, f64, f64), Failure> {
        let flooder = flood.then(|| Flood::start(status.clone()));
        emu.bubble(relay, SINK_NATIVE_V6);
        let rate =
            max_rate(&mut Sockets { socks: &emu.socks, build: Box::new(&mut load) }, &sink, trial, quick, None).rate;
        let fixed = *fixed_rate.get_or_insert(rate / 2);
        let (before, cpu0) = (settled(&sink), cpus::host_process_time(&rly).map_err(Failure::runtime)?);
        paced(&emu.socks, fixed, if quick { trial } else { CPU_RUN }, &mut load);
        let got = settled(&sink) - before;
        let cpu = cpus::host_process_time(&rly).map_err(Failure::runtime)?.saturating_sub(cpu0);
        let requests = flooder.map_or(Ok(0.0), Flood::stop)?;
        Ok((rate as f64, cpu.as_secs_f64() * 1e6 / got.max(1) as f64, requests))
    };
    let started = Instant::now();
    let mut done = Vec::new();
    for i in 0..rounds {
        // Alternate which goes first, so that a drift over the run falls on both.
        let ((quiet, cpu_quiet, _), (flooded, cpu_flooded, requests_per_s)) = if i % 2 == 0 {
            let q = measure(false)?;
            (q, measure(true)?)
        } else {
            let f = measure(true)?;
            (measure(false)?, f)
        };
        say(&format!(
            "  round {}/{rounds}: quiet {quiet:.0} pkt/s, {cpu_quiet:.3} µs CPU/packet; flooded {flooded:.0} pkt/s, \
             {cpu_flooded:.3} µs ({requests_per_s:.0} status answers/s)",
            i + 1,
        ));
        done.push(Round { quiet, flooded, requests_per_s, cpu_quiet, cpu_flooded });
    }
    let fixed_rate = fixed_rate.unwrap_or(0);
    lab.check_alive("relay").map_err(lab_err)?;
    lab.teardown();
    let report = report(&done, fixed_rate, started.elapsed());
    std::fs::create_dir_all(out).map_err(|e| Failure::runtime(format!("{}: {e}", out.display())))?;
    let file = out.join("report.md");
    std::fs::write(&file, report).map_err(|e| Failure::runtime(format!("{}: {e}", file.display())))?;
    say(&format!("\nreport: {}", file.display()));
    Ok(())
}

/// A paced loop of status requests on a thread of its own.
struct Flood {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<u64, String>>,
    started: Instant,
}

impl Flood {
    fn start(path: PathBuf) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut answered = 0u64;
            let mut buf = Vec::with_capacity(64 * 1024);
            for n in 0u64.. {
                if flag.load(Ordering::Relaxed) || t0.elapsed() > FLOOD_LIMIT {
                    break;
                }
                let due = t0 + Duration::from_micros(n * 1_000_000 / REQUESTS_PER_S);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let mut s = UnixStream::connect(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                s.set_read_timeout(Some(Duration::from_secs(1))).map_err(|e| e.to_string())?;
                buf.clear();
                if s.read_to_end(&mut buf).is_ok() && buf.starts_with(b"{") {
                    answered += 1;
                }
            }
            Ok(answered)
        });
        Flood { stop, thread, started: Instant::now() }
    }

    /// Stop; the status answers read per second.
    fn stop(self) -> Result<f64, Failure> {
        self.stop.store(true, Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64();
        let answered = self
            .thread
            .join()
            .map_err(|_| Failure::runtime("the status flood's thread panicked"))?
            .map_err(|e| Failure::runtime(format!("status flood: {e}")))?;
        Ok(answered as f64 / secs.max(1e-9))
    }
}

fn report(rounds: &[Round], fixed_rate: u64, took: Duration) -> String {
    let mut r = String::new();
    let col = |f: fn(&Round) -> f64| rounds.iter().map(f).collect::<Vec<f64>>();
    let spread = |v: &[f64], digits: usize| {
        let (lo, hi) = range(v);
        format!("median {:.*}, {lo:.*}–{hi:.*}", digits, median(v), digits, digits)
    };
    let ratios = col(|x| x.flooded / x.quiet.max(1.0));
    // Quiet, with the kernel data path carrying the packets, the daemon spends next to
    // nothing on them: a ratio to that says nothing (it was printed as 10^300).
    let measurable = rounds.iter().all(|x| x.cpu_quiet >= CPU_GRAIN_US);
    let cpu_ratios = col(|x| x.cpu_flooded / x.cpu_quiet.max(CPU_GRAIN_US));
    let _ = writeln!(r, "# The relay's rate under a flood of status requests\n");
    let _ = writeln!(r, "{} — {:.0} s of measurement.\n", machine(), took.as_secs_f64());
    let _ = writeln!(
        r,
        "shipworm's relay, one worker on its own core, carrying {SIZE} B IPv6 packets from {CLIENTS} emulated \
         Teredo clients to a native host: its highest rate with < 0.1 % loss (a search whose steps are some 4 % \
         apart), and its CPU time per packet at {fixed_rate} packets/s (half the first quiet search's), quiet and \
         while a local process connects to the relay's status socket {REQUESTS_PER_S} times a second and reads \
         the document (the flood runs on the traffic generator's core). {} rounds, the order alternating.\n",
        rounds.len()
    );
    let _ = writeln!(r, "- rate, flooded / quiet: {} over the rounds (target ≥ 0.95)", spread(&ratios, 3));
    let _ = writeln!(r, "- rate quiet: {} packets/s", spread(&col(|x| x.quiet), 0));
    let _ = writeln!(r, "- rate flooded: {} packets/s", spread(&col(|x| x.flooded), 0));
    if measurable {
        let _ = writeln!(r, "- CPU per packet, flooded / quiet: {}", spread(&cpu_ratios, 3));
    } else {
        let _ = writeln!(
            r,
            "- CPU per packet, flooded / quiet: no ratio (quiet, the daemon's CPU per packet is under {CPU_GRAIN_US} µs \
             in some round: the kernel carries the packets; the flooded figure is the flood's cost)"
        );
    }
    let _ = writeln!(r, "- CPU per packet quiet: {} µs", spread(&col(|x| x.cpu_quiet), 3));
    let _ = writeln!(r, "- CPU per packet flooded: {} µs", spread(&col(|x| x.cpu_flooded), 3));
    let _ = writeln!(r, "- status documents read: {}/s", spread(&col(|x| x.requests_per_s), 0));
    let _ = writeln!(
        r,
        "\n| round | quiet (pkt/s) | flooded (pkt/s) | ratio | CPU quiet (µs) | CPU flooded (µs) | status answers/s |"
    );
    let _ = writeln!(r, "|---:|---:|---:|---:|---:|---:|---:|");
    for (i, x) in rounds.iter().enumerate() {
        let _ = writeln!(
            r,
            "| {} | {:.0} | {:.0} | {:.3} | {:.3} | {:.3} | {:.0} |",
            i + 1,
            x.quiet,
            x.flooded,
            x.flooded / x.quiet.max(1.0),
            x.cpu_quiet,
            x.cpu_flooded,
            x.requests_per_s
        );
    }
    r
}
