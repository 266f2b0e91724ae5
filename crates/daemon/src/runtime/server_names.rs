//! The client's Teredo servers as configured — IPv4 literals or host names — turned into
//! the list of server addresses the client state machine works with.
//!
//! Names are resolved on a thread of their own: getaddrinfo blocks, for seconds when
//! DNS is unreachable, and the poll loop must keep serving the TUN, the status socket
//! and signals meanwhile. The loop hands requests over and collects answers at its
//! ticks. A name that fails is retried with back-off (1 s, 2 s, 4 s … 60 s), so a
//! laptop that starts before its network does finds its server seconds after the
//! network comes; every name is resolved again when the network changes or the client
//! lost its server, since a name may point elsewhere from the new network.
//!
//! The thread is started after root is dropped (it inherits the unprivileged
//! credentials); glibc reads /etc/hosts, /etc/resolv.conf and nsswitch.conf again as
//! needed on each lookup, all world-readable, so nothing here depends on root.

use crate::config::directives::Host;
use shipworm_proto::client::ServerAddrs;
use shipworm_wire::ipv4_scope::non_global_reason;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::time::{Duration, Instant};

/// First retry after a failed lookup.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Longest wait between retries.
pub const MAX_RETRY: Duration = Duration::from_secs(60);
/// How often the loop looks for a running lookup's answers.
const LOOKUP_LOOK: Duration = Duration::from_millis(100);

/// How long to wait before retry number `attempt` (0 for the first retry): doubling
/// from [`FIRST_RETRY`] up to [`MAX_RETRY`].
pub fn retry_delay(attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
    FIRST_RETRY.saturating_mul(factor).min(MAX_RETRY)
}

/// The servers the client is given, in order of preference: each address of the
/// primary (the first with the configured secondary, if any), then each of the
/// fallbacks. An address listed twice keeps its first place.
pub fn server_list(primary: &[Ipv4Addr], secondary: Option<Ipv4Addr>, fallbacks: &[Vec<Ipv4Addr>]) -> Vec<ServerAddrs> {
    let mut out: Vec<ServerAddrs> = Vec::new();
    let first = primary.iter().enumerate().map(|(i, &p)| match (i, secondary) {
        (0, Some(s)) => ServerAddrs { primary: p, secondary: s },
        _ => ServerAddrs::new(p),
    });
    for s in first.chain(fallbacks.iter().flatten().map(|&p| ServerAddrs::new(p))) {
        if !out.iter().any(|o| o.primary == s.primary) {
            out.push(s);
        }
    }
    out
}

/// Whether two server lists hold the same servers, whatever the order: DNS servers
/// rotate the addresses of a name between answers, and that alone is no reason to
/// start the client over.
pub fn same_servers(a: &[ServerAddrs], b: &[ServerAddrs]) -> bool {
    let key = |l: &[ServerAddrs]| {
        let mut k: Vec<(Ipv4Addr, Ipv4Addr)> = l.iter().map(|s| (s.primary, s.secondary)).collect();
        k.sort();
        k
    };
    key(a) == key(b)
}

/// Whether a client working with `current` should be replaced by one for `want`, now
/// that the names resolved again; `qualified_with` is the server it is qualified with,
/// if it is. A client that is not qualified starts over with the new list. A qualified
/// one is left alone — its tunnel works — unless the new list prefers another server
/// (it would go back to its first choice anyway) or no longer has its own; otherwise
/// the new list is taken when it next loses its server.
pub fn replace_now(current: &[ServerAddrs], want: &[ServerAddrs], qualified_with: Option<Ipv4Addr>) -> bool {
    if want.is_empty() || same_servers(current, want) {
        return false;
    }
    match qualified_with {
        None => true,
        Some(q) => current.first() != want.first() || !want.iter().any(|s| s.primary == q),
    }
}

/// One name's lookup: its IPv4 addresses in the resolver's order, or why not.
type Answer = (String, Result<Vec<Ipv4Addr>, String>);

