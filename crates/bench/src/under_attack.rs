//! The established peers' rate under attack: a flood of new peers' bubbles, and the
//! lock-out pattern (one endpoint making the relay trust many addresses).

use crate::cpus;
use crate::error::Failure;
use crate::measure::*;
use crate::rate_search::Found;
use crate::traffic::{lock_out, new_peer_flood, socket_in, v6};
use shipworm_lab::{GEN_V4, SINK_NATIVE_V6};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

/// Spoofed new-peer bubbles per second while established peers' rate is measured.
pub(crate) const FLOOD_RATE: u64 = 20_000;
/// Sockets the flood leaves by (SO_REUSEPORT spreads them over the relay's workers).
pub(crate) const FLOOD_SOCKETS: usize = 8;
/// The flood's packet size and direction in the rate table.
pub(crate) const UNDER_FLOOD: (&str, usize) = ("Teredo→IPv6 under flood", 64);
/// The lock-out pattern's packets per second (native packets and bubbles).
pub(crate) const LOCKOUT_RATE: u64 = 20_000;
/// Teredo addresses, all embedding one endpoint, the lock-out pattern makes trusted; a
/// tenth in a quick run (its figures judge nothing, and making them trusted is most of
/// the pattern's time).
pub(crate) fn lockout_addresses(quick: bool) -> u64 {
    if quick {
        6_500
    } else {
        65_000
    }
}
/// The established peers' rate under the lock-out pattern, in the rate table.
pub(crate) const UNDER_LOCKOUT: (&str, usize) = ("Teredo→IPv6 under lock-out", 64);

/// Searches a rate `n` times with `search` (from the earlier rounds' hint) while spoofed
/// bubbles from never-seen Teredo addresses pour from the generator to `relay`, and
/// files them and the flood's rate in `f`.
pub(crate) fn under_flood(
    label: &str,
    gen: &str,
    relay: SocketAddrV4,
    f: &mut Figures,
    say: &mut dyn FnMut(&str),
    search: &mut dyn FnMut() -> Found,
    n: usize,
) -> Result<(), Failure> {
    let flood_socks = (0..FLOOD_SOCKETS)
        .map(|_| socket_in(gen, SocketAddr::V4(SocketAddrV4::new(GEN_V4, 0))))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::runtime)?;
    let flood = new_peer_flood(flood_socks, relay, SINK_NATIVE_V6, FLOOD_RATE, Duration::from_secs(120));
    let found: Vec<Found> = (0..n).map(|_| search()).collect();
    f.flood = flood.stop();
    let rates = file_searches(f, UNDER_FLOOD, &found);
    say(&format!(
        "  {label} {:>4} B under a flood of {:.0} new-peer bubbles/s: Teredo→IPv6 {}",
        UNDER_FLOOD.1,
        f.flood,
        rates.join(",")
    ));
    Ok(())
}

/// Files `found` under `key` in `f`; the rates, as progress shows them.
fn file_searches(f: &mut Figures, key: (&'static str, usize), found: &[Found]) -> Vec<String> {
    for &one in found {
        f.file_rate(key, one);
    }
    found.iter().map(|one| format!("{:>9} pkt/s{}", one.rate, held_mark(*one))).collect()
}

/// Searches a rate `n` times with `search` while the lock-out pattern runs against
/// `relay` (from one endpoint in `gen`, its native packets from `h6`), and files them,
/// the pattern's rate and the relay's memory before and after in `f`.
pub(crate) fn under_lockout(
    label: &str,
    (gen, h6, rly): (&str, &str, &str),
    relay: SocketAddrV4,
    f: &mut Figures,
    say: &mut dyn FnMut(&str),
    search: &mut dyn FnMut() -> Found,
    quick: bool,
) -> Result<(), Failure> {
    let (n, addresses) = (searches(quick), lockout_addresses(quick));
    let mapped = socket_in(gen, SocketAddr::V4(SocketAddrV4::new(GEN_V4, 0))).map_err(Failure::runtime)?;
    let native = socket_in(h6, v6(Ipv6Addr::UNSPECIFIED, 0)).map_err(Failure::runtime)?;
    let before = cpus::host_rss_mib(rly).map_err(Failure::runtime)?;
    let pattern = lock_out(mapped, native, relay, addresses, LOCKOUT_RATE, Duration::from_secs(180));
    // Every address made trusted before the first search, and kept so throughout.
    std::thread::sleep(Duration::from_secs_f64(2.2 * addresses as f64 / LOCKOUT_RATE as f64));
    let found: Vec<Found> = (0..n).map(|_| search()).collect();
    let after = cpus::host_rss_mib(rly).map_err(Failure::runtime)?;
    f.lockout = pattern.stop();
    f.lockout_rss = Some((before, after));
    let rates = file_searches(f, UNDER_LOCKOUT, &found);
    say(&format!(
        "  {label} {:>4} B under the lock-out pattern ({:.0} pkt/s, {addresses} addresses of one endpoint; relay memory {before:.0} → {after:.0} MiB): Teredo→IPv6 {}",
        UNDER_LOCKOUT.1,
        f.lockout,
        rates.join(",")
    ));
    Ok(())
}
