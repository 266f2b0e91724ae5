//! Every NAT kind × every pairing of shipworm and Miredo as server, relay and client, the
//! data path with and without TUN offloads, and the NAT kind each client reports.

use super::*;

/// The cases of this topic.
pub fn cases(me: &std::path::Path) -> Vec<Case> {
    let me = me.to_path_buf();
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
                            narrow_wan: None,
                            software_sums: SoftwareSums::None,
                        };
                        cases.push(Case::passing(
                            format!("{first:<12} {nat:<15} server={server:<8} relay={relay:<8} client={client:<8}"),
                            move || matrix_cell(&s),
                        ));
                    }
                }
            }
        }
    }
    // The same through a relay that moves every packet itself (`DataPath user`; every
    // other shipworm relay in the suite moves trusted peers' packets in the kernel).
    for (first, nat) in [(Side::Native, NatKind::PortRestricted), (Side::Client, NatKind::Symmetric)] {
        let s = Scenario { nat, ..shipworm_chain(&me, first, "DataPath user\n") };
        cases.push(Case::passing(
            format!("{first:<12} {nat:<15} all shipworm, relay and client data paths in userland (DataPath user)"),
            move || userland_chain(&s),
        ));
    }
    // The kernel carries the relay's trusted peers: after the pings and the transfers,
    // the programs moved nearly every packet each way, and the daemon only what the
    // protocol needs (bubbles, the queue a first answer releases).
    // Through the relay host's stack (decapsulated by XDP), and directly (at tc ingress,
    // the lab's default).
    for (hook, extra) in [
        ("XDP in the driver, forwarding through the host's stack", "KernelForward stack\n"),
        ("tc ingress, forwarding directly", ""),
    ] {
        let direct = extra.is_empty();
        let s = shipworm_chain(&me, Side::Native, extra);
        cases.push(Case::passing(format!("kernel data path in use: the relay's and the client's programs move the transfers both ways (DataPath kernel, the relay's decapsulation by {hook})"), move || kernel_path_in_use(&s, direct)));
    }
    // The offloads are on the paths the transfers above check: TCP each way through a
    // shipworm client and relay, and the client read super-packets from its TUN (the
    // host's TCP segments, cut by us) and wrote joined rows (the relay's rows of one
    // flow, joined by us).
    // (The relay moves every packet itself here: with its kernel path, the kernel
    // moves the trains and the relay's TUN sees none.)
    {
        let s = shipworm_chain(&me, Side::Client, "DataPath user\n");
        cases.push(Case::passing(
            "TUN offloads in use: TCP both ways through a shipworm client and relay (DataPath user)",
            move || tun_offloads_in_use(&s),
        ));
    }
    // The data path without TUN offloads (what a kernel that refuses them gives): one
    // packet per read and write, both ways, each side speaking first, the transfers
    // checked intact as above.
    for first in [Side::Native, Side::Client] {
        let s = shipworm_chain(&me, first, "TunOffload no\n");
        cases.push(Case::passing(
            format!("{first:<12} without TUN offloads (TunOffload no), relay and client"),
            move || without_tun_offloads(&s),
        ));
    }
    for nat in NatKind::ALL {
        cases.push(Case::passing(format!("NAT behaviour {nat}"), move || nat_behaviour(nat)));
    }
    // The shipworm client says what NAT it is behind (Miredo dropped this probe).
    for nat in NatKind::ALL {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case::passing(format!("NAT detection {nat}"), move || nat_detection(&me, nat)));
    }
    // A datagram whose UDP checksum its sender left to be taken on the way out (a
    // process on the same host, through a veth: Miredo's client here) reaches the relay
    // in that state. Decapsulated, the sum's start would lie in the new Ethernet
    // header, and an interface that sums in software (a NIC without checksum offload)
    // would write it over the frame's type: the native host would drop every packet.
    // The relay's programs leave such datagrams to the daemon: at tc ingress (the relay
    // forwarding directly) and in XDP (through its stack). And the control: the same
    // client's datagrams with their sums finished (its host's interface sums them, as
    // from a real wire) are moved by the kernel.
    let variants = [
        (Side::Native, "", SoftwareSums::Relay, ("tc", "direct")),
        (Side::Client, "KernelForward stack\n", SoftwareSums::Relay, ("xdp", "stack")),
        (Side::Client, "", SoftwareSums::Clients, ("tc", "direct")),
    ];
    for (first, extra, software_sums, (hook, forward)) in variants {
        let s = Scenario { client: Impl::Miredo, software_sums, ..shipworm_chain(&me, first, extra) };
        let pending = software_sums == SoftwareSums::Relay;
        let what = if pending {
            format!("a local sender's datagram whose checksum is still to be taken goes to the daemon, not out with a broken frame (the relay's interface sums in software; decapsulation by {hook}, forwarding {forward})")
        } else {
            format!("a datagram with its checksum finished is moved (the client host's interface sums in software; decapsulation by {hook}, forwarding {forward})")
        };
        cases.push(Case::passing(format!("{first:<12} kernel data path: {what}; Miredo client"), move || {
            checksum_state_decides_the_path(&s, hook, forward, pending)
        }));
    }
    cases
}

