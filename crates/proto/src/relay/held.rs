//! Client packets the relay holds while their client proves the port they came from
//! (a client behind a symmetric NAT, met by its own first packet): a few a shard, for
//! the bubbles' rounds at most.

use super::*;

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
/// How long a held packet waits for its client's proof: the bubbles' rounds.
pub(super) const HELD_FOR: Duration = Duration::from_secs(BUBBLE_SPACING.as_secs() * MAX_BUBBLES as u64);

/// Hold `packet` of `client`'s from `from`, the oldest held giving way when the shard
/// holds its most.
pub(super) fn hold(
    held: &mut VecDeque<Held>,
    w: &mut RelayWorker,
    (client, from): (Ipv6Addr, SocketAddrV4),
    now: Duration,
    packet: &[u8],
) {
    if held.len() >= HELD_PER_SHARD {
        held.pop_front();
        w.stats.drops.count(DropReason::QueueFull);
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
