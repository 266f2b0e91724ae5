//! A client's first packet the client-first budget cannot take, proved without state
//! (as a SYN cookie proves a TCP handshake). A flood of forged first packets (each
//! from the mapping the made-up address it claims embeds) empties the budget, and the
//! genuine clients an anycast change brings would then be refused. Over budget, the
//! relay keeps nothing for such a packet: it sends the client, through the client's
//! server only, a bubble whose Nonce is a keyed hash of the client's address, the
//! mapping the packet came from and the time ([`COOKIE_WINDOW`]), and whose source is a
//! link-local address made of another such hash. A client that speaks RFC 6081 echoes
//! the Nonce in a direct bubble from that mapping; one that speaks RFC 4380 alone
//! (Miredo's) answers the bubble to its source. Either proves the mapping is the
//! client's (a forger never sees the bubble), and enters the client there.
//!
//! What it costs: a bubble per refused first packet, within a rate of cookies per
//! server apart from the bubbles' (a tenth of [`BUBBLES_PER_TARGET`]), which also
//! bounds the entries cookies let in: an attacker who names a server of its own in
//! made-up addresses and answers their cookies from forged mappings gets that
//! server's share, and nobody else's. No state, no held packet (the client's next one
//! goes through).
//!
//! The answer must be addressed to the cookie's source (62 bits a forger must guess);
//! a Nonce, if it carries one, must be the cookie's too, and then seals the entry
//! where it is not the embedded mapping. The cookie is the same for a mapping within
//! its window, not a fresh random value each bubble as RFC 6081 §5.2.4.1 asks of a
//! client's nonce: it is what lets the relay keep nothing. What it assumes: the client echoes the Nonce of a bubble
//! through its server, as RFC 6081 §5.2.4 asks, or answers the bubble to its source, as
//! RFC 4380 clients do (Miredo's relay's bubbles come from such an address too).

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

    /// The source of the cookie bubble for `client` at `from` in `window`.
    fn cookie_source(&self, client: &Ipv6Addr, from: SocketAddrV4, window: u64) -> Ipv6Addr {
        self.keyed_link_local((
            b"first-packet cookie source",
            u128::from(*client),
            u32::from(*from.ip()),
            from.port(),
            window,
        ))
    }

    fn window(now: Duration) -> u64 {
        now.as_secs() / COOKIE_WINDOW.as_secs()
    }

    /// A client's first packet from `from` that the budget refused: a cookie bubble to
    /// it through its server `t.server`, within the bubble rate the server gets.
    pub(super) fn send_cookie(
        &self,
        w: &mut RelayWorker,
        now: Duration,
        client: &Ipv6Addr,
        (from, t): (SocketAddrV4, &TeredoAddr),
        tx: &mut impl Transmit,
    ) {
        if !self.cookie_allowed(t.server, now) {
            w.stats.drops.count(DropReason::RateLimited);
            return;
        }
        let window = Self::window(now);
        let nonce = self.cookie(client, from, window);
        let Ok(n) = emit_bubble(&self.cookie_source(client, from, window), client, 0, &mut w.scratch) else { return };
        w.scratch[n..n + 2].copy_from_slice(&[trailer_type::NONCE, 4]);
        w.scratch[n + 2..n + 6].copy_from_slice(&nonce.get().to_be_bytes());
        tx.send(Source::Service, SocketAddrV4::new(t.server, TEREDO_PORT), &w.scratch[..n + 6], None);
        w.stats.bubbles += 1;
        w.stats.cookies_sent += 1;
    }

    /// One more cookie, or entry by a cookie, for clients of `server`.
    fn cookie_allowed(&self, server: std::net::Ipv4Addr, now: Duration) -> bool {
        self.cookie_rate.allow(server, now)
    }

    /// Whether bubble `pkt` from `client` at `from` answers the cookie sent for that
    /// mapping in this window or the last: addressed to its source, and echoing its
    /// Nonce if it carries one. `Some(true)`: the Nonce was echoed too.
    pub(super) fn cookie_answered(
        &self,
        client: &Ipv6Addr,
        from: SocketAddrV4,
        pkt: &TeredoPacket<'_>,
        now: Duration,
    ) -> Option<bool> {
        let echo = match pkt.trailers.get(trailer_type::NONCE) {
            Some(TrailerRepr::Nonce(n)) => NonZeroU32::new(u32::from_be_bytes(n)),
            _ => None,
        };
        let to = pkt.ipv6.dst_addr();
        let window = Self::window(now);
        [window, window.saturating_sub(1)].into_iter().find_map(|w| {
            let addressed = to == self.cookie_source(client, from, w);
            let echoed = echo.map(|n| self.cookie(client, from, w) == n);
            (addressed && echoed != Some(false)).then_some(echoed == Some(true))
        })
    }

    /// A client without an entry answered its cookie from `from` (`echoed`: with the
    /// Nonce): entered there, trusted (sealed where `from` is not the mapping its
    /// address embeds and the Nonce proved it), within its server's share of cookies,
    /// and into the kernel's list.
    pub(super) fn enter_by_cookie(
        &self,
        shard: &mut Shard,
        w: &mut RelayWorker,
        now: Duration,
        (key, t, from, echoed): (&Key, &TeredoAddr, SocketAddrV4, bool),
        tx: &mut impl Transmit,
    ) -> Outcome {
        let client = key.addr;
        if let Err(r) = self.tunnel_destination(t) {
            return w.dropped(r);
        }
        // Spent once, whatever the kernel is asked before the entry comes.
        if !w.kernel.take_token() && !self.cookie_allowed(t.server, now) {
            return w.dropped(DropReason::RateLimited);
        }
        if self.ask_before_eviction(&shard.peers, w, (now, &client), tx) {
            return Ok(Action::AskedKernel);
        }
        let mut peer = Peer::new(client, from, now);
        peer.trusted = true;
        peer.last_rx = now;
        peer.sealed = echoed && from != t.mapped;
        if let Err(r) = self.enter_client(shard, key, peer, now, tx) {
            return w.dropped(r);
        }
        self.kernel_trust(tx, &client, from, now);
        w.stats.cookies_proved += 1;
        Ok(Action::Consumed)
    }
}
