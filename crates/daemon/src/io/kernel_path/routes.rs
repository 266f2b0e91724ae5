//! Following the host's routing for a relay's kept route verdicts: void at every change
//! the kernel tells of, kept again once routing has settled, renewed every second.

use super::*;
use crate::io::route_watch::{Changed, Listing, RouteWatch};
use shipworm_kernel_path::RouteVerdicts;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a relay's route verdicts are kept at most, for the changes the
/// kernel tells of to nobody (a path MTU it learns, an MTU set by sysctl).
pub const ROUTE_REFRESH: Duration = Duration::from_secs(1);

/// How long the host's routing must stay unchanged before verdicts are kept again: a
/// host whose routes change all the time (a router fed a full table) is listed at most
/// this often, and its packets meanwhile look their routes up.
pub(super) const ROUTES_SETTLE: Duration = Duration::from_millis(200);

/// Keeps a relay's route verdicts (`tun`: its Teredo interface) to the host's
/// routing until `stop`, each family's on its own: void at once when the kernel tells
/// of a change to it, kept again once that routing has stayed unchanged a while, of
/// the kinds it allows (`RouteWatch::verdicts_allowed`,
/// `RouteWatch::mapping_verdicts_allowed`), and renewed every [`ROUTE_REFRESH`]. A
/// generation that cannot be moved leaves verdicts that may be wrong: the programs are
/// turned off then; if that fails too, the relay stops (`halt`) and this says why.
pub fn follow_routes(
    watch: &mut RouteWatch,
    switch: &Switch,
    tun: u32,
    stop: &AtomicBool,
    halt: &AtomicBool,
) -> Result<(), String> {
    // How soon a stop is noticed at the latest: the owner wakes the watch when it stops
    // it or fails (`RouteWatch::stopped_by`), so this is only a backstop.
    const STOP_CHECK: Duration = Duration::from_secs(30);
    let start = Instant::now();
    let (mut ipv6, mut ipv4) = (Following::<RouteVerdicts>::new(start), Following::<bool>::new(start));
    // A relay through the host's stack keeps no IPv6 verdict, and a kernel that may
    // preempt the programs none of the mappings' (per CPU): their routing is not even
    // listed then.
    let follow6 = switch.most_route_verdicts() > RouteVerdicts::None;
    let preempts = switch.most_route_verdicts() < RouteVerdicts::ClientsAndDestinations;
    let follow4 = switch.may_keep_mapping_verdicts();
    if !follow4 && shipworm_kernel_path::preempts_programs() {
        tracing::info!("kernel data path: {MAPPINGS_NOT_ON_RT}");
    }
    let tell4 = |keep: bool| switch.mapping_verdicts(keep);
    let tell6 = |keep: RouteVerdicts| switch.route_verdicts(keep);
    while !stop.load(Ordering::Relaxed) && !halt.load(Ordering::Relaxed) {
        let now = Instant::now();
        let wait_of = |follow: bool, wait: Duration| if follow { wait } else { Duration::MAX };
        let wait = wait_of(follow6, ipv6.wait(now)).min(wait_of(follow4, ipv4.wait(now)));
        let changed = watch.changed_within(STOP_CHECK.min(wait));
        let now = Instant::now();
        // A change heard is voided at once, before either family is listed; while one
        // family's routing is listed (a full table takes a while), the other's
        // verdicts are voided at once on a change to it, and renewed when due.
        if let Err(e) = ipv6.meanwhile(changed.ipv6 && follow6, tell6) {
            return cannot_void(switch, halt, &e);
        }
        if let Err(e) = ipv4.meanwhile(changed.ipv4 && follow4, tell4) {
            return cannot_void(switch, halt, &e);
        }
        let mut failed = None;
        let keep6 = ipv6.step(changed.ipv6 || !follow6, now, || {
            let mut meanwhile = |c: Changed| ipv4.meanwhile_noting(c.ipv4 && follow4, tell4, &mut failed);
            watch.verdicts_allowed(tun, stop, &mut meanwhile).map(|allowed| ipv6_verdicts_said(allowed, preempts))
        });
        if let Some(e) = failed.take() {
            return cannot_void(switch, halt, &e);
        }
        if let Some(keep) = keep6 {
            if let Err(e) = tell6(keep) {
                return cannot_void(switch, halt, &e);
            }
        }
        // The rest of a listing given up on is the socket's until the next wait drains
        // it: the kernel lists one at a time on a socket.
        if ipv6.gave_up {
            continue;
        }
        let keep4 = ipv4.step(changed.ipv4 || !follow4, now, || {
            let mut meanwhile = |c: Changed| ipv6.meanwhile_noting(c.ipv6 && follow6, tell6, &mut failed);
            watch.mapping_verdicts_allowed(stop, &mut meanwhile).map(mapping_verdicts_said)
        });
        if let Some(e) = failed.take() {
            return cannot_void(switch, halt, &e);
        }
        if let Some(keep) = keep4 {
            if let Err(e) = tell4(keep) {
                return cannot_void(switch, halt, &e);
            }
        }
    }
    // Nobody watches the routing from here on: nothing is kept.
    let failed = (ipv6.keeping != RouteVerdicts::None && switch.route_verdicts(RouteVerdicts::None).is_err())
        | (ipv4.keeping && switch.mapping_verdicts(false).is_err());
    if failed && switch.turn_off().is_err() {
        return Err("kernel data path: on stopping, the programs' route verdicts could not be voided, nor the programs turned off".into());
    }
    Ok(())
}

