//! The relay's share of the kernel data path (`RelayConfig::kernel_path`): the kernel's
//! peer list kept to the clients the relay trusts, by intents ([`KernelIntent`]) the
//! daemon carries out once a call returned, and the kernel's last-heard times taken in
//! ([`SharedRelay::kernel_saw`]) wherever the relay would judge a trusted client by its
//! own. No call of the relay's touches the kernel.
//!
//! A client is listed while its entry is trusted and not waited for. Two workers may
//! carry out their intents for one client in another order than they were made (each
//! after its shard lock is gone): for a listing, the daemon writes what
//! [`SharedRelay::kernel_entry`] says the entry should be at that moment, one writer a
//! shard at a time, so the last write always follows the last change; a removal the
//! entry no longer wants is left to the listing that came after it (whose worker lets
//! the client's queue go first).

use super::*;
use crate::transmit::{KernelIntent, KernelSeen};

/// How stale the kernel's last-heard time of a peer may be before a packet through
/// userland writes it again; the programs write theirs at this grain too (the daemon
/// hands it to them at load).
pub const KERNEL_HEARD_GRAIN: Duration = Duration::from_millis(100);

/// Times one input is handed again at most: the answers come between, and a question
/// another worker's change raised meanwhile is left unasked (the peer taken as the
/// table has it).
const ASKING_ROUNDS: u8 = 2;

/// The relay keeps a kernel data path's peer list.
pub(super) fn mirrors(cfg: &RelayConfig) -> bool {
    cfg.kernel_path && cfg.served == Served::AnyGlobal
}

/// The trusted entries `peers` removed leave the kernel's list too.
pub(super) fn kernel_forget_removed(peers: &mut PeerTable, tx: &mut impl Transmit) {
    for peer in peers.take_removed_trusted() {
        tx.kernel(KernelIntent::Forget { peer });
    }
}

/// A worker's questions to the kernel within one input ([`Action::AskedKernel`]).
#[derive(Debug, Default)]
pub(super) struct KernelAsks {
    /// Times the input was handed back so far.
    rounds: u8,
    /// Peers whose answer came since the input was first handed in.
    answered: Vec<Ipv6Addr>,
    /// A question went out during this round.
    asked: bool,
    /// The input spent its client-first token in an earlier round (it is not spent
    /// again when the input comes back).
    token: bool,
}

impl KernelAsks {
    /// Whether to ask about `peer` now.
    fn may_ask(&self, peer: &Ipv6Addr) -> bool {
        self.rounds < ASKING_ROUNDS && !self.answered.contains(peer)
    }

    /// Whether the input already holds a client-first token; it holds one from now on.
    pub(super) fn take_token(&mut self) -> bool {
        std::mem::replace(&mut self.token, true)
    }

    fn ask(&mut self, peer: Ipv6Addr, tx: &mut impl Transmit) {
        tx.kernel(KernelIntent::Read { peer, sweep: false });
        self.asked = true;
    }

    /// The round's outcome: the input is handed back (what it asked is answered
    /// first), or decided (the answers go with it).
    pub(super) fn after(&mut self, outcome: Outcome) -> Outcome {
        if std::mem::take(&mut self.asked) {
            self.rounds += 1;
            return Ok(Action::AskedKernel);
        }
        self.rounds = 0;
        self.answered.clear();
        self.token = false;
        outcome
    }
}

impl SharedRelay {
    /// A trusted client the kernel carries (listed), to which a packet came through
    /// userland while the table has it silent: the kernel may have heard from it since
    /// (the packet came up for another reason: a loop check, a full map). True if the
    /// kernel was asked.
    pub(super) fn ask_if_listed(
        &self,
        peers: &PeerTable,
        key: &Key,
        w: &mut RelayWorker,
        tx: &mut impl Transmit,
    ) -> bool {
        if !mirrors(&self.cfg) || !peers.get_keyed(key).is_some_and(|p| p.trusted && !p.waiting) {
            return false;
        }
        if !w.kernel.may_ask(&key.addr) {
            return false;
        }
        w.kernel.ask(key.addr, tx);
        true
    }

