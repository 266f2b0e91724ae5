//! The client's share of the kernel data path (`ClientConfig::kernel_path`): the
//! kernel's peer list kept to the peers the client would send to straight and take
//! packets from without more thought, by intents ([`KernelIntent`]) the daemon carries
//! out once a call returned; what the kernel heard and sent comes back in through
//! [`Client::kernel_saw`]. No call of the client's touches the kernel.
//!
//! A peer is in the list while its entry is trusted, not waiting (no bubbles, no
//! connectivity test: their answers must reach the state machine), holds nothing
//! queued, is reached from the service port (a random port's upkeep reads each of its
//! packets) and is sent to where it is heard from. It leaves the list before anything
//! else may happen to it: a packet about a listed peer waits for what the kernel heard
//! from it and first sent it since ([`Action::AskedKernel`]), so its validity and a
//! native peer's silence are judged on every packet, whichever path carried them.
//!
//! `Client::kernel` is what the client told the list (each peer's mapping and the
//! last-heard time written with it): its own record, so that it writes only changes.

use super::*;
use crate::transmit::{until_decided, KernelIntent, KernelSeen, Recorder};

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

    /// An input about `peer` comes: if the kernel carries it, what the kernel heard
    /// and sent counts first, so it is asked for (true: the input ends as
    /// [`Action::AskedKernel`], to be handed again with the answer in).
    pub(super) fn kernel_ask(&mut self, peer: &Ipv6Addr, tx: &mut impl Transmit) -> bool {
        if self.kernel_asked.is_some() || !self.kernel.contains_key(peer) {
            return false;
        }
        tx.kernel(KernelIntent::Read { peer: *peer, sweep: false });
        self.kernel_asked = Some((*peer, None));
        true
    }

    /// The input is decided: its question, if any, is done with.
    pub(super) fn kernel_done(&mut self) {
        self.kernel_asked = None;
    }

    /// What the kernel saw of `peer` (`None`: not in its list), asked by a
    /// [`KernelIntent::Read`]: its last reception, and (still unanswered) the first
    /// transmission since, into its entry. `sweep`: the sweep asked, and the peer goes
    /// if the kernel too has been without word of it for the table's idle time.
    pub fn kernel_saw(
        &mut self,
        now: Duration,
        peer: Ipv6Addr,
        seen: Option<KernelSeen>,
        sweep: bool,
        tx: &mut impl Transmit,
    ) {
        if let Some(asked) = self.kernel_asked.as_mut().filter(|(p, _)| *p == peer) {
            asked.1 = seen;
        }
        if let (Some(seen), Some(mut p)) = (seen, self.peers.get_mut(&peer)) {
            if seen.heard > p.last_rx {
                p.last_rx = seen.heard;
            }
            if let Some(sent) = seen.sent.filter(|&t| t > p.last_rx) {
                if p.last_tx <= p.last_rx || sent < p.last_tx {
                    p.last_tx = sent;
                }
            }
        }
        if sweep && self.peers.remove_if_idle(&peer, now) {
            self.kernel_settle(tx);
        }
    }

    /// Bring the kernel's entry for `peer` in line with the table.
    pub(super) fn kernel_sync(&mut self, peer: &Ipv6Addr, tx: &mut impl Transmit) {
        let want = self.kernel_target(peer);
        let have = self.kernel.get(peer).copied();
        match (want, have) {
            (Some((to, heard)), Some((listed, written))) if to == listed => {
                if heard >= written + REWRITE_HEARD {
                    // What the kernel had heard when this input asked.
                    let kernel_heard =
                        self.kernel_asked.filter(|(p, _)| p == peer).and_then(|(_, seen)| seen).map(|s| s.heard);
                    match kernel_heard {
                        // The kernel heard it as late: nothing to write (a write would
                        // also clear its first unanswered send since).
                        Some(h) if h >= heard => {
                            self.kernel.insert(*peer, (to, h));
                        }
                        _ => {
                            tx.kernel(KernelIntent::Trust { peer: *peer, mapped: to, heard });
                            self.kernel.insert(*peer, (to, heard));
                        }
                    }
                }
            }
            (Some((to, heard)), _) => {
                tx.kernel(KernelIntent::Trust { peer: *peer, mapped: to, heard });
                self.kernel.insert(*peer, (to, heard));
            }
            (None, Some(_)) => {
                // What it heard and sent is read back before it goes.
                tx.kernel(KernelIntent::Read { peer: *peer, sweep: false });
                tx.kernel(KernelIntent::Forget { peer: *peer });
                self.kernel.remove(peer);
            }
            (None, None) => {}
        }
    }

    /// Every listed peer leaves the kernel's list at the next chance (the table was
    /// replaced, or where peers are sent to changed).
    pub(super) fn kernel_orphan_all(&mut self) {
        self.kernel_orphans.extend(self.kernel.drain().map(|(a, _)| a));
    }

    /// Listed peers the table removed, or that were orphaned, leave the kernel's list
    /// (an orphan still in the table with what the kernel heard and sent read back
    /// first).
    pub(super) fn kernel_settle(&mut self, tx: &mut impl Transmit) {
        let removed = self.peers.take_removed_trusted();
        let orphans = std::mem::take(&mut self.kernel_orphans);
        for &peer in &orphans {
            tx.kernel(KernelIntent::Read { peer, sweep: false });
        }
        let gone = removed.into_iter().filter(|peer| self.kernel.remove(peer).is_some());
        for peer in orphans.into_iter().chain(gone) {
            tx.kernel(KernelIntent::Forget { peer });
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
        let next = self.kernel.keys().skip(self.kernel_cursor).take(REFRESH_PER_SWEEP);
        let mut n = 0;
        for &peer in next {
            tx.kernel(KernelIntent::Read { peer, sweep: false });
            n += 1;
        }
        self.kernel_cursor += n;
    }

    /// [`Client::on_udp`] with the daemon's part played over `w`'s kernel model: handed
    /// again until decided, every read answered ([`Client::answer_kernel`]).
    pub fn on_udp_answered(
        &mut self,
        now: Duration,
        via: Via,
        from: SocketAddrV4,
        data: &[u8],
        w: &mut Recorder,
    ) -> Outcome {
        until_decided(|| {
            let outcome = self.on_udp(now, via, from, data, w);
            self.answer_kernel(now, w);
            outcome
        })
    }

    /// [`Client::on_tun`] with the daemon's part played over `w`'s kernel model.
    pub fn on_tun_answered(&mut self, now: Duration, packet: &[u8], w: &mut Recorder) -> Outcome {
        until_decided(|| {
            let outcome = self.on_tun(now, packet, w);
            self.answer_kernel(now, w);
            outcome
        })
    }

    /// [`Client::on_timer`] with the daemon's part played over `w`'s kernel model.
    pub fn on_timer_answered(&mut self, now: Duration, w: &mut Recorder) {
        self.on_timer(now, w);
        self.answer_kernel(now, w);
    }

    /// The daemon's part, for tests and tools: the reads `w`'s kernel model holds
    /// answered from it ([`Client::kernel_saw`]), and those the answers raise, until
    /// none is left.
    pub fn answer_kernel(&mut self, now: Duration, w: &mut Recorder) {
        w.answer_reads(|w, peer, seen, sweep| self.kernel_saw(now, peer, seen, sweep, w));
    }

    /// Peers in the kernel's list.
    pub fn kernel_peers(&self) -> usize {
        self.kernel.len()
    }
}