/// The programs' verdicts could not be voided (`e`): turned off, or if that fails too,
/// the relay stops.
fn cannot_void(switch: &Switch, halt: &AtomicBool, e: &std::io::Error) -> Result<(), String> {
    match switch.turn_off() {
        Ok(()) => {
            tracing::error!(
                "kernel data path: the programs' route verdicts could not be voided ({e}); turned off, every packet now goes through the daemon"
            );
            Ok(())
        }
        Err(off) => {
            halt.store(true, Ordering::Relaxed);
            Err(format!(
                "kernel data path: the programs' route verdicts could not be voided ({e}), nor the programs turned off ({off}): stopping"
            ))
        }
    }
}

/// Which IPv6 verdicts to keep of those the host's routing allows, and what the log
/// says of it.
fn ipv6_verdicts_said(allowed: RouteVerdicts, preempts: bool) -> (RouteVerdicts, String) {
    match allowed {
        RouteVerdicts::ClientsAndDestinations if preempts => (
            RouteVerdicts::Clients,
            "route verdicts kept, for clients only: this kernel may preempt a program for another on the same CPU (PREEMPT_RT), and native destinations' verdicts are kept per CPU, so each packet from a client looks its route up".into(),
        ),
        RouteVerdicts::ClientsAndDestinations => (
            allowed,
            "route verdicts kept, for clients and native destinations: the host's IPv6 routing depends on a packet's destination alone".into(),
        ),
        RouteVerdicts::Clients => (
            allowed,
            "route verdicts kept, for clients only: a multipath route shares flows among next hops, so each packet from a client looks its route up".into(),
        ),
        RouteVerdicts::None => (
            allowed,
            "no IPv6 route verdicts kept: the host's IPv6 routing may depend on more than a packet's destination (policy rules, routes by source, nexthop objects listed without their next hops, or multipath through the Teredo interface), so each packet looks its IPv6 route up".into(),
        ),
    }
}

/// Whether to keep the verdicts on the routes to clients' mappings, and what the log
/// says of it.
fn mapping_verdicts_said(allowed: bool) -> (bool, String) {
    if allowed {
        (true, "route verdicts kept for clients' mappings: no IPv4 route shares flows among next hops".into())
    } else {
        (false, "no route verdicts kept for clients' mappings: an IPv4 route shares flows among next hops (by the neighbours' state too, which nobody announces), so each packet to a client looks its IPv4 route up".into())
    }
}

/// Why a kernel that may preempt the programs keeps no mapping's verdict.
const MAPPINGS_NOT_ON_RT: &str = "no route verdicts kept for clients' mappings: this kernel may preempt a program for another on the same CPU (PREEMPT_RT), and they are kept per CPU, so each packet to a client looks its IPv4 route up";

/// One family's route verdicts as the relay follows the host's routing of it.
pub(super) struct Following<K> {
    /// What the programs keep now (`K::default()`: nothing).
    keeping: K,
    /// Since when the routing has been changing: listed once it has stood still.
    unsettled: Option<Instant>,
    next_refresh: Instant,
    /// What the log last said of it, so that it says each thing once.
    said: Option<String>,
    /// Its last `step` gave a listing up before the kernel had sent all of it.
    gave_up: bool,
}

impl<K: Copy + PartialEq + Default> Following<K> {
    /// A listing is due from the start: nothing is kept until it says so.
    pub(super) fn new(now: Instant) -> Following<K> {
        Following {
            keeping: K::default(),
            unsettled: Some(now.checked_sub(ROUTES_SETTLE).unwrap_or(now)),
            next_refresh: now + ROUTE_REFRESH,
            said: None,
            gave_up: false,
        }
    }

    /// How long until it has something to do.
    fn wait(&self, now: Instant) -> Duration {
        match self.unsettled {
            Some(since) => (since + ROUTES_SETTLE).saturating_duration_since(now),
            None if self.keeping != K::default() => self.next_refresh.saturating_duration_since(now),
            None => Duration::MAX,
        }
    }

    /// While the other family's routing is listed: told at once what is to be voided on
    /// a change to this one (`changed`), and renewed when due, by `tell`.
    fn meanwhile(&mut self, changed: bool, tell: impl FnOnce(K) -> std::io::Result<()>) -> std::io::Result<()> {
        let now = Instant::now();
        let nothing = K::default();
        if changed {
            self.unsettled = Some(now);
        }
        if self.keeping == nothing || !(changed || now >= self.next_refresh) {
            return Ok(());
        }
        if changed {
            self.keeping = nothing;
        }
        self.next_refresh = now + ROUTE_REFRESH;
        tell(self.keeping)
    }

