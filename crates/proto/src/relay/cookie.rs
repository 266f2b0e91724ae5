//! A client's first packet the client-first budget cannot take, proved without state
//! (as a SYN cookie proves a TCP handshake). A flood of forged first packets (each
//! from the mapping the made-up address it claims embeds) empties the budget, and the
//! genuine clients an anycast change brings would then be refused. Over budget, the
//! relay keeps nothing for such a packet: it sends the client, through the client's
//! server only, a bubble whose Nonce is a keyed hash of the client's address, the
//! mapping the packet came from and the time ([`COOKIE_WINDOW`]). A client that speaks
//! RFC 6081 echoes it in a direct bubble from that mapping; the echo proves the mapping
//! is the client's (a forger never sees the bubble), and enters the client there.
//!
//! What it costs: a bubble per refused first packet, within the rate each server
//! target gets ([`BUBBLES_PER_TARGET`]), no state, no held packet (the client's
//! next one goes through). What it assumes: the client echoes the Nonce of a bubble
//! that comes from a native address through its server, as RFC 6081 §5.2.4 asks
//! (shipworm and Windows do; Miredo 1.2.6 answers without the Nonce, and stays
//! refused while the budget is empty).

use super::*;

/// How long a cookie is good: the window it was made in and the next.
pub const COOKIE_WINDOW: Duration = Duration::from_secs(10);

impl SharedRelay {
    /// The cookie for `client` at mapping `from` in window `window`.
    fn cookie(&self, client: &Ipv6Addr, from: SocketAddrV4, window: u64) -> NonZeroU32 {
        let what = (b"first-packet cookie", u128::from(*client), u32::from(*from.ip()), from.port(), window);
        let h = std::hash::BuildHasher::hash_one(&self.nonce_keys, what);
        NonZeroU32::new(h as u32).unwrap_or(NonZeroU32::MIN)
    }

    fn window(now: Duration) -> u64 {
        now.as_secs() / COOKIE_WINDOW.as_secs()
    }

    /// A client's first packet from `from` that the budget refused: a cookie bubble to
    /// it through its server `t.server`, from the native host `native` it wrote to,
    /// within the bubble rate the server gets.
    pub(super) fn send_cookie(
        &self,
        w: &mut RelayWorker,
        now: Duration,
        (client, native): (&Ipv6Addr, &Ipv6Addr),
        (from, t): (SocketAddrV4, &TeredoAddr),
        tx: &mut impl Transmit,
    ) {
        if !self.bubble_rate.lock().unwrap_or_else(PoisonError::into_inner).allow(t.server, now) {
            w.stats.drops.count(DropReason::RateLimited);
            return;
        }
        let nonce = self.cookie(client, from, Self::window(now));
        let Ok(n) = emit_bubble(native, client, 0, &mut w.scratch) else { return };
        w.scratch[n..n + 2].copy_from_slice(&[trailer_type::NONCE, 4]);
        w.scratch[n + 2..n + 6].copy_from_slice(&nonce.get().to_be_bytes());
        tx.send(Source::Service, SocketAddrV4::new(t.server, TEREDO_PORT), &w.scratch[..n + 6], None);
        w.stats.bubbles += 1;
        w.stats.cookies_sent += 1;
    }

    /// Whether `echo`, in a bubble from `client` at `from`, is the cookie sent for that
    /// mapping in this window or the last.
    pub(super) fn cookie_echoed(&self, client: &Ipv6Addr, from: SocketAddrV4, echo: NonZeroU32, now: Duration) -> bool {
        let window = Self::window(now);
        [window, window.saturating_sub(1)].into_iter().any(|w| self.cookie(client, from, w) == echo)
    }

    /// A client without an entry echoed its cookie from `from`: entered there, trusted
    /// (sealed where `from` is not the mapping its address embeds: our nonce proved
    /// it), and into the kernel's list.
    pub(super) fn enter_by_cookie(
        &self,
        shard: &mut Shard,
        w: &mut RelayWorker,
        now: Duration,
        (key, t, from): (&Key, &TeredoAddr, SocketAddrV4),
        tx: &mut impl Transmit,
    ) -> Outcome {
        let client = key.addr;
        if let Err(r) = self.tunnel_destination(t) {
            return w.dropped(r);
        }
        if self.ask_before_eviction(&shard.peers, w, (now, &client), tx) {
            return Ok(Action::AskedKernel);
        }
        let mut peer = Peer::new(client, from, now);
        peer.trusted = true;
        peer.last_rx = now;
        peer.sealed = from != t.mapped;
        if let Err(r) = self.enter_client(shard, key, peer, now, tx) {
            return w.dropped(r);
        }
        self.kernel_trust(tx, &client, from, now);
        w.stats.cookies_proved += 1;
        Ok(Action::Consumed)
    }
}