/// The kinds of BPF object process `pid` holds descriptors of ("bpf-map", "bpf-prog",
/// "bpf_link"), one entry a descriptor.
fn bpf_descriptors(pid: u32) -> Vec<String> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| Some(target.to_str()?.strip_prefix("anon_inode:")?.to_owned()))
        .filter(|kind| kind.starts_with("bpf"))
        .collect()
}

/// One cell of the matrix: qualification, first contact each way, pings, transfers.
fn matrix_cell(s: &Scenario) -> Result<String, Failed> {
    let (_lab, o) = scenario::run(s, &mut |_| {}).map_err(Failed::from)?;
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
}

/// The chain with every packet moved by the daemons (`DataPath user`).
fn userland_chain(s: &Scenario) -> Result<String, Failed> {
    let (lab, o) = scenario::run(s, &mut |_| {}).map_err(Failed::from)?;
    let st = lab.relay_status().ok_or(Failed::at(6, "step 6: the relay's status socket did not answer"))?;
    if st["data_path"]["kind"] != "user" {
        return Err(Failed::at(6, format!("step 6: the relay's data path is {}", st["data_path"])));
    }
    Ok(format!(
        "first contact {:.1} ms; ping out {}, in {}; TCP {:.0}/{:.0} Mbit/s",
        o.first_ms,
        o.ping_out,
        o.ping_in,
        o.tcp_out.mbit_per_s(),
        o.tcp_in.mbit_per_s()
    ))
}

/// TCP from the native host reaches the client's host joined by GRO, on its Teredo
/// interface: the IPv6 stack takes a 3 MB transfer there in fewer than a quarter as
/// many packets as it has segments
/// (each at most 1,220 bytes of data through a 1,280-byte Teredo MTU). The client's
/// XDP decapsulation, ahead of the driver's GRO, makes them so; decapsulating at tc
/// ingress (after GRO) handed the host every segment alone (seen failing so, with the
/// client's XDP program taking nothing: 2,544 and 2,584 packets for 2,460 segments).
fn tcp_joined_at_client(lab: &shipworm_lab::Lab, client: std::net::Ipv6Addr) -> Result<String, Failed> {
    let cns = &lab.clients[0].ns;
    // The Teredo interface's own counts (packets, bytes): what arrived elsewhere (on
    // the Ethernet interface, were tc ingress not to hand XDP's packets on) is not
    // counted, and all the transfer's bytes must be.
    let received = || -> Result<(u64, u64), Failed> {
        let snmp = shipworm_lab::netns::exec(cns, &["cat", "/proc/net/dev_snmp6/teredo"])
            .map_err(|e| Failed::at(10, format!("step 10: {e}")))?;
        let field = |name: &str| {
            snmp.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|n| n.trim().parse::<u64>().ok()))
                .ok_or(Failed::at(10, format!("step 10: no {name} in the client's /proc/net/dev_snmp6/teredo")))
        };
        Ok((field("Ip6InReceives")?, field("Ip6InOctets")?))
    };
    const BYTES: usize = 3_000_000;
    let before = received()?;
    let t = shipworm_lab::traffic::tcp_transfer(&lab.ns("h6"), cns, client, BYTES, std::time::Duration::from_secs(20))
        .map_err(|e| Failed::at(10, format!("step 10: TCP native → client: {e}")))?;
    let after = received()?;
    let (packets, octets) = (after.0 - before.0, after.1 - before.1);
    let segments = BYTES.div_ceil(1220) as u64;
    let text = format!(
        "TCP native → client {:.0} Mbit/s, {} B, the client's host took it on teredo in {packets} IPv6 packets ({octets} B) for at least {segments} segments",
        t.mbit_per_s(),
        t.bytes
    );
    if !t.intact || octets < BYTES as u64 || packets * 4 > segments {
        return Err(Failed::at(10, format!("step 10: not joined on teredo: {text}")));
    }
    Ok(text)
}

