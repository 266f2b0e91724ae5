//! Local discovery on the link (RFC 4380 §5.2.8): our announcements and the peers'
//! (the peers heard are kept in [`crate::local_discovery`]).

use super::*;

/// Our announcements on the link: the schedule (RFC 4380 §5.2.8's every 200 to 300 s,
/// and before it, after coming up with a new address, one at once and
/// [`ANNOUNCE_REPEATS`] more [`RETRY`] apart), the last one sent, and one outside the
/// schedule deferred for the spacing. Never two within [`ANSWER_SPACING`].
#[derive(Debug, Default)]
pub(super) struct Announcer {
    last: Option<Duration>,
    next: Duration,
    /// Announcements of the schedule still to repeat, [`RETRY`] apart, after coming up.
    repeats: u8,
    /// An announcement outside the schedule, waiting for the spacing since our last.
    deferred: Option<Duration>,
}

impl Announcer {
    /// A new address: one at once, then the repeats.
    pub(super) fn restart(&mut self, now: Duration) {
        *self = Announcer { next: now, repeats: ANNOUNCE_REPEATS, ..Announcer::default() };
    }

    /// An announcement outside the schedule: true if it may go now; otherwise it waits
    /// until `spacing` after the last (deferred, not dropped: a peer that came up since
    /// our last one, the reason to announce again, has not heard it).
    fn may_go_within(&mut self, now: Duration, spacing: Duration) -> bool {
        let Some(last) = self.last.filter(|&t| now.saturating_sub(t) < spacing) else { return true };
        let at = last + spacing;
        self.deferred = Some(self.deferred.map_or(at, |d| d.min(at)));
        false
    }

    /// Whether the schedule's announcement is due now and may go; one that would come
    /// within the spacing of the last waits for it, keeping its place.
    fn scheduled_due(&mut self, now: Duration) -> bool {
        if now < self.next {
            return false;
        }
        if let Some(last) = self.last.filter(|&t| now.saturating_sub(t) < ANSWER_SPACING) {
            self.next = last + ANSWER_SPACING;
            return false;
        }
        true
    }

    /// The schedule's announcement went at `now`: the next is a repeat, or `period`
    /// later (asked only then: it draws random bits).
    fn scheduled_sent(&mut self, now: Duration, period: impl FnOnce() -> Duration) {
        self.next = if self.repeats > 0 {
            self.repeats -= 1;
            now + RETRY
        } else {
            now + period()
        };
    }

    /// A deferred announcement is due.
    fn deferred_due(&self, now: Duration) -> bool {
        self.deferred.is_some_and(|d| now >= d)
    }

    /// One went at `now`: whatever waited for the spacing is served by it.
    fn sent(&mut self, now: Duration) {
        self.last = Some(now);
        self.deferred = None;
    }

    /// When the next is due, scheduled or deferred.
    fn due(&self) -> Duration {
        self.deferred.map_or(self.next, |d| d.min(self.next))
    }
}

impl<R: Random> Client<R> {
    /// A discovery bubble heard on the link (RFC 4380 §5.2.8): from a Teredo address
    /// behind our own NAT (its address embeds our public one, Miredo's check) and from
    /// our own network (a subnet the host is attached to, as the daemon lists them; the
    /// same /24 when it could not). The peer is
    /// noted, not trusted, and gets a bubble straight back; a peer new to us also gets
    /// our announcement (it may have missed our last one).
    pub(super) fn on_discovery(
        &mut self,
        now: Duration,
        from: SocketAddrV4,
        pkt: &TeredoPacket<'_>,
        tx: &mut (impl Transmit + Ports),
    ) -> Outcome {
        let (Some(me), Phase::Up { ra, .. }) = (self.address(), &self.q.phase) else {
            return self.dropped(DropReason::LocalDestination);
        };
        let ours = *ra.mapped.ip();
        let ip = &pkt.ipv6;
        let src = ip.src_addr();
        if !self.cfg.local_discovery || !pkt.is_bubble() || ip.dst_addr() != ALL_NODES || src == me {
            return self.dropped(DropReason::LocalDestination);
        }
        let on_link = self.local.is_some_and(|l| self.same_subnet(*l.ip(), *from.ip()));
        match TeredoAddr::decode(&src) {
            Some(t) if *t.mapped.ip() == ours && on_link => {}
            _ => return self.dropped(DropReason::SourceMismatch),
        }
        // Only a peer new to us (or moved) is answered, and announced to: a flood of
        // announcements, or forged ones naming a victim on our link, draws nothing more.
        if !self.local_peers.heard(src, from, now) {
            return Ok(Action::Consumed);
        }
        self.send_bubble(&me, &src, Trailers::default(), Path::service(from), tx);
        // It may have missed our last announcement (it was not there yet): ours again
        // now, or when one that went out a moment ago is 200 ms old.
        self.announce_within(now, ANSWER_SPACING, tx);
        Ok(Action::Answered)
    }

    /// A discovery bubble to the link (RFC 4380 §5.2.8) outside the schedule, on a
    /// call: at most one per bubble spacing.
    pub(super) fn announce(&mut self, now: Duration, tx: &mut (impl Transmit + Ports)) {
        self.announce_within(now, RETRY, tx);
    }

