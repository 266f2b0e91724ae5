//! Qualification (RFC 4380 §5.2.1, RFC 5991) and what keeps it: the router
//! solicitations to the primary and secondary addresses and the cone probe, the checks
//! an advertisement must pass, the address with its random bits, NAT kind detection,
//! failover between servers, back-off, the refresh of the mapping and the return to
//! the first server. The address the interface keeps while qualifying again lives here
//! too (`held_address`).

use super::*;

/// What qualification knows and is doing: the client's part that qualifies, keeps the
/// mapping alive, goes back to the first server and detects the NAT.
#[derive(Debug, Clone)]
pub(super) struct Qualification {
    pub(super) phase: Phase,
    pub(super) nat: NatKind,
    /// The cone probe's nonce and server, while it may be answered.
    pub(super) cone_nonce: Option<([u8; 8], usize)>,
    /// The cone probe was answered: a full-cone NAT.
    pub(super) cone_seen: bool,
    /// When the server in use last spoke to us.
    pub(super) last_server_rx: Duration,
    /// The randomized refresh interval.
    pub(super) refresh_after: Duration,
    /// The refresh under way: its nonce, when it went and how many tries.
    pub(super) maint: Option<([u8; 8], Duration, u8)>,
    /// The solicitation to the first server while we use another: its nonce and when.
    pub(super) home: Option<([u8; 8], Duration)>,
    /// The RFC 5991 random bits and the mapping they were drawn for.
    pub(super) random_bits: Option<(SocketAddrV4, u16)>,
    /// The address the interface keeps while we qualify again (network change, going
    /// home): traffic keeps flowing on it, and peers stay if the new RA gives it back.
    pub(super) held_address: Option<Ipv6Addr>,
    /// Behind a port-preserving symmetric NAT (RFC 6081 §5.4.3): the primary's mapping
    /// kept our port.
    pub(super) port_preserving: bool,
    /// Secure qualification: the server that said, in an advertisement signed with our
    /// key, that the key is retired (RFC 4380 §5.3.2); until an advertisement qualifies.
    pub(super) key_retired: Option<Ipv4Addr>,
}

impl Qualification {
    /// Nothing known: qualifying at once with `servers`, or resolving their names while
    /// there are none.
    pub(super) fn new(servers: &[ServerAddrs]) -> Qualification {
        Qualification {
            phase: if servers.is_empty() {
                Phase::Resolving
            } else {
                Phase::Offline { retry_at: Duration::ZERO, backoff: Duration::from_secs(10) }
            },
            nat: NatKind::Unknown,
            cone_nonce: None,
            cone_seen: false,
            last_server_rx: Duration::ZERO,
            refresh_after: Duration::from_secs(30),
            maint: None,
            home: None,
            random_bits: None,
            held_address: None,
            port_preserving: false,
            key_retired: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// No server yet: the daemon resolves their names ([`Client::set_servers`]).
    Resolving,
    /// Waiting before trying again.
    Offline { retry_at: Duration, backoff: Duration },
    /// RS to `server`'s primary address.
    Primary { server: usize, nonce: [u8; 8], sent_at: Duration, tries: u8 },
    /// RS to its secondary address, knowing the primary's answer.
    Secondary { server: usize, first: Ra, nonce: [u8; 8], sent_at: Duration, tries: u8 },
    /// Qualified.
    Up { server: usize, ra: Ra, address: Ipv6Addr },
}

/// What an RA must match: who sends it, our nonce, the RS source it answers, and the
/// primary address its prefix must name.
#[derive(Debug, Clone, Copy)]
pub(super) struct Wanted {
    from: Ipv4Addr,
    nonce: [u8; 8],
    rs_src: Ipv6Addr,
    primary: Ipv4Addr,
}

/// What a valid RA says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ra {
    pub(super) mapped: SocketAddrV4,
    pub(super) prefix: [u8; 8],
    pub(super) mtu: u32,
}

/// How long refresh solicitation `tries` (1 for the first) waits for its answer: 1, 2,
/// 2, 4, 4, 4, 4 s, then the last one an RS's usual time-out (25 s in all).
fn refresh_retry_after(tries: u8) -> Duration {
    const WAITS: [u64; 7] = [1, 2, 2, 4, 4, 4, 4];
    match WAITS.get(usize::from(tries.max(1)) - 1) {
        Some(&s) if tries < REFRESH_TRIES => Duration::from_secs(s),
        _ => RS_TIMEOUT,
    }
}

impl<R: Random> Client<R> {
    /// Eight random bytes: a solicitation's authentication nonce, or the payload a
    /// connectivity test's echo reply must carry (unrelated to the bubbles' 32-bit
    /// Nonce trailers, [`Client::bubble_nonce`]).
    pub(super) fn auth_nonce(&mut self) -> [u8; 8] {
        let mut n = [0u8; 8];
        self.rng.fill(&mut n);
        n
    }

