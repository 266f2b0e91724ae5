//! What a compromised daemon would find: privileges, seccomp, capabilities, files.

use super::*;

/// The cases of this topic.
pub fn cases(me: &std::path::Path) -> Vec<Case> {
    let me = me.to_path_buf();
    let mut cases: Vec<Case> = Vec::new();
    // What a compromised daemon would find: every shipworm process of a lab (server,
    // relay, client, the client's interface helper and hook runner) with no_new_privs,
    // a seccomp filter on every thread and an empty bounding set; no capability but the
    // helper's CAP_NET_ADMIN, and the helper without a network socket. Checked while
    // traffic has gone through and the hook has run.
    let shipworm = Impl::Shipworm(me.clone());
    cases
        .push(Case::passing("confinement: no_new_privs, seccomp, capabilities of every shipworm process", move || {
            confinement_of_every_process(&shipworm)
        }));
    cases.push(forged_sources(&me));
    cases
}

/// A Teredo datagram carrying an echo request from `src` to `dst` (identifier `ident`,
/// sequence number `seq`), as a client would send it.
fn echo_in_teredo(src: std::net::Ipv6Addr, dst: std::net::Ipv6Addr, ident: u16, seq: u16) -> Vec<u8> {
    use shipworm_wire::icmpv6::Icmpv6Repr;
    use shipworm_wire::ipv6::Ipv6Repr;
    let echo = Icmpv6Repr::EchoRequest { ident, seq_no: seq, data: b"forged" };
    let mut b = vec![0u8; 40 + echo.buffer_len()];
    Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 58, payload_len: echo.buffer_len(), hop_limit: 64 }
        .emit(&mut b)
        .expect("fits");
    echo.emit(&src, &dst, &mut b[40..]).expect("fits");
    b
}

