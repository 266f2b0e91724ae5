//! Building bubbles (RFC 4380 §5.2.6) with their RFC 6081 trailers, and the indirect
//! bubble through a peer's server (with a fresh nonce, the predicted port and our
//! local address as the extensions want them).

use super::*;

/// What a bubble carries beyond its headers: RFC 6081's trailers, in the order they go.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Trailers {
    /// Nonce (§5.2.4): ours, or the peer's echoed.
    pub nonce: Option<NonZeroU32>,
    /// Random Port (§5.4.4): the port the peer should try.
    pub random_port: Option<NonZeroU16>,
    /// Neighbor Discovery Option (§5.7): Server Load Reduction's solicitation or answer.
    pub discovery: Option<DiscoveryType>,
    /// Alternate Address (§5.6): our local address, and the port mapping our gateway
    /// gave us, for a peer behind our own public address.
    pub alternates: [Option<SocketAddrV4>; 2],
}

impl Trailers {
    /// A Nonce trailer only, if there is a nonce.
    pub(super) fn nonce(nonce: Option<NonZeroU32>) -> Trailers {
        Trailers { nonce, ..Trailers::default() }
    }

    /// A Neighbor Discovery Option trailer only.
    pub(super) fn discovery(kind: DiscoveryType) -> Trailers {
        Trailers { discovery: Some(kind), ..Trailers::default() }
    }
}

/// Where a datagram goes: the socket it leaves from, the endpoint, the TTL (`None`: the
/// socket's).
#[derive(Debug, Clone, Copy)]
pub(super) struct Path {
    pub from: Source,
    pub to: SocketAddrV4,
    pub ttl: Option<u8>,
}

impl Path {
    /// From the service socket, with its TTL.
    pub(super) fn service(to: SocketAddrV4) -> Path {
        Path { from: Source::Service, to, ttl: None }
    }

    /// From socket `from`, with its TTL.
    pub(super) fn new(from: Source, to: SocketAddrV4) -> Path {
        Path { from, to, ttl: None }
    }
}