    /// Build an RS from `src` with `nonce` into the scratch buffer.
    pub(super) fn rs(&mut self, src: Ipv6Addr, nonce: [u8; 8]) -> usize {
        let dst = crate::server::ALL_ROUTERS;
        let zero = [0u8; secure::MAC_LEN];
        let auth = match &self.cfg.credentials {
            Some(c) => AuthRepr { client_id: &c.client_id, auth_value: &zero, nonce, confirmation: 0 },
            None => AuthRepr::with_nonce(nonce),
        };
        let at = TeredoHeaderRepr { auth: Some(auth), origin: None }.emit(&mut self.scratch).expect("fits");
        Ipv6Repr { src_addr: src, dst_addr: dst, next_header: ip_protocol::ICMPV6, payload_len: 8, hop_limit: 255 }
            .emit(&mut self.scratch[at..])
            .expect("fits");
        Icmpv6Repr::RouterSolicit.emit(&src, &dst, &mut self.scratch[at + 40..]).expect("fits");
        if let Some(c) = &self.cfg.credentials {
            secure::sign(&c.secret, &mut self.scratch[..at + 48]);
        }
        self.stats.solicitations += 1;
        at + 48
    }

    pub(super) fn send_rs(&mut self, to: Ipv4Addr, nonce: [u8; 8], tx: &mut (impl Transmit + Ports)) {
        let n = self.rs(RS_SOURCE_RESTRICTED, nonce);
        tx.send(Source::Service, SocketAddrV4::new(to, TEREDO_PORT), &self.scratch[..n], None);
    }

    /// Start qualifying with server `server` now.
    pub(super) fn qualify(&mut self, now: Duration, server: usize, tx: &mut (impl Transmit + Ports)) {
        let s = self.cfg.servers[server];
        let nonce = self.auth_nonce();
        self.send_rs(s.primary, nonce, tx);
        // The cone test, from the probe port: answered from the secondary address.
        let cone = self.auth_nonce();
        let n = self.rs(RS_SOURCE_CONE, cone);
        tx.send(Source::Probe, SocketAddrV4::new(s.primary, TEREDO_PORT), &self.scratch[..n], None);
        self.q.cone_nonce = Some((cone, server));
        self.q.cone_seen = false;
        if let Phase::Up { address, .. } = self.q.phase {
            self.q.held_address = Some(address);
        }
        self.q.phase = Phase::Primary { server, nonce, sent_at: now, tries: 1 };
    }

    /// The network changed (new IPv4 address or default route): qualify again at once.
    /// The interface keeps the old address until the new RA says otherwise, so a
    /// change that keeps the mapping costs nothing.
    pub fn on_network_change(&mut self, now: Duration, tx: &mut (impl Transmit + Ports)) {
        let server = match self.q.phase {
            Phase::Up { server, .. } | Phase::Primary { server, .. } | Phase::Secondary { server, .. } => server,
            Phase::Offline { .. } => 0,
            // No server to ask yet: the names are looked up again (the daemon's part).
            Phase::Resolving => return,
        };
        self.q.maint = None;
        self.qualify(now, server, tx);
        self.kernel_settle(tx);
    }

