//! The end-to-end suite: every NAT kind × every pairing of shipworm and Miredo as
//! server, relay and client, in the namespace lab. Each case states its expected
//! outcome — pass, or failure at a named step with the reason — and the suite fails
//! when a case does otherwise, including a case that starts passing (so expectations
//! are updated when a role lands). Needs root; `scripts/test.sh` provides it.

#[path = "e2e/anycast.rs"]
mod anycast;

use shipworm_lab::scenario::{self, Scenario, Side};
use shipworm_lab::{Impl, NatKind};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const BYTES: usize = 10_000_000;
/// Client to client: the data check, not a throughput figure.
const P2P_BYTES: usize = 1_000_000;

#[derive(Debug, Clone)]
enum Expect {
    Pass,
    /// Fails at this step, for this reason.
    Fail(u32, &'static str),
}

struct Case {
    name: String,
    expect: Expect,
    run: Box<dyn Fn() -> Result<String, String> + Send>,
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

fn step_of(err: &str) -> Option<u32> {
    err.strip_prefix("step ")?.split_whitespace().next()?.trim_end_matches(':').parse().ok()
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
    }
}

fn main() {
    if !nix::unistd::Uid::effective().is_root() {
        if std::env::var_os("SHIPWORM_SKIP_E2E").is_some() {
            println!("e2e: skipped (SHIPWORM_SKIP_E2E set)");
            println!("test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out");
            return;
        }
        eprintln!("e2e: needs root (network namespaces): run scripts/test.sh as root, or set SHIPWORM_SKIP_E2E=1");
        std::process::exit(1);
    }
    let me = std::path::PathBuf::from(env!("CARGO_BIN_EXE_shipworm"));
    let impls = [Impl::Shipworm(me.clone()), Impl::Miredo];
    let mut cases: Vec<Case> = Vec::new();
    // Each pairing twice: the native host speaking first, and the client. Each lab is
    // new, so the first packet of the case is the first the relay and client see.
    // Every one must pass. Behind the symmetric NAT a Miredo client answers relays from
    // a port its address does not embed; Miredo's relay accepts that (a Miredo
    // extension) and so does ours, for a bubble answering its own from the embedded
    // IPv4 address; shipworm's client keeps the primary server's mapping there (RFC 6081
    // §5.2) and is answered the same way.
    for first in [Side::Native, Side::Client] {
        for nat in NatKind::ALL {
            // The kinds RFC 4380 names in every pairing; the RFC 6081 symmetric kinds with
            // each relay and each client, through shipworm's server (whose part in a
            // relay exchange is the same for every kind).
            let servers = if NatKind::RFC4380.contains(&nat) { impls.to_vec() } else { vec![impls[0].clone()] };
            for server in &servers {
                for relay in &impls {
                    for client in &impls {
                        let s = Scenario {
                            nat,
                            server: server.clone(),
                            relay: relay.clone(),
                            client: client.clone(),
                            transfer_bytes: BYTES,
                            pings: 5,
                            keep_on_failure: false,
                            first,
                            shipworm_extra: "",
                        };
                        cases.push(Case {
                        name: format!("{first:<12} {nat:<15} server={server:<8} relay={relay:<8} client={client:<8}"),
                        expect: Expect::Pass,
                        run: Box::new(move || {
                            let (_lab, o) = scenario::run(&s, &mut |_| {}).map_err(|e| e.to_string())?;
                            Ok(format!(
                                "qualified {:.2} s; first contact {:.1} ms, second {:.1} ms; ping out {}, in {}; TCP {:.0}/{:.0} Mbit/s",
                                o.qualify_secs,
                                o.first_ms,
                                o.second_ms,
                                o.ping_out,
                                o.ping_in,
                                o.tcp_out.mbit_per_s(),
                                o.tcp_in.mbit_per_s()
                            ))
                        }),
                    });
                    }
                }
            }
        }
    }
    // The offloads are on the paths the transfers above check: TCP each way through a
    // shipworm client and relay, and the client read super-packets from its TUN (the
    // host's TCP segments, cut by us) and wrote joined rows (the relay's rows of one
    // flow, joined by us).
    {
        let s = shipworm_chain(&me, Side::Client, "");
        cases.push(Case {
            name: "TUN offloads in use: TCP both ways through a shipworm client and relay".into(),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (lab, o) = scenario::run(&s, &mut |_| {}).map_err(|e| e.to_string())?;
                let st = lab.client_status(0).ok_or("step 6: the client's status socket did not answer")?;
                let tun = &st["tun"];
                let offloads = tun["offloads"].as_str().unwrap_or("?").to_string();
                let read = tun["super_packets_read"].as_u64().unwrap_or(0);
                let joined = tun["joined_writes"].as_u64().unwrap_or(0);
                if offloads == "no offloads" {
                    return Err("step 6: the kernel granted the client no TUN offloads".into());
                }
                if read == 0 || joined == 0 {
                    return Err(format!(
                        "step 6: {offloads} granted but not used: {read} super-packets read, {joined} joined writes"
                    ));
                }
                // The relay says the same in its counters (SIGUSR1).
                let pid = std::fs::read_to_string(lab.dir().join("relay.pid")).map_err(|e| format!("relay.pid: {e}"))?;
                let pid = nix::unistd::Pid::from_raw(pid.trim().parse().map_err(|e| format!("relay.pid: {e}"))?);
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGUSR1).map_err(|e| e.to_string())?;
                std::thread::sleep(std::time::Duration::from_millis(500));
                let log = lab.log_tail("relay", 5);
                let line = log.lines().rev().find(|l| l.contains("TUN reads were super-packets")).unwrap_or("");
                let counts: Vec<u64> = line
                    .rsplit(';')
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect();
                if counts.len() != 2 || counts.contains(&0) {
                    return Err(format!("step 6: the relay's counters show no offloads in use:\n{log}"));
                }
                Ok(format!(
                    "client {offloads}: {read} super-packets read, {joined} joined writes; relay: {} and {}; TCP {:.0}/{:.0} Mbit/s, intact",
                    counts[0],
                    counts[1],
                    o.tcp_out.mbit_per_s(),
                    o.tcp_in.mbit_per_s()
                ))
            }),
        });
    }
    // The data path without TUN offloads (what a kernel that refuses them gives): one
    // packet per read and write, both ways, each side speaking first, the transfers
    // checked intact as above.
    for first in [Side::Native, Side::Client] {
        let s = shipworm_chain(&me, first, "TunOffload no\n");
        cases.push(Case {
            name: format!("{first:<12} without TUN offloads (TunOffload no), relay and client"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (lab, o) = scenario::run(&s, &mut |_| {}).map_err(|e| e.to_string())?;
                for name in ["relay", "client0"] {
                    if !lab.log_tail(name, 200).contains("no offloads") {
                        let log = lab.log_tail(name, 20);
                        return Err(format!("step 4: {name} did not run without TUN offloads; its log:\n{log}"));
                    }
                }
                Ok(format!("TCP {:.0}/{:.0} Mbit/s, intact", o.tcp_out.mbit_per_s(), o.tcp_in.mbit_per_s()))
            }),
        });
    }
    for nat in NatKind::ALL {
        cases.push(Case {
            name: format!("NAT behaviour {nat}"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(nat, 1)]))
                    .map_err(|e| e.to_string())?;
                let got = lab.probe_nat(0).map_err(|e| e.to_string())?;
                let want = nat.expected_behaviour();
                if got == want {
                    Ok(format!("{got:?}"))
                } else {
                    Err(format!("step 0 (probe the NAT) failed: got {got:?}, a {nat} NAT must give {want:?}"))
                }
            }),
        });
    }
    // Two clients behind one NAT that does not hairpin (Linux masquerade), A calls B
    // cold: they meet on their own network through RFC 6081 hairpinning.
    for nat in [NatKind::PortRestricted, NatKind::Symmetric] {
        for server in &impls {
            for a in &impls {
                for b in &impls {
                    let (server, a, b) = (server.clone(), a.clone(), b.clone());
                    let expect = if matches!(a, Impl::Miredo) || matches!(b, Impl::Miredo) {
                        Expect::Fail(
                            5,
                            "the NAT does not hairpin, and Miredo 1.2.6 has neither RFC 6081 hairpinning (§5.6) nor RFC 4380 local discovery (§5.2.8)",
                        )
                    } else {
                        Expect::Pass
                    };
                    cases.push(Case {
                        name: format!("same NAT A={nat}/{a} calls B={nat}/{b} server={server}"),
                        expect,
                        run: Box::new(move || {
                            scenario::run_same_nat(nat, &server, [&a, &b], "", P2P_BYTES, &mut |_| {})
                                .map(|(_lab, o)| direct_summary(&o))
                                .map_err(|e| e.to_string())
                        }),
                    });
                }
            }
        }
    }
    // The same, shipworm's clients without hairpinning: they find each other by RFC
    // 4380 §5.2.8 local discovery instead.
    for nat in [NatKind::PortRestricted, NatKind::Symmetric] {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: format!("same NAT by local discovery (Hairpinning no) {nat}"),
            expect: Expect::Pass,
            run: Box::new(move || {
                scenario::run_same_nat(nat, &me, [&me, &me], "Hairpinning no\n", P2P_BYTES, &mut |_| {})
                    .map(|(_lab, o)| direct_summary(&o))
                    .map_err(|e| e.to_string())
            }),
        });
    }
    // Client to client, cold: A calls B first, for every ordered pair of NAT kinds,
    // every pairing of implementations (Miredo's client with ours both ways) and
    // both servers. No relay takes part: they must reach each other directly.
    // The RFC 6081 symmetric kinds: shipworm's clients through shipworm's server, and
    // Miredo's client as the peer behind a full cone.
    for a_nat in NatKind::ALL {
        for b_nat in NatKind::ALL {
            let classic = NatKind::RFC4380.contains(&a_nat) && NatKind::RFC4380.contains(&b_nat);
            let (servers, a_impls, b_impls) = if classic {
                (impls.to_vec(), impls.to_vec(), impls.to_vec())
            } else if b_nat == NatKind::FullCone {
                (vec![impls[0].clone()], vec![impls[0].clone()], impls.to_vec())
            } else if a_nat == NatKind::FullCone {
                (vec![impls[0].clone()], impls.to_vec(), vec![impls[0].clone()])
            } else {
                (vec![impls[0].clone()], vec![impls[0].clone()], vec![impls[0].clone()])
            };
            for server in &servers {
                for a in &a_impls {
                    for b in &b_impls {
                        let (server, a, b) = (server.clone(), a.clone(), b.clone());
                        cases.push(Case {
                            name: format!("client↔client A={a_nat}/{a} calls B={b_nat}/{b} server={server}"),
                            expect: peer_expectation([a_nat, b_nat], &a, &b),
                            run: Box::new(move || {
                                scenario::run_peer_to_peer([a_nat, b_nat], &server, [&a, &b], P2P_BYTES, &mut |_| {})
                                    .map(|(_lab, o)| direct_summary(&o))
                                    .map_err(|e| e.to_string())
                            }),
                        });
                    }
                }
            }
        }
    }
    // A correspondent calls first with a real application: a SIP call (Debian's SIPp)
    // from the native host to the client's Teredo address, whose first INVITE must
    // be answered (no retransmission allowed), for every server/relay/client pairing.
    for (server, relay, client) in pairings(&impls) {
        cases.push(Case {
            name: format!("SIP call native → client server={server} relay={relay} client={client}"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, c) = scenario::run_sip(NatKind::PortRestricted, &server, &relay, &client, None, &mut |_| {})
                    .map_err(|e| e.to_string())?;
                Ok(format!("first INVITE answered; call completed in {:.2} s", c.first.1.secs))
            }),
        });
    }
    // And a TCP connection, the native host's SYN first (no retransmission allowed).
    for (server, relay, client) in pairings(&impls) {
        cases.push(Case {
            name: format!("TCP connection native → client server={server} relay={relay} client={client}"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, t) = scenario::run_tcp_first(NatKind::PortRestricted, &server, &relay, &client, P2P_BYTES)
                    .map_err(|e| e.to_string())?;
                Ok(format!("first SYN answered; {} bytes intact, {:.0} Mbit/s", t.bytes, t.mbit_per_s()))
            }),
        });
    }
    {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: "SIP call native → client, then again after a handoff".into(),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, c) =
                    scenario::run_sip(NatKind::PortRestricted, &me, &me, &me, Some(NatKind::FullCone), &mut |_| {})
                        .map_err(|e| e.to_string())?;
                let (new, after) = c.after_handoff.ok_or("no call after the handoff")?;
                Ok(format!(
                    "{}: call in {:.2} s; after the move, {new}: call in {:.2} s; both on their first INVITE",
                    c.first.0, c.first.1.secs, after.secs
                ))
            }),
        });
    }
    // The shipworm client says what NAT it is behind (Miredo dropped this probe).
    for nat in NatKind::ALL {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: format!("NAT detection {nat}"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(nat, 1)]))
                    .map_err(|e| e.to_string())?;
                lab.start_server(&me).map_err(|e| e.to_string())?;
                lab.start_client(0, &me).map_err(|e| e.to_string())?;
                let want = match nat {
                    NatKind::FullCone => "cone",
                    NatKind::AddressRestricted | NatKind::PortRestricted => "restricted",
                    _ => "symmetric",
                };
                let deadline = Instant::now() + std::time::Duration::from_secs(10);
                loop {
                    let got = lab.client_status(0).map(|s| s["nat"].as_str().unwrap_or("").to_string());
                    if got.as_deref() == Some(want) {
                        return Ok(format!("client reports {want}"));
                    }
                    if Instant::now() > deadline {
                        return Err(format!(
                            "step 4 (detect the NAT) failed: client reports {got:?}, want {want}; client log:\n{}",
                            lab.log_tail("client0", 15)
                        ));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            }),
        });
    }
    // The multi-worker relay owns its interface: a second daemon is refused, the first
    // keeps its queues (RelayThreads 2 forces the multi-queue path on any machine).
    {
        let me = me.clone();
        cases.push(Case {
            name: "relay RelayThreads 2: multi-queue TUN, a second relay refused".into(),
            expect: Expect::Pass,
            run: Box::new(move || {
                let mut lab =
                    shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![])).map_err(|e| e.to_string())?;
                lab.start_relay_with(&Impl::Shipworm(me.clone()), "RelayThreads 2\n").map_err(|e| e.to_string())?;
                let ns = lab.ns("rly");
                let queues = |lab: &shipworm_lab::Lab| {
                    shipworm_lab::netns::exec(&ns, &["ip", "-d", "link", "show", "teredo"])
                        .map(|t| t.contains("multi_queue numqueues 2 "))
                        .unwrap_or(false)
                        .then_some(())
                        .ok_or_else(|| {
                            format!("teredo is not a 2-queue TUN; relay log:\n{}", lab.log_tail("relay", 10))
                        })
                };
                queues(&lab)?;
                let conf = lab.dir().join("relay.conf").display().to_string();
                let bin = me.display().to_string();
                // Bounded: a second relay that wrongly starts is stopped after 5 s.
                let second = shipworm_lab::netns::exec(&ns, &["timeout", "5", &bin, "relay", "-c", &conf]);
                match second {
                    Err(e) if e.to_string().contains("exists and is in use") => {}
                    Err(e) => return Err(format!("second relay failed, but not because the interface is taken: {e}")),
                    Ok(_) => return Err("a second relay started on the same interface".into()),
                }
                queues(&lab)?;
                Ok("second relay refused: interface in use; the first keeps 2 queues".into())
            }),
        });
    }
    // Mobility: the client changes networks under a running ping.
    for (from, to) in [(NatKind::PortRestricted, NatKind::FullCone), (NatKind::FullCone, NatKind::AddressRestricted)] {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: format!("handoff {from} → {to}"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, h) = scenario::run_handoff(&me, [from, to], &mut |_| {}).map_err(|e| e.to_string())?;
                Ok(format!(
                    "{} → {}: new address after {:.0} ms, longest gap between echo replies {:.0} ms ({} + {} answered, every 20 ms)",
                    h.old,
                    h.new,
                    h.address_after.as_secs_f64() * 1000.0,
                    h.traffic_gap.as_secs_f64() * 1000.0,
                    h.answered.0,
                    h.answered.1
                ))
            }),
        });
    }
    // What a compromised daemon would find: every shipworm process of a lab (server,
    // relay, client, the client's interface helper and hook runner) with no_new_privs,
    // a seccomp filter on every thread and an empty bounding set; no capability but the
    // helper's CAP_NET_ADMIN, and the helper without a network socket. Checked while
    // traffic has gone through and the hook has run.
    {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: "confinement: no_new_privs, seccomp, capabilities of every shipworm process".to_string(),
            expect: Expect::Pass,
            run: Box::new(move || {
                use std::os::unix::fs::PermissionsExt;
                let mut lab =
                    shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
                        .map_err(|e| e.to_string())?;
                let hook = lab.dir().join("hook.sh");
                std::fs::write(&hook, "#!/bin/sh\nexit 0\n").map_err(|e| e.to_string())?;
                std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
                std::fs::set_permissions(lab.dir(), std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| e.to_string())?;
                lab.start_server(&me).map_err(|e| e.to_string())?;
                lab.start_relay(&me).map_err(|e| e.to_string())?;
                lab.start_client_with(0, &me, &format!("HookScript {}\n", hook.display()))
                    .map_err(|e| e.to_string())?;
                lab.wait_qualified(0, std::time::Duration::from_secs(20)).map_err(|e| e.to_string())?;
                // The lab's daemons: their command lines name its directory.
                let dir = lab.dir().display().to_string();
                let mut seen: Vec<String> = Vec::new();
                for entry in std::fs::read_dir("/proc").map_err(|e| e.to_string())?.flatten() {
                    let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
                    let proc_dir = entry.path();
                    let cmdline = std::fs::read(proc_dir.join("cmdline")).unwrap_or_default();
                    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                    let ours = std::fs::read_link(proc_dir.join("exe")).is_ok_and(|e| e.ends_with("shipworm"));
                    if !ours || !cmdline.contains(&dir) {
                        continue;
                    }
                    let status = std::fs::read_to_string(proc_dir.join("status")).unwrap_or_default();
                    let field = |name: &str| {
                        status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string()).unwrap_or_default()
                    };
                    let comm = field("Name:");
                    let role = if comm == "shipworm-iface" || comm == "shipworm-hook" {
                        comm.clone()
                    } else {
                        cmdline.split_whitespace().nth(1).unwrap_or("?").to_string()
                    };
                    let what = format!("{role} (pid {pid})");
                    if field("NoNewPrivs:") != "1" {
                        return Err(format!("step 6: {what}: NoNewPrivs {}", field("NoNewPrivs:")));
                    }
                    if field("CapBnd:") != "0000000000000000" {
                        return Err(format!("step 6: {what}: bounding set {}", field("CapBnd:")));
                    }
                    for task in std::fs::read_dir(proc_dir.join("task")).map_err(|e| e.to_string())?.flatten() {
                        let t = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
                        if !t.lines().any(|l| l == "Seccomp:\t2") {
                            return Err(format!("step 6: {what}: thread {:?} without a seccomp filter", task.file_name()));
                        }
                    }
                    let want_caps = if role == "shipworm-iface" { "0000000000001000" } else { "0000000000000000" };
                    for set in ["CapEff:", "CapPrm:"] {
                        if field(set) != want_caps {
                            return Err(format!("step 6: {what}: {set} {} (want {want_caps})", field(set)));
                        }
                    }
                    if role == "shipworm-iface" {
                        // Its sockets: the socketpair to the client and netlink, none in
                        // the namespace's UDP, TCP or raw tables.
                        let mut tables = String::new();
                        for t in ["udp", "udp6", "tcp", "tcp6", "raw", "raw6"] {
                            tables += &std::fs::read_to_string(proc_dir.join("net").join(t)).unwrap_or_default();
                        }
                        for fd in std::fs::read_dir(proc_dir.join("fd")).map_err(|e| e.to_string())?.flatten() {
                            let target = std::fs::read_link(fd.path()).unwrap_or_default().display().to_string();
                            if let Some(inode) = target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) {
                                if tables.split_whitespace().any(|w| w == inode) {
                                    return Err(format!("step 6: {what} holds a network socket ({target})"));
                                }
                            }
                        }
                    }
                    seen.push(what);
                }
                seen.sort();
                for role in ["server", "relay", "client", "shipworm-iface", "shipworm-hook"] {
                    if !seen.iter().any(|s| s.starts_with(&format!("{role} "))) {
                        return Err(format!("step 6: no {role} process found among {seen:?}"));
                    }
                }
                // Where the kernel has Landlock, each confined process says it restricted its
                // file access (the client's log holds the helper's line too).
                // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only asks the ABI.
                let abi = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) };
                let mut files = "no Landlock in this kernel";
                if abi > 0 {
                    for (name, want) in [("server", 1), ("relay", 1), ("client0", 2)] {
                        let said = lab.log_tail(name, 200).matches("file access restricted").count();
                        if said < want {
                            return Err(format!("step 6: {name}: {said} of {want} processes restricted their file access"));
                        }
                    }
                    files = "file access restricted by Landlock";
                }
                // The helper dies: the client says so and stops (its supervisor restarts it).
                let pid_of = |role: &str| {
                    seen.iter()
                        .find(|s| s.starts_with(&format!("{role} ")))
                        .and_then(|s| s.rsplit("pid ").next()?.trim_end_matches(')').parse::<i32>().ok())
                };
                let (helper, client) = (pid_of("shipworm-iface"), pid_of("client"));
                let (Some(helper), Some(client)) = (helper, client) else { return Err("step 7: pids".into()) };
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(helper), nix::sys::signal::Signal::SIGKILL)
                    .map_err(|e| e.to_string())?;
                let deadline = Instant::now() + std::time::Duration::from_secs(5);
                let stopped = loop {
                    let st = std::fs::read_to_string(format!("/proc/{client}/status")).unwrap_or_default();
                    if st.is_empty() || st.contains("State:\tZ") {
                        break Instant::now() + std::time::Duration::from_secs(5) - deadline;
                    }
                    if Instant::now() > deadline {
                        return Err("step 7: the client runs on after its interface helper was killed".into());
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                };
                let log = lab.log_tail("client0", 5);
                if !log.contains("interface helper") {
                    return Err(format!("step 7: the client stopped without naming the helper: {log}"));
                }
                Ok(format!(
                    "{} processes: NoNewPrivs 1, Seccomp 2 on every thread, bounding set empty, no capability but the helper's CAP_NET_ADMIN, {files}; {}; helper killed, client stopped in {} ms saying so",
                    seen.len(),
                    seen.join(", "),
                    stopped.as_millis()
                ))
            }),
        });
    }
    // `shipworm status` for every role: the counters a user reads move with traffic.
    {
        let bin = me.display().to_string();
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: "status of server, relay and client".to_string(),
            expect: Expect::Pass,
            run: Box::new(move || {
                let mut lab =
                    shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
                        .map_err(|e| e.to_string())?;
                lab.start_server(&me).map_err(|e| e.to_string())?;
                lab.start_relay(&me).map_err(|e| e.to_string())?;
                lab.start_client(0, &me).map_err(|e| e.to_string())?;
                let addr = lab.wait_qualified(0, std::time::Duration::from_secs(20)).map_err(|e| e.to_string())?;
                let status = |name: &str, json: bool| -> Result<String, String> {
                    let socket = lab.daemon_socket(name).display().to_string();
                    let mut args = vec![bin.as_str(), "status", "--socket", &socket];
                    if json {
                        args.push("--json");
                    }
                    let out = std::process::Command::new(args[0]).args(&args[1..]).output().map_err(|e| e.to_string())?;
                    if !out.status.success() {
                        return Err(format!("shipworm status of {name}: {}", String::from_utf8_lossy(&out.stderr)));
                    }
                    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
                };
                let json = |name: &str| -> Result<serde_json::Value, String> {
                    serde_json::from_str(&status(name, true)?).map_err(|e| format!("{name}: {e}"))
                };
                let relay_before = json("relay")?;
                let cns = lab.clients[0].ns.clone();
                let out = shipworm_lab::traffic::ping(&cns, shipworm_lab::HOST6_V6, 5, 3).map_err(|e| e.to_string())?;
                let back = shipworm_lab::traffic::ping(&lab.ns("h6"), addr, 5, 3).map_err(|e| e.to_string())?;
                if out.received == 0 || back.received == 0 {
                    return Err(format!("step 2: ping {}/5 out, {}/5 back", out.received, back.received));
                }
                // The relay publishes its workers' counters every tick (250 ms).
                std::thread::sleep(std::time::Duration::from_millis(600));
                let (relay, server, client) = (json("relay")?, json("server")?, json("client0")?);
                let n = |v: &serde_json::Value, path: &[&str]| {
                    path.iter().fold(v, |v, k| &v[*k]).as_u64().unwrap_or(0)
                };
                let moved = |k: &str| n(&relay, &["counters", k]) - n(&relay_before, &["counters", k]);
                if relay["role"] != "relay" || moved("to_teredo") < 5 || moved("to_native") < 5 || n(&relay, &["peers"]) < 1 {
                    return Err(format!("step 3: relay status did not follow the 10 echoes: before {relay_before}, after {relay}"));
                }
                if server["role"] != "server" || n(&server, &["counters", "advertisements"]) < 1 {
                    return Err(format!("step 3: server status shows no advertisement: {server}"));
                }
                if client["state"] != "qualified" || client["address"] != addr.to_string() {
                    return Err(format!("step 3: client status: {client}"));
                }
                let text = status("relay", false)? + &status("server", false)?;
                for want in ["role       relay on teredo", "peers      ", "role       server on 192.0.2.1:3544", "RAs        "] {
                    if !text.contains(want) {
                        return Err(format!("step 4: `shipworm status` says no {want:?}:\n{text}"));
                    }
                }
                Ok(format!(
                    "relay: {} peer(s), +{} to Teredo, +{} to IPv6 over 10 echoes; server: {} RAs, {} forwarded to Teredo; client {}",
                    n(&relay, &["peers"]),
                    moved("to_teredo"),
                    moved("to_native"),
                    n(&server, &["counters", "advertisements"]),
                    n(&server, &["counters", "forwarded_udp"]),
                    client["state"]
                ))
            }),
        });
    }
    // Prometheus: every role's /metrics (MetricsAddress) names its counters and they move
    // with traffic.
    {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: "metrics of server, relay and client".to_string(),
            expect: Expect::Pass,
            run: Box::new(move || {
                let mut lab =
                    shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
                        .map_err(|e| e.to_string())?;
                let extra = "MetricsAddress 127.0.0.1:9544\n";
                lab.start_server_with(&me, extra).map_err(|e| e.to_string())?;
                lab.start_relay_with(&me, extra).map_err(|e| e.to_string())?;
                lab.start_client_with(0, &me, extra).map_err(|e| e.to_string())?;
                let addr = lab.wait_qualified(0, std::time::Duration::from_secs(20)).map_err(|e| e.to_string())?;
                let (srv, rly, cns) = (lab.ns("srv"), lab.ns("rly"), lab.clients[0].ns.clone());
                // What Prometheus does: GET /metrics on the daemon's namespace's loopback.
                let get = |ns: &str, path: &str| -> Result<String, String> {
                    let (ns, path) = (ns.to_string(), path.to_string());
                    std::thread::spawn(move || -> Result<String, String> {
                        use std::io::{Read, Write};
                        shipworm_lab::netns::enter(&ns).map_err(|e| e.to_string())?;
                        let mut s = std::net::TcpStream::connect("127.0.0.1:9544").map_err(|e| format!("{ns}: {e}"))?;
                        s.set_read_timeout(Some(std::time::Duration::from_secs(5))).map_err(|e| e.to_string())?;
                        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                            .map_err(|e| e.to_string())?;
                        let mut text = String::new();
                        s.read_to_string(&mut text).map_err(|e| e.to_string())?;
                        Ok(text)
                    })
                    .join()
                    .map_err(|_| "scrape thread panicked".to_string())?
                };
                // The sum of the samples whose lines start with `series` (a name and the
                // first labels: the relay's packets over all its workers).
                let value = |text: &str, series: &str| -> u64 {
                    text.lines()
                        .filter_map(|l| l.strip_prefix(series))
                        .filter_map(|v| v.rsplit(' ').next()?.trim().parse::<f64>().ok())
                        .sum::<f64>() as u64
                };
                // Published every 250 ms.
                std::thread::sleep(std::time::Duration::from_millis(600));
                let before = get(&rly, "/metrics")?;
                let out = shipworm_lab::traffic::ping(&cns, shipworm_lab::HOST6_V6, 5, 3).map_err(|e| e.to_string())?;
                let back = shipworm_lab::traffic::ping(&lab.ns("h6"), addr, 5, 3).map_err(|e| e.to_string())?;
                if out.received == 0 || back.received == 0 {
                    return Err(format!("step 2: ping {}/5 out, {}/5 back", out.received, back.received));
                }
                std::thread::sleep(std::time::Duration::from_millis(600));
                let (relay, server, client) = (get(&rly, "/metrics")?, get(&srv, "/metrics")?, get(&cns, "/metrics")?);
                for (who, text) in [("relay", &relay), ("server", &server), ("client", &client)] {
                    if !text.starts_with("HTTP/1.1 200 OK") || !text.contains("text/plain; version=0.0.4") {
                        return Err(format!("step 3: {who}'s /metrics: {}", text.lines().next().unwrap_or("")));
                    }
                    if !text.contains(&format!("shipworm_info{{role=\"{who}\"")) {
                        return Err(format!("step 3: {who} has no shipworm_info"));
                    }
                }
                let to_teredo = "shipworm_relay_packets_total{direction=\"to_teredo\",";
                let to_ipv6 = "shipworm_relay_packets_total{direction=\"to_ipv6\",";
                let moved = |series: &str| value(&relay, series).saturating_sub(value(&before, series));
                // An echo of ping's 56 data bytes is a 104-byte IPv6 packet.
                let bytes_ipv6 = "shipworm_relay_bytes_total{direction=\"to_ipv6\",";
                if moved(bytes_ipv6) < 5 * 104 {
                    return Err(format!("step 4: relay bytes to IPv6 moved by {} over 5 echoes:\n{relay}", moved(bytes_ipv6)));
                }
                if moved(to_teredo) < 5 || moved(to_ipv6) < 5 || value(&relay, "shipworm_relay_peers ") < 1 {
                    return Err(format!("step 4: relay counters did not follow 10 echoes:\n{relay}"));
                }
                if value(&server, "shipworm_server_router_advertisements_total ") < 1 {
                    return Err(format!("step 4: server sent no RA?\n{server}"));
                }
                // The client's first echo to the native host went through the server (the
                // relay's discovery), and the relay's bubble came back through it: at
                // least one packet forwarded, each at least an IPv6 header's bytes.
                let server_forwarded = value(&server, "shipworm_server_forwarded_total{");
                let server_bytes = value(&server, "shipworm_server_bytes_total{");
                if server_forwarded == 0 || server_bytes < server_forwarded * 40 {
                    return Err(format!("step 4: server bytes {server_bytes} for {server_forwarded} forwarded:\n{server}"));
                }
                let delivered = value(&client, "shipworm_client_packets_total{direction=\"to_host\"}");
                if value(&client, "shipworm_client_bytes_total{direction=\"to_host\"}") < delivered * 104 {
                    return Err(format!("step 4: client bytes to the host under {delivered} × 104:\n{client}"));
                }
                if value(&client, "shipworm_client_qualified ") != 1 || delivered < 5 {
                    return Err(format!("step 4: client metrics:\n{client}"));
                }
                let missing = get(&rly, "/")?;
                if !missing.starts_with("HTTP/1.1 404") {
                    return Err(format!("step 5: GET / answered {}", missing.lines().next().unwrap_or("")));
                }
                Ok(format!(
                    "relay +{} to Teredo, +{} to IPv6 over 10 echoes, {} peer(s); server {} RAs, {} forwarded ({} B); client qualified, {} delivered; GET / → 404",
                    moved(to_teredo),
                    moved(to_ipv6),
                    value(&relay, "shipworm_relay_peers "),
                    value(&server, "shipworm_server_router_advertisements_total "),
                    server_forwarded,
                    server_bytes,
                    delivered
                ))
            }),
        });
    }
    // BIRD announces the Teredo prefix for the relay (RFC 4380 §5.4): the relay enables
    // BIRD's protocol once it serves, and on SIGTERM disables it first and forwards for
    // DrainTime while routing moves the traffic elsewhere. The protocol starts disabled in
    // BIRD's configuration, so an announcement proves the relay made it.
    {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: "relay and BIRD: announced once serving, withdrawn before a clean stop, drained".to_string(),
            expect: Expect::Pass,
            run: Box::new(move || {
                use nix::sys::signal::Signal;
                use shipworm_lab::bird::birdc;
                use std::time::Duration;
                let mut lab =
                    shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
                        .map_err(|e| e.to_string())?;
                let bird_conf = "router id 192.0.2.10;\nprotocol device { scan time 10; }\n\
                                 protocol static teredo { disabled; ipv6; route 2001::/32 via \"teredo\"; }\n";
                let ctl = lab.start_bird("rly", bird_conf).map_err(|e| format!("step 1 (BIRD): {e}"))?;
                let announced = |ctl: &std::path::Path| {
                    birdc(ctl, &["show", "route", "2001::/32", "protocol", "teredo"]).is_ok_and(|r| r.contains("2001::/32"))
                };
                if announced(&ctl) {
                    return Err("step 1: BIRD announces before the relay started".into());
                }
                lab.start_server(&me).map_err(|e| e.to_string())?;
                let extra = format!("BirdSocket {}\nDrainTime 2\n", ctl.display());
                lab.start_relay_with(&me, &extra).map_err(|e| e.to_string())?;
                lab.start_client(0, &me).map_err(|e| e.to_string())?;
                let addr = lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| e.to_string())?;
                if !announced(&ctl) {
                    return Err(format!("step 2: BIRD does not announce 2001::/32:\n{}", lab.log_tail("relay", 10)));
                }
                // The native host pings the client every 20 ms through the relay while it stops.
                let h6 = lab.ns("h6");
                let t0 = Instant::now();
                let pings = std::thread::spawn(move || {
                    shipworm_lab::traffic::ping_stream(&h6, addr, Duration::from_millis(20), Duration::from_secs(4))
                });
                std::thread::sleep(Duration::from_millis(800));
                let term = t0.elapsed();
                lab.signal_peer("relay", Signal::SIGTERM).map_err(|e| e.to_string())?;
                let (mut withdrawn, mut exited) = (None, None);
                while t0.elapsed() < Duration::from_secs(6) && exited.is_none() {
                    if withdrawn.is_none() && !announced(&ctl) {
                        withdrawn = Some(t0.elapsed());
                    }
                    if lab.exited("relay").is_some() {
                        exited = Some(t0.elapsed());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                let echoes = pings.join().map_err(|_| "ping thread panicked".to_string())?.map_err(|e| e.to_string())?;
                let log = lab.log_tail("relay", 8);
                let withdrawn = withdrawn.ok_or(format!("step 3: BIRD still announces after SIGTERM:\n{log}"))?;
                let exited = exited.ok_or(format!("step 3: the relay did not stop within 5 s of SIGTERM:\n{log}"))?;
                if exited < withdrawn || exited - term < Duration::from_millis(1500) {
                    return Err(format!(
                        "step 3: withdrawn {:?} and exited {:?} after SIGTERM: no drain\n{log}",
                        withdrawn - term,
                        exited - term
                    ));
                }
                // Echoes sent between the withdrawal and the last 50 ms of the drain (2 s
                // from SIGTERM; then the relay closes, which takes a moment before it
                // exits): the relay still forwarded them (the lab has no other relay to
                // move to).
                let drain_end = term + Duration::from_secs(2);
                let drained: Vec<_> = echoes
                    .iter()
                    .filter(|e| e.sent > withdrawn && e.sent + Duration::from_millis(50) < drain_end)
                    .collect();
                let answered = drained.iter().filter(|e| e.rtt.is_some()).count();
                if drained.is_empty() || answered < drained.len() {
                    let lost: Vec<String> = drained
                        .iter()
                        .filter(|e| e.rtt.is_none())
                        .map(|e| format!("{} ms", (drain_end.as_millis() as i64) - (e.sent.as_millis() as i64)))
                        .collect();
                    return Err(format!(
                        "step 4: {answered} of {} echoes answered during the drain (lost: sent {} before the drain's end)\n{log}",
                        drained.len(),
                        lost.join(", ")
                    ));
                }
                Ok(format!(
                    "announced once serving; withdrawn {} ms after SIGTERM, exited {:.1} s after it; {answered} of {} echoes answered during the drain",
                    (withdrawn - term).as_millis(),
                    (exited - term).as_secs_f64(),
                    drained.len()
                ))
            }),
        });
    }
    // Run by systemd (Type=notify, WatchdogSec): each role says READY=1 once it serves,
    // feeds the watchdog from its event loop, says what it does (the client: qualified,
    // with its address) and STOPPING=1 on SIGTERM. The service manager is a datagram
    // socket per daemon, as systemd's NOTIFY_SOCKET.
    {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: "systemd notify: ready, status, watchdog, stopping for every role".to_string(),
            expect: Expect::Pass,
            run: Box::new(move || {
                use std::os::unix::net::UnixDatagram;
                let mut lab =
                    shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
                        .map_err(|e| e.to_string())?;
                // The daemons end as the service user: their managers' sockets must be
                // writable by it, as systemd's is.
                // Each read as it arrives, as systemd does (a datagram socket's queue holds ten).
                let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let mut managers = Vec::new();
                for name in ["server", "relay", "client0"] {
                    let path = lab.dir().join(format!("{name}.notify"));
                    let sock = UnixDatagram::bind(&path).map_err(|e| e.to_string())?;
                    sock.set_read_timeout(Some(std::time::Duration::from_millis(50))).map_err(|e| e.to_string())?;
                    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666))
                        .map_err(|e| e.to_string())?;
                    let done = Arc::clone(&done);
                    let reader = std::thread::spawn(move || {
                        let mut got: Vec<String> = Vec::new();
                        let mut buf = [0u8; 1024];
                        while !done.load(std::sync::atomic::Ordering::Relaxed) {
                            if let Ok(n) = sock.recv(&mut buf) {
                                got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                            }
                        }
                        got
                    });
                    managers.push((name, reader, path));
                }
                lab.set_daemon_env("WATCHDOG_USEC", "1500000");
                let start = Instant::now();
                for (name, _, path) in &managers {
                    lab.set_daemon_env("NOTIFY_SOCKET", &path.display().to_string());
                    match *name {
                        "server" => lab.start_server(&me),
                        "relay" => lab.start_relay(&me),
                        _ => lab.start_client(0, &me),
                    }
                    .map_err(|e| e.to_string())?;
                }
                let addr = lab.wait_qualified(0, std::time::Duration::from_secs(20)).map_err(|e| e.to_string())?;
                // Two watchdog periods' worth of feeding, and the client's status catching up.
                std::thread::sleep(std::time::Duration::from_millis(3200).saturating_sub(start.elapsed()));
                std::thread::sleep(std::time::Duration::from_millis(300));
                for name in ["client0", "relay", "server"] {
                    lab.stop_peer(name);
                }
                let took = start.elapsed().as_secs_f64();
                std::thread::sleep(std::time::Duration::from_millis(100));
                done.store(true, std::sync::atomic::Ordering::Relaxed);
                let mut said = Vec::new();
                for (name, reader, _) in managers {
                    let got = reader.join().map_err(|_| "a manager's reader panicked".to_string())?;
                    if !got.first().is_some_and(|m| m.starts_with("READY=1\nSTATUS=")) {
                        return Err(format!("{name}: first message is not READY=1 with a status: {got:?}"));
                    }
                    let feeds = got.iter().filter(|m| *m == "WATCHDOG=1").count();
                    // Fed at a third of 1.5 s over the seconds it ran: at least one feed a period.
                    if (feeds as f64) < took / 1.5 {
                        return Err(format!("{name}: {feeds} watchdog feeds in {took:.1} s: {got:?}"));
                    }
                    if got.last().map(String::as_str) != Some("STOPPING=1") {
                        return Err(format!("{name}: did not say STOPPING=1 last: {got:?}\n{}", lab.log_tail(name, 8)));
                    }
                    if name == "client0"
                        && !got
                            .iter()
                            .any(|m| m.starts_with(&format!("STATUS=qualified: {addr} (server 192.0.2.1, NAT ")))
                    {
                        return Err(format!("client0: no status saying it qualified as {addr}: {got:?}"));
                    }
                    said.push(format!("{name} {feeds} feeds"));
                }
                Ok(format!(
                    "READY=1, STATUS, WATCHDOG=1 ({}) over {took:.1} s, STOPPING=1; client: qualified: {addr}",
                    said.join(", ")
                ))
            }),
        });
    }
    // Miredo's hook script variables and a configurable default-route metric.
    {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: "client hook script and route metric".to_string(),
            expect: Expect::Pass,
            run: Box::new(move || {
                use std::os::unix::fs::PermissionsExt;
                let mut lab =
                    shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
                        .map_err(|e| e.to_string())?;
                let out = lab.dir().join("hook-out");
                std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
                std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).map_err(|e| e.to_string())?;
                let hook = lab.dir().join("hook.sh");
                let record = out.join("env");
                std::fs::write(&hook, format!("#!/bin/sh\nenv | sort > {}.$STATE\n", record.display()))
                    .map_err(|e| e.to_string())?;
                std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
                std::fs::set_permissions(lab.dir(), std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| e.to_string())?;
                lab.start_server(&me).map_err(|e| e.to_string())?;
                lab.start_client_with(0, &me, &format!("HookScript {}\nDefaultRouteMetric 1500\n", hook.display()))
                    .map_err(|e| e.to_string())?;
                let addr = lab.wait_qualified(0, std::time::Duration::from_secs(20)).map_err(|e| e.to_string())?;
                let ns = lab.clients[0].ns.clone();
                let routes = shipworm_lab::netns::exec(&ns, &["ip", "-6", "route", "show", "default"])
                    .map_err(|e| e.to_string())?;
                if !routes.contains("dev teredo") || !routes.contains("metric 1500") {
                    return Err(format!("step 5 (default route) failed: {routes:?}"));
                }
                let file = record.with_extension("up");
                let deadline = Instant::now() + std::time::Duration::from_secs(5);
                let env = loop {
                    if let Ok(t) = std::fs::read_to_string(&file) {
                        if !t.is_empty() {
                            break t;
                        }
                    }
                    if Instant::now() > deadline {
                        return Err("step 6 (hook script) failed: it did not run".into());
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                };
                for want in [
                    "STATE=up".to_string(),
                    "IFACE=teredo".into(),
                    format!("ADDRESS={addr}"),
                    "LLADDRESS=fe80::ffff:ffff:ffff".into(),
                    "MTU=1280".into(),
                ] {
                    if !env.lines().any(|l| l == want) {
                        return Err(format!("step 6 (hook script) failed: {want} missing from {env:?}"));
                    }
                }
                Ok(format!("hook saw STATE=up ADDRESS={addr}; default route metric 1500"))
            }),
        });
    }
    // Secure qualification (RFC 4380 §5.2.2): only the client with the secret qualifies.
    {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: "secure qualification".to_string(),
            expect: Expect::Pass,
            run: Box::new(move || {
                let mut lab =
                    shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 2)]))
                        .map_err(|e| e.to_string())?;
                lab.start_server_with(&me, "SecureQualification alice correct-horse-battery\n")
                    .map_err(|e| e.to_string())?;
                lab.start_client_with(0, &me, "SecureQualification alice correct-horse-battery\n")
                    .map_err(|e| e.to_string())?;
                lab.start_client_with(1, &me, "SecureQualification alice wrong-secret\n").map_err(|e| e.to_string())?;
                let a = lab.wait_qualified(0, std::time::Duration::from_secs(10)).map_err(|e| e.to_string())?;
                std::thread::sleep(std::time::Duration::from_secs(2));
                let state = lab.client_status(1).map(|s| s["state"].as_str().unwrap_or("").to_string());
                if state.as_deref() == Some("qualified")
                    || shipworm_lab::peers::teredo_address(&lab.clients[1].ns).is_some()
                {
                    return Err(
                        "step 4 (refuse the wrong secret) failed: the client with the wrong secret qualified".into()
                    );
                }
                Ok(format!("alice qualified ({a}); the wrong secret got nothing (client state {state:?})"))
            }),
        });
    }
    // Server failover: the primary server is killed.
    {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: "server failover (RefreshInterval 10)".to_string(),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, took) = scenario::run_failover(&me, 10, &mut |_| {}).map_err(|e| e.to_string())?;
                Ok(format!("qualified with the second server {:.1} s after the first died", took.as_secs_f64()))
            }),
        });
    }
    // Expiry: the native host speaks first, both sides go quiet past the peers'
    // validity, and it speaks first again. Pushed last, so these long waits start first.
    for relay in &impls {
        let (me, relay) = (Impl::Shipworm(me.clone()), relay.clone());
        cases.push(Case {
            name: format!("native first again after 35 s idle relay={relay} client=shipworm"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, (a, b)) =
                    scenario::run_native_first_after_idle(&me, &relay, &me, std::time::Duration::from_secs(35))
                        .map_err(|e| e.to_string())?;
                Ok(format!("answered cold in {a:.1} ms, and again after the idle time in {b:.1} ms"))
            }),
        });
    }
    // A server name that resolves only after the client started (issue #21): the client
    // waits, resolving, and qualifies once the name appears in its hosts file.
    {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            name: "server name resolves late".to_string(),
            expect: Expect::Pass,
            run: Box::new(move || {
                use shipworm_lab::names::SERVER_NAME;
                use std::time::Duration;
                let mut lab =
                    shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
                        .map_err(|e| format!("step 1 (build the lab) failed: {e}"))?;
                lab.start_server(&me).map_err(|e| format!("step 2 (start the server) failed: {e}"))?;
                lab.start_client_named(0, &me, SERVER_NAME)
                    .map_err(|e| format!("step 3 (start the client) failed: {e}"))?;
                std::thread::sleep(Duration::from_secs(3));
                lab.check_alive("client0").map_err(|e| format!("step 4 (wait for the name) failed: {e}"))?;
                let st = lab.client_status(0).ok_or("step 4 (wait for the name) failed: no status from the client")?;
                if st["state"] != "resolving" || !st["waiting_for"].to_string().contains(SERVER_NAME) {
                    return Err(format!("step 4 (wait for the name) failed: status {st}"));
                }
                lab.add_host(0, shipworm_lab::SERVER_V4, SERVER_NAME)
                    .map_err(|e| format!("step 5 (add the name) failed: {e}"))?;
                let added = Instant::now();
                let a = lab
                    .wait_qualified(0, Duration::from_secs(10))
                    .map_err(|e| format!("step 6 (qualify once it resolves) failed: {e}"))?;
                Ok(format!(
                    "resolving for 3 s, then qualified {:.1} s after the name was added: {a}",
                    added.elapsed().as_secs_f64()
                ))
            }),
        });
    }
    cases.extend(anycast::cases(&me));
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    cases.retain(|c| filter.is_empty() || filter.iter().any(|f| c.name.contains(f.as_str())));

    let started = Instant::now();
    let queue = Arc::new(Mutex::new(cases.into_iter().enumerate().collect::<Vec<_>>()));
    let results = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (queue, results) = (Arc::clone(&queue), Arc::clone(&results));
            std::thread::spawn(move || loop {
                let Some((i, case)) = queue.lock().unwrap().pop() else {
                    break;
                };
                let t = Instant::now();
                let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (case.run)()))
                    .unwrap_or_else(|_| Err("panicked".into()));
                let (verdict, detail) = judge(&case.expect, &got);
                println!("{verdict:<5} {} ({:.1} s) {detail}", case.name, t.elapsed().as_secs_f64());
                results.lock().unwrap().push((i, verdict));
            })
        })
        .collect();
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

fn judge(expect: &Expect, got: &Result<String, String>) -> (&'static str, String) {
    match (expect, got) {
        (Expect::Pass, Ok(detail)) => ("PASS", detail.clone()),
        (Expect::Pass, Err(e)) => ("FAIL", format!("expected to pass: {e}")),
        (Expect::Fail(step, why), Err(e)) if step_of(e) == Some(*step) => ("XFAIL", format!("step {step}: {why}")),
        (Expect::Fail(step, why), Err(e)) => ("FAIL", format!("expected failure at step {step} ({why}), got: {e}")),
        (Expect::Fail(step, why), Ok(detail)) => {
            ("FAIL", format!("passed, but expected to fail at step {step} ({why}): update the expectation. {detail}"))
        }
    }
}