    /// [`Following::meanwhile`] as a listing's hook: false (the listing ends) once
    /// telling failed, the failure kept in `failed` for the caller.
    fn meanwhile_noting(
        &mut self,
        changed: bool,
        tell: impl FnOnce(K) -> std::io::Result<()>,
        failed: &mut Option<std::io::Error>,
    ) -> bool {
        match self.meanwhile(changed, tell) {
            Ok(()) => true,
            Err(e) => {
                failed.get_or_insert(e);
                false
            }
        }
    }

    /// What the programs are to keep from now on, if they are to be told (each telling
    /// voids what they kept): nothing at once on a change (`changed`); what `list`
    /// allows (with what the log says of it) once the routing has stood still; the
    /// same again when due for renewal.
    pub(super) fn step(
        &mut self,
        changed: bool,
        now: Instant,
        list: impl FnOnce() -> Result<(K, String), Listing>,
    ) -> Option<K> {
        let nothing = K::default();
        self.gave_up = false;
        let keep = if changed {
            self.unsettled = Some(now);
            if self.keeping == nothing {
                return None;
            }
            nothing
        } else if self.unsettled.is_some_and(|since| now >= since + ROUTES_SETTLE) {
            self.unsettled = None;
            let listed = list();
            self.gave_up = listed.is_err();
            let (keep, say, warn) = match listed {
                Ok((keep, say)) => (keep, say, false),
                Err(Listing::Changed) => {
                    self.unsettled = Some(now);
                    (nothing, String::new(), false)
                }
                // Listed again in a while, or on the next change.
                Err(Listing::Failed(e)) => {
                    self.unsettled = Some(now + ROUTE_REFRESH);
                    (nothing, format!("{e}; each packet looks its route up meanwhile"), true)
                }
            };
            if !say.is_empty() && self.said.as_deref() != Some(say.as_str()) {
                if warn {
                    tracing::warn!("kernel data path: {say}");
                } else {
                    tracing::info!("kernel data path: {say}");
                }
                self.said = Some(say);
            }
            if keep == nothing && self.keeping == nothing {
                return None;
            }
            keep
        } else if self.keeping != nothing && now >= self.next_refresh {
            self.keeping
        } else {
            return None;
        };
        self.next_refresh = now + ROUTE_REFRESH;
        self.keeping = keep;
        Some(keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One family's verdicts: kept once its routing has stood still and the listing
    /// allows them, void at once on a change, renewed each second; and, while the
    /// other family's routing is listed, voided at once on a change and renewed when
    /// due all the same.
    #[test]
    fn each_familys_verdicts_are_voided_at_once_and_renewed_on_time_even_while_the_other_lists() {
        let t0 = Instant::now();
        let mut f = Following::<bool>::new(t0);
        let allow = || Ok((true, "kept".to_string()));
        assert_eq!(f.step(false, t0, allow), Some(true), "listed at the start, kept");
        assert_eq!(f.step(false, t0 + Duration::from_millis(500), allow), None, "nothing due");
        assert_eq!(f.step(false, t0 + ROUTE_REFRESH, allow), Some(true), "renewed");
        let changed = t0 + ROUTE_REFRESH + Duration::from_millis(10);
        assert_eq!(f.step(true, changed, allow), Some(false), "void at once");
        assert_eq!(f.step(false, changed + Duration::from_millis(100), allow), None, "not settled");
        let settled = changed + ROUTES_SETTLE;
        assert_eq!(f.step(false, settled, allow), Some(true), "settled, listed again");
        // While the other family lists: nothing to tell before the renewal is due...
        let mut told = Vec::new();
        f.meanwhile(false, |k| {
            told.push(k);
            Ok(())
        })
        .unwrap();
        assert!(told.is_empty(), "told {told:?} before the renewal was due");
        // ...renewed once due (the clock is the real one here: the renewal is made
        // due by hand)...
        f.next_refresh = Instant::now();
        f.meanwhile(false, |k| {
            told.push(k);
            Ok(())
        })
        .unwrap();
        // ...and voided at once on a change, then left alone until listed again.
        f.meanwhile(true, |k| {
            told.push(k);
            Ok(())
        })
        .unwrap();
        f.meanwhile(true, |k| {
            told.push(k);
            Ok(())
        })
        .unwrap();
        assert_eq!(told, [true, false]);
        assert!(!f.keeping && f.unsettled.is_some());
        // A failure to tell is the caller's.
        let mut g = Following::<RouteVerdicts>::new(t0);
        g.step(false, t0, || Ok((RouteVerdicts::Clients, String::new())));
        assert!(g.meanwhile(true, |_| Err(std::io::Error::other("refused"))).is_err());
        // A listing that fails keeps nothing and is tried again a second later.
        let mut h = Following::<bool>::new(t0);
        assert_eq!(h.step(false, t0, || Err(Listing::Failed("no".into()))), None);
        assert_eq!(h.step(false, t0 + ROUTES_SETTLE + Duration::from_millis(1), allow), None, "too soon");
        assert_eq!(h.step(false, t0 + ROUTE_REFRESH + ROUTES_SETTLE, allow), Some(true));
    }
}