    /// Check an RA against what we asked: from `expect`:3544, our nonce, sent to
    /// `rs_src`, exactly one /64 prefix naming `primary`, an origin indication with a
    /// global mapping, an acceptable MTU. RFC 4861 checks too (link-local source, hop
    /// limit 255, checksum, code, options).
    pub(super) fn check_ra(
        &self,
        datagram: &[u8],
        pkt: &TeredoPacket<'_>,
        from: SocketAddrV4,
        want: Wanted,
    ) -> Result<Ra, DropReason> {
        let Wanted { from: expect, nonce, rs_src, primary } = want;
        let (nonce, rs_src) = (&nonce, &rs_src);
        if from != SocketAddrV4::new(expect, TEREDO_PORT) {
            return Err(DropReason::SourceMismatch);
        }
        let auth = pkt.auth_repr().ok_or(DropReason::AuthenticationFailed)?;
        if auth.nonce != *nonce {
            return Err(DropReason::AuthenticationFailed);
        }
        match &self.cfg.credentials {
            Some(c) => {
                let h = pkt.auth.as_ref().expect("checked above");
                if auth.client_id != c.client_id.as_slice() || !secure::verify(&c.secret, h, datagram) {
                    return Err(DropReason::AuthenticationFailed);
                }
                // Signed with our key, so the server's word: the key is no longer valid.
                if auth.confirmation != 0 {
                    return Err(DropReason::KeyRetired);
                }
            }
            None if auth.confirmation != 0 => return Err(DropReason::AuthenticationFailed),
            None => {}
        }
        let mapped = pkt.origin.ok_or(DropReason::BadValue)?;
        if !is_global_unicast(*mapped.ip()) {
            return Err(DropReason::DestinationMappingNotGlobal);
        }
        let ip = &pkt.ipv6;
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        if dst != *rs_src || !src.is_link_local() || ip.hop_limit() != 255 || ip.next_header() != ip_protocol::ICMPV6 {
            return Err(DropReason::InvalidSolicitation);
        }
        let icmp = Icmpv6Packet::new_checked(ip.payload())?;
        let Icmpv6Repr::RouterAdvert(ra) = Icmpv6Repr::parse(&src, &dst, &icmp)? else {
            return Err(DropReason::InvalidSolicitation);
        };
        let pio = match (ra.prefix_info_count, ra.prefix_info) {
            (1, Some(p)) if p.prefix_len == 64 => p,
            _ => return Err(DropReason::BadValue),
        };
        let o = pio.prefix.octets();
        if o[4..8] != primary.octets() || o[0] & 0xe0 != 0x20 {
            return Err(DropReason::BadValue);
        }
        let mtu = ra.mtu.unwrap_or(1280);
        if !(1280..=65535).contains(&mtu) {
            return Err(DropReason::BadValue);
        }
        let mut prefix = [0u8; 8];
        prefix.copy_from_slice(&o[..8]);
        if prefix[..4] == teredo_addr::PREFIX_EXPERIMENTAL.to_be_bytes() {
            // Old Microsoft servers: Miredo rewrites to the RFC prefix, so do we.
            prefix[..4].copy_from_slice(&teredo_addr::PREFIX.to_be_bytes());
        }
        Ok(Ra { mapped, prefix, mtu })
    }

    /// The address for `ra`: RFC 5991 random bits, drawn again only when the mapping
    /// changes.
    pub(super) fn address_for(&mut self, ra: &Ra) -> Ipv6Addr {
        let bits = match self.q.random_bits {
            Some((m, b)) if m == ra.mapped => b,
            _ => {
                let b = (self.rng.below(0x0fff) + 1) as u16; // never 0: 0 reads as RFC 4380-only
                self.q.random_bits = Some((ra.mapped, b));
                b
            }
        };
        let mut o = [0u8; 16];
        o[..8].copy_from_slice(&ra.prefix);
        let t = TeredoAddr {
            prefix: u32::from_be_bytes([o[0], o[1], o[2], o[3]]),
            server: Ipv4Addr::new(o[4], o[5], o[6], o[7]),
            flags: Flags::new(false, bits),
            mapped: ra.mapped,
        };
        t.to_ipv6()
    }

