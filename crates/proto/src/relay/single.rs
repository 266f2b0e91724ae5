//! The relay on one thread ([`Relay`]): one shard, one worker; tests, and what the
//! sans-IO behaviour is specified against.

use super::*;
use crate::transmit::{until_decided, Recorder};

/// The relay on one thread: one shard, one worker (tests, and what the sans-IO
/// behaviour is specified against).
#[derive(Debug)]
pub struct Relay {
    shared: SharedRelay,
    worker: RelayWorker,
}

impl Relay {
    /// A relay with this configuration.
    pub fn new(cfg: RelayConfig) -> Relay {
        let shared = SharedRelay::new(cfg, 1);
        let worker = shared.worker();
        Relay { shared, worker }
    }

    /// Counters.
    pub fn stats(&self) -> &RelayStats {
        &self.worker.stats
    }

    /// Number of peers.
    pub fn peer_count(&self) -> usize {
        self.shared.peer_count()
    }

    /// Peers waiting for bubble answers.
    pub fn pending_len(&self) -> usize {
        self.shared.pending_len()
    }

    /// Bytes held in queues (a walk over the table).
    pub fn queued_bytes(&self) -> usize {
        self.shared.queued_bytes()
    }

    /// See [`SharedRelay::set_served`].
    pub fn set_served(&self, addresses: &[Ipv6Addr]) -> bool {
        self.shared.set_served(addresses)
    }

    /// See [`SharedRelay::on_tun`].
    pub fn on_tun(&mut self, now: Duration, packet: &[u8], tx: &mut impl Transmit) -> Outcome {
        self.shared.on_tun(&mut self.worker, now, packet, tx)
    }

    /// See [`SharedRelay::on_udp`].
    pub fn on_udp(&mut self, now: Duration, from: SocketAddrV4, datagram: &[u8], tx: &mut impl Transmit) -> Outcome {
        self.shared.on_udp(&mut self.worker, now, from, datagram, tx)
    }

    /// See [`SharedRelay::on_timer`].
    pub fn on_timer(&mut self, now: Duration, tx: &mut impl Transmit) {
        self.shared.on_timer(&mut self.worker, now, tx)
    }

    /// See [`SharedRelay::poll_timeout`].
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.shared.poll_timeout()
    }

    /// [`Relay::on_udp`] with the daemon's part played over `w`'s kernel model: handed
    /// again until decided, every read answered ([`Relay::answer_kernel`]).
    pub fn on_udp_answered(&mut self, now: Duration, from: SocketAddrV4, datagram: &[u8], w: &mut Recorder) -> Outcome {
        until_decided(|| {
            let outcome = self.on_udp(now, from, datagram, w);
            self.answer_kernel(now, w);
            outcome
        })
    }

    /// [`Relay::on_tun`] with the daemon's part played over `w`'s kernel model.
    pub fn on_tun_answered(&mut self, now: Duration, packet: &[u8], w: &mut Recorder) -> Outcome {
        until_decided(|| {
            let outcome = self.on_tun(now, packet, w);
            self.answer_kernel(now, w);
            outcome
        })
    }

    /// [`Relay::on_timer`] with the daemon's part played over `w`'s kernel model.
    pub fn on_timer_answered(&mut self, now: Duration, w: &mut Recorder) {
        self.on_timer(now, w);
        self.answer_kernel(now, w);
    }

    /// The daemon's part, for tests and tools: the reads `w`'s kernel model holds
    /// answered from it ([`SharedRelay::kernel_saw`]), and those the answers raise,
    /// until none is left.
    pub fn answer_kernel(&mut self, now: Duration, w: &mut Recorder) {
        let (shared, worker) = (&self.shared, &mut self.worker);
        w.answer_reads(|w, peer, seen, sweep| shared.kernel_saw(worker, now, peer, seen, sweep, w));
    }
}
