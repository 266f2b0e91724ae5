//! The rate search: the highest rate a path carries with under 0.1 % loss, counting
//! only what arrived in time, from a [`Load`] and the [`Sink`] that counts arrivals.

use crate::traffic::{settled, Load, Sink};
use std::time::Duration;

/// How long after the last send of a trial its packets may still arrive and count, as
/// a share of the trial: a thirtieth (5 ms of 150). A relay behind its load holds the
/// excess in its buffers and delivers it later: counted, a 150 ms trial would credit it
/// with its buffers' worth over 0.15 s more packets per second than it keeps up with
/// (8 MiB of buffers hold more than the whole rate). What is still queued a thirtieth
/// of the trial after its end counts as lost: a relay may run at most 1/30 over what it
/// sustains, whatever the trial's length.
const IN_TIME_SHARE: u32 = 30;

/// What one rate trial showed.
#[derive(Debug, Clone, Copy)]
struct Trial {
    /// The rate asked for was sent (at least 97 % of it) and under 0.1 % was lost.
    passed: bool,
    /// Packets per second sent with under 0.1 % lost, whether or not the sender reached
    /// the rate asked for (0 when more was lost).
    carried: u64,
}

/// The highest rate carried with less than 0.1 % loss, counting only what arrived in
/// time ([`IN_TIME_SHARE`]). Without a `hint`, a search that
/// doubles from 40 000 packets/s then bisects ([`STEPS`]; 2 in quick mode). With one (the
/// median of this route's earlier rounds), it bisects a bracket of 0.6–1.4 times the
/// hint, its bottom tried first, in as many steps and to the same fineness, in about
/// two thirds of the trials: more rounds fit in the same time. A bottom that fails
/// starts the full search over; a bracket whose every step passes is left upwards.
/// A rate that fails gets a second trial: on shared cores one trial in a few loses
/// packets to a scheduling hiccup, and a single such trial early in the search would
/// otherwise throw away half the range (rounds of the same path differed by up to a
/// third). A trial whose sender fell short of the rate but lost nothing still shows
/// what the path carried.
pub fn max_rate(load: &mut dyn Load, sink: &Sink, dur: Duration, quick: bool, hint: Option<u64>) -> Found {
    // The count a trial starts from: the previous trial's settled count (the path has
    // stood still since), or a fresh one at the first trial.
    let mut start_count: Option<u64> = None;
    let mut once = |rate: u64| -> Trial {
        let before = match start_count {
            Some(c) => c,
            None => settled(sink),
        };
        let sent = load.paced(rate, dur);
        std::thread::sleep(dur / IN_TIME_SHARE);
        let got = sink.count() - before;
        start_count = Some(settled(sink));
        let loss = if sent == 0 { 1.0 } else { 1.0 - got as f64 / sent as f64 };
        let achieved = sent as f64 / dur.as_secs_f64();
        if std::env::var_os("SHIPWORM_BENCH_DEBUG").is_some() {
            let late = start_count.unwrap_or(0) - before - got;
            eprintln!(
                "    trial {rate} pkt/s: sent {sent} ({achieved:.0}/s), in time {got}, late {late}, loss {loss:.4}"
            );
        }
        let clean = sent > 0 && loss < 0.001;
        Trial { passed: clean && achieved >= rate as f64 * 0.97, carried: if clean { achieved as u64 } else { 0 } }
    };
    search(&mut once, if quick { 2 } else { STEPS }, hint)
}

/// Bisection steps of a full search: to 1/16 of the bracket, 5 % of a hinted search's
/// rate. Rounds of the same path spread wider than that (the host's noise), so a fifth
/// step would be lost in it; its trials' time measures the kernel path under the flood
/// instead.
const STEPS: usize = 4;

/// Rates the search doubles up to, at most.
const CEILING: u64 = 4_000_000;

/// The rate search behind [`max_rate`].
fn search(once: &mut dyn FnMut(u64) -> Trial, steps: usize, hint: Option<u64>) -> Found {
    let mut carried = 0u64;
    // Rates at which a trial lost packets (rather than fell short of the rate unharmed).
    let mut lossy: Vec<u64> = Vec::new();
    let mut trial = |rate: u64| {
        let mut attempt = || {
            let t = once(rate);
            carried = carried.max(t.carried);
            if !t.passed && t.carried == 0 {
                lossy.push(rate);
            }
            t.passed
        };
        attempt() || attempt()
    };
    // From `good` (passed, or 0), doubling from `rate` until a rate fails: (passed, failed),
    // failed 0 when none did up to the ceiling.
    let double = |trial: &mut dyn FnMut(u64) -> bool, mut good: u64, mut rate: u64| {
        while rate <= CEILING {
            if trial(rate) {
                good = rate;
                rate *= 2;
            } else {
                return (good, rate);
            }
        }
        (good, 0)
    };
    // Halves [good, bad) `steps` times; says whether any step failed.
    let bisect = |trial: &mut dyn FnMut(u64) -> bool, good: &mut u64, bad: &mut u64| {
        let mut failed = false;
        for _ in 0..steps {
            let mid = (*good + *bad) / 2;
            if trial(mid) {
                *good = mid;
            } else {
                *bad = mid;
                failed = true;
            }
        }
        failed
    };
    let bracket = hint.map(|h| (h * 3 / 5, h * 7 / 5)).filter(|&(lo, _)| lo > 0 && trial(lo));
    let (mut good, mut bad) = match bracket {
        Some(b) => b,
        None => double(&mut trial, 0, 40_000),
    };
    if bad != 0 && !bisect(&mut trial, &mut good, &mut bad) && bracket.is_some() {
        // Every step passed, and the bracket's top was never tried: the path may carry more.
        (good, bad) = double(&mut trial, good, bad);
        if bad != 0 {
            bisect(&mut trial, &mut good, &mut bad);
        }
    }
    // Every pass carried at least 97 % of its rate: the figure is what was carried.
    Found { rate: carried, held_by_sender: bad != 0 && !lossy.contains(&bad) }
}