impl<R: Random> Client<R> {
    /// The one way a bubble is made and sent: from our address `me` to `dst` with
    /// `trailers`, along `path`; counted.
    pub(super) fn send_bubble(
        &mut self,
        me: &Ipv6Addr,
        dst: &Ipv6Addr,
        trailers: Trailers,
        path: Path,
        tx: &mut impl Transmit,
    ) {
        let mut n = emit_bubble(me, dst, 0, &mut self.scratch).expect("fits");
        let emit = |t: TrailerRepr<'_>, buf: &mut [u8]| t.emit(buf).expect("fits");
        if let Some(nonce) = trailers.nonce {
            n += emit(TrailerRepr::Nonce(nonce.get().to_be_bytes()), &mut self.scratch[n..]);
        }
        if let Some(port) = trailers.random_port {
            n += emit(TrailerRepr::RandomPort(port.get()), &mut self.scratch[n..]);
        }
        if let Some(kind) = trailers.discovery {
            n += emit(TrailerRepr::NeighborDiscovery(kind), &mut self.scratch[n..]);
        }
        let listed = trailers.alternates.iter().flatten().copied();
        let (list, count) = listed.fold(([SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0); 2], 0), |(mut l, k), a| {
            l[k] = a;
            (l, k + 1)
        });
        if count > 0 {
            n += emit_alternate_addresses(&list[..count], &mut self.scratch[n..]).expect("fits");
        }
        tx.send(path.from, path.to, &self.scratch[..n], path.ttl);
        self.stats.bubbles += 1;
    }

    /// Whether a bubble of `kind` to `dst` may go now (RFC 4380 §5.2.6); counted as
    /// withheld if not.
    pub(super) fn spend_bubble(&mut self, now: Duration, dst: Ipv6Addr, kind: bubble_budget::Kind) -> bool {
        let spent = self.bubbles_spent.spend(now, dst, kind);
        self.stats.bubbles_withheld += u64::from(!spent);
        spent
    }

    /// A bubble nonce for a Nonce trailer (RFC 6081 §5.2.4.1): random, never 0, which
    /// means "none".
    pub(super) fn bubble_nonce(&mut self) -> NonZeroU32 {
        let mut b = [0u8; 4];
        self.rng.fill(&mut b);
        NonZeroU32::new(u32::from_be_bytes(b)).unwrap_or(NonZeroU32::MIN)
    }

    /// Whether `pkt` is a bubble carrying a Nonce trailer, whatever our settings: an
    /// echo of a nonce proves one exchange, not that the sender takes our packets.
    pub(super) fn carries_nonce(pkt: &TeredoPacket<'_>) -> bool {
        pkt.is_bubble() && pkt.trailers.find(trailer_type::NONCE).is_some()
    }

    /// The Nonce trailer of a bubble, if Symmetric NAT Support is on.
    pub(super) fn nonce_in(&self, pkt: &TeredoPacket<'_>) -> Option<NonZeroU32> {
        if !self.cfg.symmetric_nat_support || !pkt.is_bubble() {
            return None;
        }
        match pkt.trailers.get(trailer_type::NONCE) {
            Some(TrailerRepr::Nonce(n)) => NonZeroU32::new(u32::from_be_bytes(n)),
            _ => None,
        }
    }

    /// An indirect bubble to `dst` through its server `server`, with a fresh nonce that
    /// its direct answer must echo (RFC 6081 §5.2.4.1).
    pub(super) fn send_indirect(
        &mut self,
        now: Duration,
        me: &Ipv6Addr,
        dst: Ipv6Addr,
        server: Ipv4Addr,
        tx: &mut (impl Transmit + Ports),
    ) {
        let nonce = if self.cfg.symmetric_nat_support { Some(self.bubble_nonce()) } else { None };
        let Some(mut p) = self.peers.get_mut(&dst) else {
            return;
        };
        // The try counts whether or not the budget lets its bubble go: a peer past
        // its budget is given up after its tries, as one that never answers.
        let spent = self.bubbles_spent.spend(now, dst, bubble_budget::Kind::Indirect);
        self.stats.bubbles_withheld += u64::from(!spent);
        p.nonce_sent = nonce;
        p.last_tx = now;
        p.tries += 1;
        let reached = p.trusted;
        drop(p);
        if !spent {
            return;
        }
        let mut trailers = Trailers::nonce(nonce);
        // Port prediction (§5.4.4.2 b, §5.5.4.2): the port the peer should try.
        let predicted = self.ports.get(&dst).and_then(|e| e.predicted);
        trailers.random_port = predicted.filter(|_| !reached && nonce.is_some());
        if nonce.is_some() && !reached {
            trailers.alternates = self.alternates_for(&dst);
        }
        self.send_bubble(me, &dst, trailers, Path::service(SocketAddrV4::new(server, TEREDO_PORT)), tx);
    }

    /// Hairpinning (§5.6.4.1): what our indirect bubbles to `peer` list, whether we call
    /// or answer — our local address and the mapping our gateway gave us (§5.6.3; none
    /// when it is the server's mapping, which the address already says) — when the peer
    /// is behind our own public address. Nobody else could use them, and only such a
    /// peer learns the addresses of our network. Nothing when neither differs from our
    /// mapping (no NAT in between).
    pub(super) fn alternates_for(&self, peer: &Ipv6Addr) -> [Option<SocketAddrV4>; 2] {
        let Phase::Up { ra, .. } = &self.q.phase else { return [None; 2] };
        if !self.cfg.hairpinning || !self.behind_our_nat(peer) {
            return [None; 2];
        }
        let differs = |a: Option<SocketAddrV4>| a.filter(|a| *a != ra.mapped);
        [differs(self.local), differs(self.port_mapping.mapping)]
    }
}
