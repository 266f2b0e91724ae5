//! Sparse latency: a probe every few milliseconds, as a call or a ping sends, beside
//! the kernel path's, on every route of the CPU trials' size.

use crate::error::Failure;
use crate::measure::*;
use crate::stats::*;
use crate::traffic::{sparse_latencies, Probe};
use std::time::Duration;

/// The gap between two sparse latency probes.
pub(crate) const SPARSE_GAP: Duration = Duration::from_millis(5);

/// Sparse probes a lab sends on each path of [`CPU_SIZE`].
const SPARSE_PROBES: usize = 200;

/// Latency with a probe every [`SPARSE_GAP`] on every route of [`CPU_SIZE`], the
/// kernel path beside it in turn.
pub(crate) fn sparse_latency(
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
