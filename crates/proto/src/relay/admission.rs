//! Whether a datagram from a client the relay has an entry for comes from that client
//! (RFC 4380 §5.4.2; RFC 6081 §5.2.4's nonce): judged from the datagram and the entry
//! alone, with no lock, table or output in sight, so that every rule is one line here
//! and a case of its own.

use super::*;

/// What the admission looks at in a datagram.
#[derive(Debug, Clone, Copy)]
pub(super) struct Datagram {
    /// Where it came from.
    pub(super) from: SocketAddrV4,
    /// The mapping its source address embeds.
    pub(super) embeds: SocketAddrV4,
    /// A bubble (no payload).
    pub(super) bubble: bool,
    /// The Nonce trailer it carries, if a bubble (RFC 6081 §5.2.4: a client's direct
    /// bubble echoes ours).
    pub(super) echo: Option<NonZeroU32>,
    /// A bubble addressed to our bubbles' source for the client (`bubble_source`): an
    /// answer from someone who saw one of our bubbles.
    pub(super) to_us: bool,
}

/// What becomes of a datagram from a client with an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// From the client: its entry is updated and the packet goes on. `proved`: by our
    /// nonce or from the mapping its address embeds (the round's nonce is spent);
    /// `fresh`: from the mapping the kernel's list already has, heard a moment ago (no
    /// update of the list); `seal`: whether the entry's port is then one our nonce
    /// proved elsewhere than the embedded mapping (`None`: as it was).
    Client { proved: bool, fresh: bool, seal: Option<bool> },
    /// From the mapping the client's address embeds while another port of that address
    /// is being proved (packets from it held): the packet goes on, and the wait and
    /// what it holds stay. Only our nonce ends such a wait: the embedded mapping can be
    /// read off the address and forged by anyone.
    Passing,
    /// Data from another port of the address the client embeds, its entry trusted and
    /// not waiting: the port is proved as a first packet's is (bubbles with a nonce,
    /// the packet held meanwhile), never taken on its word.
    Prove,
    /// More from a client whose first packets are held while its port is proved: held
    /// too (if they may leave at all).
    Hold,
    /// Not from the client.
    Refused(DropReason),
}

