//! RFC 6081 §5.4 and §5.5: behind a symmetric NAT, a random port of ours per peer, its
//! external number predicted (the same port behind a port-preserving NAT, the Echo
//! Test behind a sequential one), the peer's announced random port, and the refresh
//! bubbles that keep such a port open.

use super::*;

/// Why port-prediction bubbles go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bubbling {
    /// Our own try (a host packet waits).
    OurTry,
    /// The peer's indirect bubble arrived; `first` when it came before any of ours did
    /// (we are the first to hear of the other's port).
    Heard {
        /// We had sent the peer no indirect bubble yet.
        first: bool,
    },
}

/// The Peer Refresh Timer of random ports (RFC 6081 §5.4.2.1), and the refresh bubbles
/// sent without data in between at most.
const REFRESH: Duration = Duration::from_secs(30);
const MAX_REFRESHES: u8 = 20;
/// How long a random port waits for its peer to answer on it.
const STALE_PORT: Duration = Duration::from_secs(60);

impl<R: Random> Client<R> {
    /// The random port an indirect bubble from `src` announces (§5.4.4.4): kept when
    /// none was known, or when the old one went quiet (no exchange for 30 s).
    /// True when the port is new.
    pub(super) fn remember_peer_port(&mut self, now: Duration, src: Ipv6Addr, pkt: &TeredoPacket<'_>) -> bool {
        // RFC 6081 gives the trailer type 0x05 (§4.5) and IANA 0x02 (§9): take either.
        let announced = [trailer_type::RANDOM_PORT, trailer_type::RANDOM_PORT_IANA].into_iter().find_map(|k| {
            let t = pkt.trailers.find(k)?;
            (t.value.len() == 2).then(|| NonZeroU16::new(u16::from_be_bytes([t.value[0], t.value[1]])))?
        });
        let Some(port) = announced else { return false };
        let quiet = self.peers.get(&src).is_none_or(|p| {
            now.saturating_sub(p.last_rx) >= Duration::from_secs(30)
                && now.saturating_sub(p.last_tx) >= Duration::from_secs(30)
        });
        match self.ports.entry(src, now) {
            Some(e) if e.peer.is_none() || (e.peer != Some(port) && quiet) => {
                e.peer = Some(port);
                true
            }
            _ => false,
        }
    }

    /// The bubbles of port prediction to a peer we do not trust yet (RFC 6081 §5.4.4.3,
    /// §5.5.4.1). Behind a symmetric NAT, a random port of ours for the peer is opened
    /// (and announced by our indirect bubbles), and an Echo Test started if the NAT
    /// does not keep ports. Bubbles go from it only once the peer's indirect bubble
    /// said where the peer will answer from: its own random port, or (none announced)
    /// the mapping its address embeds; a bubble from our random port to any other
    /// place would spend the port's one preserved mapping. Without a random port of
    /// ours, a bubble goes from the service port to the port the peer announced.
    ///
    /// Linux NATs make an unanswered packet poison the port it reached (see the notes
    /// on the opening bubble), so a bubble the peer's NAT will drop must die before it:
    /// the first side to hear of the other's port (`Bubbling::Heard { first: true }`)
    /// opens its own NAT with a short TTL; the side that hears back, whose peer has
    /// opened its NAT by then, sends with the full TTL. True while an Echo Test holds
    /// the indirect bubble back.
    pub(super) fn random_port_bubbles(
        &mut self,
        now: Duration,
        dst: Ipv6Addr,
        echo: Option<NonZeroU32>,
        how: Bubbling,
        tx: &mut (impl Transmit + Ports),
    ) -> bool {
        let (Some(me), Some(t)) = (self.address(), TeredoAddr::decode(&dst)) else { return false };
        let me = &me;
        if self.open_random_port(now, me, dst, t, tx) {
            return true;
        }
        if !self.cfg.symmetric_nat_support || self.peers.get(&dst).is_none_or(|p| p.trusted) {
            return false;
        }
        let Some(e) = self.ports.get(&dst) else { return false };
        if e.echo.is_some() {
            return true;
        }
        let (local, predicted, peer) = (e.local, e.predicted, e.peer);
        let heard =
            matches!(how, Bubbling::Heard { .. }) || self.peers.get(&dst).is_some_and(|p| p.nonce_received.is_some());
        let to = SocketAddrV4::new(*t.mapped.ip(), peer.map_or(t.mapped.port(), NonZeroU16::get));
        let ttl = match how {
            Bubbling::Heard { first: true } if self.cfg.opening_bubble_ttl > 0 => Some(self.cfg.opening_bubble_ttl),
            _ => None,
        };
        match local {
            Some(local) if peer.is_some() || heard => {
                let trailers = Trailers { random_port: predicted, ..Trailers::nonce(echo) };
                self.send_bubble(me, &dst, trailers, Path { from: Source::Port(local), to, ttl }, tx);
            }
            None if peer.is_some() => {
                self.send_bubble(me, &dst, Trailers::nonce(echo), Path { from: Source::Service, to, ttl }, tx);
            }
            _ => {}
        }
        false
    }