/// What a rate search found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The highest rate carried with less than 0.1 % loss.
    pub rate: u64,
    /// The lowest rate that failed failed only because the sender fell short of it, the
    /// path losing nothing: the figure is the sender's, and the path may carry more.
    pub held_by_sender: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path that carries `capacity` packets/s behind a sender that reaches `sender`.
    fn path(capacity: u64, sender: u64) -> impl FnMut(u64) -> Trial {
        move |rate| {
            let sent = rate.min(sender);
            let clean = sent <= capacity;
            Trial { passed: clean && sent * 100 >= rate * 97, carried: if clean { sent } else { 0 } }
        }
    }

    #[test]
    fn one_unlucky_trial_does_not_sink_the_rate_search() {
        // The first trial at 80 000 loses packets to a hiccup. Taken at its word, that
        // trial would cap the search below 80 000.
        let mut real = path(100_000, u64::MAX);
        let mut tried = Vec::new();
        let mut once = |rate: u64| {
            tried.push(rate);
            if rate == 80_000 && tried.iter().filter(|&&r| r == 80_000).count() == 1 {
                return Trial { passed: false, carried: 0 };
            }
            real(rate)
        };
        let found = search(&mut once, 5, None);
        // Bisection between 80 000 and 160 000 in 5 steps: within 2 500 below capacity.
        assert!((97_500..=100_000).contains(&found.rate), "found {found:?}");
        // The path set it: the rate above lost packets.
        assert!(!found.held_by_sender);
        // Failures get a second trial; passes are not repeated.
        let times = |rate| tried.iter().filter(|&&r| r == rate).count();
        assert_eq!((times(40_000), times(80_000), times(160_000)), (1, 2, 2));
    }

    #[test]
    fn a_sender_that_falls_short_without_loss_still_shows_what_was_carried() {
        // The relay would carry more; the sender tops out at 91 000: what it sent, all
        // delivered, is the figure (the search's own steps stop at 90 000).
        // The search says so: the sender held the figure.
        assert_eq!(search(&mut path(150_000, 91_000), 5, None), Found { rate: 91_000, held_by_sender: true });
        // What was sent with loss is never counted as carried; the path held these.
        assert_eq!(search(&mut path(50_000, 91_000), 5, None), Found { rate: 50_000, held_by_sender: false });
        assert_eq!(search(&mut path(49_000, 91_000), 5, None), Found { rate: 48_750, held_by_sender: false });
    }

    #[test]
    fn a_rate_is_held_by_the_sender_only_when_its_lowest_failing_rate_lost_nothing() {
        // The sender tops out at 100 000, and at every rate above, the first trial lost
        // packets: the lowest failing rate lost some, so the path is not cleared.
        let mut real = path(150_000, 100_000);
        let mut seen = Vec::new();
        let mut once = |rate: u64| {
            if rate > 100_000 && !seen.contains(&rate) {
                seen.push(rate);
                return Trial { passed: false, carried: 0 };
            }
            real(rate)
        };
        let found = search(&mut once, 5, Some(100_000));
        assert_eq!(found.rate, 100_000);
        assert!(!found.held_by_sender, "{found:?}");
        // A path that never fails is held by nothing.
        assert!(!search(&mut |rate| Trial { passed: true, carried: rate }, 5, None).held_by_sender);
    }

    /// Counts the trials a search makes on `path`.
    fn counted(path: &mut dyn FnMut(u64) -> Trial, hint: Option<u64>) -> (u64, usize) {
        let mut n = 0;
        let found = search(
            &mut |rate| {
                n += 1;
                path(rate)
            },
            5,
            hint,
        );
        (found.rate, n)
    }

    #[test]
    fn a_hinted_search_is_as_fine_as_the_full_one_in_fewer_trials() {
        let (full, full_n) = counted(&mut path(100_000, u64::MAX), None);
        let (hinted, hinted_n) = counted(&mut path(100_000, u64::MAX), Some(96_000));
        // Both bisect a bracket about 80 000 wide in 5 steps: within 2 500 of capacity.
        assert!((97_500..=100_000).contains(&full), "full {full}");
        assert!((97_500..=100_000).contains(&hinted), "hinted {hinted}");
        assert!(hinted_n * 4 < full_n * 3, "{hinted_n} trials hinted against {full_n}");
    }

    #[test]
    fn a_hint_above_what_the_path_now_carries_falls_back_to_the_full_search() {
        // Earlier rounds found 200 000; this round the path carries 100 000, so even the
        // bracket's bottom (120 000) fails.
        let (found, _) = counted(&mut path(100_000, u64::MAX), Some(200_000));
        assert!((97_500..=100_000).contains(&found), "found {found}");
    }

    #[test]
    fn a_hint_below_what_the_path_now_carries_is_left_upwards() {
        // Earlier rounds found 60 000; the path now carries 150 000, above the bracket's
        // top (84 000): the search goes on up rather than stopping under the top.
        let (found, _) = counted(&mut path(150_000, u64::MAX), Some(60_000));
        assert!((145_000..=150_000).contains(&found), "found {found}");
    }

    #[test]
    fn a_path_that_never_fails_is_searched_up_to_the_ceiling() {
        let mut n = 0;
        let mut once = |rate| {
            n += 1;
            Trial { passed: true, carried: rate }
        };
        assert_eq!(search(&mut once, 5, None).rate, 2_560_000);
        assert_eq!(n, 7);
    }
}
