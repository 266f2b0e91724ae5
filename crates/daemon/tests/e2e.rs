//! The end-to-end suite: every NAT kind × every pairing of shipworm and Miredo as
//! server, relay and client, in the namespace lab. Each case states its expected
//! outcome — pass, or failure at a named step with the reason — and the suite fails
//! when a case does otherwise, including a case that starts passing (so expectations
//! are updated when a role lands). Needs root; `scripts/test.sh` provides it.

#[path = "e2e/anycast.rs"]
mod anycast;
#[path = "e2e/anycast_servers.rs"]
mod anycast_servers;
#[path = "e2e/calling_first.rs"]
mod calling_first;
#[path = "e2e/client_to_client.rs"]
mod client_to_client;
#[path = "e2e/conformance.rs"]
mod conformance;
#[path = "e2e/idle.rs"]
mod idle;
#[path = "e2e/links.rs"]
mod links;
#[path = "e2e/nat_matrix.rs"]
mod nat_matrix;
#[path = "e2e/operations.rs"]
mod operations;
#[path = "e2e/peers.rs"]
mod peers;
#[path = "e2e/reload.rs"]
mod reload;
#[path = "e2e/security.rs"]
mod security;
#[path = "e2e/windows_like.rs"]
mod windows_like;

use shipworm_lab::scenario::{self, Scenario, Side};
use shipworm_lab::traffic;
use shipworm_lab::{Impl, NatKind, SoftwareSums};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A chain's TCP each way: a data check (every segment through the tunnel, GSO and GRO
/// trains among them, the whole compared), not a throughput figure (the benchmark's).
const BYTES: usize = 3_000_000;
/// Client to client: the data check, not a throughput figure.
const P2P_BYTES: usize = 1_000_000;
/// When the cases that mostly wait start, after the suite's.
const WAITS_AFTER: std::time::Duration = std::time::Duration::from_secs(45);
/// The gap between a case's pings: they check that every echo comes back, once a path
/// is up (the 0.2 s of ping's default, and the lab's, made them a third of a chain's time).
const PING_GAP: std::time::Duration = std::time::Duration::from_millis(50);