    /// Behind a symmetric NAT, a random port for `dst`, a peer we do not trust yet,
    /// unless it has one: its number is the prediction behind a port-preserving NAT,
    /// and an Echo Test starts behind any other (true then). Opened before anything
    /// carrying the peer's nonce goes to it, so that all of that leaves from the one
    /// port the peer will take us at.
    pub(super) fn open_random_port(
        &mut self,
        now: Duration,
        me: &Ipv6Addr,
        dst: Ipv6Addr,
        t: TeredoAddr,
        tx: &mut (impl Transmit + Ports),
    ) -> bool {
        // A mapped port needs no prediction: anyone reaches it.
        let wanted = self.cfg.symmetric_nat_support
            && self.q.nat == NatKind::Symmetric
            && !self.port_mapping.inbound
            && self.peers.get(&dst).is_some_and(|p| !p.trusted)
            && self.ports.get(&dst).is_none_or(|e| e.local.is_none());
        if !wanted {
            return false;
        }
        let Some(e) = self.ports.entry(dst, now) else { return false };
        let Some(port) = tx.open_port() else { return false };
        e.local = Some(port);
        if self.q.port_preserving {
            e.predicted = Some(port);
            return false;
        }
        self.start_echo_test(now, me, dst, t, 1, tx)
    }

    /// The nonce our bubbles from the service port may echo to `peer`: none while a
    /// random port of ours is open for it (the peer must take us there, not here).
    pub(super) fn primary_echo(&self, peer: &Ipv6Addr, echo: Option<NonZeroU32>) -> Option<NonZeroU32> {
        match self.ports.get(peer) {
            Some(e) if e.local.is_some() && !e.via_local => None,
            _ => echo,
        }
    }

    /// The Echo Test (§5.5.4.1.1), from `dst`'s random port: a solicitation to the
    /// primary server, a bubble to the peer, a solicitation to the secondary; the two
    /// answers bracket the port the bubble went out from. The failover timer waits
    /// `tries` seconds. Returns true: the indirect bubble waits for the answers.
    pub(super) fn start_echo_test(
        &mut self,
        now: Duration,
        me: &Ipv6Addr,
        dst: Ipv6Addr,
        t: TeredoAddr,
        tries: u8,
        tx: &mut (impl Transmit + Ports),
    ) -> bool {
        let Some(server) = self.current_server().map(|i| self.cfg.servers[i]) else { return false };
        let Some(local) = self.ports.get(&dst).and_then(|e| e.local) else { return false };
        let nonces = [self.auth_nonce(), self.auth_nonce()];
        let to = self
            .ports
            .get(&dst)
            .map_or(t.mapped, |e| SocketAddrV4::new(*t.mapped.ip(), e.peer.map_or(t.mapped.port(), NonZeroU16::get)));
        let n = self.rs(RS_SOURCE_RESTRICTED, nonces[0]);
        tx.send(Source::Port(local), SocketAddrV4::new(server.primary, TEREDO_PORT), &self.scratch[..n], None);
        let ttl = (self.cfg.opening_bubble_ttl > 0).then_some(self.cfg.opening_bubble_ttl);
        self.send_bubble(me, &dst, Trailers::default(), Path { from: Source::Port(local), to, ttl }, tx);
        let n = self.rs(RS_SOURCE_RESTRICTED, nonces[1]);
        tx.send(Source::Port(local), SocketAddrV4::new(server.secondary, TEREDO_PORT), &self.scratch[..n], None);
        if let Some(e) = self.ports.get_mut(&dst) {
            e.echo =
                Some(EchoTest { nonces, ports: [None, None], tries, due: now + Duration::from_secs(u64::from(tries)) });
        }
        self.stats.echo_tests += 1;
        true
    }