/// Forged sources at the relay (#60): datagrams in a trusted client's name, from another
/// port of its public address (a host behind the same NAT: the NAT box itself here) and
/// from another address (the server's host), each carrying an echo request to the
/// native host. None reaches it, whichever path takes them (the relay's kernel data
/// path, its default in the lab, or the daemon); the client's own echo requests, with
/// the same identifier, do (the listener hears what crosses). Seen failing with the
/// relay taking any port of the embedded address for a trusted client: the forgeries
/// from the NAT box were heard.
fn forged_sources(me: &std::path::Path) -> Case {
    let me = Impl::Shipworm(me.to_path_buf());
    Case {
        // Mostly the listener's 9 s.
        waits: true,
        name: "forged sources at the relay: another port or address of a trusted client reaches no native host".into(),
        expect: Expect::Pass,
        run: Box::new(move || {
            use shipworm_lab::{netns, Lab, LabSpec, HOST6_V6, RELAY_V4};
            use std::net::{SocketAddrV4, UdpSocket};
            use std::time::Duration;
            let mut lab = Lab::build(&LabSpec::nats(vec![(NatKind::PortRestricted, 1)])).map_err(|e| e.to_string())?;
            lab.start_server(&me).map_err(|e| e.to_string())?;
            lab.start_relay(&me).map_err(|e| e.to_string())?;
            lab.start_client(0, &me).map_err(|e| e.to_string())?;
            let address = lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| e.to_string())?;
            let (client, nat, srv, h6) = (lab.clients[0].ns.clone(), lab.ns("nat1"), lab.ns("srv"), lab.ns("h6"));
            let public = lab.clients[0].nat_public;
            // The client talks to the native host first: the relay trusts it.
            let first = traffic::ping(&client, HOST6_V6, 2, 3).map_err(|e| e.to_string())?;
            if first.received == 0 {
                return Err(Failed::at(5, format!("step 5: the client's pings got no answer: {first:?}")));
            }
            // What the relay's programs saw come from a listed peer at another mapping:
            // every forgery must reach the relay, or the case proves nothing.
            let elsewhere = |lab: &Lab| {
                let st = lab.relay_status().unwrap_or_default();
                st["counters"]["kernel_path_packets"]["decap"]["other_mapping"].as_u64().unwrap_or(0)
            };
            let elsewhere_before = elsewhere(&lab);
            let ident = traffic::stream_ident() ^ 0x0f0f;
            let start = Instant::now();
            // Past the 8 s a forgery from another port may be held while its port is
            // proved: one let go when the hold ends would be heard too.
            let listen = {
                let h6 = h6.clone();
                std::thread::spawn(move || traffic::echo_requests_heard(&h6, ident, Duration::from_secs(9), start))
            };
            // The client's own: sequence numbers from 0.
            let own = {
                let client = client.clone();
                std::thread::spawn(move || {
                    traffic::ping_stream_from(
                        &client,
                        HOST6_V6,
                        Duration::from_millis(100),
                        Duration::from_secs(2),
                        start + Duration::from_millis(200),
                        ident,
                    )
                })
            };
            // The forgeries: sequence numbers from 1000, 20 from each place.
            let forge = |ns: String, from: SocketAddrV4| {
                std::thread::spawn(move || -> Result<(), String> {
                    netns::enter(&ns).map_err(|e| e.to_string())?;
                    let sock = UdpSocket::bind(from).map_err(|e| format!("bind {from} in {ns}: {e}"))?;
                    std::thread::sleep(Duration::from_millis(300));
                    for seq in 0..20u16 {
                        let datagram = echo_in_teredo(address, HOST6_V6, ident, 1000 + seq);
                        sock.send_to(&datagram, SocketAddrV4::new(RELAY_V4, 3545)).map_err(|e| e.to_string())?;
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Ok(())
                })
            };
            let other_port = forge(nat.clone(), SocketAddrV4::new(public, 45_000));
            let other_address = forge(srv.clone(), SocketAddrV4::new(shipworm_lab::SERVER_V4, 45_000));
            for (what, t) in [("another port", other_port), ("another address", other_address)] {
                t.join()
                    .map_err(|_| "a forger panicked".to_string())?
                    .map_err(|e| format!("forging from {what}: {e}"))?;
            }
            let own = own.join().map_err(|_| "the client's stream panicked".to_string())?.map_err(|e| e.to_string())?;
            let heard = listen.join().map_err(|_| "the listener panicked".to_string())?.map_err(|e| e.to_string())?;
            let forged: Vec<u16> = heard.iter().map(|&(seq, _)| seq).filter(|&s| s >= 1000).collect();
            let genuine = heard.iter().filter(|&&(seq, _)| seq < 1000).count();
            if genuine == 0 {
                return Err(Failed::at(
                    6,
                    format!(
                        "step 6: none of the client's {} echo requests was heard: the listener proves nothing",
                        own.len()
                    ),
                ));
            }
            if !forged.is_empty() {
                return Err(Failed::at(7, format!("step 7: forged echo requests reached the native host: {forged:?}")));
            }
            // Counters are published within a quarter second.
            std::thread::sleep(Duration::from_millis(500));
            let reached = elsewhere(&lab).saturating_sub(elsewhere_before);
            if reached < 40 {
                return Err(Failed::at(
                    8,
                    format!("step 8: the relay saw {reached} of the 40 forgeries arrive: nothing was tested"),
                ));
            }
            let status = lab.relay_status().unwrap_or_default();
            Ok(format!(
                "the client's {genuine}/{} echo requests heard at the native host, 0 of 40 forged (20 from {public}:45000, 20 from {}:45000), all 40 seen arriving by the relay's programs ({reached}); relay dropped {}",
                own.len(),
                shipworm_lab::SERVER_V4,
                status["counters"]["dropped"]
            ))
        }),
    }
}

