//! What comes from our server that is not an advertisement: indirect bubbles (answered
//! with a direct bubble, and with an indirect one of ours when the peer speaks RFC
//! 6081) and the ICMPv6 it passes on between Teredo peers.

use super::*;

/// Entries an Alternate Address trailer holds at most (RFC 6081 §4.3).
const ALTERNATES: usize = 4;

/// A packet from our server that is not an advertisement, as answering it needs it.
struct FromServer {
    src: Ipv6Addr,
    /// Its Nonce trailer, if any.
    nonce: Option<NonZeroU32>,
    /// The sender's Teredo address, when it is a Teredo peer's bubble.
    teredo: Option<TeredoAddr>,
    /// The addresses the peer listed (Alternate Address trailer, hairpinning).
    alternates: [Option<SocketAddrV4>; ALTERNATES],
    /// We had sent the peer no indirect bubble yet.
    first: bool,
    /// The peer gets an indirect bubble of ours in answer.
    answer_indirect: bool,
    /// It announced a random port we did not know.
    new_peer_port: bool,
    /// An Echo Test holds our indirect bubble back.
    echo_running: bool,
}

impl<R: Random> Client<R> {
    /// From the server, not an RA: indirect bubbles (answer the origin with a direct
    /// bubble) and the ICMPv6 it passes on between Teredo peers.
    pub(super) fn on_server_packet(
        &mut self,
        now: Duration,
        pkt: &TeredoPacket<'_>,
        tx: &mut (impl Transmit + Ports),
    ) -> Outcome {
        let Some(me) = self.address() else {
            return self.dropped(DropReason::LocalDestination);
        };
        let ip = &pkt.ipv6;
        let src = ip.src_addr();
        if !self.our_address(&ip.dst_addr()) {
            return self.dropped(DropReason::LocalDestination);
        }
        // Miredo's relay sends its indirect bubbles from a link-local address: fine for
        // a bubble, which is answered and consumed; nothing link-local reaches the host.
        if !pkt.is_bubble() && !src.is_forwardable() {
            return self.dropped(DropReason::SourceMismatch);
        }
        let nonce = self.nonce_in(pkt);
        let alternates = match self.alternates_in(pkt, nonce) {
            Ok(a) => a,
            Err(why) => return self.dropped(why),
        };
        let teredo = TeredoAddr::decode(&src).filter(|_| pkt.is_bubble() && !src.is_link_local());
        // Whether this is the peer's answer to an indirect bubble of ours.
        let first = self.peers.get(&src).is_none_or(|p| p.nonce_sent.is_none());
        let answer_indirect = match teredo {
            Some(t) => self.remember_nonce(now, src, t, nonce),
            None => false,
        };
        let new_peer_port = teredo.is_some() && nonce.is_some() && self.remember_peer_port(now, src, pkt);
        let echo_running = match (teredo, answer_indirect) {
            (Some(t), true) => self.open_random_port(now, &me, src, t, tx),
            _ => false,
        };
        let b = FromServer { src, nonce, teredo, alternates, first, answer_indirect, new_peer_port, echo_running };
        self.answer_directly(now, &me, &b, pkt.origin, tx);
        self.answer_with_ours(now, &me, &b, tx);
        if pkt.is_bubble() {
            return Ok(Action::Consumed);
        }
        if ip.next_header() != ip_protocol::ICMPV6 {
            return self.dropped(DropReason::NotBubbleOrIcmpv6);
        }
        // A server passes on echo requests and replies between Teredo peers and nothing
        // else (RFC 4380 §5.3.1); anything else from its endpoint is forged — an error
        // aimed at a live connection (Destination Unreachable, Packet Too Big) — and
        // anyone can forge that endpoint past every NAT kind.
        let echo = matches!(ip.payload().first(), Some(&message::ECHO_REQUEST | &message::ECHO_REPLY));
        if !echo {
            return self.dropped(DropReason::Icmpv6TypeNotForwarded);
        }
        self.deliver(ip.packet(), tx);
        Ok(Action::Forwarded)
    }

