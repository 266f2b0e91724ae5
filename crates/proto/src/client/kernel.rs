//! The client's share of the kernel data path (`ClientConfig::kernel_path`): the
//! kernel's peer list ([`Transmit::kernel`]) kept to the peers the client would send to
//! straight and take packets from without more thought.
//!
//! A peer is in the list while its entry is trusted, not waiting (no bubbles, no
//! connectivity test: their answers must reach the state machine), holds nothing
//! queued, is reached from the service port (a random port's upkeep reads each of its
//! packets) and is sent to where it is heard from. It leaves the list before anything
//! else may happen to it: the kernel's last-heard time, and the first transmission
//! since, are read back into the entry first, so its validity and a native peer's
//! silence are judged on every packet, whichever path carried them.

use super::*;

/// How much later the state machine may hear from a listed peer (packets the kernel
/// passed up: bubbles, trailers, checksums a sender on this machine left to be taken)
/// before its last-heard time is written again. Well inside [`RELAY_SILENCE`]: the
/// programs take a native peer for silent a second after their first unanswered send,
/// so a peer whose answers all come through the daemon would otherwise be tested again
/// every second or so.
const REWRITE_HEARD: Duration = Duration::from_millis(250);
/// Listed peers whose times are read back each sweep (`timer::SWEEP_EVERY`): the
/// list's cap of 4,096, so each at every sweep, and a peer the kernel carries stays
/// valid in the table's eyes too, and a full table never pushes it out first.
const REFRESH_PER_SWEEP: usize = 4096;

impl<R: Random> Client<R> {
    /// The address the daemon gave the programs (`None`: none yet, or none now): peers
    /// are listed only while it is the client's, so that between a new address and the
    /// daemon's carrying it out no packet moves for the old one.
    pub fn set_kernel_address(&mut self, address: Option<Ipv6Addr>) {
        self.kernel_address = address;
    }

    /// Where the kernel may send to `peer` and take its packets from, if anywhere.
    fn kernel_target(&self, peer: &Ipv6Addr) -> Option<(SocketAddrV4, Duration)> {
        if self.address().is_none() || self.kernel_address != self.address() {
            return None;
        }
        let p = self.peers.get(peer)?;
        let plain = p.trusted && !p.waiting && p.nonce().is_none() && p.queue().is_empty();
        if !plain || p.mapped.ip().is_unspecified() || self.retests.contains(peer) {
            return None;
        }
        if self.ports.via(peer) != Source::Service || self.peer_target(peer, p.mapped) != p.mapped {
            return None;
        }
        Some((p.mapped, p.last_rx))
    }

    /// Bring the kernel's entry for `peer` in line with the table.
    pub(super) fn kernel_sync(&mut self, peer: &Ipv6Addr, tx: &mut impl Transmit) {
        let want = self.kernel_target(peer);
        let have = self.kernel.get(peer).copied();
        match (want, have) {
            (Some((to, heard)), Some((listed, written))) if to == listed => {
                if heard >= written + REWRITE_HEARD {
                    let Some(k) = tx.kernel() else { return };
                    match k.heard(peer) {
                        // The kernel heard it as late: nothing to write (a write would
                        // also clear its first unanswered send since).
                        Some(h) if h >= heard => {
                            self.kernel.insert(*peer, (to, h));
                        }
                        _ => {
                            k.trust(peer, to, heard);
                            self.kernel.insert(*peer, (to, heard));
                        }
                    }
                }
            }
            (Some((to, heard)), _) => {
                let Some(k) = tx.kernel() else { return };
                k.trust(peer, to, heard);
                self.kernel.insert(*peer, (to, heard));
            }
            (None, Some(_)) => {
                self.kernel_pull(peer, tx);
                if let Some(k) = tx.kernel() {
                    k.forget(peer);
                }
                self.kernel.remove(peer);
            }
            (None, None) => {}
        }
    }

    /// What the kernel heard from `peer` and sent to it, into its entry: its last
    /// reception, and (still unanswered) the first transmission since.
    pub(super) fn kernel_pull(&mut self, peer: &Ipv6Addr, tx: &mut impl Transmit) {
        let Some((heard, sent)) = tx.kernel().and_then(|k| k.heard_and_sent(peer)) else { return };
        let Some(mut p) = self.peers.get_mut(peer) else { return };
        if heard > p.last_rx {
            p.last_rx = heard;
        }
        if let Some(sent) = sent.filter(|&t| t > p.last_rx) {
            if p.last_tx <= p.last_rx || sent < p.last_tx {
                p.last_tx = sent;
            }
        }
    }

    /// Every listed peer leaves the kernel's list at the next chance (the table was
    /// replaced, or where peers are sent to changed).
    pub(super) fn kernel_orphan_all(&mut self) {
        self.kernel_orphans.extend(self.kernel.drain().map(|(a, _)| a));
    }

    /// Listed peers the table removed, or that were orphaned, leave the kernel's list
    /// (an orphan still in the table with what the kernel heard and sent read back).
    pub(super) fn kernel_settle(&mut self, tx: &mut impl Transmit) {
        let removed = self.peers.take_removed_trusted();
        let orphans = std::mem::take(&mut self.kernel_orphans);
        for peer in &orphans {
            self.kernel_pull(peer, tx);
        }
        let gone = removed.into_iter().filter(|peer| self.kernel.remove(peer).is_some());
        let gone: Vec<Ipv6Addr> = orphans.into_iter().chain(gone).collect();
        if let Some(k) = tx.kernel() {
            for peer in &gone {
                k.forget(peer);
            }
        }
    }

    /// A sweep: the next few listed peers' times read back.
    pub(super) fn kernel_refresh(&mut self, tx: &mut impl Transmit) {
        if self.kernel.is_empty() {
            return;
        }
        if self.kernel_cursor >= self.kernel.len() {
            self.kernel_cursor = 0;
        }
        let next: Vec<Ipv6Addr> =
            self.kernel.keys().skip(self.kernel_cursor).take(REFRESH_PER_SWEEP).copied().collect();
        self.kernel_cursor += next.len();
        for peer in &next {
            self.kernel_pull(peer, tx);
        }
    }

    /// Peers in the kernel's list.
    pub fn kernel_peers(&self) -> usize {
        self.kernel.len()
    }
}