    /// A server's answer on a random port: one of an Echo Test's two (§5.5.4.4). Never
    /// taken for qualification: it reports the random port's mapping, not ours.
    pub(super) fn on_echo_answer(
        &mut self,
        now: Duration,
        pkt: &TeredoPacket<'_>,
        tx: &mut (impl Transmit + Ports),
    ) -> Outcome {
        let (Some(auth), Some(origin)) = (pkt.auth.as_ref(), pkt.origin) else {
            return self.dropped(DropReason::AuthenticationFailed);
        };
        let Some((peer, i)) = self.ports.echo_nonce(&auth.nonce()) else {
            return self.dropped(DropReason::AuthenticationFailed);
        };
        let Some(e) = self.ports.get_mut(&peer) else { return Ok(Action::Consumed) };
        let Some(test) = e.echo.as_mut() else { return Ok(Action::Consumed) };
        test.ports[i] = NonZeroU16::new(origin.port());
        let Some(predicted) = test.prediction() else { return Ok(Action::Consumed) };
        e.predicted = Some(predicted);
        e.echo = None;
        self.echo_test_done(now, peer, tx);
        Ok(Action::Consumed)
    }

    /// An Echo Test ended, with a prediction or without: the indirect bubble it held
    /// back goes now.
    pub(super) fn echo_test_done(&mut self, now: Duration, peer: Ipv6Addr, tx: &mut (impl Transmit + Ports)) {
        let (Some(me), Some(t)) = (self.address(), TeredoAddr::decode(&peer)) else { return };
        if self.peers.get(&peer).is_some_and(|p| !p.trusted) {
            self.send_indirect(now, &me, peer, t.server, tx);
        }
    }

    /// When [`Client::tend_random_ports`] next has something to do: a port to close,
    /// a forgotten peer's, a stale one's, an echo test's end, a port's refresh.
    pub(super) fn random_ports_due(&self) -> Option<Duration> {
        if self.ports.has_closing() {
            return Some(Duration::ZERO);
        }
        let mut next: Option<Duration> = None;
        for (peer, e) in self.ports.iter() {
            let due = if self.peers.get(peer).is_none() {
                Duration::ZERO
            } else if let Some(test) = &e.echo {
                test.due
            } else if e.via_local {
                e.refreshed_at + REFRESH
            } else {
                e.touched + STALE_PORT
            };
            next = Some(next.map_or(due, |n| n.min(due)));
        }
        next
    }

    /// Time for the random ports: Echo Tests that got no answer (§5.5.2.2: one more
    /// after 1 s, then the indirect bubble without a prediction after 2 s), keep-alive
    /// bubbles to peers reached through a random port (§5.4.2.1: every 30 s without
    /// data, 20 at most), and ports whose peer is gone are closed.
    pub(super) fn tend_random_ports(&mut self, now: Duration, tx: &mut (impl Transmit + Ports)) {
        for port in self.ports.take_closing() {
            tx.close_port(port);
        }
        if self.ports.is_empty() {
            return;
        }
        let me = self.address();
        for peer in self.ports.peers() {
            let Some(p) = self.peers.get(&peer).map(|p| (p.trusted, p.mapped)) else {
                if let Some(local) = self.ports.remove(&peer).and_then(|e| e.local) {
                    tx.close_port(local);
                }
                continue;
            };
            let Some(e) = self.ports.get_mut(&peer) else { continue };
            // A port the peer never answered on, or an announcement nobody followed, is
            // let go after a while: forged indirect bubbles must not hold the table.
            let stale = !e.via_local && now.saturating_sub(e.touched) >= STALE_PORT;
            if stale && e.echo.is_none() {
                if let Some(local) = e.local {
                    tx.close_port(local);
                }
                self.ports.remove(&peer);
                continue;
            }
            if let Some(test) = e.echo.filter(|t| now >= t.due) {
                let (Some(me), Some(t)) = (me, TeredoAddr::decode(&peer)) else {
                    // Not qualified: the test ends here, and the stale rule closes its port.
                    e.echo = None;
                    continue;
                };
                if test.tries < 2 {
                    self.start_echo_test(now, &me, peer, t, test.tries + 1, tx);
                } else {
                    e.echo = None;
                    self.echo_test_done(now, peer, tx);
                }
                continue;
            }
            if e.via_local && now.saturating_sub(e.refreshed_at) >= REFRESH {
                e.refreshed_at = now;
                if now.saturating_sub(e.last_data) < REFRESH {
                    e.refreshes = 0;
                } else if e.refreshes < MAX_REFRESHES {
                    e.refreshes += 1;
                    let (local, (trusted, mapped)) = (e.local, p);
                    if let (true, Some(me), Some(local)) = (trusted, me, local) {
                        let path = Path::new(Source::Port(local), mapped);
                        self.send_bubble(&me, &peer, Trailers::default(), path, tx);
                    }
                }
            }
        }
    }
}
