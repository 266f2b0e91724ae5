//! RFC MUSTs seen from outside, on the wire: what leaves a NAT box or a relay host,
//! counted by the kernel (nftables), not by the daemons' own counters.

use super::*;
use shipworm_lab::{netns, LabSpec, RELAY_V4, SERVER_V4};
use shipworm_wire::teredo_addr::{Flags, TeredoAddr, PREFIX};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::time::Duration;

/// The cases of this topic.
pub fn cases(me: &std::path::Path) -> Vec<Case> {
    let me = Impl::Shipworm(me.to_path_buf());
    vec![Case {
        waits: true,
        name: "RFC 4380 §5.2.6 on the wire: a silent Teredo peer pinged for 20 s gets at most 4 bubbles of each kind from the client and the relay".into(),
        expect: Expect::Pass,
        // With the budget taken out (every `spend` allowed) the client's NAT let 11
        // direct and 11 indirect bubbles out, and the relay sent 10 (seen).
        run: Box::new(move || bubble_budget(&me)),
    }]
}

/// Where nobody answers: a Teredo address of our server whose mapping no host has.
fn silent(mapped: SocketAddrV4) -> Ipv6Addr {
    TeredoAddr { prefix: PREFIX, server: SERVER_V4, flags: Flags(0), mapped }.to_ipv6()
}

fn bubble_budget(me: &Impl) -> Result<String, Failed> {
    let mut lab = shipworm_lab::Lab::build(&LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))?;
    lab.start_server(me)?;
    lab.start_relay(me)?;
    lab.start_client(0, me)?;
    lab.wait_qualified(0, Duration::from_secs(20))?;
    // The relay's silent client embeds no host of the relay's own subnet (it would
    // never be bubbled: CVE-2006-6264).
    let to_client = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 99), 40000);
    let to_native = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 98), 40001);
    let (nat, rly) = (lab.ns("nat1"), lab.ns("rly"));
    // Counted where they leave: the client's on its NAT box (forwarded), the relay's at
    // its host's output. A bubble is a UDP payload starting with an IPv6 header
    // (version 6 in its first 4 bits); the client's refreshes to the server do not.
    let count = |ns: &str, rules: &str| -> Result<(), Failed> {
        let table = format!("table inet lab_bubbles {{\n  counter direct {{ }}\n  counter indirect {{ }}\n{rules}}}\n");
        netns::exec_input(ns, &["nft", "-f", "-"], Some(&table)).map(drop).map_err(Failed::from)
    };
    count(
        &nat,
        &format!(
            "  chain passing {{ type filter hook forward priority -10; policy accept;\n    ip daddr {} udp dport {} counter name \"direct\"\n    ip daddr {SERVER_V4} udp dport 3544 @th,64,4 6 counter name \"indirect\"\n  }}\n",
            to_client.ip(),
            to_client.port()
        ),
    )?;
    count(
        &rly,
        &format!(
            "  chain leaving {{ type filter hook output priority -10; policy accept;\n    ip saddr {RELAY_V4} ip daddr {} udp dport {} counter name \"direct\"\n    ip saddr {RELAY_V4} ip daddr {SERVER_V4} udp dport 3544 @th,64,4 6 counter name \"indirect\"\n  }}\n",
            to_native.ip(),
            to_native.port()
        ),
    )?;
    // Once a second for 20 s from each side: the client's host to one silent peer, the
    // native host to another (through the relay). Ping gets no answer and says so.
    let (cns, h6) = (lab.clients[0].ns.clone(), lab.ns("h6"));
    let pings = [(cns, silent(to_client)), (h6, silent(to_native))];
    std::thread::scope(|s| {
        for (ns, dst) in &pings {
            let dst = dst.to_string();
            s.spawn(move || netns::exec(ns, &["ping", "-6", "-n", "-q", "-c", "20", "-i", "1", "-W", "1", &dst]));
        }
    });
    let read = |ns: &str, name: &str| -> Result<u64, Failed> {
        let text = netns::exec(ns, &["nft", "list", "counter", "inet", "lab_bubbles", name]).map_err(Failed::from)?;
        text.split_whitespace()
            .skip_while(|w| *w != "packets")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| Failed::at(5, format!("step 5: no count in {text:?}")))
    };
    let client = (read(&nat, "direct")?, read(&nat, "indirect")?);
    let relay = (read(&rly, "direct")?, read(&rly, "indirect")?);
    let said = format!("client: {} direct, {} indirect; relay: {} indirect", client.0, client.1, relay.1);
    // At least one of each: the peers were bubbled at all (the counting is right).
    if client.0 == 0 || client.1 == 0 || relay.1 == 0 {
        return Err(Failed::at(5, format!("step 5: a kind was never bubbled ({said})")));
    }
    if client.0 > 4 || client.1 > 4 || relay.0 > 4 || relay.1 > 4 {
        return Err(Failed::at(5, format!("step 5: more than 4 bubbles of a kind in 20 s ({said})")));
    }
    Ok(said)
}