    /// Hairpinning (§5.6.4.2): the addresses an indirect bubble with a nonce lists,
    /// every one the trailer may hold (RFC 6081 §4.3: one to four; a client knows two of
    /// its own, local and UPnP, but a peer may list more, and each gets its bubble). A
    /// malformed Alternate Address trailer spoils the bubble. Taken only from a peer
    /// behind our own public address, the one case hairpinning is for: anyone else's
    /// list would have us send into our own network at its choosing (the bubble can
    /// be forged by any host that can reach our server).
    fn alternates_in(
        &self,
        pkt: &TeredoPacket<'_>,
        nonce: Option<NonZeroU32>,
    ) -> Result<[Option<SocketAddrV4>; ALTERNATES], DropReason> {
        let mut alternates = [None; ALTERNATES];
        if nonce.is_none() || !self.cfg.hairpinning || !self.behind_our_nat(&pkt.ipv6.src_addr()) {
            return Ok(alternates);
        }
        let Some(t) = pkt.trailers.find(trailer_type::ALTERNATE_ADDRESS) else { return Ok(alternates) };
        match TrailerRepr::parse(&t) {
            Ok(TrailerRepr::AlternateAddress(list)) => {
                for (slot, a) in alternates.iter_mut().zip(list.iter()) {
                    *slot = Some(a);
                }
                Ok(alternates)
            }
            _ => Err(DropReason::BadValue),
        }
    }

    /// Whoever is behind an indirect bubble waits for our direct one (RFC 4380 §5.2.3;
    /// practice answers with a bubble rather than a ping): to the mapping a trusted peer
    /// proved (RFC 6081 §6.1 step 10), else to the origin indication, else to the
    /// mapping its Teredo address embeds. It echoes the peer's nonce. A native host's
    /// bubble comes from the relay that holds its packets for us now, which the origin
    /// names: after a relay change (an anycast relay failed) that is not the relay we
    /// trusted, and only a bubble to it lets its packets through.
    fn answer_directly(
        &mut self,
        now: Duration,
        me: &Ipv6Addr,
        b: &FromServer,
        origin: Option<SocketAddrV4>,
        tx: &mut (impl Transmit + Ports),
    ) {
        let src = b.src;
        let src_teredo = TeredoAddr::decode(&src).is_some();
        let proven = self
            .peers
            .get(&src)
            .filter(|p| p.trusted && (src_teredo || origin.is_none_or(|o| o == p.mapped)))
            .map(|p| p.mapped);
        let origin = origin.or_else(|| TeredoAddr::decode(&src).map(|t| t.mapped));
        let to = proven.map(|m| self.peer_target(&src, m)).or(origin);
        let trusted = proven.is_some();
        let Some(o) = to.filter(|o| trusted || self.unreachable_embedded(*o.ip()).is_none()) else { return };
        let echo = Trailers::nonce(self.primary_echo(&src, b.nonce));
        let via = if trusted { self.ports.via(&src) } else { Source::Service };
        self.send_bubble(me, &src, echo, Path::new(via, o), tx);
        // With our port mapped, a peer whose origin is not its embedded mapping (a
        // symmetric NAT) gets one at its embedded mapping too: if it holds a mapping as
        // well, that one passes (RFC 6081 §5.3.4.2).
        let extra = b.answer_indirect && self.port_mapping.inbound && !trusted;
        if let Some(t) = b.teredo.filter(|t| extra && t.mapped != o && t.mapped.ip() == o.ip()) {
            if self.unreachable_embedded(*t.mapped.ip()).is_none() {
                self.send_bubble(me, &src, echo, Path::service(t.mapped), tx);
            }
        }
        // A native host's last transmission is our traffic's (its silence is timed from
        // it): bubbles that anyone can draw through the server do not move it.
        if let Some(mut p) = self.peers.get_mut(&src).filter(|_| src_teredo) {
            p.last_tx = now;
        }
        // Our echo of its nonce now proves us to a peer met through hairpinning: what
        // waited for it follows the bubble.
        if trusted && b.nonce.is_some() {
            self.flush(&src, o, tx);
        }
    }

