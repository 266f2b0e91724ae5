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
    /// Alternate Address (§5.6): our local address, for a peer behind our own NAT.
    pub alternate: Option<SocketAddrV4>,
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
        if let Some(local) = trailers.alternate {
            n += emit_alternate_addresses(&[local], &mut self.scratch[n..]).expect("fits");
        }
        tx.send(path.from, path.to, &self.scratch[..n], path.ttl);
        self.stats.bubbles += 1;
    }

    /// A bubble nonce for a Nonce trailer (RFC 6081 §5.2.4.1): random, never 0, which
    /// means "none".
    pub(super) fn bubble_nonce(&mut self) -> NonZeroU32 {
        let mut b = [0u8; 4];
        self.rng.fill(&mut b);
        NonZeroU32::new(u32::from_be_bytes(b)).unwrap_or(NonZeroU32::MIN)
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
        p.nonce_sent = nonce;
        p.last_tx = now;
        p.tries += 1;
        let reached = p.trusted;
        // Our local address goes only to a peer we are reaching ourselves (the host has
        // packets for it), never in answer to an indirect bubble anyone could forge.
        let ours = p.waiting;
        drop(p);
        let mut trailers = Trailers::nonce(nonce);
        // Port prediction (§5.4.4.2 b, §5.5.4.2): the port the peer should try.
        let predicted = self.ports.get(&dst).and_then(|e| e.predicted);
        trailers.random_port = predicted.filter(|_| !reached && nonce.is_some());
        // Hairpinning (§5.6.4.1): our local address, while the peer is not reached, and
        // only with a nonce to prove the bubbles it brings; not when it is our mapping
        // (no NAT in between: nothing to add).
        let mapped = match &self.q.phase {
            Phase::Up { ra, .. } => Some(ra.mapped),
            _ => None,
        };
        let list = nonce.is_some() && !reached && ours && self.cfg.hairpinning;
        trailers.alternate = self.local.filter(|l| list && Some(*l) != mapped);
        self.send_bubble(me, &dst, trailers, Path::service(SocketAddrV4::new(server, TEREDO_PORT)), tx);
    }
}