/// The kernel moved the transfers both ways, the daemons only what the protocol needs; its
/// route verdicts are voided when the host's routes change; nothing is left attached by a
/// daemon killed.
fn kernel_path_in_use(s: &Scenario, direct: bool) -> Result<String, Failed> {
    let (mut lab, o) = scenario::run(s, &mut |_| {}).map_err(Failed::from)?;
    let st = lab.relay_status().ok_or(Failed::at(6, "step 6: the relay's status socket did not answer"))?;
    let c = &st["counters"];
    let kernel = |d: &str| c["kernel_path_packets"][d]["forwarded"].as_u64().unwrap_or(0);
    let user = |d: &str| {
        // Every worker's but the kernel's own row.
        c["packets"][d]
            .as_object()
            .map_or(0, |w| w.iter().filter(|(k, _)| *k != "kernel").filter_map(|(_, v)| v.as_u64()).sum::<u64>())
    };
    let (decap, encap, to_ipv6, to_teredo) = (kernel("decap"), kernel("encap"), user("to_ipv6"), user("to_teredo"));
    let text = format!(
        "{}; kernel moved {decap} to IPv6 and {encap} to Teredo, the daemon {to_ipv6} and {to_teredo} (the kernel's reasons: {}); TCP {:.0}/{:.0} Mbit/s",
        st["data_path"], c["kernel_path_packets"], o.tcp_out.mbit_per_s(), o.tcp_in.mbit_per_s()
    );
    if st["data_path"]["kind"] != "kernel" || decap < 100 * (to_ipv6 + 1) / 10 || encap < 100 * (to_teredo + 1) / 10 {
        return Err(Failed::at(6, format!("step 6: the kernel did not carry the traffic: {text}")));
    }
    // Forwarding directly, the relay's programs sent (nearly) all of it out of
    // the host's routes themselves; through the stack, none.
    let sent = |d: &str| c["kernel_path_packets"][d]["direct"].as_u64().unwrap_or(0);
    let (want_hook, want_forward) = if direct { ("tc", "direct") } else { ("xdp", "stack") };
    let kind_ok = st["data_path"]["decap"] == want_hook && st["data_path"]["forward"] == want_forward;
    let direct_ok = if direct {
        sent("decap") * 10 >= decap * 9 && sent("encap") * 10 >= encap * 9
    } else {
        sent("decap") + sent("encap") == 0
    };
    if !kind_ok || !direct_ok {
        return Err(Failed::at(6, format!("step 6: not forwarded {want_forward} ({want_hook}): {text}")));
    }
    // The client's programs carried its side: into its Teredo interface (XDP in
    // the driver, which a veth has, handing on at tc ingress, whatever the relay's
    // hook) and out of it.
    let cs = lab.client_status(0).ok_or(Failed::at(6, "step 6: the client's status socket did not answer"))?;
    let cc = &cs["counters"];
    let ck = |d: &str| cc["kernel_path_packets"][d]["forwarded"].as_u64().unwrap_or(0);
    let cu = |d: &str| cc["packets"][d].as_u64().unwrap_or(0);
    // The client's packets count the kernel's too.
    let (c_in, c_out) = (ck("decap"), ck("encap"));
    let (c_host, c_peers) = (cu("to_host").saturating_sub(c_in), cu("to_peers").saturating_sub(c_out));
    let text = format!(
        "{text}; client {}: kernel moved {c_in} in and {c_out} out, the daemon {c_host} and {c_peers} (the kernel's reasons: {})",
        cs["data_path"], cc["kernel_path_packets"]
    );
    if cs["data_path"]["kind"] != "kernel"
        || cs["data_path"]["decap"] != "xdp"
        || c_in < 100 * (c_host + 1) / 10
        || c_out < 100 * (c_peers + 1) / 10
    {
        return Err(Failed::at(6, format!("step 6: the client's kernel path did not carry its traffic: {text}")));
    }
    // What the client's kernel moved arrives on its Teredo interface, where
    // the host's firewall looks for it: 20 pings in, each counted by an
    // `iifname teredo` rule, and each moved by the kernel.
    let cns = lab.clients[0].ns.clone();
    let nft = |args: &[&str]| shipworm_lab::netns::exec(&cns, &[&["nft"][..], args].concat());
    let seen = || -> Result<u64, Failed> {
        let text =
            nft(&["list", "chain", "inet", "seen", "input"]).map_err(|e| Failed::at(8, format!("step 8: {e}")))?;
        Ok(text.split_whitespace().skip_while(|w| *w != "packets").nth(1).and_then(|n| n.parse().ok()).unwrap_or(0))
    };
    nft(&["add", "table", "inet", "seen"])
        .and_then(|_| nft(&["add", "chain", "inet", "seen", "input", "{ type filter hook input priority 0; }"]))
        .and_then(|_| {
            nft(&[
                "add",
                "rule",
                "inet",
                "seen",
                "input",
                "iifname",
                "teredo",
                "icmpv6",
                "type",
                "echo-request",
                "counter",
            ])
        })
        .map_err(|e| Failed::at(8, format!("step 8: nft: {e}")))?;
    let moved_before = ck("decap");
    let pings = shipworm_lab::traffic::ping(&lab.ns("h6"), o.address, 20, 2)
        .map_err(|e| Failed::at(8, format!("step 8: ping6: {e}")))?;
    let after = lab.client_status(0).ok_or(Failed::at(8, "step 8: the client's status socket did not answer"))?;
    let moved = after["counters"]["kernel_path_packets"]["decap"]["forwarded"].as_u64().unwrap_or(0) - moved_before;
    let on_teredo = seen()?;
    let text =
        format!("{text}; 20 pings in ({pings}): {moved} moved by the kernel, {on_teredo} seen arriving on teredo");
    if on_teredo < 20 || moved < 20 {
        return Err(Failed::at(8, format!("step 8: {text}")));
    }
    let text = format!("{text}; {}", tcp_joined_at_client(&lab, o.address)?);
    let rly = lab.ns("rly");
    // The relay's programs keep the route to the client's mapping (its NAT's
    // public address, an IPv4 route), and forwarding directly, each
    // client's route verdict and each native destination's; a change of
    // the relay host's routes voids them at once (its watch, not the
    // second they are kept at most): the client's address routed to a
    // blackhole there, the pings right after are lost (their requests);
    // the native host's address so routed, lost too (their answers); the
    // mapping, their requests again; each route gone, they are answered
    // again. (Destinations' and mappings' verdicts are kept per CPU: which
    // CPU a packet reaches the relay on is the lab's; the programs' tests
    // show each kept and voided on its own.)
    let text = {
        let route = |verb: &str, to: std::net::IpAddr| {
            let (family, len) = if to.is_ipv6() { ("-6", 128) } else { ("-4", 32) };
            shipworm_lab::netns::exec(&rly, &["ip", family, "route", verb, "blackhole", &format!("{to}/{len}")])
                .map_err(|e| Failed::at(9, format!("step 9: {e}")))
        };
        let mapping = std::net::IpAddr::V4(*shipworm_wire::teredo_addr::TeredoAddr::decode_any(&o.address).mapped.ip());
        // From the native host's first address (it has two), the one
        // blackholed below.
        let pings = |n: u32| {
            shipworm_lab::traffic::ping_from(&lab.ns("h6"), shipworm_lab::HOST6_V6, o.address, n, 1)
                .map_err(|e| Failed::at(9, format!("step 9: ping6: {e}")))
        };
        // The relay keeps these here (its status says so; a direct relay
        // clients' only, and no relay mappings', on a kernel that may
        // preempt programs), or the losses below would prove nothing of
        // the watch.
        let preempts = shipworm_kernel_path::preempts_programs();
        let want = match (direct, preempts) {
            (false, _) => None,
            (true, true) => Some("clients"),
            (true, false) => Some("clients and destinations"),
        };
        let status = lab.relay_status().map(|s| s["data_path"].clone());
        let kept = status.as_ref().map(|d| d["route_verdicts"].clone());
        let mappings = status.as_ref().map(|d| d["mapping_route_verdicts"].clone());
        if kept.as_ref().and_then(|k| k.as_str()) != want
            || mappings.as_ref().and_then(serde_json::Value::as_bool) != Some(!preempts)
        {
            return Err(Failed::at(
                9,
                format!(
                    "step 9: the relay keeps route verdicts {kept:?} and mappings' {mappings:?}, not {want:?}: {text}"
                ),
            ));
        }
        let mut text = text;
        let mut to_blackhole: Vec<(&str, std::net::IpAddr)> = Vec::new();
        if direct {
            to_blackhole.push(("the client's address", o.address.into()));
            if !preempts {
                to_blackhole.push(("the native host's address", shipworm_lab::HOST6_V6.into()));
            }
        }
        if !preempts {
            to_blackhole.push(("the client's mapping", mapping));
        }
        if to_blackhole.is_empty() {
            text = format!("{text}; no route verdict kept to test (a relay through the stack on a kernel that may preempt programs)");
        }
        for (what, to) in to_blackhole {
            // One answered right before: the verdict is kept in this
            // generation, so that only the watch can void it in time.
            // (Up to three tries: one echo lost on a loaded machine is not what
            // this step checks.)
            let mut primed = pings(1)?;
            for _ in 0..2 {
                if primed.received == 1 {
                    break;
                }
                primed = pings(1)?;
            }
            route("add", to)?;
            std::thread::sleep(std::time::Duration::from_millis(30));
            let blackholed = pings(3)?;
            route("del", to)?;
            let back = pings(3)?;
            text = format!("{text}; one ping ({primed}), then {what} blackholed on the relay host: {blackholed}, the route gone: {back}");
            if primed.received != 1 || blackholed.received != 0 || back.received != 3 {
                return Err(Failed::at(
                    9,
                    format!("step 9: the relay did not follow its host's route at once: {text}"),
                ));
            }
        }
        text
    };
    // A daemon killed leaves nothing attached: its programs were held by links
    // it owned, and the kernel frees a program nothing holds.
    let loaded = |id: &str| shipworm_lab::netns::exec(&rly, &["bpftool", "prog", "show", "id", id]).is_ok();
    for (daemon, status) in [("relay", &st), ("client0", &cs)] {
        let ids: Vec<String> = status["data_path"]["programs"]
            .as_array()
            .map_or_else(Vec::new, |v| v.iter().filter_map(|i| i.as_u64()).map(|i| i.to_string()).collect());
        // The decapsulation (XDP or tc) and the encapsulation.
        if ids.len() < 2 || !ids.iter().all(|id| loaded(id)) {
            return Err(Failed::at(
                10,
                format!("step 10: the {daemon}'s programs {ids:?} are not all loaded while it runs"),
            ));
        }
        // Once attached, the daemon keeps maps and links, no program.
        let kinds = lab.peer_pid(daemon).map(bpf_descriptors).unwrap_or_default();
        let links = kinds.iter().filter(|k| *k == "bpf_link").count();
        if kinds.iter().any(|k| k == "bpf-prog") || !kinds.iter().any(|k| k == "bpf-map") || links < ids.len() {
            return Err(Failed::at(
                10,
                format!("step 10: the {daemon} holds BPF descriptors {kinds:?}: maps and links only, no program"),
            ));
        }
        lab.signal_peer(daemon, nix::sys::signal::Signal::SIGKILL)
            .map_err(|e| Failed::at(10, format!("step 10: {e}")))?;
        let gone = (0..50).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            !ids.iter().any(|id| loaded(id))
        });
        if !gone {
            return Err(Failed::at(10, format!("step 10: the killed {daemon}'s programs are still loaded after 1 s")));
        }
    }
    Ok(format!("{text}; maps and links held, no program; relay and client killed, nothing left attached"))
}

