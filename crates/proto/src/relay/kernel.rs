//! The relay's share of the kernel data path (`RelayConfig::kernel_path`): the kernel's
//! peer list ([`Transmit::kernel`]) kept to the clients the relay trusts, under the
//! shard's lock, and the kernel's last-heard times read back wherever the relay would
//! judge a trusted client by its own.

use super::*;

/// How stale the kernel's last-heard time of a peer may be before a packet through
/// userland writes it again; the programs write theirs at this grain too (the daemon
/// hands it to them at load).
pub const KERNEL_HEARD_GRAIN: Duration = Duration::from_millis(100);

/// The relay keeps a kernel data path's peer list.
pub(super) fn mirrors(cfg: &RelayConfig) -> bool {
    cfg.kernel_path && cfg.served == Served::AnyGlobal
}

/// The trusted entries `peers` removed leave the kernel's list too.
pub(super) fn kernel_forget_removed(peers: &mut PeerTable, tx: &mut impl Transmit) {
    let removed = peers.take_removed_trusted();
    if let Some(k) = tx.kernel().filter(|_| !removed.is_empty()) {
        for a in &removed {
            k.forget(a);
        }
    }
}

impl SharedRelay {
    /// A trusted peer the kernel heard from since we did: its last reception moves up
    /// to the kernel's. True if it is valid now. Asks the kernel only about trusted
    /// entries that are not waited for (those are not in its list), so that packets to
    /// made-up destinations cost no look-up.
    pub(super) fn kernel_heard(&self, peers: &mut PeerTable, key: &Key, now: Duration, tx: &mut impl Transmit) -> bool {
        if !mirrors(&self.cfg) || !peers.get_keyed(key).is_some_and(|p| p.trusted && !p.waiting) {
            return false;
        }
        let Some(heard) = tx.kernel().and_then(|k| k.heard(&key.addr)) else {
            return false;
        };
        let Some(mut p) = peers.get_mut_keyed(key) else {
            return false;
        };
        if heard > p.last_rx {
            p.last_rx = heard;
        }
        p.is_valid(now)
    }

    /// `client` is trusted at `mapped`, heard from now: into the kernel's list too,
    /// if the relay keeps one and anything may be sent to the client at all.
    pub(super) fn kernel_trust(&self, tx: &mut impl Transmit, client: &Ipv6Addr, mapped: SocketAddrV4, now: Duration) {
        if !mirrors(&self.cfg) {
            return;
        }
        let carried = TeredoAddr::decode_with_prefix(client, self.cfg.prefix)
            .is_some_and(|t| self.tunnel_destination(&t).is_ok());
        if let Some(k) = tx.kernel() {
            if carried {
                k.trust(client, mapped, now);
            } else {
                k.forget(client);
            }
        }
    }
}
