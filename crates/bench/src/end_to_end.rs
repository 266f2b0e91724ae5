//! The end-to-end chains through a NAT: TCP and UDP through a client and relay, each
//! round in a fresh lab.

use crate::error::Failure;
use crate::measure::*;
use crate::packets::udp_payload;
use crate::rate_search::max_rate;
use crate::stats::*;
use crate::traffic::{socket_in, v6, Sink, Sockets};
use shipworm_lab::traffic::tcp_transfer;
use shipworm_lab::{Lab, HOST6_V6};
use std::net::Ipv6Addr;
use std::time::Duration;

/// One implementation's client and relay chain through a NAT, over every end-to-end
/// round (a fresh lab each: one lab's transfers and searches moved together).
pub(crate) struct EndToEnd {
    pub(crate) name: &'static str,
    /// Seconds from client start to an address, one per round.
    pub(crate) qualify_secs: Vec<f64>,
    /// Median steady ping6 round trip of each round ([`e2e_pings`] echoes), ms.
    pub(crate) ping_ms: Vec<f64>,
    /// The same trip without the tunnel, in each round's lab (none in quick runs): the
    /// client host's IPv4 round trip to the relay host, plus the relay host's IPv6
    /// round trip to the native host, less one round trip to its own loopback (the
    /// echo's turn in the pinging and the answering stacks, counted twice by the two
    /// parts and once by the chain), ms.
    pub(crate) native_ms: Vec<f64>,
    /// TCP Mbit/s, every transfer client → native and back.
    pub(crate) tcp: (Vec<f64>, Vec<f64>),
    /// TCP Mbit/s of [`TCP_STREAMS`] connections at once, client → native and back.
    pub(crate) tcp_streams: (Vec<f64>, Vec<f64>),
    /// UDP packets/s under 0.1 % loss, client → native and back, every search of every round.
    pub(crate) udp: (Vec<f64>, Vec<f64>),
}

/// A figure's two directions over the rounds ([`middle_mean`]).
pub(crate) fn both_ways((out, back): &(Vec<f64>, Vec<f64>)) -> (f64, f64) {
    (middle_mean(out), middle_mean(back))
}

/// End-to-end rounds: each builds a fresh lab per implementation, alternately, for two
/// TCP transfers and two UDP rate searches each way, the relay and the client with equal
/// buffers (Miredo's client on its defaults spread 39-80 k packets/s native→client
/// over ten rounds). One lab's figures stuck together and
/// moved by a fifth to a third from run to run, even as the median of five transfers.
pub(crate) fn e2e_rounds(quick: bool) -> usize {
    if quick {
        1
    } else {
        6
    }
}

/// Echoes each way in an end-to-end round's ping6: 20, or 5 in a quick run (0.2 s apart,
/// they were two thirds of its chains' time).
pub(crate) fn e2e_pings(quick: bool) -> u32 {
    if quick {
        5
    } else {
        20
    }
}

/// Bytes in each end-to-end TCP transfer.
pub(crate) fn e2e_bytes(quick: bool) -> usize {
    if quick {
        2_000_000
    } else {
        20_000_000
    }
}

/// TCP through a client and relay chain, both ways: two transfers of `bytes` each way
/// to and from the client at `client` (after the buffers were made equal; the
/// scenario's own transfer came before), each checked
/// intact, in Mbit/s.
pub(crate) fn e2e_tcp(lab: &Lab, client: Ipv6Addr, bytes: usize) -> Result<([f64; 2], [f64; 2]), Failure> {
    let (cns, h6) = (lab.clients[0].ns.clone(), lab.ns("h6"));
    let once = |from: &str, to: &str, addr: Ipv6Addr| -> Result<f64, Failure> {
        let t = tcp_transfer(from, to, addr, bytes, Duration::from_secs(30)).map_err(lab_err)?;
        if !t.intact {
            return Err(Failure::runtime(format!(
                "bench: TCP {from} → {to}: the bytes that arrived differ from those sent"
            )));
        }
        Ok(t.mbit_per_s())
    };
    let out = [once(&cns, &h6, HOST6_V6)?, once(&cns, &h6, HOST6_V6)?];
    let back = [once(&h6, &cns, client)?, once(&h6, &cns, client)?];
    Ok((out, back))
}