/// How `d` is admitted against the client's entry `p` at `now`.
pub(super) fn admit(p: &Peer, d: &Datagram, now: Duration) -> Admission {
    let embedded = d.embeds == d.from;
    let same_address = d.embeds.ip() == d.from.ip();
    // A port our nonce proved elsewhere than the embedded mapping is kept until the
    // client proves another or its entry expires: one datagram forged from the embedded
    // mapping, which anyone can read off the address, moved it, and the client's own
    // packets were refused from then on. (A port taken on a nonce-less answer is not
    // sealed: its client, which may be a host behind the same address, has no nonce to
    // prove with, and the client's own packets from the embedded mapping take it back.)
    let proved_elsewhere = p.trusted && p.sealed && p.mapped != d.embeds;
    // From the mapping a bubble exchange proved.
    let learned = p.trusted && p.mapped == d.from;
    // Our bubbles' nonce echoed: the client itself, from any port of the address it
    // embeds (a symmetric NAT's). It moves a mapping an answer without it set (someone
    // behind the same address).
    let by_nonce = d.echo.is_some() && d.echo == p.nonce_sent && same_address;
    // Without a nonce (Miredo's clients), another port of the embedded address is taken
    // while we wait for an answer: a symmetric NAT's, and only by an answer addressed to
    // our bubbles' source, which a host behind the same address spraying bubbles in the
    // client's name has never seen. Not while a port the client spoke from is being
    // proved: only the nonce proves it, for the whole wait, whether its held packets
    // are still there or were pushed out.
    let answer = p.waiting && !p.proving && d.bubble && d.echo.is_none() && d.to_us && same_address;
    if embedded && !by_nonce {
        if proved_elsewhere {
            return Admission::Refused(DropReason::SourceMismatch);
        }
        if p.proving {
            // Data goes on and ends nothing; a bubble (the client answering ours, with
            // no nonce: Miredo's) ends the wait at the embedded mapping, our nonce kept
            // for the port being proved.
            if !d.bubble {
                return Admission::Passing;
            }
            return Admission::Client { proved: false, fresh: false, seal: Some(false) };
        }
    }
    if embedded || learned || answer || by_nonce {
        let fresh = learned && !p.waiting && now.saturating_sub(p.last_rx) < KERNEL_HEARD_GRAIN;
        let seal = if by_nonce {
            Some(!embedded)
        } else if learned {
            None
        } else {
            Some(false)
        };
        return Admission::Client { proved: by_nonce || embedded, fresh, seal };
    }
    if p.waiting && p.proving && !d.bubble && same_address {
        return Admission::Hold;
    }
    // Not more often than bubbles may go (a proof is bubbles).
    if p.trusted && !p.waiting && !d.bubble && same_address && now.saturating_sub(p.last_tx) >= BUBBLE_SPACING {
        return Admission::Prove;
    }
    Admission::Refused(DropReason::SourceMismatch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const EMBEDS: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 7), 40000);
    const OTHER_PORT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 7), 40001);
    const ELSEWHERE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 9), 40000);
    const NONCE: Option<NonZeroU32> = NonZeroU32::new(7);

    fn entry(waiting: bool, trusted_at: Option<SocketAddrV4>) -> Peer {
        let mut p = Peer::new(Ipv6Addr::LOCALHOST, trusted_at.unwrap_or(EMBEDS), Duration::ZERO);
        p.trusted = trusted_at.is_some();
        p.waiting = waiting;
        p.nonce_sent = NONCE;
        p
    }

    fn datagram(from: SocketAddrV4, bubble: bool, echo: Option<NonZeroU32>) -> Datagram {
        Datagram { from, embeds: EMBEDS, bubble, echo, to_us: bubble }
    }

    /// The entry trusted at a port our nonce proved.
    fn sealed(mut p: Peer) -> Peer {
        p.sealed = true;
        p
    }

    /// The entry waiting for the proof of a port it spoke from (its packets held).
    fn proving(mut p: Peer) -> Peer {
        p.proving = true;
        p
    }

    #[test]
    fn each_way_a_client_proves_itself_and_each_refusal() {
        let s = Duration::from_secs(10);
        let cases = [
            // From the mapping its address embeds: the client, proved.
            (
                entry(false, None),
                datagram(EMBEDS, false, None),
                Admission::Client { proved: true, fresh: false, seal: Some(false) },
            ),
            // From the mapping a bubble exchange proved, data.
            (
                entry(false, Some(OTHER_PORT)),
                datagram(OTHER_PORT, false, None),
                Admission::Client { proved: false, fresh: false, seal: None },
            ),
            // Our nonce echoed from another port of the embedded address.
            (
                entry(true, None),
                datagram(OTHER_PORT, true, NONCE),
                Admission::Client { proved: true, fresh: false, seal: Some(true) },
            ),
            // A nonce-less answer from another port while we wait (a symmetric NAT's),
            // addressed to our bubbles' source.
            (
                entry(true, None),
                datagram(OTHER_PORT, true, None),
                Admission::Client { proved: false, fresh: false, seal: Some(false) },
            ),
            // ... but not one addressed elsewhere: a host behind the same address
            // spraying bubbles in the client's name, which never saw ours.
            (
                entry(true, None),
                Datagram { to_us: false, ..datagram(OTHER_PORT, true, None) },
                Admission::Refused(DropReason::SourceMismatch),
            ),
            // ... but not for a client whose packets are held: only the nonce proves it.
            (
                proving(entry(true, None)),
                datagram(OTHER_PORT, true, None),
                Admission::Refused(DropReason::SourceMismatch),
            ),
            // Its held client's data from the unproved port: held too.
            (proving(entry(true, None)), datagram(OTHER_PORT, false, None), Admission::Hold),
            // A wrong nonce, another address, or data from an unproved port: refused.
            (
                entry(true, None),
                datagram(OTHER_PORT, true, NonZeroU32::new(8)),
                Admission::Refused(DropReason::SourceMismatch),
            ),
            (entry(true, None), datagram(ELSEWHERE, true, NONCE), Admission::Refused(DropReason::SourceMismatch)),
            (entry(false, None), datagram(OTHER_PORT, false, None), Admission::Refused(DropReason::SourceMismatch)),
        ];
        for (i, (p, d, want)) in cases.into_iter().enumerate() {
            assert_eq!(admit(&p, &d, s), want, "case {i}: {d:?} against {p:?}");
        }
    }

    #[test]
    fn a_port_proved_elsewhere_is_kept_and_a_port_is_never_taken_on_its_word() {
        let s = Duration::from_secs(10);
        let cases = [
            // Trusted at a proved port: a datagram from the embedded mapping (forgeable
            // by anyone) moves nothing; without the rule it was admitted and moved the
            // entry there.
            (
                sealed(entry(false, Some(OTHER_PORT))),
                datagram(EMBEDS, false, None),
                Admission::Refused(DropReason::SourceMismatch),
            ),
            (
                sealed(entry(true, Some(OTHER_PORT))),
                datagram(EMBEDS, true, None),
                Admission::Refused(DropReason::SourceMismatch),
            ),
            // A port taken on a nonce-less answer is not sealed: the client's own
            // packets from its embedded mapping take it back (a host behind the same
            // address may have answered in its name; a client without nonces has no
            // other way back).
            (
                entry(false, Some(OTHER_PORT)),
                datagram(EMBEDS, false, None),
                Admission::Client { proved: true, fresh: false, seal: Some(false) },
            ),
            // ... but our nonce echoed from it proves it.
            (
                entry(true, Some(OTHER_PORT)),
                datagram(EMBEDS, true, NONCE),
                Admission::Client { proved: true, fresh: false, seal: Some(false) },
            ),
            // While another port is being proved (its packets held), the embedded
            // mapping's packets go on and the wait stays.
            (proving(entry(true, Some(EMBEDS))), datagram(EMBEDS, false, None), Admission::Passing),
            // ... and the client's own answer from there, without a nonce (Miredo's),
            // ends the wait there, our nonce kept for the port being proved.
            (
                proving(entry(true, None)),
                datagram(EMBEDS, true, None),
                Admission::Client { proved: false, fresh: false, seal: Some(false) },
            ),
            // Trusted at the embedded mapping (perhaps by a forged first packet): data
            // from another port of the address is proved, not refused for good.
            (entry(false, Some(EMBEDS)), datagram(OTHER_PORT, false, None), Admission::Prove),
            // A port being proved whose held packets were pushed out (a flood of
            // others'): still only the nonce proves it, not a bubble without one.
            (
                proving(entry(true, None)),
                datagram(OTHER_PORT, true, None),
                Admission::Refused(DropReason::SourceMismatch),
            ),
            // A bubble from another port proves nothing and starts nothing.
            (
                entry(false, Some(EMBEDS)),
                datagram(OTHER_PORT, true, None),
                Admission::Refused(DropReason::SourceMismatch),
            ),
            // Another address: refused.
            (
                entry(false, Some(EMBEDS)),
                datagram(ELSEWHERE, false, None),
                Admission::Refused(DropReason::SourceMismatch),
            ),
        ];
        for (i, (p, d, want)) in cases.into_iter().enumerate() {
            assert_eq!(admit(&p, &d, s), want, "case {i}: {d:?} against {p:?}");
        }
    }

    #[test]
    fn a_listed_client_heard_a_moment_ago_is_fresh() {
        let mut p = entry(false, Some(EMBEDS));
        p.last_rx = Duration::from_secs(10);
        let d = datagram(EMBEDS, false, None);
        let at = |ms| admit(&p, &d, Duration::from_secs(10) + Duration::from_millis(ms));
        assert_eq!(at(50), Admission::Client { proved: true, fresh: true, seal: None });
        assert_eq!(at(150), Admission::Client { proved: true, fresh: false, seal: None });
    }
}