/// How a name is looked up: [`lookup`], or a stand-in in tests (which must not send
/// DNS queries off the host).
type Lookup = fn(&str) -> Result<Vec<Ipv4Addr>, String>;

/// The lookup thread's two ends.
struct Worker {
    ask: Sender<Vec<String>>,
    answers: Receiver<Vec<Answer>>,
}

impl Worker {
    fn spawn(lookup: Lookup) -> std::io::Result<Worker> {
        let (ask, asked) = mpsc::channel::<Vec<String>>();
        let (tell, answers) = mpsc::channel();
        std::thread::Builder::new().name("resolver".into()).spawn(move || {
            // Ends when the daemon drops its end.
            for names in asked {
                let found: Vec<Answer> = names.into_iter().map(|n| (n.clone(), lookup(&n))).collect();
                if tell.send(found).is_err() {
                    break;
                }
            }
        })?;
        Ok(Worker { ask, answers })
    }
}

/// Resolve `name` with the system's resolver (getaddrinfo: /etc/hosts, DNS, …).
fn lookup(name: &str) -> Result<Vec<Ipv4Addr>, String> {
    let mut v4: Vec<Ipv4Addr> = Vec::new();
    for a in (name, 0u16).to_socket_addrs().map_err(|e| e.to_string())? {
        if let IpAddr::V4(a) = a.ip() {
            if !v4.contains(&a) {
                v4.push(a);
            }
        }
    }
    if v4.is_empty() {
        return Err("it has no IPv4 address (Teredo servers are reached over IPv4)".into());
    }
    Ok(v4)
}

/// The configured servers and what their names resolved to.
pub struct ServerNames {
    primary: Host,
    secondary: Option<Host>,
    fallbacks: Vec<Host>,
    lookup: Lookup,
    /// The last global IPv4 addresses each name resolved to: kept when a later lookup
    /// fails (a DNS outage is no reason to forget a server that worked).
    known: HashMap<String, Vec<Ipv4Addr>>,
    /// Names whose last lookup failed, with the error, in configuration order.
    failing: Vec<(String, String)>,
    worker: Option<Worker>,
    in_flight: bool,
    /// A full round was asked for while another ran: start it when that one ends.
    again: bool,
    /// Retries done since the last round that resolved everything.
    attempt: u32,
    retry_at: Option<Instant>,
    /// When [`ServerNames::tick`] last looked for answers.
    looked_at: Instant,
}

impl ServerNames {
    /// The servers of the configuration; names, if any, are looked up at once.
    pub fn new(primary: Host, secondary: Option<Host>, fallbacks: Vec<Host>, now: Instant) -> ServerNames {
        ServerNames::with_lookup(primary, secondary, fallbacks, lookup, now)
    }

    fn with_lookup(
        primary: Host,
        secondary: Option<Host>,
        fallbacks: Vec<Host>,
        lookup: Lookup,
        now: Instant,
    ) -> ServerNames {
        let mut s = ServerNames {
            primary,
            secondary,
            fallbacks,
            lookup,
            known: HashMap::new(),
            failing: Vec::new(),
            worker: None,
            in_flight: false,
            again: false,
            attempt: 0,
            retry_at: None,
            looked_at: now,
        };
        s.resolve_all(now);
        s
    }

