//! Which packets from peers are taken (RFC 4380 §5.2.3's rules, RFC 6081 §5.2.4.4's
//! nonces, local discovery's peers) and what accepting one changes: the peer's
//! mapping, the socket that carries it, what its trailers ask.

use super::*;

/// On what ground a packet from a peer is taken, or why it is not (RFC 4380 §5.2.3's
/// numbered rules, RFC 6081 §5.2.4.4). Taking it has already updated the peer's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Acceptance {
    /// Rule 2: the echo reply of our connectivity test, from wherever it came; the
    /// relay it came through serves the peer from now on. The reply is ours, not the
    /// host's.
    TestReply,
    /// Rule 1: a peer trusted at this very endpoint before this packet.
    Trusted,
    /// A direct bubble echoing our last indirect bubble's nonce (`by_nonce`), or a
    /// peer without nonces (Miredo) answering from another port of its address while
    /// we reach it: the endpoint is its mapping now. `learned_port`: a port its address
    /// does not embed (it is behind a symmetric NAT).
    Proven {
        /// Our nonce proved it.
        by_nonce: bool,
        /// It came from a port its address does not embed.
        learned_port: bool,
    },
    /// Rule 3: its address embeds where it came from; or rule 5: local discovery heard
    /// it there, and it is not a bubble with a nonce.
    Embedded,
    /// Rule 6: a native host through an endpoint not (yet) its own: hold and test.
    FirstContact,
    /// Not taken, for this reason.
    Refused(DropReason),
}

impl<R: Random> Client<R> {
    /// A packet from a peer, on the service port (`port` `None`) or on a random port.
    pub(super) fn on_peer_packet(
        &mut self,
        now: Duration,
        from: SocketAddrV4,
        pkt: &TeredoPacket<'_>,
        port: Option<NonZeroU16>,
        tx: &mut (impl Transmit + Ports),
    ) -> Outcome {
        let ip = &pkt.ipv6;
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let (learned_port, proven, known) = match self.accept(now, from, pkt, port) {
            Acceptance::Refused(why) => return self.dropped(why),
            Acceptance::FirstContact => return self.first_contact(now, from, src, ip.packet(), tx),
            Acceptance::TestReply => {
                self.release_held(&src, from, tx);
                self.flush(&src, from, tx);
                return Ok(Action::Consumed);
            }
            Acceptance::Trusted => (false, false, true),
            Acceptance::Proven { by_nonce, learned_port } => (learned_port, by_nonce, false),
            Acceptance::Embedded => (false, false, false),
        };
        // A direct response (RFC 4380 §5.2.6): its bubbles count from nothing again (no
        // look-up a packet while no peer has a count).
        if !self.bubbles_spent.is_empty() {
            self.bubbles_spent.answered(&src);
        }
        let new_route = self.route_through(now, &src, port, proven, tx);
        // The peer now sees us where our address does not say (its proven port
        // changed, or our packets leave from a random port): it takes them only once we
        // echoed a nonce of its own. While what waits is held so, a bubble of its
        // echoing ours is no sign that it takes our packets either (a neighbour sends
        // one to the local address our indirect bubble listed before it heard us);
        // anything else it sends from there is: data, an advertisement, a bubble without
        // a nonce go to us from there only once it trusts us there.
        let holding = Self::carries_nonce(pkt) && self.peers.get(&src).is_some_and(|p| p.holding);
        let reprove = learned_port || new_route || holding;
        let echo = if reprove { self.peers.get(&src).and_then(|p| p.nonce_received) } else { None };
        if reprove && echo.is_some() {
            // Tell it at once, through the port its NAT opened towards us: its own
            // bubbles to our address's mapping may all have been dropped, and it
            // would otherwise wait for its next indirect bubble's answer (RFC 6081 §6.1
            // step 10) to trust us.
            let to = self.peer_target(&src, from);
            self.send_bubble(&dst, &src, Trailers::nonce(echo), Path::new(Source::service_or(port), to), tx);
        }
        // Without its nonce yet (its indirect bubble is still on its way through the
        // servers), what the host queued waits for it, and what the host sends next
        // waits behind it: sent now, it would be dropped.
        let hold = reprove && echo.is_none();
        if hold {
            if let Some(mut p) = self.peers.get_mut(&src) {
                p.holding = true;
            }
        }
        if pkt.is_bubble() && !pkt.trailers.is_empty() {
            self.on_peer_trailers(now, from, port, known, pkt, tx);
        }
        if !hold {
            self.flush(&src, from, tx);
        }
        if pkt.is_bubble() {
            return Ok(Action::Consumed);
        }
        self.deliver(ip.packet(), tx);
        Ok(Action::Forwarded)
    }