    /// `newcomer` is about to be inserted into a full table: the trusted entries the
    /// insertion would weigh that look out of use are asked about first, so that one
    /// only the kernel hears from keeps its place. True if any was asked.
    pub(super) fn ask_before_eviction(
        &self,
        peers: &PeerTable,
        w: &mut RelayWorker,
        (now, newcomer): (Duration, &Ipv6Addr),
        tx: &mut impl Transmit,
    ) -> bool {
        let mut asked = false;
        for peer in peers.eviction_candidates(now, newcomer) {
            if w.kernel.may_ask(&peer) {
                w.kernel.ask(peer, tx);
                asked = true;
            }
        }
        asked
    }

    /// `client` is trusted at `mapped`, heard from now: into the kernel's list too,
    /// if the relay keeps one and anything may be sent to the client at all.
    pub(super) fn kernel_trust(&self, tx: &mut impl Transmit, client: &Ipv6Addr, mapped: SocketAddrV4, now: Duration) {
        if !mirrors(&self.cfg) {
            return;
        }
        tx.kernel(if self.carried(client) {
            KernelIntent::Trust { peer: *client, mapped, heard: now }
        } else {
            KernelIntent::Forget { peer: *client }
        });
    }

    /// Whether anything may be sent to `client` at all.
    fn carried(&self, client: &Ipv6Addr) -> bool {
        TeredoAddr::decode_with_prefix(client, self.cfg.prefix).is_some_and(|t| self.tunnel_destination(&t).is_ok())
    }

    /// What the kernel's list should hold for `peer` now: its mapping and last-heard
    /// time, or nothing. The daemon writes this, not the intent's own data, so that
    /// intents carried out in another order than made still leave the list right. A
    /// trusted client is listed unless waited for, and while it proves another port
    /// (it is kept where it was trusted meanwhile).
    pub fn kernel_entry(&self, peer: &Ipv6Addr) -> Option<(SocketAddrV4, Duration)> {
        if !mirrors(&self.cfg) {
            return None;
        }
        let key = self.keys.key(peer);
        let p = lock(self.shard(&key)).peers.get_keyed(&key).map(|p| *p)?;
        (p.trusted && (!p.waiting || p.proving) && self.carried(peer)).then_some((p.mapped, p.last_rx))
    }

    /// Which of the daemon's writers to the kernel's list `peer` belongs to, out of
    /// `writers` (one per shard: a peer's intents are carried out one at a time).
    pub fn kernel_writer(&self, peer: &Ipv6Addr, writers: usize) -> usize {
        self.shard_index(&self.keys.key(peer)) % writers.max(1)
    }

    /// What the kernel saw of `peer` (`None`: not in its list), asked by a
    /// [`KernelIntent::Read`]: its last reception moves up to the kernel's. `sweep`: the
    /// sweep asked, and the peer goes if the kernel too has been without word of it for
    /// the table's idle time.
    pub fn kernel_saw(
        &self,
        w: &mut RelayWorker,
        now: Duration,
        peer: Ipv6Addr,
        seen: Option<KernelSeen>,
        sweep: bool,
        tx: &mut impl Transmit,
    ) {
        let key = self.keys.key(&peer);
        let mut shard = lock(self.shard(&key));
        if let (Some(seen), Some(mut p)) = (seen, shard.peers.get_mut_keyed(&key)) {
            if seen.heard > p.last_rx {
                p.last_rx = seen.heard;
            }
        }
        if sweep && shard.peers.remove_if_idle(&peer, now) {
            kernel_forget_removed(&mut shard.peers, tx);
        }
        drop(shard);
        if w.kernel.rounds > 0 && !w.kernel.answered.contains(&peer) {
            w.kernel.answered.push(peer);
        }
    }
}