    /// Every distinct name, in configuration order.
    fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for h in std::iter::once(&self.primary).chain(&self.secondary).chain(&self.fallbacks) {
            if let Host::Name(n) = h {
                if !out.contains(n) {
                    out.push(n.clone());
                }
            }
        }
        out
    }

    /// The addresses `h` stands for now (none for a name not resolved yet).
    fn addresses(&self, h: &Host) -> Vec<Ipv4Addr> {
        match h {
            Host::Addr(a) => vec![*a],
            Host::Name(n) => self.known.get(n).cloned().unwrap_or_default(),
        }
    }

    /// The servers to give the client now; empty until something resolved.
    pub fn servers(&self) -> Vec<ServerAddrs> {
        let fallbacks: Vec<Vec<Ipv4Addr>> = self.fallbacks.iter().map(|h| self.addresses(h)).collect();
        // A secondary given as a name and not resolved yet: the convention (primary + 1)
        // until it is, rather than no client at all.
        let secondary = self.secondary.as_ref().and_then(|h| self.addresses(h).first().copied());
        server_list(&self.addresses(&self.primary), secondary, &fallbacks)
    }

    /// Names whose last lookup failed, with the error.
    pub fn failing(&self) -> &[(String, String)] {
        &self.failing
    }

    /// The configured servers as written, for logs and status.
    pub fn describe(&self) -> String {
        let mut s = self.primary.to_string();
        if let Some(h) = &self.secondary {
            s.push_str(&format!(" (secondary {h})"));
        }
        if !self.fallbacks.is_empty() {
            let f: Vec<String> = self.fallbacks.iter().map(Host::to_string).collect();
            s.push_str(&format!(", then {}", f.join(", ")));
        }
        s
    }

    /// For `shipworm status`: each name, what it resolved to and its last error.
    pub fn json(&self) -> serde_json::Value {
        let rows: Vec<serde_json::Value> = self
            .names()
            .into_iter()
            .map(|n| {
                let addrs: Vec<String> = self.known.get(&n).into_iter().flatten().map(Ipv4Addr::to_string).collect();
                let error = self.failing.iter().find(|(f, _)| *f == n).map(|(_, e)| e.clone());
                serde_json::json!({"name": n, "addresses": addrs, "error": error})
            })
            .collect();
        serde_json::Value::Array(rows)
    }

    /// Look every name up again now (the network changed, or the client lost its
    /// server), with the back-off started over.
    pub fn resolve_all(&mut self, now: Instant) {
        if self.in_flight {
            self.again = true;
            return;
        }
        self.attempt = 0;
        self.retry_at = None;
        let names = self.names();
        self.ask(names, now);
    }

    fn ask(&mut self, names: Vec<String>, now: Instant) {
        if names.is_empty() {
            return;
        }
        if self.worker.is_none() {
            match Worker::spawn(self.lookup) {
                Ok(w) => self.worker = Some(w),
                Err(e) => {
                    tracing::warn!("cannot start the name resolver thread: {e}; trying again later");
                    self.schedule_retry(now);
                    return;
                }
            }
        }
        let sent = self.worker.as_ref().is_some_and(|w| w.ask.send(names).is_ok());
        if sent {
            self.in_flight = true;
        } else {
            // The thread is gone (it cannot panic in normal operation): a new one next time.
            self.worker = None;
            self.schedule_retry(now);
        }
    }

    fn schedule_retry(&mut self, now: Instant) {
        self.retry_at = Some(now + retry_delay(self.attempt));
        self.attempt = self.attempt.saturating_add(1);
    }

    /// When [`ServerNames::tick`] next has something to do: soon while a lookup runs
    /// (its answer comes on a channel the loop cannot poll), the retry otherwise.
    pub fn next_due(&self) -> Option<Instant> {
        if self.in_flight {
            return Some(self.looked_at + LOOKUP_LOOK);
        }
        self.retry_at
    }

    /// Called when due (or whenever): take in finished lookups, start due retries.
    pub fn tick(&mut self, now: Instant) {
        self.looked_at = now;
        if self.in_flight {
            let got = match &self.worker {
                Some(w) => w.answers.try_recv(),
                None => Err(TryRecvError::Disconnected),
            };
            match got {
                Ok(answers) => {
                    self.in_flight = false;
                    for (name, result) in answers {
                        self.take_answer(name, result);
                    }
                    if std::mem::take(&mut self.again) {
                        self.resolve_all(now);
                    } else if self.failing.is_empty() {
                        self.attempt = 0;
                        self.retry_at = None;
                    } else {
                        self.schedule_retry(now);
                    }
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    tracing::warn!("the name resolver thread stopped; starting another");
                    self.in_flight = false;
                    self.worker = None;
                    self.schedule_retry(now);
                }
            }
        }
        if !self.in_flight && self.retry_at.is_some_and(|t| now >= t) {
            self.retry_at = None;
            let names = self.unresolved();
            self.ask(names, now);
        }
    }

    /// Names to try again: those whose last lookup failed, and those never answered
    /// (their first lookup could not even start).
    fn unresolved(&self) -> Vec<String> {
        let failing = |n: &String| self.failing.iter().any(|(f, _)| f == n);
        self.names().into_iter().filter(|n| failing(n) || !self.known.contains_key(n)).collect()
    }

    fn take_answer(&mut self, name: String, result: Result<Vec<Ipv4Addr>, String>) {
        let result = result.and_then(|addrs| {
            let (global, other): (Vec<Ipv4Addr>, Vec<Ipv4Addr>) =
                addrs.into_iter().partition(|&a| non_global_reason(a).is_none());
            let why = |a: &Ipv4Addr| format!("{a} is {}", non_global_reason(*a).unwrap_or("not global"));
            if global.is_empty() {
                let list: Vec<String> = other.iter().map(why).collect();
                return Err(format!("it resolves to no global unicast address ({})", list.join(", ")));
            }
            if !other.is_empty() && self.known.get(&name) != Some(&global) {
                for a in &other {
                    tracing::warn!("{name}: ignoring {}: a Teredo server needs a global unicast address", why(a));
                }
            }
            Ok(global)
        });
        let was_failing = self.failing.iter().position(|(n, _)| *n == name);
        match result {
            Ok(addrs) => {
                if was_failing.is_some() || self.known.get(&name) != Some(&addrs) {
                    let list: Vec<String> = addrs.iter().map(Ipv4Addr::to_string).collect();
                    tracing::info!("Teredo server name {name} resolved: {}", list.join(", "));
                }
                if let Some(i) = was_failing {
                    self.failing.remove(i);
                }
                self.known.insert(name, addrs);
            }
            Err(e) => {
                let changed = was_failing.is_none_or(|i| self.failing[i].1 != e);
                let message = match self.known.get(&name) {
                    None => format!("waiting for the name of the Teredo server to resolve: {name} ({e})"),
                    Some(old) => {
                        let list: Vec<String> = old.iter().map(Ipv4Addr::to_string).collect();
                        format!("cannot resolve the Teredo server name {name} again ({e}); keeping {}", list.join(", "))
                    }
                };
                // Said once, and again only when the reason changes: retries run for
                // as long as the network is away.
                if changed {
                    tracing::warn!("{message}");
                } else {
                    tracing::debug!("{message}");
                }
                match was_failing {
                    Some(i) => self.failing[i].1 = e,
                    None => self.failing.push((name, e)),
                }
            }
        }
        // Configuration order, so that status and retries list the primary first.
        let order = self.names();
        self.failing.sort_by_key(|(n, _)| order.iter().position(|o| o == n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn back_off_doubles_from_one_second_to_a_minute() {
        let secs: Vec<u64> = (0..9).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(retry_delay(31), MAX_RETRY);
        assert_eq!(retry_delay(32), MAX_RETRY, "no overflow past the shift width");
        assert_eq!(retry_delay(u32::MAX), MAX_RETRY);
    }

    #[test]
    fn every_address_of_the_primary_first_then_the_fallbacks() {
        let l = server_list(
            &[v4("192.0.2.1"), v4("198.51.100.1")],
            Some(v4("192.0.2.9")),
            &[vec![v4("203.0.113.1")], vec![], vec![v4("198.51.100.1"), v4("203.0.113.7")]],
        );
        assert_eq!(
            l,
            [
                ServerAddrs { primary: v4("192.0.2.1"), secondary: v4("192.0.2.9") },
                ServerAddrs::new(v4("198.51.100.1")),
                ServerAddrs::new(v4("203.0.113.1")),
                ServerAddrs::new(v4("203.0.113.7")),
            ]
        );
        // Nothing resolved for the primary yet: the fallbacks alone.
        assert_eq!(
            server_list(&[], Some(v4("192.0.2.9")), &[vec![v4("203.0.113.1")]]),
            [ServerAddrs::new(v4("203.0.113.1"))]
        );
        assert!(server_list(&[], None, &[vec![]]).is_empty());
    }

    #[test]
    fn a_rotated_answer_is_the_same_list() {
        let a = [ServerAddrs::new(v4("192.0.2.1")), ServerAddrs::new(v4("198.51.100.1"))];
        let b = [a[1], a[0]];
        assert!(same_servers(&a, &b));
        assert!(!same_servers(&a, &a[..1]));
        let other_secondary = [ServerAddrs { primary: v4("192.0.2.1"), secondary: v4("192.0.2.9") }, a[1]];
        assert!(!same_servers(&a, &other_secondary));
    }

    #[test]
    fn a_working_tunnel_is_replaced_only_for_a_reason() {
        let (a, b, c) =
            (ServerAddrs::new(v4("192.0.2.1")), ServerAddrs::new(v4("192.0.2.5")), ServerAddrs::new(v4("203.0.113.1")));
        // Nothing resolved yet, or nothing new: nothing to do.
        assert!(!replace_now(&[], &[], None));
        assert!(!replace_now(&[a, b], &[b, a], None));
        // The first names resolved: the first client.
        assert!(replace_now(&[], &[a], None));
        // Not qualified: start over with the new list.
        assert!(replace_now(&[b], &[a, b], None));
        // Qualified with the fallback, and the primary's name resolved at last: go home.
        assert!(replace_now(&[b], &[a, b], Some(b.primary)));
        // Qualified with the primary; a fallback's address changed: later.
        assert!(!replace_now(&[a, b], &[a, c], Some(a.primary)));
        // Qualified with a fallback that the names no longer give: now.
        assert!(replace_now(&[a, b], &[a, c], Some(b.primary)));
    }

    fn wait_answer(s: &mut ServerNames) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while s.in_flight && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            s.tick(Instant::now());
        }
        assert!(!s.in_flight, "no answer from the resolver thread");
    }

    #[test]
    fn a_name_whose_first_lookup_never_started_is_tried_again() {
        fn found(_: &str) -> Result<Vec<Ipv4Addr>, String> {
            Ok(vec!["192.0.2.1".parse().unwrap()])
        }
        let now = Instant::now();
        let mut s = ServerNames::with_lookup(Host::Name("server.teredo.test".into()), None, vec![], found, now);
        wait_answer(&mut s);
        // As if the resolver thread could not start after a network change: nothing in
        // flight, nothing failing, nothing known, a retry due.
        s.known.clear();
        s.worker = None;
        s.schedule_retry(now);
        assert!(!s.in_flight && s.failing().is_empty() && s.servers().is_empty());
        s.tick(now + Duration::from_secs(2));
        assert!(s.in_flight, "the retry asks again for the name never answered");
        wait_answer(&mut s);
        assert_eq!(s.servers(), [ServerAddrs::new(v4("192.0.2.1"))]);
    }

    #[test]
    fn literals_need_no_lookup() {
        let s = ServerNames::new(Host::Addr(v4("192.0.2.1")), None, vec![Host::Addr(v4("192.0.2.5"))], Instant::now());
        assert!(s.worker.is_none() && !s.in_flight);
        assert_eq!(s.servers(), [ServerAddrs::new(v4("192.0.2.1")), ServerAddrs::new(v4("192.0.2.5"))]);
    }

    #[test]
    fn a_failing_name_is_retried_with_back_off_and_the_rest_is_used() {
        use std::sync::atomic::{AtomicBool, Ordering};
        static IN_HOSTS: AtomicBool = AtomicBool::new(false);
        fn hosts_file(name: &str) -> Result<Vec<Ipv4Addr>, String> {
            match (name, IN_HOSTS.load(Ordering::SeqCst)) {
                ("server.teredo.test", true) => Ok(vec!["192.0.2.1".parse().unwrap()]),
                _ => Err("Name or service not known".into()),
            }
        }
        let t0 = Instant::now();
        let mut s = ServerNames::with_lookup(
            Host::Name("server.teredo.test".into()),
            None,
            vec![Host::Addr(v4("192.0.2.5"))],
            hosts_file,
            t0,
        );
        assert!(s.in_flight);
        wait_answer(&mut s);
        assert_eq!(s.failing(), [("server.teredo.test".to_string(), "Name or service not known".to_string())]);
        assert_eq!(s.servers(), [ServerAddrs::new(v4("192.0.2.5"))], "the fallback serves meanwhile");
        let first = s.retry_at.expect("a retry is scheduled");
        assert!(first > t0 && first <= Instant::now() + FIRST_RETRY);
        // Not before it is due; once due, the retry goes out and the next waits longer.
        s.tick(first - Duration::from_millis(1));
        assert!(!s.in_flight);
        s.tick(first);
        assert!(s.in_flight);
        let asked = Instant::now();
        wait_answer(&mut s);
        assert_eq!(s.attempt, 2);
        assert!(s.retry_at.expect("another retry") >= asked + retry_delay(1));
        let json = s.json();
        assert_eq!(json[0]["name"], "server.teredo.test");
        assert_eq!(json[0]["error"], "Name or service not known");
        // The name appears; a network change looks again at once, back-off started over.
        IN_HOSTS.store(true, Ordering::SeqCst);
        s.resolve_all(Instant::now());
        assert!(s.in_flight && s.attempt == 0 && s.retry_at.is_none());
        wait_answer(&mut s);
        assert!(s.failing().is_empty() && s.retry_at.is_none());
        assert_eq!(s.servers(), [ServerAddrs::new(v4("192.0.2.1")), ServerAddrs::new(v4("192.0.2.5"))]);
    }

    #[test]
    fn answers_keep_global_addresses_only() {
        let mut s = ServerNames::new(Host::Addr(v4("192.0.2.1")), None, vec![], Instant::now());
        s.fallbacks.push(Host::Name("t.example".into()));
        s.take_answer("t.example".into(), Ok(vec![v4("10.0.0.1"), v4("203.0.113.1")]));
        assert_eq!(s.known["t.example"], [v4("203.0.113.1")]);
        s.take_answer("t.example".into(), Ok(vec![v4("127.0.0.1")]));
        assert!(s.failing()[0].1.contains("no global unicast address"));
        assert_eq!(s.known["t.example"], [v4("203.0.113.1")], "a failed lookup forgets nothing");
        assert_eq!(s.servers().len(), 2);
        s.take_answer("t.example".into(), Ok(vec![v4("203.0.113.2")]));
        assert!(s.failing().is_empty());
        assert_eq!(s.servers()[1], ServerAddrs::new(v4("203.0.113.2")));
    }

    #[test]
    fn a_secondary_name_pairs_with_the_first_primary_address() {
        let mut s = ServerNames::new(
            Host::Name("p.example".into()),
            Some(Host::Name("s.example".into())),
            vec![],
            Instant::now(),
        );
        s.take_answer("p.example".into(), Ok(vec![v4("192.0.2.1"), v4("198.51.100.1")]));
        assert_eq!(s.servers()[0], ServerAddrs::new(v4("192.0.2.1")), "convention until it resolves");
        s.take_answer("s.example".into(), Ok(vec![v4("192.0.2.77")]));
        assert_eq!(
            s.servers(),
            [
                ServerAddrs { primary: v4("192.0.2.1"), secondary: v4("192.0.2.77") },
                ServerAddrs::new(v4("198.51.100.1"))
            ]
        );
    }
}