/// Every shipworm process of a lab is confined: no_new_privs, seccomp on every thread,
/// an empty bounding set, no capability but the interface helper's CAP_NET_ADMIN.
fn confinement_of_every_process(me: &Impl) -> Result<String, Failed> {
    use std::os::unix::fs::PermissionsExt;
    let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
        .map_err(|e| e.to_string())?;
    let hook = lab.dir().join("hook.sh");
    std::fs::write(&hook, "#!/bin/sh\nexit 0\n").map_err(|e| e.to_string())?;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    std::fs::set_permissions(lab.dir(), std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    lab.start_server(me).map_err(|e| e.to_string())?;
    lab.start_relay(me).map_err(|e| e.to_string())?;
    lab.start_client_with(0, me, &format!("HookScript {}\n", hook.display())).map_err(|e| e.to_string())?;
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
        let role = if ["shipworm-iface", "shipworm-hook", "shipworm-echo", "shipworm-conf"].contains(&comm.as_str()) {
            comm.clone()
        } else {
            cmdline.split_whitespace().nth(1).unwrap_or("?").to_string()
        };
        let what = format!("{role} (pid {pid})");
        if field("NoNewPrivs:") != "1" {
            return Err(Failed::at(6, format!("step 6: {what}: NoNewPrivs {}", field("NoNewPrivs:"))));
        }
        if field("CapBnd:") != "0000000000000000" {
            return Err(Failed::at(6, format!("step 6: {what}: bounding set {}", field("CapBnd:"))));
        }
        for task in std::fs::read_dir(proc_dir.join("task")).map_err(|e| e.to_string())?.flatten() {
            let t = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            if !t.lines().any(|l| l == "Seccomp:\t2") {
                return Err(Failed::at(
                    6,
                    format!("step 6: {what}: thread {:?} without a seccomp filter", task.file_name()),
                ));
            }
        }
        let want_caps = if role == "shipworm-iface" { "0000000000001000" } else { "0000000000000000" };
        for set in ["CapEff:", "CapPrm:"] {
            if field(set) != want_caps {
                return Err(Failed::at(6, format!("step 6: {what}: {set} {} (want {want_caps})", field(set))));
            }
        }
        // Its sockets, against the namespace's tables: the helper holds none
        // (the socketpair to the client and netlink only); a raw IPv6
        // socket, which sends any packet, only the server's echo link (#40, 11).
        let table = |t: &str| std::fs::read_to_string(proc_dir.join("net").join(t)).unwrap_or_default();
        let raw6 = table("raw6");
        let mut tables = raw6.clone();
        for t in ["udp", "udp6", "tcp", "tcp6", "raw"] {
            tables += &table(t);
        }
        for fd in std::fs::read_dir(proc_dir.join("fd")).map_err(|e| e.to_string())?.flatten() {
            let target = std::fs::read_link(fd.path()).unwrap_or_default().display().to_string();
            let Some(inode) = target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) else { continue };
            let held = |t: &str| t.split_whitespace().any(|w| w == inode);
            if role == "shipworm-iface" && held(&tables) {
                return Err(Failed::at(6, format!("step 6: {what} holds a network socket ({target})")));
            }
            if role != "shipworm-echo" && held(&raw6) {
                return Err(Failed::at(6, format!("step 6: {what} holds a raw IPv6 socket ({target})")));
            }
        }
        seen.push(what);
    }
    seen.sort();
    for role in ["server", "relay", "client", "shipworm-iface", "shipworm-hook", "shipworm-echo", "shipworm-conf"] {
        if !seen.iter().any(|s| s.starts_with(&format!("{role} "))) {
            return Err(Failed::at(6, format!("step 6: no {role} process found among {seen:?}")));
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
                return Err(Failed::at(
                    6,
                    format!("step 6: {name}: {said} of {want} processes restricted their file access"),
                ));
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
    let (Some(helper), Some(client)) = (helper, client) else { return Err(Failed::at(7, "step 7: pids")) };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(helper), nix::sys::signal::Signal::SIGKILL)
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let stopped = loop {
        let st = std::fs::read_to_string(format!("/proc/{client}/status")).unwrap_or_default();
        if st.is_empty() || st.contains("State:\tZ") {
            break Instant::now() + std::time::Duration::from_secs(5) - deadline;
        }
        if Instant::now() > deadline {
            return Err(Failed::at(7, "step 7: the client runs on after its interface helper was killed"));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let log = lab.log_tail("client0", 5);
    if !log.contains("interface helper") {
        return Err(Failed::at(7, format!("step 7: the client stopped without naming the helper: {log}")));
    }
    Ok(format!(
        "{} processes: NoNewPrivs 1, Seccomp 2 on every thread, bounding set empty, no capability but the helper's CAP_NET_ADMIN, {files}; {}; helper killed, client stopped in {} ms saying so",
        seen.len(),
        seen.join(", "),
        stopped.as_millis()
    ))
}
