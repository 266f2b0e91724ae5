//! CPU per packet: fixed-rate trials while the relay host's core and its processes'
//! time are read before and after.

use crate::cpus;
use crate::error::Failure;
use crate::measure::*;
use crate::traffic::settled;
use std::time::{Duration, Instant};

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