/// Connections of the parallel TCP transfers.
pub(crate) const TCP_STREAMS: usize = 4;

/// TCP through a client and relay chain, both ways, with [`TCP_STREAMS`] connections
/// at once carrying `bytes` between them, each checked intact: Mbit/s of all their
/// bytes over the time the slowest took.
pub(crate) fn e2e_tcp_streams(lab: &Lab, client: Ipv6Addr, bytes: usize) -> Result<(f64, f64), Failure> {
    let (cns, h6) = (lab.clients[0].ns.clone(), lab.ns("h6"));
    let once = |from: &str, to: &str, addr: Ipv6Addr| -> Result<f64, Failure> {
        let each = bytes / TCP_STREAMS;
        let all: Vec<_> = std::thread::scope(|s| {
            let running: Vec<_> = (0..TCP_STREAMS)
                .map(|_| s.spawn(|| tcp_transfer(from, to, addr, each, Duration::from_secs(30))))
                .collect();
            running.into_iter().map(|h| h.join().map_err(|_| Failure::runtime("a TCP stream panicked"))).collect()
        });
        let (mut total, mut slowest) = (0u64, 0f64);
        for t in all {
            let t = t?.map_err(lab_err)?;
            if !t.intact {
                return Err(Failure::runtime(format!(
                    "bench: TCP ×{TCP_STREAMS} {from} → {to}: the bytes that arrived differ from those sent"
                )));
            }
            total += t.bytes;
            slowest = slowest.max(t.secs);
        }
        Ok(total as f64 * 8.0 / slowest.max(1e-9) / 1e6)
    };
    Ok((once(&cns, &h6, HOST6_V6)?, once(&h6, &cns, client)?))
}

/// UDP through a client and relay chain, both ways: the highest rate under 0.1 % loss
/// for 512-byte IPv6 packets, [`searches`] of each way, in turn, each starting from
/// `hints` (the median of this chain's earlier rounds, as the relays' searches do). The
/// lab is the one a scenario left running.
pub(crate) fn e2e_udp(
    lab: &Lab,
    client: Ipv6Addr,
    hints: [Option<u64>; 2],
    quick: bool,
) -> Result<(Vec<f64>, Vec<f64>), Failure> {
    let (cns, h6) = (lab.clients[0].ns.clone(), lab.ns("h6"));
    let (dur, _) = trial_sizes(quick);
    let ways = [(&cns, &h6, HOST6_V6), (&h6, &cns, client)];
    let mut tx = Vec::new();
    let mut sinks = Vec::new();
    for (from_ns, to_ns, _) in ways {
        tx.push(socket_in(from_ns, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?);
        sinks.push(Sink::start(vec![socket_in(to_ns, v6(Ipv6Addr::UNSPECIFIED, 9010)).map_err(Failure::runtime)?]));
    }
    let keep_alive = socket_in(&cns, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?;
    let mut rates: [Vec<f64>; 2] = Default::default();
    for _ in 0..searches(quick) {
        for (k, &(_, _, to)) in ways.iter().enumerate() {
            let mut build = |seq: u64, buf: &mut [u8]| (udp_payload(buf, 512, seq), v6(to, 9010), 0);
            // The client renews its peer entries first (they lapse 30 s after its last
            // packet, and native→client traffic alone would not renew them).
            let _ = keep_alive.send_to(&[0u8; 8], &v6(HOST6_V6, 9011).into());
            std::thread::sleep(Duration::from_millis(50));
            let found = max_rate(
                &mut Sockets { socks: std::slice::from_ref(&tx[k]), build: Box::new(&mut build) },
                &sinks[k],
                dur,
                quick,
                hints[k],
            );
            rates[k].push(found.rate as f64);
        }
    }
    let [up, down] = rates;
    Ok((up, down))
}