    pub(super) fn schedule_refresh(&mut self) {
        // RFC 4380: uniform in 75–100 % of the refresh interval.
        let r = self.cfg.refresh.as_millis() as u64;
        let jitter = self.rng.below(r / 4 + 1);
        self.q.refresh_after = Duration::from_millis(r - jitter);
    }

    /// Forget every peer, learned under a mapping that is gone: their random ports close
    /// at the next tick, and what native hosts that spoke first held is dropped. Peers
    /// heard on the link go too (another network, another link).
    pub(super) fn forget_peers(&mut self) {
        self.peers = peer_table(&self.cfg);
        self.kernel.orphan_all();
        self.waiting.clear();
        self.local_peers.clear();
        self.ports.forget_all();
        let lost = self.first_contacts.clear();
        self.stats.drops.count_n(DropReason::ConnectivityTestFailed, lost);
    }

    /// The servers to use, in order of preference: the daemon resolves their names and
    /// gives them here, again whenever the answers change. The same list changes
    /// nothing. Another one starts afresh, as a new client would (the address goes, with
    /// the peers, the random ports and the port mapping learned through the old servers;
    /// qualification starts at the next tick), keeping only the counters and what the
    /// daemon told of the host. An empty list: resolving, no server to ask.
    pub fn set_servers(&mut self, servers: Vec<ServerAddrs>) {
        if servers == self.cfg.servers {
            return;
        }
        // What the old servers gave is moot; a loss of the address still has to reach
        // the interface.
        self.events.retain(|e| matches!(e, ClientEvent::Down(_)));
        if self.address().is_some() {
            self.events.push_back(ClientEvent::Down(SERVERS_CHANGED));
        }
        self.forget_peers();
        self.q = Qualification::new(&servers);
        self.cfg.servers = servers;
        self.port_mapping = PortMapping::default();
        self.announcer = link::Announcer::default();
    }

    pub(super) fn come_up(&mut self, now: Duration, server: usize, ra: Ra) {
        let address = self.address_for(&ra);
        let changed = match self.q.phase {
            Phase::Up { address: old, .. } => old != address,
            _ => self.q.held_address != Some(address),
        };
        self.q.held_address = None;
        if changed {
            // Peers were learned under the old mapping: start afresh.
            self.forget_peers();
            self.stats.addresses += 1;
        }
        // §5.4.3: behind a symmetric NAT that kept our port towards the primary, a random
        // port of ours keeps its number outside too; otherwise it is counted out in
        // sequence, and an Echo Test predicts it (§3.4).
        self.q.port_preserving =
            self.q.nat == NatKind::Symmetric && self.cfg.service_port.map(NonZeroU16::get) == Some(ra.mapped.port());
        self.q.phase = Phase::Up { server, ra, address };
        self.update_mapped_inbound();
        if changed {
            // Tell the link at once: a peer there may be calling us already.
            self.announcer.restart(now);
        }
        self.q.last_server_rx = now;
        self.q.maint = None;
        self.q.key_retired = None;
        self.schedule_refresh();
        if changed || self.events.is_empty() {
            self.events.push_back(ClientEvent::Up {
                address,
                mtu: ra.mtu,
                server: self.cfg.servers[server].primary,
                nat: self.q.nat,
            });
        }
    }

    /// An advertisement refused for `r`; one that says our key is retired is told the
    /// operator once (an event, the status), then counted as any refusal.
    fn ra_refused(&mut self, r: DropReason, server: Ipv4Addr) -> Outcome {
        if r == DropReason::KeyRetired && self.q.key_retired != Some(server) {
            self.q.key_retired = Some(server);
            self.events.push_back(ClientEvent::KeyRetired { server });
        }
        self.dropped(r)
    }