    /// Whether a packet from `from` (on the service port, `port` `None`, or a random port)
    /// is taken, and on what ground; a taken one is recorded in the peer's entry.
    fn accept(
        &mut self,
        now: Duration,
        from: SocketAddrV4,
        pkt: &TeredoPacket<'_>,
        port: Option<NonZeroU16>,
    ) -> Acceptance {
        let ip = &pkt.ipv6;
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        if let Err(r) = self.may_take(&src, &dst, port) {
            return Acceptance::Refused(r);
        }
        // Also when the peer was trusted through another relay: that is how a relay
        // change is followed.
        if self.peers.get(&src).and_then(|p| p.nonce()).is_some_and(|n| is_echo_reply_with(ip, &n)) {
            if let Some(mut p) = self.peers.get_mut(&src) {
                p.trusted = true;
                p.mapped = from;
                p.last_rx = now;
                p.tries = 0;
            }
            return Acceptance::TestReply;
        }
        let embedded = TeredoAddr::decode(&src);
        if let Some(taken) = self.accept_known(now, from, pkt, embedded) {
            return taken;
        }
        let with_nonce = Self::carries_nonce(pkt);
        if self.take_at_embedded_mapping(now, from, src, embedded, with_nonce) {
            return Acceptance::Embedded;
        }
        if embedded.is_none() && !pkt.is_bubble() {
            return Acceptance::FirstContact;
        }
        Acceptance::Refused(DropReason::SourceMismatch)
    }

    /// Why a packet from `src` to `dst` (on random port `port`, if one) is not for us,
    /// if it is not.
    fn may_take(&self, src: &Ipv6Addr, dst: &Ipv6Addr, port: Option<NonZeroU16>) -> Result<(), DropReason> {
        if !self.our_address(dst) {
            return Err(DropReason::LocalDestination);
        }
        if !src.is_forwardable() {
            // Forged RAs and the like never reach the host stack, nor does anything
            // posing as the host's own site (unique-local) or as loopback.
            return Err(DropReason::SourceMismatch);
        }
        // A random port hears only the peer it was opened for.
        if port.is_some() && self.ports.get(src).and_then(|e| e.local) != port {
            return Err(DropReason::SourceMismatch);
        }
        Ok(())
    }

    /// A packet from a peer we have an entry for, taken at its trusted mapping or
    /// proving one (`None`: neither).
    fn accept_known(
        &mut self,
        now: Duration,
        from: SocketAddrV4,
        pkt: &TeredoPacket<'_>,
        embedded: Option<TeredoAddr>,
    ) -> Option<Acceptance> {
        let src = pkt.ipv6.src_addr();
        let nonce = self.nonce_in(pkt);
        let with_nonce = Self::carries_nonce(pkt);
        match self.peers.get_mut(&src) {
            Some(mut p) if p.trusted && p.mapped == from => {
                p.last_rx = now;
                // Tries count until the peer shows it takes our packets: a bubble
                // echoing our nonce while what waits is held for that does not.
                if !(p.holding && with_nonce) {
                    p.tries = 0;
                }
                Some(Acceptance::Trusted)
            }
            // A nonce proves one exchange, once, and only while we are still reaching the
            // peer: a trusted peer's mapping is never moved by a guessed or replayed one.
            // Without the Miredo rule, a symmetric-NAT Miredo client could not be reached.
            Some(mut p)
                if ((!p.trusted || p.waiting) && nonce.is_some() && p.nonce_sent == nonce && embedded.is_some())
                    || (p.waiting
                        && pkt.is_bubble()
                        && nonce.is_none()
                        && !p.knows_trailers
                        && embedded.is_some_and(|t| t.mapped.ip() == from.ip())) =>
            {
                // Also for a peer local discovery heard at `from`: its bubble echoing our
                // nonce from there may answer the local address our indirect bubble
                // listed (hairpinning), not our announcement, which it may never have
                // heard. It takes our packets only once we echoed its own nonce, or
                // once it heard us (its advertisement, data, a bubble without a nonce).
                let learned_port = (!p.trusted || p.mapped != from) && embedded.is_some_and(|t| t.mapped != from);
                let by_nonce = nonce.is_some();
                if by_nonce {
                    p.nonce_sent = None;
                }
                p.trusted = true;
                p.mapped = from;
                p.last_rx = now;
                // Not where it may not take ours yet (what waits is held): the tries
                // run on, so the wait ends.
                if !learned_port {
                    p.tries = 0;
                }
                Some(Acceptance::Proven { by_nonce, learned_port })
            }
            _ => None,
        }
    }

