//! Reaching peers: the waiting list and its cap, bubbles or a connectivity-test echo
//! for each waiting peer, its queue sent once it answers, native hosts that speak first
//! (held while their test runs, [`crate::first_contact`]) and silent native hosts tested
//! again, and the ICMPv6 error to the host when a peer cannot be reached.

use super::*;

impl<R: Random> Client<R> {
    /// One more peer is about to wait: the list is capped (`pending_capacity`), and
    /// with it the bytes its queues hold. The oldest waiting peer gives way, its
    /// packets lost; a trusted one keeps its entry.
    pub(super) fn make_room_to_wait(&mut self) {
        while self.waiting.len() >= self.cfg.pending_capacity.max(1) {
            let Some(old) = self.waiting.give_way() else { break };
            // A stale list entry (answered or gone since) is passed over: what it may hold
            // is the timer's to settle, or a packet just held for a new wait.
            let Some(lost) = self.peers.give_way(&old) else { continue };
            self.stats.drops.count_n(DropReason::QueueFull, lost);
            // What it held as a first contact goes too (counted as a failed test).
            self.discard_held(&old);
        }
    }

    pub(super) fn flush(&mut self, addr: &Ipv6Addr, to: SocketAddrV4, tx: &mut (impl Transmit + Ports)) {
        self.waiting.ended(addr);
        let Some(mut p) = self.peers.get_mut(addr) else {
            return;
        };
        p.waiting = false;
        p.holding = false;
        p.set_nonce(None);
        p.solicitations = 0;
        let empty = p.queue().is_empty();
        drop(p);
        if empty {
            return;
        }
        let via = self.ports.via(addr);
        let to = self.peer_target(addr, to);
        let Some(mut q) = self.peers.get_mut(addr).and_then(|mut p| p.take_queue()) else {
            return;
        };
        while let Some(packet) = q.next_packet() {
            tx.send(via, to, packet, None);
            self.stats.sent += 1;
            self.stats.sent_bytes += packet.len() as u64;
        }
    }

    /// A native host spoke first, through `from`: hold its packet and run the direct
    /// IPv6 connectivity test to it (RFC 4380 §5.2.3 case 6, §5.2.9), within the shared
    /// first-contact budget.
    pub(super) fn first_contact(
        &mut self,
        now: Duration,
        from: SocketAddrV4,
        src: Ipv6Addr,
        packet: &[u8],
        tx: &mut (impl Transmit + Ports),
    ) -> Outcome {
        // Held first: over budget, nothing else is spent (not even a peer entry).
        match self.first_contacts.hold(src, from, packet, now) {
            Ok(gave_way) => self.stats.drops.count_n(DropReason::SourceMismatch, gave_way),
            Err(r) => return self.dropped(r),
        }
        if self.peers.get(&src).is_none_or(|p| !p.waiting) {
            self.make_room_to_wait();
        }
        if self.peers.get(&src).is_none() {
            let unknown = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
            if self.peers.insert(Peer::new(src, unknown, now), now).is_err() {
                // This packet, and any held before the entry went away.
                let n = self.first_contacts.discard(&src);
                self.stats.drops.count_n(DropReason::TableFull, n);
                return Err(DropReason::TableFull);
            }
        }
        let mut p = self.peers.get_mut(&src).expect("present");
        let newly = !p.waiting;
        p.waiting = true;
        drop(p);
        if newly {
            self.waiting.join(src);
            self.stats.first_contacts += 1;
        }
        self.try_to_reach(now, src, tx);
        self.waits(&src, now);
        Ok(Action::Queued)
    }

    /// The test for `src` passed through `proven`: deliver what it held, if it came
    /// from there too.
    pub(super) fn release_held(&mut self, src: &Ipv6Addr, proven: SocketAddrV4, tx: &mut (impl Transmit + Ports)) {
        let Some(released) = self.first_contacts.release(src, proven) else { return };
        if let Some(mut d) = released.deliver {
            while let Some(packet) = d.next_packet() {
                tx.deliver(packet);
                self.stats.delivered += 1;
                self.stats.delivered_bytes += packet.len() as u64;
                self.stats.first_contact_delivered += 1;
            }
        }
        self.stats.drops.count_n(DropReason::SourceMismatch, released.dropped);
    }