    pub(super) fn go_down(
        &mut self,
        now: Duration,
        why: &'static str,
        next_server: Option<usize>,
        tx: &mut (impl Transmit + Ports),
    ) {
        // The interface loses its address, qualified or held while qualifying again (a
        // network change whose new network does not reach the server).
        if matches!(self.q.phase, Phase::Up { .. }) || self.q.held_address.is_some() {
            self.events.push_back(ClientEvent::Down(why));
        }
        self.q.maint = None;
        self.q.home = None;
        self.port_mapping.inbound = false;
        match next_server {
            Some(s) => {
                self.qualify(now, s, tx);
                // The interface lost the address with the Down event.
                self.q.held_address = None;
            }
            None => {
                self.q.held_address = None;
                let backoff = match self.q.phase {
                    Phase::Offline { backoff, .. } => (backoff * 2).min(Duration::from_secs(120)),
                    _ => Duration::from_secs(10),
                };
                self.q.phase = Phase::Offline { retry_at: now + backoff, backoff };
            }
        }
    }

    pub(super) fn is_server(&self, from: &SocketAddrV4) -> Option<usize> {
        if from.port() != TEREDO_PORT {
            return None;
        }
        self.cfg.servers.iter().position(|s| s.primary == *from.ip() || s.secondary == *from.ip())
    }

    pub(super) fn current_server(&self) -> Option<usize> {
        match self.q.phase {
            Phase::Up { server, .. } | Phase::Primary { server, .. } | Phase::Secondary { server, .. } => Some(server),
            Phase::Offline { .. } | Phase::Resolving => None,
        }
    }

    pub(super) fn on_probe(&mut self, datagram: &[u8], pkt: &TeredoPacket<'_>, from: SocketAddrV4) -> Outcome {
        let Some((nonce, server)) = self.q.cone_nonce else {
            return self.dropped(DropReason::AuthenticationFailed);
        };
        let s = self.cfg.servers[server];
        match self.check_ra(
            datagram,
            pkt,
            from,
            Wanted { from: s.secondary, nonce, rs_src: RS_SOURCE_CONE, primary: s.primary },
        ) {
            Ok(_) => {
                self.q.cone_seen = true;
                self.q.cone_nonce = None;
                if self.q.nat == NatKind::Restricted {
                    self.q.nat = NatKind::Cone;
                    self.events.push_back(ClientEvent::Nat(NatKind::Cone));
                }
                Ok(Action::Consumed)
            }
            Err(r) => self.ra_refused(r, s.primary),
        }
    }

    pub(super) fn on_ra(
        &mut self,
        now: Duration,
        idx: usize,
        from: SocketAddrV4,
        datagram: &[u8],
        pkt: &TeredoPacket<'_>,
        tx: &mut (impl Transmit + Ports),
    ) -> Outcome {
        let s = self.cfg.servers[idx];
        match self.q.phase {
            Phase::Primary { server, nonce, .. } if server == idx => {
                match self.check_ra(
                    datagram,
                    pkt,
                    from,
                    Wanted { from: s.primary, nonce, rs_src: RS_SOURCE_RESTRICTED, primary: s.primary },
                ) {
                    Ok(first) => {
                        self.stats.advertisements += 1;
                        let nonce = self.auth_nonce();
                        self.send_rs(s.secondary, nonce, tx);
                        self.q.phase = Phase::Secondary { server, first, nonce, sent_at: now, tries: 1 };
                        Ok(Action::Consumed)
                    }
                    Err(r) => self.ra_refused(r, s.primary),
                }
            }
            Phase::Secondary { server, first, nonce, .. } if server == idx => {
                match self.check_ra(
                    datagram,
                    pkt,
                    from,
                    Wanted { from: s.secondary, nonce, rs_src: RS_SOURCE_RESTRICTED, primary: s.primary },
                ) {
                    Ok(second) => {
                        self.on_second_ra(now, server, (first, second), tx);
                        Ok(Action::Consumed)
                    }
                    Err(r) => self.ra_refused(r, s.primary),
                }
            }
            Phase::Up { server, ra: old, .. } if server == idx => {
                let Some((nonce, _, _)) = self.q.maint else {
                    return self.on_home_ra(now, idx, from, datagram, pkt, tx);
                };
                match self.check_ra(
                    datagram,
                    pkt,
                    from,
                    Wanted { from: s.primary, nonce, rs_src: RS_SOURCE_RESTRICTED, primary: s.primary },
                ) {
                    Ok(ra) => {
                        self.on_maintenance_ra(now, server, (old, ra), tx);
                        Ok(Action::Consumed)
                    }
                    Err(r) => self.ra_refused(r, s.primary),
                }
            }
            _ => self.on_home_ra(now, idx, from, datagram, pkt, tx),
        }
    }

