//! Client packets the relay holds while their client proves the port they came from
//! (a client behind a symmetric NAT, met by its own first packet): a few a shard, for
//! the bubbles' rounds at most.

use super::*;
use std::net::Ipv4Addr;

/// A client's packet to the native side, held while its port is proved.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) client: Ipv6Addr,
    /// Where it came from: released only if that is the port the client proves.
    pub(super) from: SocketAddrV4,
    pub(super) at: Duration,
    pub(super) packet: Box<[u8]>,
}

/// Client packets held a shard, at most.
pub const HELD_PER_SHARD: usize = 32;
/// Of which one IPv4 source holds at most: a flood from one address pushes out its own
/// packets, not other clients'.
pub const HELD_PER_SOURCE: usize = 4;
/// How long a held packet waits for its client's proof: the bubbles' rounds.
pub(super) const HELD_FOR: Duration = Duration::from_secs(BUBBLE_SPACING.as_secs() * MAX_BUBBLES as u64);

/// Hold `packet` of `client`'s from `from`. A source holding its share gives up its own
/// oldest; a full shard, the oldest of the source holding the most (the newcomer's own
/// if it is that source): one address's flood never pushes out another's packets
/// while it holds more than they do.
pub(super) fn hold(
    held: &mut VecDeque<Held>,
    w: &mut RelayWorker,
    (client, from): (Ipv6Addr, SocketAddrV4),
    now: Duration,
    packet: &[u8],
) {
    let of = |ip: &Ipv4Addr, held: &VecDeque<Held>| held.iter().filter(|h| h.from.ip() == ip).count();
    let give_way = if of(from.ip(), held) >= HELD_PER_SOURCE {
        Some(*from.ip())
    } else if held.len() >= HELD_PER_SHARD {
        // At most 32 entries: counting each one's source is cheaper than keeping counts.
        // The newcomer's own source if it holds the most, else the one of the oldest
        // packet among the sources that do.
        let most = held.iter().map(|h| of(h.from.ip(), held)).max().unwrap_or(0);
        if of(from.ip(), held) == most {
            Some(*from.ip())
        } else {
            held.iter().map(|h| *h.from.ip()).find(|ip| of(ip, held) == most)
        }
    } else {
        None
    };
    if let Some(ip) = give_way {
        if let Some(i) = held.iter().position(|h| *h.from.ip() == ip) {
            held.remove(i);
            w.stats.drops.count(DropReason::QueueFull);
        }
    }
    held.push_back(Held { client, from, at: now, packet: packet.into() });
}

/// The packets held for `client` that came from `proved`, taken out of `held` in the
/// order they came; its others (from ports it did not prove) are dropped.
pub(super) fn take_held(
    held: &mut VecDeque<Held>,
    w: &mut RelayWorker,
    client: &Ipv6Addr,
    proved: SocketAddrV4,
) -> Vec<Box<[u8]>> {
    let mut out = Vec::new();
    held.retain_mut(|h| {
        if h.client != *client {
            return true;
        }
        if h.from == proved {
            out.push(std::mem::take(&mut h.packet));
        } else {
            w.stats.drops.count(DropReason::SourceMismatch);
        }
        false
    });
    out
}
