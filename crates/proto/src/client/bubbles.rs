//! Building bubbles (RFC 4380 §5.2.6) with their RFC 6081 trailers, and the indirect
//! bubble through a peer's server (with a fresh nonce, the predicted port and our
//! local address as the extensions want them).

use super::*;

impl<R: Random> Client<R> {
    /// A bubble nonce for a Nonce trailer (RFC 6081 §5.2.4.1): random, never 0, which
    /// means "none".
    pub(super) fn bubble_nonce(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.rng.fill(&mut b);
        u32::from_be_bytes(b).max(1)
    }

    /// A bubble from `me` to `dst` in the scratch buffer, with a Nonce trailer unless
    /// `nonce` is 0; returns its length.
    pub(super) fn bubble(&mut self, me: &Ipv6Addr, dst: &Ipv6Addr, nonce: u32) -> usize {
        let nonce = (nonce != 0).then(|| TrailerRepr::Nonce(nonce.to_be_bytes()));
        self.bubble_with(me, dst, nonce)
    }

    /// A bubble from `me` to `dst` in the scratch buffer, with `trailer` if any.
    pub(super) fn bubble_with(&mut self, me: &Ipv6Addr, dst: &Ipv6Addr, trailer: Option<TrailerRepr<'_>>) -> usize {
        let n = emit_bubble(me, dst, 0, &mut self.scratch).expect("fits");
        match trailer {
            Some(t) => n + t.emit(&mut self.scratch[n..]).expect("fits"),
            None => n,
        }
    }

    /// The Nonce trailer of a bubble, if Symmetric NAT Support is on (0: none).
    pub(super) fn nonce_in(&self, pkt: &TeredoPacket<'_>) -> u32 {
        if !self.cfg.symmetric_nat_support || !pkt.is_bubble() {
            return 0;
        }
        match pkt.trailers.get(trailer_type::NONCE) {
            Some(TrailerRepr::Nonce(n)) => u32::from_be_bytes(n),
            _ => 0,
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
        let nonce = if self.cfg.symmetric_nat_support { self.bubble_nonce() } else { 0 };
        let Some(mut p) = self.peers.get_mut(&dst) else {
            return;
        };
        p.nonce_sent = nonce;
        p.last_tx = now;
        p.bubbles += 1;
        let reached = p.trusted;
        // Our local address goes only to a peer we are reaching ourselves (the host has
        // packets for it), never in answer to an indirect bubble anyone could forge.
        let ours = p.waiting;
        drop(p);
        let mut n = self.bubble(me, &dst, nonce);
        // Port prediction (§5.4.4.2 b, §5.5.4.2): the port the peer should try.
        let predicted = self.ports.get(&dst).and_then(|e| e.predicted);
        if let (Some(predicted), false, true) = (predicted, reached, nonce != 0) {
            n += TrailerRepr::RandomPort(predicted.get()).emit(&mut self.scratch[n..]).expect("fits");
        }
        // Hairpinning (§5.6.4.1): our local address, while the peer is not reached, and
        // only with a nonce to prove the bubbles it brings; not when it is our mapping
        // (no NAT in between: nothing to add).
        let mapped = match &self.q.phase {
            Phase::Up { ra, .. } => Some(ra.mapped),
            _ => None,
        };
        let list = nonce != 0 && !reached && ours && self.cfg.hairpinning;
        if let Some(local) = self.local.filter(|l| list && Some(*l) != mapped) {
            n += emit_alternate_addresses(&[local], &mut self.scratch[n..]).expect("fits");
        }
        tx.send(Source::Service, SocketAddrV4::new(server, TEREDO_PORT), &self.scratch[..n], None);
        self.stats.bubbles += 1;
    }
}