    /// The secondary address's answer (`second`) after the primary's (`first`): the
    /// NAT's kind, and up (or, behind a symmetric NAT without RFC 6081's support, down).
    fn on_second_ra(
        &mut self,
        now: Duration,
        server: usize,
        (first, second): (Ra, Ra),
        tx: &mut (impl Transmit + Ports),
    ) {
        self.stats.advertisements += 1;
        let nat = if second.mapped != first.mapped {
            NatKind::Symmetric
        } else if self.q.cone_seen {
            NatKind::Cone
        } else {
            NatKind::Restricted
        };
        self.q.nat = nat;
        if nat == NatKind::Symmetric && !self.cfg.symmetric_nat_support {
            self.events.push_back(ClientEvent::Nat(nat));
            self.go_down(now, "symmetric NAT: no Teredo address (RFC 4380)", None, tx);
        } else {
            self.come_up(now, server, first);
        }
    }

    /// A maintenance solicitation's answer (`ra`) while up with `old`: the same mapping
    /// and prefix keep the address; another means a new address, the NAT checked again.
    fn on_maintenance_ra(
        &mut self,
        now: Duration,
        server: usize,
        (old, ra): (Ra, Ra),
        tx: &mut (impl Transmit + Ports),
    ) {
        self.stats.advertisements += 1;
        self.q.last_server_rx = now;
        if ra.mapped != old.mapped || ra.prefix != old.prefix {
            self.qualify(now, server, tx);
        } else {
            self.come_up(now, server, ra);
        }
    }

    /// An answer from the first server while we use another: go back to it.
    pub(super) fn on_home_ra(
        &mut self,
        now: Duration,
        idx: usize,
        from: SocketAddrV4,
        datagram: &[u8],
        pkt: &TeredoPacket<'_>,
        tx: &mut (impl Transmit + Ports),
    ) -> Outcome {
        let Some((nonce, _)) = self.q.home else {
            return self.dropped(DropReason::AuthenticationFailed);
        };
        let s = self.cfg.servers[idx];
        if idx != 0 {
            return self.dropped(DropReason::AuthenticationFailed);
        }
        let wanted = Wanted { from: s.primary, nonce, rs_src: RS_SOURCE_RESTRICTED, primary: s.primary };
        if let Err(r) = self.check_ra(datagram, pkt, from, wanted) {
            return self.ra_refused(r, s.primary);
        }
        self.q.home = None;
        self.qualify(now, 0, tx);
        Ok(Action::Consumed)
    }