    /// Rules 3 and 5: a Teredo source whose embedded mapping is where it came from, or
    /// a peer local discovery found, from where it was heard; trusted there (a new
    /// entry, or the old one renewed). False when neither holds, or the table is full.
    fn take_at_embedded_mapping(
        &mut self,
        now: Duration,
        from: SocketAddrV4,
        src: Ipv6Addr,
        embedded: Option<TeredoAddr>,
        with_nonce: bool,
    ) -> bool {
        // A peer heard on the link writes to our local address from there once it heard
        // us too, and then takes our packets from there (rule 5). A bubble with a nonce
        // is no sign of that: hairpinning sends one to the local address our indirect
        // bubble listed, to a peer that never heard our announcement.
        let local = || embedded.is_some() && !with_nonce && self.local_peers.get(&src, now) == Some(from);
        // Never for an embedded address on a subnet we are attached to: that host
        // is met by local discovery, not this way (CVE-2006-6264).
        let direct = embedded.is_some_and(|t| t.mapped == from && self.unreachable_embedded(*from.ip()).is_none());
        if direct || local() {
            // A peer proven elsewhere (behind a symmetric NAT) keeps that mapping while
            // it is valid: a packet claiming the embedded one is taken (RFC 4380 case
            // 3) but moves nothing.
            let elsewhere = self.peers.get(&src).is_some_and(|p| p.is_valid(now) && p.mapped != from);
            let mut p = Peer::new(src, from, now);
            p.trusted = true;
            p.last_rx = now;
            // Trusted afresh at this mapping; what it queued, its last transmission
            // and what it told us of itself stay.
            let renewed = !elsewhere
                && self
                    .peers
                    .get_mut(&src)
                    .map(|mut old| {
                        p.last_tx = old.last_tx;
                        p.nonce_received = old.nonce_received;
                        p.knows_trailers = old.knows_trailers;
                        *old = p;
                        old.set_nonce(None);
                    })
                    .is_some();
            elsewhere || renewed || self.peers.insert(p, now).is_ok()
        } else {
            false
        }
    }

    /// Which of our sockets carries `src` from now on (RFC 6081 §5.4.4.5), after a
    /// packet taken on `port` (`None`: the service port): true when that moved to a random
    /// port of ours. A random port is closed when the peer proved itself on the service
    /// port instead.
    fn route_through(
        &mut self,
        now: Duration,
        src: &Ipv6Addr,
        port: Option<NonZeroU16>,
        proven: bool,
        tx: &mut (impl Transmit + Ports),
    ) -> bool {
        let mut new_route = false;
        if !self.ports.is_empty() {
            if let Some(e) = self.ports.get_mut(src) {
                if port.is_some() && e.local == port {
                    // It answered on our random port: everything to it leaves from there.
                    new_route = !e.via_local;
                    e.via_local = true;
                    e.touched = now;
                } else if let (None, true, Some(local), false) = (port, proven, e.local, e.via_local) {
                    // It answered on the service port: the random one is not needed.
                    tx.close_port(local);
                    (e.local, e.predicted, e.echo) = (None, None, None);
                }
            }
        }
        new_route
    }

    /// Trailers of an accepted direct bubble from `src` at `from`: the peer knows RFC
    /// 6081, and a Server Load Reduction solicitation is answered with an advertisement
    /// (§5.7.4.2) — only now that the bubble passed the acceptance rules, so a forged
    /// solicitation cannot make us send to an address of its choosing. A peer on the
    /// link, writing from where local discovery heard it, asks so when it calls us
    /// ([`Client::reach_on_link`]); it is answered whether or not Server Load Reduction
    /// is on, since we take its packets from there now.
    pub(super) fn on_peer_trailers(
        &mut self,
        now: Duration,
        from: SocketAddrV4,
        port: Option<NonZeroU16>,
        known: bool,
        pkt: &TeredoPacket<'_>,
        tx: &mut (impl Transmit + Ports),
    ) {
        let (me, src) = (&pkt.ipv6.dst_addr(), &pkt.ipv6.src_addr());
        let on_link = !self.local_peers.is_empty() && self.local_peers.get(src, now) == Some(from);
        if !self.cfg.symmetric_nat_support && !self.cfg.server_load_reduction && !on_link && !known {
            return;
        }
        let solicited = matches!(
            pkt.trailers.get(trailer_type::NEIGHBOR_DISCOVERY),
            Some(TrailerRepr::NeighborDiscovery(DiscoveryType::Solicitation))
        );
        // Only a peer trusted at this endpoint before this packet is answered, once per
        // bubble spacing: a packet spoofed from an address its source embeds would
        // otherwise turn us into a reflector. A peer on our link, once per 200 ms: its
        // call may come just after our last transmission to it (our answer to its
        // indirect bubble), and it holds what it sends us until we answer.
        let spacing = if on_link { ANSWER_SPACING } else { RETRY };
        let mut answer = false;
        if let Some(mut p) = self.peers.get_mut(src) {
            p.knows_trailers = true;
            answer = (known || on_link) && (p.last_tx + spacing <= now || p.last_tx == Duration::ZERO);
            if answer && solicited {
                p.last_tx = now;
            }
        }
        // Answered whether or not Server Load Reduction is on: a peer that asks holds
        // what it would send us until we do.
        if solicited && answer {
            let ad = Trailers::discovery(DiscoveryType::Advertisement);
            self.send_bubble(me, src, ad, Path::new(Source::service_or(port), from), tx);
            self.stats.peer_advertisements += 1;
        }
    }
}

/// Whether `ip` is an ICMPv6 echo reply (no extension headers) carrying `nonce`.
pub(super) fn is_echo_reply_with(ip: &Ipv6Packet<&[u8]>, nonce: &[u8; 8]) -> bool {
    if ip.next_header() != ip_protocol::ICMPV6 {
        return false;
    }
    let Ok(icmp) = Icmpv6Packet::new_checked(ip.payload()) else {
        return false;
    };
    icmp.msg_type() == message::ECHO_REPLY
        && icmp.verify_checksum(&ip.src_addr(), &ip.dst_addr())
        && icmp.payload() == nonce
}
