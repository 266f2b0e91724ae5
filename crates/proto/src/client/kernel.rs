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
//! [`KernelList`] is the part that keeps it: what the client told the list (each
//! peer's mapping and the last-heard time written with it, its own record, so that it
//! writes only changes), the question an input is waiting on, the peers to take out.
//! The client says what each peer should be ([`Client::kernel_target`], from the
//! table); the part decides what to write.

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

/// What the client told the kernel's peer list, and what it asks of it.
#[derive(Debug, Default)]
pub(super) struct KernelList {
    /// Each listed peer's mapping and the last-heard time written with it.
    listed: HashMap<Ipv6Addr, (SocketAddrV4, Duration)>,
    /// The peer the input in hand asked about, and the answer once it came.
    asked: Option<(Ipv6Addr, Option<KernelSeen>)>,
    /// Listed peers to take out at the next chance (the table was replaced, or where
    /// peers are sent to changed), what the kernel saw of them read back first.
    orphans: Vec<Ipv6Addr>,
    /// Where the next sweep's read-back of listed peers starts.
    cursor: usize,
    /// The address the programs match ([`Client::set_kernel_address`]).
    address: Option<Ipv6Addr>,
}

impl KernelList {
    /// Peers in the list.
    pub(super) fn len(&self) -> usize {
        self.listed.len()
    }

    /// Something waits to be taken out.
    pub(super) fn has_orphans(&self) -> bool {
        !self.orphans.is_empty()
    }

    /// An input about `peer` comes: if the list carries it, what the kernel heard and
    /// sent counts first, so it is asked for (true: the input ends as
    /// [`Action::AskedKernel`], to be handed again with the answer in). One question
    /// an input.
    fn ask(&mut self, peer: &Ipv6Addr, tx: &mut impl Transmit) -> bool {
        if self.asked.is_some() || !self.listed.contains_key(peer) {
            return false;
        }
        tx.kernel(KernelIntent::Read { peer: *peer, sweep: false });
        self.asked = Some((*peer, None));
        true
    }

    /// The kernel's answer about `peer`, kept for the input that asked.
    fn answer(&mut self, peer: &Ipv6Addr, seen: Option<KernelSeen>) {
        if let Some(asked) = self.asked.as_mut().filter(|(p, _)| p == peer) {
            asked.1 = seen;
        }
    }

    /// The input is decided: its question, if any, is done with.
    fn done(&mut self) {
        self.asked = None;
    }

    /// `peer`'s entry in the list brought to `want` (where the kernel may send to it
    /// and take its packets from, with its last-heard time; `None`: nowhere).
    fn sync(&mut self, peer: &Ipv6Addr, want: Option<(SocketAddrV4, Duration)>, tx: &mut impl Transmit) {
        match (want, self.listed.get(peer).copied()) {
            (Some((to, heard)), Some((listed, written))) if to == listed => {
                if heard < written + REWRITE_HEARD {
                    return;
                }
                // What the kernel had heard when this input asked.
                let kernel_heard = self.asked.filter(|(p, _)| p == peer).and_then(|(_, seen)| seen).map(|s| s.heard);
                match kernel_heard {
                    // The kernel heard it as late: nothing to write (a write would also
                    // clear its first unanswered send since).
                    Some(h) if h >= heard => {
                        self.listed.insert(*peer, (to, h));
                    }
                    _ => self.trust(peer, to, heard, tx),
                }
            }
            (Some((to, heard)), _) => self.trust(peer, to, heard, tx),
            (None, Some(_)) => {
                // What it heard and sent is read back before it goes.
                tx.kernel(KernelIntent::Read { peer: *peer, sweep: false });
                tx.kernel(KernelIntent::Forget { peer: *peer });
                self.listed.remove(peer);
            }
            (None, None) => {}
        }
    }

    fn trust(&mut self, peer: &Ipv6Addr, mapped: SocketAddrV4, heard: Duration, tx: &mut impl Transmit) {
        tx.kernel(KernelIntent::Trust { peer: *peer, mapped, heard });
        self.listed.insert(*peer, (mapped, heard));
    }

    /// Every listed peer leaves the list at the next chance.
    pub(super) fn orphan_all(&mut self) {
        self.orphans.extend(self.listed.drain().map(|(a, _)| a));
    }

    /// Listed peers the table `removed`, and the orphans, leave the list (an orphan
    /// still in the table with what the kernel heard and sent read back first).
    fn settle(&mut self, removed: Vec<Ipv6Addr>, tx: &mut impl Transmit) {
        let orphans = std::mem::take(&mut self.orphans);
        for &peer in &orphans {
            tx.kernel(KernelIntent::Read { peer, sweep: false });
        }
        let gone = removed.into_iter().filter(|peer| self.listed.remove(peer).is_some());
        for peer in orphans.into_iter().chain(gone) {
            tx.kernel(KernelIntent::Forget { peer });
        }
    }

    /// A sweep: the next few listed peers' times read back.
    fn refresh(&mut self, tx: &mut impl Transmit) {
        if self.cursor >= self.listed.len() {
            self.cursor = 0;
        }
        let next = self.listed.keys().skip(self.cursor).take(REFRESH_PER_SWEEP);
        let mut n = 0;
        for &peer in next {
            tx.kernel(KernelIntent::Read { peer, sweep: false });
            n += 1;
        }
        self.cursor += n;
    }
}

impl<R: Random> Client<R> {
    /// The address the daemon gave the programs (`None`: none yet, or none now): peers
    /// are listed only while it is the client's, so that between a new address and the
    /// daemon's carrying it out no packet moves for the old one.
    pub fn set_kernel_address(&mut self, address: Option<Ipv6Addr>) {
        self.kernel.address = address;
    }

    /// Where the kernel may send to `peer` and take its packets from, if anywhere.
    fn kernel_target(&self, peer: &Ipv6Addr) -> Option<(SocketAddrV4, Duration)> {
        if self.address().is_none() || self.kernel.address != self.address() {
            return None;
        }
        let p = self.peers.get(peer)?;
        let plain = p.trusted && !p.waiting && p.nonce().is_none() && p.queue().is_empty();
        if !plain || p.mapped.ip().is_unspecified() || self.waiting.is_retest(peer) {
            return None;
        }
        if self.ports.via(peer) != Source::Service || self.peer_target(peer, p.mapped) != p.mapped {
            return None;
        }
        Some((p.mapped, p.last_rx))
    }

    /// See [`KernelList::ask`].
    pub(super) fn kernel_ask(&mut self, peer: &Ipv6Addr, tx: &mut impl Transmit) -> bool {
        self.kernel.ask(peer, tx)
    }

    /// The input is decided.
    pub(super) fn kernel_done(&mut self) {
        self.kernel.done();
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
        self.kernel.answer(&peer, seen);
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
        self.kernel.sync(peer, want, tx);
    }

    /// Listed peers the table removed, or that were orphaned, leave the kernel's list.
    pub(super) fn kernel_settle(&mut self, tx: &mut impl Transmit) {
        let removed = self.peers.take_removed_trusted();
        self.kernel.settle(removed, tx);
    }

    /// A sweep: the next few listed peers' times read back.
    pub(super) fn kernel_refresh(&mut self, tx: &mut impl Transmit) {
        self.kernel.refresh(tx);
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