    pub(super) fn maintain(&mut self, now: Duration, server: usize, tx: &mut (impl Transmit + Ports)) {
        let s = self.cfg.servers[server];
        match self.q.maint {
            // Nothing from the server for the randomized refresh interval: ask it.
            None if now.saturating_sub(self.q.last_server_rx) >= self.q.refresh_after => {
                let nonce = self.auth_nonce();
                self.send_rs(s.primary, nonce, tx);
                self.q.maint = Some((nonce, now, 1));
            }
            // Retries back off (1, 2, 2, 4, 4, 4, 4 s): a lost solicitation or answer on a lossy
            // link must not cost the address, every connection on it with it.
            Some((nonce, sent, tries)) if now.saturating_sub(sent) >= refresh_retry_after(tries) => {
                if tries < REFRESH_TRIES {
                    self.send_rs(s.primary, nonce, tx);
                    self.q.maint = Some((nonce, now, tries + 1));
                } else if server + 1 < self.cfg.servers.len() {
                    // The server is gone: the next one, and a new address.
                    self.go_down(now, "server stopped answering", Some(server + 1), tx);
                    return;
                } else {
                    // No other server: qualify with it again, the address held (as after a
                    // network change), and given up only if that fails too.
                    self.q.maint = None;
                    self.qualify(now, server, tx);
                    return;
                }
            }
            _ => {}
        }
        // On a fallback server: now and then, see whether the first one is back.
        if server != 0 {
            match self.q.home {
                Some((_, sent)) if now.saturating_sub(sent) < self.cfg.home_check => {}
                _ => {
                    let nonce = self.auth_nonce();
                    self.send_rs(self.cfg.servers[0].primary, nonce, tx);
                    self.q.home = Some((nonce, now));
                }
            }
        }
    }

    /// When [`Client::on_qualifier_timer`] next has something to do: an RS's time-out,
    /// the retry after a failure, the refresh or its retry, the look at the first
    /// server from a fallback one. `None`: nothing until the servers are known.
    pub(super) fn qualifier_due(&self) -> Option<Duration> {
        match self.q.phase {
            Phase::Resolving => None,
            Phase::Offline { retry_at, .. } => Some(retry_at),
            Phase::Primary { sent_at, .. } | Phase::Secondary { sent_at, .. } => Some(sent_at + RS_TIMEOUT),
            Phase::Up { server, .. } => {
                let refresh = match self.q.maint {
                    None => self.q.last_server_rx + self.q.refresh_after,
                    Some((_, sent, tries)) => sent + refresh_retry_after(tries),
                };
                // Never asked yet: at once.
                let home =
                    (server != 0).then(|| self.q.home.map_or(Duration::ZERO, |(_, sent)| sent + self.cfg.home_check));
                let announce = self.announce_due();
                Some([Some(refresh), home, announce].into_iter().flatten().min().unwrap_or(refresh))
            }
        }
    }

    /// Time for qualification: RS retries, failover, back-off, and once qualified the
    /// refresh and our announcement on the link.
    pub(super) fn on_qualifier_timer(&mut self, now: Duration, tx: &mut (impl Transmit + Ports)) {
        match self.q.phase {
            Phase::Offline { retry_at, .. } if now >= retry_at => self.qualify(now, 0, tx),
            Phase::Primary { server, nonce, sent_at, tries } if now.saturating_sub(sent_at) >= RS_TIMEOUT => {
                if tries < RS_TRIES {
                    self.send_rs(self.cfg.servers[server].primary, nonce, tx);
                    self.q.phase = Phase::Primary { server, nonce, sent_at: now, tries: tries + 1 };
                } else {
                    // Failover: the next server, or back-off after the last.
                    let next = (server + 1 < self.cfg.servers.len()).then_some(server + 1);
                    self.go_down(now, "server does not answer", next, tx);
                }
            }
            Phase::Secondary { server, first, nonce, sent_at, tries } if now.saturating_sub(sent_at) >= RS_TIMEOUT => {
                if tries < RS_TRIES {
                    self.send_rs(self.cfg.servers[server].secondary, nonce, tx);
                    self.q.phase = Phase::Secondary { server, first, nonce, sent_at: now, tries: tries + 1 };
                } else {
                    // The secondary address is silent: usable, NAT kind unknown.
                    self.q.nat = NatKind::Unknown;
                    self.come_up(now, server, first);
                }
            }
            Phase::Up { server, .. } => self.maintain(now, server, tx),
            _ => {}
        }
        // Up, or just come up (the secondary's silence): the link hears of it now.
        if matches!(self.q.phase, Phase::Up { .. }) {
            self.announce_when_due(now, tx);
        }
    }
}