    /// Drop what `src` held: its test failed or was overtaken.
    pub(super) fn discard_held(&mut self, src: &Ipv6Addr) {
        let n = self.first_contacts.discard(src);
        self.stats.drops.count_n(DropReason::ConnectivityTestFailed, n);
    }

    /// A native peer we keep sending to has said nothing for [`RELAY_SILENCE`]: its
    /// relay may be gone (an anycast relay fails, and routing moves the peer's side to
    /// another one, which has nothing to send us until our traffic reaches the peer
    /// again). The direct IPv6 connectivity test runs again through the server, while
    /// our traffic still goes where it went: the reply comes back through whichever
    /// relay serves the peer now, and that relay takes our traffic from then on (as for
    /// any test's reply). A peer that is only quiet costs one echo
    /// per second of one-way traffic; one that answers within the second costs nothing.
    ///
    /// The host asked for it, so it never waits on the first contacts' echo budget
    /// (forged first contacts cannot hold it off); it takes no room from the waiting
    /// list either: with the list full, a later packet tries again.
    pub(super) fn retest(&mut self, now: Duration, dst: Ipv6Addr, tx: &mut (impl Transmit + Ports)) {
        if self.peers.get(&dst).is_none_or(|p| p.waiting) {
            return;
        }
        if !self.waiting.join_retest(dst, self.cfg.pending_capacity.max(1)) {
            return;
        }
        let Some(mut p) = self.peers.get_mut(&dst) else { return };
        p.waiting = true;
        p.tries = 0;
        drop(p);
        self.stats.silent_retests += 1;
        self.try_to_reach(now, dst, tx);
        self.waits(&dst, now);
    }

    /// One more try to reach a waiting peer, within the limits: bubbles for a Teredo
    /// peer, a connectivity-test echo (through our server) for a native one.
    pub(super) fn try_to_reach(&mut self, now: Duration, dst: Ipv6Addr, tx: &mut (impl Transmit + Ports)) {
        let Some(me) = self.address() else { return };
        let Some(server) = self.current_server().map(|i| self.cfg.servers[i].primary) else {
            return;
        };
        let teredo = TeredoAddr::decode(&dst);
        // A nonce is drawn only for a native peer's first echo, not for every queued packet.
        let needs_nonce = teredo.is_none() && self.peers.get(&dst).is_some_and(|p| p.nonce().is_none());
        let nonce = if needs_nonce { self.auth_nonce() } else { [0; 8] };
        let Some(p) = self.peers.get(&dst) else {
            return;
        };
        // The first try goes at once (a new entry's "30 s ago" may predate time zero).
        if (p.tries > 0 && now.saturating_sub(p.last_tx) < RETRY) || p.tries >= PEER_TRIES {
            return;
        }
        // Echo requests for first contacts share one budget: a flood of forged first
        // contacts must not turn the client into a source of echoes. A refused one is
        // tried next tick. Tests the host asked for (its packets queued) never wait on
        // that budget.
        if teredo.is_none()
            && p.queue().is_empty()
            && !self.waiting.is_retest(&dst)
            && !self.first_contacts.allow_test(now)
        {
            return;
        }
        match teredo {
            Some(t) => self.bubble_peer(now, &me, dst, t, tx),
            None => self.send_test_echo(now, &me, dst, server, nonce, tx),
        }
    }