#[derive(Debug, Clone)]
enum Expect {
    Pass,
    /// Fails at this step, for this reason.
    Fail(u32, &'static str),
    /// Passes, or fails at this step for this reason: a peer's own timing decides which
    /// (a failure at any other step is a failure).
    PassOrFail(u32, &'static str),
}

impl Case {
    /// A case expected to pass, run in one of the jobs' turns.
    fn passing(name: impl Into<String>, run: impl Fn() -> Result<String, Failed> + Send + 'static) -> Case {
        Case { waits: false, name: name.into(), expect: Expect::Pass, run: Box::new(run) }
    }
}

/// A case written as a function of the binary under test: its name, whether it
/// mostly waits, what it is expected to do, and the function.
type Single = (&'static str, bool, Expect, fn(&Path) -> Result<String, Failed>);

/// The case a row of a topic's table stands for.
fn one(me: &Path, (name, waits, expect, run): Single) -> Case {
    let me = me.to_path_buf();
    Case { waits, name: name.to_string(), expect, run: Box::new(move || run(&me)) }
}

struct Case {
    /// Most of the case's time is a wait (a protocol timer, a stretch of loss or of
    /// idleness) with little work: it runs beside the suite's jobs, on a thread of its
    /// own ([`WAITS_AFTER`] into the run), not in one of their turns.
    waits: bool,
    name: String,
    expect: Expect,
    run: Box<dyn Fn() -> Result<String, Failed> + Send>,
}

/// Why a case failed: the step it failed at, where the case or the lab's scenario
/// numbered it, and what happened.
#[derive(Debug)]
struct Failed {
    step: Option<u32>,
    message: String,
}

impl Failed {
    /// The case's step `step` failed: `message` says how.
    fn at(step: u32, message: impl Into<String>) -> Failed {
        Failed { step: Some(step), message: message.into() }
    }
}

/// A scenario's error keeps the step it failed at.
impl From<shipworm_lab::LabError> for Failed {
    fn from(e: shipworm_lab::LabError) -> Failed {
        Failed { step: e.step(), message: e.to_string() }
    }
}

/// Anything else failed outside the numbered steps.
impl From<String> for Failed {
    fn from(message: String) -> Failed {
        Failed { step: None, message }
    }
}

impl From<&str> for Failed {
    fn from(message: &str) -> Failed {
        Failed { step: None, message: message.to_string() }
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// What two clients talking directly must do (A calls B first). Every expected failure
/// names why it cannot work: the RFC 6081 §3 connectivity matrix (Figure 1) for the
/// NAT pairs the extensions shipworm has cannot cover, or Miredo's missing RFC 6081.
fn peer_expectation(nats: [NatKind; 2], a: &Impl, b: &Impl) -> Expect {
    use NatKind::*;
    let miredo = |i: &Impl| matches!(i, Impl::Miredo);
    // Any port-symmetric kind reaches, and is reached by, these through RFC 6081 §5.2.
    let open = |k: NatKind| matches!(k, FullCone | AddressRestricted);
    // A new random port for every destination (with or without an IGD on the box).
    let random = |k: NatKind| matches!(k, Symmetric | SymmetricUpnp | SymmetricPcp);
    // A shipworm client behind a gateway that maps its port (Miredo asks for none).
    let maps = |k: NatKind, i: &Impl| matches!(k, SymmetricUpnp | SymmetricPcp) && !miredo(i);
    match nats {
        [x, y] if x.is_symmetric() && open(y) && miredo(a) => Expect::Fail(
            5,
            "Miredo's client A speaks no RFC 6081: behind the symmetric NAT its bubbles leave from a port its address does not embed, with no nonce to prove them (§5.2.4.4)",
        ),
        // With A's port mapped, B's direct answer comes in through the mapping (A sends
        // nothing directly before B has spoken, so no session of its NAT shadows it).
        [x, y] if x.is_symmetric() && open(y) && miredo(b) && !maps(x, a) => Expect::Fail(
            5,
            "Miredo's client B answers A's indirect bubble only with a direct one, which A's symmetric NAT drops; RFC 6081 §6.1 needs B's indirect bubble (packet 4)",
        ),
        [x, y] if open(x) || open(y) => Expect::Pass,
        // Both behind gateways that map ports (PCP or UPnP): each reaches the port the
        // other's address embeds (RFC 6081 §5.3).
        [SymmetricUpnp | SymmetricPcp, SymmetricUpnp | SymmetricPcp] => Expect::Pass,
        // B's bubble to A's mapped endpoint opens B's port-restricted NAT for it, and A's
        // answers leave from there (the session the mapping made for B's bubble).
        [x, PortRestricted] if maps(x, a) => Expect::Pass,
        [x, y] if random(x) || random(y) => Expect::Fail(
            5,
            "RFC 6081 §3 Figure 1: a port-symmetric NAT with random ports reaches only cone and address-restricted peers (and, with a port mapping, a peer that has one too)",
        ),
        [SequentialSymmetric, SequentialSymmetric | PortPreservingSymmetric] => Expect::Fail(
            5,
            "RFC 6081 §3 Figure 1: sequential port-symmetric reaches only cone, address-restricted and port-restricted peers",
        ),
        [PortRestricted, PortRestricted] if miredo(a) => Expect::Fail(
            5,
            "Miredo's first direct bubble (full TTL) reaches B's Linux NAT before B wrote to A; conntrack's entry for it moves B's answer to another port, which A's NAT refuses (shipworm's opening bubble avoids this)",
        ),
        // Port-restricted, port-preserving and sequential among themselves: random ports
        // and port prediction (RFC 6081 §5.4, §5.5).
        _ => Expect::Pass,
    }
}

/// One line for a client-to-client run.
fn direct_summary(o: &scenario::PeerToPeer) -> String {
    format!("direct: first contact {:.1} ms; ping {}; TCP {:.0} Mbit/s", o.first_ms, o.ping, o.tcp.mbit_per_s())
}

/// Every (server, relay, client) choice among `impls`.
fn pairings(impls: &[Impl]) -> Vec<(Impl, Impl, Impl)> {
    let mut v = Vec::new();
    for s in impls {
        for r in impls {
            for c in impls {
                v.push((s.clone(), r.clone(), c.clone()));
            }
        }
    }
    v
}

/// Server, relay and client all shipworm's, behind a port-restricted NAT, with `extra`
/// configuration lines for the relay and the client.
fn shipworm_chain(me: &std::path::Path, first: Side, extra: &'static str) -> Scenario {
    let me = Impl::Shipworm(me.to_path_buf());
    Scenario {
        nat: NatKind::PortRestricted,
        server: me.clone(),
        relay: me.clone(),
        client: me,
        transfer_bytes: BYTES,
        pings: 5,
        keep_on_failure: false,
        first,
        shipworm_extra: extra,
        narrow_wan: None,
        software_sums: SoftwareSums::None,
    }
}

fn main() {
    // `cargo test` by a user: the suite needs root (namespaces, veth, nftables), and says
    // so rather than fail. scripts/test.sh sets SHIPWORM_E2E=required: CI never skips it.
    let required = std::env::var("SHIPWORM_E2E").is_ok_and(|v| v == "required");
    let skip = std::env::var_os("SHIPWORM_SKIP_E2E").is_some();
    if skip || !nix::unistd::Uid::effective().is_root() {
        let why = if skip { "SHIPWORM_SKIP_E2E is set" } else { "it needs root (network namespaces, veth, nftables)" };
        if required {
            eprintln!("e2e: cannot run: {why}; SHIPWORM_E2E=required (scripts/test.sh runs it as root)");
            std::process::exit(1);
        }
        println!("e2e: skipped, {why}: run scripts/test.sh as root for the end-to-end suite");
        println!("test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out");
        return;
    }
    // The binary users run (the test command's release build, `SHIPWORM_E2E_BIN`), or
    // the test build's.
    let me = std::env::var_os("SHIPWORM_E2E_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_BIN_EXE_shipworm")));
    println!("e2e: shipworm is {}", me.display());
    let mut cases: Vec<Case> = Vec::new();
    let topics = [
        nat_matrix::cases,
        links::cases,
        client_to_client::cases,
        calling_first::cases,
        security::cases,
        operations::cases,
        peers::cases,
        reload::cases,
        idle::cases,
        windows_like::cases,
    ];
    for topic in topics {
        cases.extend(topic(&me));
    }
    cases.extend(conformance::cases(&me));
    cases.push(links::lossy_uplink(&me));
    // The jobs' longest last: the queue is taken from its end, so they start first (the
    // cases that mostly wait run beside the jobs from the start anyway).
    cases.extend(anycast::cases(&me));
    cases.extend(anycast_servers::cases(&me));
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    cases.retain(|c| filter.is_empty() || filter.iter().any(|f| c.name.contains(f.as_str())));

    let started = Instant::now();
    let (waiting, working): (Vec<_>, Vec<_>) = cases.into_iter().enumerate().partition(|(_, c)| c.waits);
    let queue = Arc::new(Mutex::new(working));
    let results = Arc::new(Mutex::new(Vec::new()));
    // Cases wait on timers and the network far more than they compute: more run at once
    // than there are cores. Not more than eight on 2 cores: the suite took 204 s eight
    // at a time, 162 s twelve and 137 s sixteen, but the anycast cases' timing gave way
    // beside them (BGP up in the wrong order at sixteen, a Miredo relay's expected
    // failure passing at twelve). SHIPWORM_E2E_JOBS sets how many.
    let jobs = std::env::var("SHIPWORM_E2E_JOBS").ok().and_then(|j| j.parse().ok()).unwrap_or(8usize).max(1);
    println!(
        "e2e: {} cases, {jobs} at a time, and {} that mostly wait beside them",
        queue.lock().unwrap().len() + waiting.len(),
        waiting.len()
    );
    let run_one = {
        let results = Arc::clone(&results);
        move |i: usize, case: Case| {
            let t = Instant::now();
            // A case expected to fail (a known limit) waits 2 s at a first contact,
            // not 5: nothing that fails there structurally answers late.
            let wait = if matches!(case.expect, Expect::Fail(..)) { 2 } else { 5 };
            let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                scenario::with_first_contact_wait(wait, || traffic::with_ping_interval(PING_GAP, || (case.run)()))
            }))
            .unwrap_or_else(|_| Err("panicked".into()));
            let (verdict, detail) = judge(&case.expect, &got);
            println!("{verdict:<5} {} ({:.1} s) {detail}", case.name, t.elapsed().as_secs_f64());
            results.lock().unwrap().push((i, verdict));
        }
    };
    // The cases that wait start once the jobs' first turns (the anycast cases, which time
    // failovers in milliseconds) are under way: ten labs set up beside them made one
    // miss its 250 ms (seen). The longest wait still ends long before the jobs do.
    let after = if queue.lock().unwrap().is_empty() { std::time::Duration::ZERO } else { WAITS_AFTER };
    let mut workers: Vec<_> = waiting
        .into_iter()
        .map(|(i, case)| {
            let run_one = run_one.clone();
            std::thread::spawn(move || {
                std::thread::sleep(after);
                run_one(i, case)
            })
        })
        .collect();
    workers.extend((0..jobs).map(|_| {
        let (queue, run_one) = (Arc::clone(&queue), run_one.clone());
        std::thread::spawn(move || loop {
            let Some((i, case)) = queue.lock().unwrap().pop() else {
                break;
            };
            run_one(i, case);
        })
    }));
    for w in workers {
        w.join().unwrap();
    }
    let results = results.lock().unwrap();
    let count = |v: &str| results.iter().filter(|(_, r)| *r == v).count();
    let (pass, xfail, fail) = (count("PASS"), count("XFAIL"), count("FAIL"));
    println!(
        "e2e: {pass} passed, {xfail} expected failures (known limits, each with its reason), {fail} failed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let left = std::process::Command::new("ip").args(["netns", "list"]).output().map(|o| o.stdout).unwrap_or_default();
    let ours = String::from_utf8_lossy(&left)
        .lines()
        .filter(|l| l.starts_with(&format!("swl{}n", std::process::id())))
        .count();
    if ours > 0 {
        println!("FAIL  {ours} namespace(s) left behind");
    }
    println!(
        "test result: {}. {pass} passed; {fail} failed; {xfail} ignored; 0 measured; 0 filtered out",
        if fail == 0 && ours == 0 { "ok" } else { "FAILED" }
    );
    if fail > 0 || ours > 0 {
        std::process::exit(1);
    }
}

fn judge(expect: &Expect, got: &Result<String, Failed>) -> (&'static str, String) {
    match (expect, got) {
        (Expect::Pass, Ok(detail)) => ("PASS", detail.clone()),
        (Expect::Pass, Err(e)) => ("FAIL", format!("expected to pass: {e}")),
        (Expect::Fail(step, why), Err(e)) if e.step == Some(*step) => ("XFAIL", format!("step {step}: {why}")),
        (Expect::Fail(step, why), Err(e)) => ("FAIL", format!("expected failure at step {step} ({why}), got: {e}")),
        (Expect::Fail(step, why), Ok(detail)) => {
            ("FAIL", format!("passed, but expected to fail at step {step} ({why}): update the expectation. {detail}"))
        }
        (Expect::PassOrFail(..), Ok(detail)) => ("PASS", detail.clone()),
        (Expect::PassOrFail(step, why), Err(e)) if e.step == Some(*step) => ("XFAIL", format!("step {step}: {why}")),
        (Expect::PassOrFail(step, why), Err(e)) => {
            ("FAIL", format!("expected to pass or to fail at step {step} ({why}), got: {e}"))
        }
    }
}