/// TCP both ways with the TUN offloads at work on each side.
fn tun_offloads_in_use(s: &Scenario) -> Result<String, Failed> {
    let (lab, o) = scenario::run(s, &mut |_| {}).map_err(Failed::from)?;
    let st = lab.client_status(0).ok_or(Failed::at(6, "step 6: the client's status socket did not answer"))?;
    let offloads = st["tun_offloads"].as_str().unwrap_or("?").to_string();
    let read = st["counters"]["tun_super_packets_read"].as_u64().unwrap_or(0);
    let joined = st["counters"]["tun_joined_writes"].as_u64().unwrap_or(0);
    if offloads == "no offloads" {
        return Err(Failed::at(6, "step 6: the kernel granted the client no TUN offloads"));
    }
    if read == 0 || joined == 0 {
        return Err(Failed::at(
            6,
            format!("step 6: {offloads} granted but not used: {read} super-packets read, {joined} joined writes"),
        ));
    }
    // The relay says the same in its counters (SIGUSR1).
    let pid = std::fs::read_to_string(lab.dir().join("relay.pid")).map_err(|e| format!("relay.pid: {e}"))?;
    let pid = nix::unistd::Pid::from_raw(pid.trim().parse().map_err(|e| format!("relay.pid: {e}"))?);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGUSR1).map_err(|e| e.to_string())?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    let log = lab.log_tail("relay", 5);
    // `counters: … tun_super_packets_read=N tun_joined_writes=M`
    let line = log.lines().rev().find(|l| l.contains("tun_super_packets_read=")).unwrap_or("");
    let count = |name: &str| -> Option<u64> {
        line.split_whitespace().find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
    };
    let counts: Vec<u64> =
        [count("tun_super_packets_read"), count("tun_joined_writes")].into_iter().flatten().collect();
    if counts.len() != 2 || counts.contains(&0) {
        return Err(Failed::at(6, format!("step 6: the relay's counters show no offloads in use:\n{log}")));
    }
    Ok(format!(
        "client {offloads}: {read} super-packets read, {joined} joined writes; relay: {} and {}; TCP {:.0}/{:.0} Mbit/s, intact",
        counts[0],
        counts[1],
        o.tcp_out.mbit_per_s(),
        o.tcp_in.mbit_per_s()
    ))
}