    /// Bubbles to Teredo peer `dst`: the direct one (an opening one first, unless our
    /// NAT is a cone that lets anyone in), then the indirect one; or, to a silent peer we
    /// trusted, a solicitation first (Server Load Reduction).
    fn bubble_peer(
        &mut self,
        now: Duration,
        me: &Ipv6Addr,
        dst: Ipv6Addr,
        t: TeredoAddr,
        tx: &mut (impl Transmit + Ports),
    ) {
        if self.solicit_silent_peer(now, me, dst, t, tx) {
            return;
        }
        let Some(p) = self.peers.get(&dst) else { return };
        // With our port mapped, no direct bubble until the peer has spoken: anyone
        // reaches us at our address's endpoint, and a packet of ours would open a
        // session of our NAT on a random port, which shadows the mapping — the peer's
        // answer then clashes with it and is dropped or comes in under another port.
        let (mapped, echo) = (p.mapped, p.nonce_received);
        let opening = p.tries == 0 && self.q.nat != NatKind::Cone && self.cfg.opening_bubble_ttl > 0;
        let direct = !self.port_mapping.inbound || p.trusted;
        // A peer on our link (RFC 4380 §5.2.4 case 3), or behind our NAT.
        self.reach_on_link(now, me, dst, tx);
        let echo_running = self.open_random_port(now, me, dst, t, tx);
        let direct = direct && self.spend_bubble(now, dst, bubble_budget::Kind::Direct);
        if direct {
            let ttl = opening.then_some(self.cfg.opening_bubble_ttl);
            let echo = Trailers::nonce(self.primary_echo(&dst, echo));
            self.send_bubble(me, &dst, echo, Path { from: Source::Service, to: mapped, ttl }, tx);
        }
        // Port prediction first: a running Echo Test sends the indirect bubble when it
        // has its answer.
        if !echo_running && !self.random_port_bubbles(now, dst, echo, Bubbling::OurTry, tx) {
            self.send_indirect(now, me, dst, t.server, tx);
        } else if let Some(mut p) = self.peers.get_mut(&dst) {
            p.last_tx = now;
            p.tries += 1;
        }
    }

    /// Server Load Reduction (RFC 6081 §5.7): a peer we trusted, silent for 30 s, is
    /// asked directly first (true: a solicitation went, and that is all for now);
    /// with the third solicitation, at 4 s, we also start over as if we had never met
    /// (§5.7.2: "if the count is now three, it MUST send an indirect bubble"), its
    /// random port closed too (port prediction starts over), and the caller sends the
    /// bubbles of a first contact.
    fn solicit_silent_peer(
        &mut self,
        now: Duration,
        me: &Ipv6Addr,
        dst: Ipv6Addr,
        t: TeredoAddr,
        tx: &mut (impl Transmit + Ports),
    ) -> bool {
        let Some(mut p) = self.peers.get_mut(&dst) else { return false };
        if !(p.trusted && self.cfg.server_load_reduction && p.knows_trailers) {
            return false;
        }
        p.solicitations += 1;
        p.tries += 1;
        p.last_tx = now;
        let (to, last) = (p.mapped, p.solicitations >= SOLICITATIONS);
        drop(p);
        // A solicitation is a direct bubble: it counts as one (§5.2.6).
        if self.spend_bubble(now, dst, bubble_budget::Kind::Direct) {
            let ask = Trailers::discovery(DiscoveryType::Solicitation);
            self.send_bubble(me, &dst, ask, Path::new(self.ports.via(&dst), to), tx);
            self.stats.peer_solicitations += 1;
        }
        if !last {
            return true;
        }
        let Some(mut p) = self.peers.get_mut(&dst) else { return true };
        p.trusted = false;
        // Starting over does not start the tries over for what is held: the wait ends
        // when they run out (`give_up`).
        if !p.holding {
            p.tries = 0;
        }
        p.holding = false;
        p.solicitations = 0;
        p.mapped = t.mapped;
        // Starting over: the nonce its last indirect bubble carried is no proof for
        // its next answer; its fresh indirect bubble brings the one to echo.
        p.nonce_received = None;
        drop(p);
        if let Some(local) = self.ports.remove(&dst).and_then(|e| e.local) {
            tx.close_port(local);
        }
        false
    }