    /// A peer that speaks RFC 6081 and that we do not trust yet gets our own bubbles: a
    /// direct one to each address it listed, with its nonce (one may be on our side of a
    /// NAT that does not hairpin), and our indirect one, unless port prediction sends
    /// it. The answer to our own indirect bubble, or a port to try that we did not know,
    /// tells where to send from our random port: now, not at our next retry.
    fn answer_with_ours(&mut self, now: Duration, me: &Ipv6Addr, b: &FromServer, tx: &mut (impl Transmit + Ports)) {
        let (src, nonce, how) = (b.src, b.nonce, Bubbling::Heard { first: b.first });
        let Some(t) = b.teredo else {
            // Not a Teredo peer's bubble: nothing of ours to add, and no alternates
            // (remember_nonce made no answer).
            return;
        };
        if b.answer_indirect {
            let own = self.local;
            // A host each: the trailer's parser refuses groups, the link's broadcast,
            // 0.0.0.0 and port 0 (RFC 6081 §4.3); a subnet's broadcast of ours is only
            // told apart here, where the subnets are known.
            let subnet_broadcast = |ip: Ipv4Addr| {
                self.attached.iter().any(|&(net, mask)| mask != u32::MAX && u32::from(ip) == net | !mask)
            };
            let host = |a: &SocketAddrV4| !(a.ip().is_loopback() || subnet_broadcast(*a.ip()));
            let hosts: Vec<SocketAddrV4> =
                b.alternates.into_iter().flatten().filter(|a| Some(*a) != own && host(a)).collect();
            for to in hosts {
                self.send_bubble(me, &src, Trailers::nonce(nonce), Path::service(to), tx);
            }
            if !b.echo_running && !self.random_port_bubbles(now, src, nonce, how, tx) {
                self.send_indirect(now, me, src, t.server, tx);
            }
        } else if nonce.is_some() && (!b.first || (b.new_peer_port && self.first_contacts.allow_test(now))) {
            self.random_port_bubbles(now, src, nonce, how, tx);
        }
    }

    /// An indirect bubble from Teredo peer `src`, carrying `nonce` (if any): keep the
    /// nonce to echo (RFC 6081 §5.2.4.3), and say whether to answer with an indirect
    /// bubble of ours: the peer speaks the extension, we do not trust it yet, and
    /// neither its bubble budget nor the shared echo budget is spent. A peer entry is
    /// made for that answer's nonce (untrusted entries give way when the table is full).
    pub(super) fn remember_nonce(
        &mut self,
        now: Duration,
        src: Ipv6Addr,
        t: TeredoAddr,
        nonce: Option<NonZeroU32>,
    ) -> bool {
        let reachable =
            self.unreachable_embedded(*t.mapped.ip()).is_none() && self.unreachable_embedded(t.server).is_none();
        // A new entry only within the shared budget: forged indirect bubbles must not
        // crowd out the peers the host is reaching.
        let mut budget_spent = false;
        if nonce.is_some() && reachable && self.peers.get(&src).is_none() {
            if !self.first_contacts.allow_test(now) {
                return false;
            }
            budget_spent = true;
            let _ = self.peers.insert(Peer::new(src, t.mapped, now), now);
        }
        let Some(mut p) = self.peers.get_mut(&src) else {
            return false;
        };
        p.nonce_received = nonce;
        p.knows_trailers |= nonce.is_some();
        let may = nonce.is_some()
            && reachable
            && !p.trusted
            && p.tries < PEER_TRIES
            && (p.tries == 0 || now.saturating_sub(p.last_tx) >= RETRY);
        may && (budget_spent || self.first_contacts.allow_test(now))
    }
}