    /// An announcement outside the schedule now, or, when the last one went out less
    /// than `spacing` ago, as soon as the spacing allows: deferred, not dropped, since
    /// a peer that came up since our last one (the reason to announce again) has not
    /// heard it. The schedule (the repeats after coming up, then every 200 to 300 s)
    /// is not moved by it.
    pub(super) fn announce_within(&mut self, now: Duration, spacing: Duration, tx: &mut (impl Transmit + Ports)) {
        if self.announcer.may_go_within(now, spacing) {
            self.send_announcement(now, tx);
        }
    }

    /// The announcements due at `now`: a deferred one, and the schedule's — RFC 4380
    /// §5.2.8's every 200 to 300 s, and before them, after we came up with a new
    /// address, one at once and [`ANNOUNCE_REPEATS`] more [`RETRY`] apart. Never two
    /// within [`ANSWER_SPACING`]: a scheduled one that would be waits for it, keeping
    /// its place in the schedule.
    pub(super) fn announce_when_due(&mut self, now: Duration, tx: &mut (impl Transmit + Ports)) {
        if self.announcer.scheduled_due(now) && self.send_announcement(now, tx) {
            let rng = &mut self.rng;
            self.announcer.scheduled_sent(now, || Duration::from_secs(200 + rng.below(101)));
        }
        // A deferred one, unless the schedule's just served it.
        if self.announcer.deferred_due(now) {
            self.announce_within(now, ANSWER_SPACING, tx);
        }
    }

    /// When [`Client::announce_when_due`] next sends: the schedule's or a deferred
    /// announcement, while there is an address to announce and discovery is on.
    pub(super) fn announce_due(&self) -> Option<Duration> {
        if !self.cfg.local_discovery || self.address().is_none() {
            return None;
        }
        Some(self.announcer.due())
    }

    /// One announcement to the link, if we have an address and local discovery is on.
    fn send_announcement(&mut self, now: Duration, tx: &mut (impl Transmit + Ports)) -> bool {
        let Some(me) = self.address() else { return false };
        if !self.cfg.local_discovery {
            return false;
        }
        let n = emit_bubble(&me, &ALL_NODES, 1, &mut self.scratch).expect("fits");
        tx.send(Source::Service, GROUP, &self.scratch[..n], None);
        self.stats.bubbles += 1;
        self.announcer.sent(now);
        true
    }

    /// Whether Teredo address `peer` embeds our own public IPv4 address: a peer behind
    /// our NAT, the one case local discovery and hairpinning are for.
    pub(super) fn behind_our_nat(&self, peer: &Ipv6Addr) -> bool {
        let Phase::Up { ra, .. } = &self.q.phase else { return false };
        TeredoAddr::decode(peer).is_some_and(|t| t.mapped.ip() == ra.mapped.ip())
    }

    /// Our side, when we call `peer`, of a contact on the link: bubbles between two
    /// clients behind one NAT meet only there when the NAT does not hairpin. A peer
    /// heard on the link gets our announcement (which it needs to take our bubble) and
    /// a bubble at its local address, which asks (a Neighbor Discovery solicitation)
    /// whether it takes our packets there: its advertisement says so, and what waits
    /// goes at once. A bubble of its echoing our nonce from there would not: that may
    /// answer the local address our indirect bubble listed, from a peer that never heard
    /// our announcement. A peer behind our NAT not heard there gets our
    /// announcement, which draws its own (the last one either of us sent may have been
    /// lost, or gone out before the other was up): without it, the two would stay
    /// apart until the next announcement. At most one announcement per bubble spacing.
    ///
    /// Only the caller announces so: the peer, hearing us first, writes to us from its
    /// local address without a nonce only once it has heard us, so we trust it (and
    /// send what waits) only when it will take our packets. A callee announcing itself when called
    /// through the server was tried: the caller could trust it before it had heard the
    /// caller, and the caller's first packet was refused (the e2e same-NAT case).
    pub(super) fn reach_on_link(
        &mut self,
        now: Duration,
        me: &Ipv6Addr,
        peer: Ipv6Addr,
        tx: &mut (impl Transmit + Ports),
    ) {
        if !self.cfg.local_discovery {
            return;
        }
        if let Some(at) = self.local_peers.get(&peer, now) {
            self.announce(now, tx);
            let ask = Trailers::discovery(DiscoveryType::Solicitation);
            self.send_bubble(me, &peer, ask, Path::service(at), tx);
        } else if self.behind_our_nat(&peer) {
            self.announce(now, tx);
        }
    }

    /// Whether `a` and `b` are on one subnet this host is attached to (RFC 6081 §5.6's
    /// "local subnet", as the daemon lists them); without a list, the same /24.
    pub(super) fn same_subnet(&self, a: Ipv4Addr, b: Ipv4Addr) -> bool {
        let (a, b) = (u32::from(a), u32::from(b));
        if self.attached.is_empty() {
            return a >> 8 == b >> 8;
        }
        self.attached.iter().any(|&(net, mask)| a & mask == net && b & mask == net)
    }
}