    /// The direct IPv6 connectivity test (RFC 4380 §5.2.9) to native host `dst`: an
    /// echo request through our server `server`, carrying the test's nonce (`fresh`
    /// starts one when none runs).
    fn send_test_echo(
        &mut self,
        now: Duration,
        me: &Ipv6Addr,
        dst: Ipv6Addr,
        server: Ipv4Addr,
        fresh: [u8; 8],
        tx: &mut (impl Transmit + Ports),
    ) {
        let Some(mut p) = self.peers.get_mut(&dst) else { return };
        p.last_tx = now;
        p.tries += 1;
        let nonce = match p.nonce() {
            Some(running) => running,
            None => {
                p.set_nonce(Some(fresh));
                fresh
            }
        };
        drop(p);
        let mut id = [0u8; 4];
        self.rng.fill(&mut id);
        let echo = Icmpv6Repr::EchoRequest {
            ident: u16::from_be_bytes([id[0], id[1]]),
            seq_no: u16::from_be_bytes([id[2], id[3]]),
            data: &nonce,
        };
        let len = echo.buffer_len();
        let me = *me;
        Ipv6Repr { src_addr: me, dst_addr: dst, next_header: ip_protocol::ICMPV6, payload_len: len, hop_limit: 64 }
            .emit(&mut self.scratch)
            .expect("fits");
        echo.emit(&me, &dst, &mut self.scratch[40..]).expect("fits");
        tx.send(Source::Service, SocketAddrV4::new(server, TEREDO_PORT), &self.scratch[..40 + len], None);
        self.stats.echoes += 1;
    }

    pub(super) fn error_to_host(
        &mut self,
        now: Duration,
        offending: &Ipv6Packet<&[u8]>,
        code: u8,
        tx: &mut (impl Transmit + Ports),
    ) {
        if !icmp_error::may_answer(offending) || !self.icmp.allow(now) {
            return;
        }
        let mut out = [0u8; 1280];
        if let Some(n) =
            icmp_error::build(&LINK_LOCAL, offending, |q| Icmpv6Repr::DstUnreachable { code, invoking: q }, &mut out)
        {
            tx.deliver(&out[..n]);
        }
    }

    pub(super) fn give_up(&mut self, now: Duration, dst: Ipv6Addr, tx: &mut (impl Transmit + Ports)) {
        self.discard_held(&dst);
        self.waiting.ended(&dst);
        // A peer still valid through its relay keeps it: a test that another relay's
        // (maybe forged) packets started and that failed says nothing against it.
        let kept = self.peers.get_mut(&dst).filter(|p| p.is_valid(now)).map(|mut p| {
            p.waiting = false;
            p.set_nonce(None);
            p.tries = 0;
            (p.holding, p.mapped)
        });
        if let Some((holding, to)) = kept {
            // What waited for a peer to show it takes our packets goes now, as it
            // would have without the wait: held no longer than the tries.
            if holding {
                self.flush(&dst, to, tx);
            }
            return;
        }
        let Some(mut gone) = self.peers.remove(&dst) else {
            return;
        };
        let mut q = gone.queue.drain();
        while let Some(packet) = q.next_packet() {
            if let Ok(ip) = Ipv6Packet::new_checked(packet) {
                self.error_to_host(now, &ip, unreachable::ADDRESS, tx);
            }
        }
    }

    /// Time for the waiting peers: the next try for each one due, or giving up.
    pub(super) fn retry_waiting(&mut self, now: Duration, tx: &mut (impl Transmit + Ports)) {
        for _ in 0..self.waiting.len() {
            let Some(dst) = self.waiting.next() else {
                break;
            };
            let Some(p) = self.peers.get(&dst) else {
                self.discard_held(&dst);
                self.waiting.ended(&dst);
                continue;
            };
            if !p.waiting {
                // Settled another way (its trusted relay spoke): what another relay
                // brought stays unproven.
                self.discard_held(&dst);
                self.waiting.ended(&dst);
                continue;
            }
            if p.queue().is_empty()
                && TeredoAddr::decode(&dst).is_none()
                && !self.first_contacts.contains(&dst)
                && !self.waiting.is_retest(&dst)
            {
                // A first contact whose held packets expired: nothing left to test for
                // (keeps forged sources from spending the echo budget). Our own test of
                // a silent peer runs its course of tries.
                self.give_up(now, dst, tx);
                continue;
            }
            if p.tries > 0 && now.saturating_sub(p.last_tx) < RETRY {
                self.waiting.join(dst);
            } else if p.tries < PEER_TRIES {
                self.try_to_reach(now, dst, tx);
                self.waiting.join(dst);
            } else {
                self.give_up(now, dst, tx);
            }
        }
    }
}
