//! Figures over rounds and searches: trimmed means, medians, percentiles, standard
//! errors, and the latency added as a quotient of differences with its error.

/// A figure over rounds or searches: the mean of all but the highest and the lowest
/// ninth, at least one each (of two or fewer, of all). Not their median: a path's
/// rounds fall at two levels a lab apart, and a median jumps from one level to the
/// other when one round does, while this moves by a ninth of the gap; dropping the
/// ends still keeps a stalled round from counting.
pub(crate) fn middle_mean(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let cut = (v.len() / 9).max(1);
    let middle = if v.len() > 2 { &v[cut..v.len() - cut] } else { &v[..] };
    middle.iter().sum::<f64>() / middle.len() as f64
}

/// The median; of an even count, the mean of the middle two (with a handful of rounds,
/// taking the upper one alone made the figure needlessly jumpy).
pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The lowest and the highest of `v` (infinities of no values).
pub(crate) fn range(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| (l.min(x), h.max(x)))
}

pub(crate) fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(f64::NAN)
}

/// The mean, and its standard error from the spread of the values (NaN under two).
pub(crate) fn mean_and_error(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, if v.len() < 2 { f64::NAN } else { (var / n).sqrt() })
}

/// The latency shipworm adds over the kernel path, as a share of what Miredo adds, from
/// the labs' medians of each (shipworm, Miredo, kernel), with its standard error.
///
/// A quotient of differences magnifies the labs' noise several times over, so two runs
/// may differ by more than a plain latency ratio ever does; the error says how far it
/// is pinned down, carried to first order from each mean's.
pub(crate) fn added(s: &[f64], m: &[f64], k: &[f64]) -> (f64, f64) {
    let ((s, es), (m, em), (k, ek)) = (mean_and_error(s), mean_and_error(m), mean_and_error(k));
    let d = m - k;
    let q = (s - k) / d;
    let var = (es / d).powi(2) + (q / d * em).powi(2) + ((s - m) / (d * d) * ek).powi(2);
    (q, var.sqrt())
}

/// Half the width of a 90 % interval, in standard errors.
pub(crate) const Z90: f64 = 1.645;