/// The chain with `TunOffload no`: one packet per read and write, transfers intact.
fn without_tun_offloads(s: &Scenario) -> Result<String, Failed> {
    let (lab, o) = scenario::run(s, &mut |_| {}).map_err(Failed::from)?;
    for name in ["relay", "client0"] {
        if !lab.log_tail(name, 200).contains("no offloads") {
            let log = lab.log_tail(name, 20);
            return Err(Failed::at(4, format!("step 4: {name} did not run without TUN offloads; its log:\n{log}")));
        }
    }
    Ok(format!("TCP {:.0}/{:.0} Mbit/s, intact", o.tcp_out.mbit_per_s(), o.tcp_in.mbit_per_s()))
}

/// The lab's NAT behaves as its kind says (RFC 4787's mapping and filtering).
fn nat_behaviour(nat: NatKind) -> Result<String, Failed> {
    let lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(nat, 1)])).map_err(|e| e.to_string())?;
    let got = lab.probe_nat(0).map_err(|e| e.to_string())?;
    let want = nat.expected_behaviour();
    if got == want {
        Ok(format!("{got:?}"))
    } else {
        Err(Failed::at(0, format!("step 0 (probe the NAT) failed: got {got:?}, a {nat} NAT must give {want:?}")))
    }
}

/// The client says the NAT kind it found.
fn nat_detection(me: &Impl, nat: NatKind) -> Result<String, Failed> {
    let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(nat, 1)])).map_err(|e| e.to_string())?;
    lab.start_server(me).map_err(|e| e.to_string())?;
    lab.start_client(0, me).map_err(|e| e.to_string())?;
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
            return Err(Failed::at(
                4,
                format!(
                    "step 4 (detect the NAT) failed: client reports {got:?}, want {want}; client log:\n{}",
                    lab.log_tail("client0", 15)
                ),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A datagram's checksum state decides whether the relay's programs move it.
fn checksum_state_decides_the_path(s: &Scenario, hook: &str, forward: &str, pending: bool) -> Result<String, Failed> {
    let (lab, o) = scenario::run(s, &mut |_| {}).map_err(Failed::from)?;
    let st = lab.relay_status().ok_or(Failed::at(6, "step 6: the relay's status socket did not answer"))?;
    let k = &st["counters"]["kernel_path_packets"]["decap"];
    let (left, moved) = (k["checksum_pending"].as_u64().unwrap_or(0), k["forwarded"].as_u64().unwrap_or(0));
    let text = format!(
        "first contact {:.1} ms; ping out {}, in {}; TCP {:.0}/{:.0} Mbit/s; the relay's data path {}, its decapsulation {k}",
        o.first_ms,
        o.ping_out,
        o.ping_in,
        o.tcp_out.mbit_per_s(),
        o.tcp_in.mbit_per_s(),
        st["data_path"]
    );
    let d = &st["data_path"];
    if d["kind"] != "kernel" || d["decap"] != hook || d["forward"] != forward {
        return Err(Failed::at(6, format!("step 6: not the data path asked for ({hook}, {forward}): {text}")));
    }
    // The transfer client → native is thousands of datagrams; Miredo's client
    // leaves every sum to be taken.
    let right = if pending { left > 100 && moved == 0 } else { left == 0 && moved > 100 };
    if !right {
        return Err(Failed::at(6, format!("step 6: wrong datagrams left to the daemon: {text}")));
    }
    Ok(text)
}
