//! One relay worker's loop: its UDP socket and TUN queue, batched, asleep until a
//! socket is readable or something is due; worker 0 also runs the relay's timers, the
//! shell's chores and answers `shipworm status`.

use super::*;

/// One worker's loop: its socket and TUN queue, batched; worker 0 also runs the timers
/// and answers SIGUSR1.
pub(super) fn worker(
    shared: &WorkerShared<'_>,
    id: usize,
    io: &WorkerIo,
    addresses: Option<(AddressWatch, u32)>,
) -> Result<(), Failure> {
    /// Stops the other workers when this one ends early, by error or by panic.
    struct HaltOnExit<'a>(&'a WorkerShared<'a>, bool);
    impl Drop for HaltOnExit<'_> {
        fn drop(&mut self) {
            if !self.1 || std::thread::panicking() {
                self.0.halt.store(true, Ordering::Relaxed);
                self.0.wake_all();
            }
        }
    }
    let mut guard = HaltOnExit(shared, false);
    let r = worker_loop(shared, id, io, addresses);
    guard.1 = r.is_ok();
    r
}

/// One worker as the loop's role: its share of the relay and its output.
struct Worker<'a> {
    shared: &'a WorkerShared<'a>,
    id: usize,
    state: RelayWorker,
    out: Output<'a>,
    /// Past the caches, a batch's peer entries are fetched before any is used (as of
    /// the last round).
    fetch: bool,
}

/// What runs around one worker's rounds: when its counters are published, busy
/// polling; worker 0's the shell's chores, status requests and the host's addresses.
struct Rounds {
    /// When this worker's counters changed since it last published them: they are
    /// published within a `PUBLISH_EVERY` of that.
    changed_since: Option<Instant>,
    /// A host-specific relay's watch on the host's addresses (worker 0's), and the
    /// prefix whose addresses it never serves.
    addresses: Option<(AddressWatch, u32)>,
    /// Worker 0 saw the host's addresses change.
    addresses_changed: bool,
    busy: BusyPoll,
    /// When this round began (after its wait, or its spin).
    round_start: Instant,
}

fn worker_loop(
    shared: &WorkerShared<'_>,
    id: usize,
    io: &WorkerIo,
    addresses: Option<(AddressWatch, u32)>,
) -> Result<(), Failure> {
    let WorkerIo { sock, tun } = io;
    let dup = || sock.try_clone().map_err(|e| Failure::runtime(format!("cannot duplicate the UDP socket: {e}")));
    let decap_at_tc = shared.kernel.is_some_and(|k| k.decap == kernel_path::DecapHook::Tc);
    let mut inputs = Inputs {
        datagrams: vec![RecvBatch::for_service(dup()?, BATCH, SLOT, decap_at_tc)],
        packets: Some(TunInput::new(tun)),
    };
    let mut w = Worker {
        shared,
        id,
        state: shared.relay.worker(),
        out: Output {
            batch: SendBatch::new(dup()?, BATCH, SLOT),
            tun: TunOutput::new(tun),
            kernel: shared.kernel.map(|k| k.peers(shared.started.elapsed())),
            intents: Vec::new(),
        },
        fetch: shared.relay.fetches_ahead(),
    };
    let now = Instant::now();
    let mut rounds = Rounds {
        changed_since: None,
        addresses,
        addresses_changed: true,
        // Busy polling where it pays (`runtime::busy_poll`): right after traffic, when
        // the next packet is due within the window, look again at once, yielding the
        // core between looks, rather than sleep.
        busy: BusyPoll::new(shared.busy_poll, now),
        round_start: now,
    };
    // A failure (a socket error) still publishes this worker's last counters for the
    // exit report.
    let ran = role_loop::run(&mut w, &mut inputs, &mut rounds);
    rounds.publish(&mut w, &inputs);
    ran
}

impl<'a> role_loop::Role for Worker<'a> {
    type Datagrams = RecvBatch;
    type Packets = TunInput<'a>;
    const DATAGRAM_BATCHES: usize = UDP_BATCHES_PER_ROUND;
    const PACKETS: usize = BATCH;

    /// Worker 0 runs the relay's timers; the others have none.
    fn deadline(&self) -> Option<Instant> {
        let shared = self.shared;
        (self.id == 0).then(|| shared.relay.poll_timeout().map(|t| shared.started + t)).flatten()
    }

    fn ahead(&self, data: &[u8]) {
        if self.fetch {
            self.shared.relay.prefetch_udp(data);
        }
    }

    fn on_datagram(&mut self, now: Instant, _input: usize, from: SocketAddrV4, data: &[u8]) {
        let shared = self.shared;
        let now = now.saturating_duration_since(shared.started);
        let outcome =
            self.out.decide(shared, &mut self.state, now, |w, out| shared.relay.on_udp(w, now, from, data, out));
        logging::outcome(outcome, "datagram", from);
    }

    fn on_packet(&mut self, now: Instant, packet: &[u8]) {
        let shared = self.shared;
        let now = now.saturating_duration_since(shared.started);
        let outcome = self.out.decide(shared, &mut self.state, now, |w, out| shared.relay.on_tun(w, now, packet, out));
        logging::outcome(outcome, "packet", "the IPv6 side");
    }

    fn on_deadline(&mut self, now: Instant) {
        let shared = self.shared;
        let now = now.saturating_duration_since(shared.started);
        shared.relay.on_timer(&mut self.state, now, &mut self.out);
        self.out.carry_out(shared, &mut self.state, now);
    }

    fn flush(&mut self) {
        self.out.tun.flush();
        DatagramOutput::flush(&mut self.out.batch);
    }

    /// The TUN's packets only: what the UDP side queued leaves with the TUN side's in
    /// one send at the round's end.
    fn after_input(&mut self) {
        self.out.tun.flush();
    }
}

impl Around<Worker<'_>> for Rounds {
    fn done(&mut self, w: &mut Worker<'_>) -> Result<bool, Failure> {
        Ok(!w.shared.running())
    }

    /// Its counters' publication and a drain's end; for worker 0 also the shell's next
    /// chores. Worker 0 says what it sleeps until before the last look at the relay's
    /// deadline: a worker that brings the deadline forward after that look sees it
    /// and wakes it (both sides sequentially consistent).
    fn wake_at(&mut self, w: &Worker<'_>) -> Option<Instant> {
        let shared = w.shared;
        let publish = self.changed_since.map(|t| t + PUBLISH_EVERY);
        let drain = shared.drain_until.get().copied();
        if w.id != 0 {
            // Stops and failures wake them ([`WorkerShared::wake_all`]).
            return [publish, drain].into_iter().flatten().min();
        }
        let timer = shared.relay.poll_timeout().map(|t| shared.started + t);
        let until = [publish, timer, drain].into_iter().flatten().fold(shared.shell.next_wake(), Instant::min);
        let asleep = u64::try_from(until.saturating_duration_since(shared.started).as_nanos()).unwrap_or(u64::MAX);
        shared.asleep_until.store(asleep, Ordering::SeqCst);
        Some(shared.relay.poll_timeout().map_or(until, |t| until.min(shared.started + t)))
    }

    fn spin(&mut self) -> bool {
        let now = Instant::now();
        self.round_start = now;
        self.busy.spin(now)
    }

    /// Every worker's wake-up; worker 0's the status socket, signals and the host's
    /// addresses too.
    fn watch<'w>(&'w self, w: &'w Worker<'_>, fds: &mut Watched<'w>) {
        let shared = w.shared;
        fds.push(shared.wakes[w.id].0.as_fd());
        if w.id == 0 {
            fds.extend([shared.shell.status_fd(), shared.shell.signal_fd()]);
            fds.extend(self.addresses.as_ref().map(|(a, _)| a.as_fd()));
        }
    }

    fn woke(&mut self, w: &mut Worker<'_>, readable: &[bool], _any: bool) -> Result<(), Failure> {
        let shared = w.shared;
        self.round_start = Instant::now();
        let ready = |i: usize| readable.get(i) == Some(&true);
        if ready(0) {
            wait::take_wake_ups(&shared.wakes[w.id].0);
        }
        if w.id == 0 {
            shared.asleep_until.store(0, Ordering::SeqCst);
            self.addresses_changed |= ready(3);
            // Answered at once, before the round's reading (a requester waits less).
            if ready(1) {
                shared.shell.serve_status(shared);
            }
        }
        Ok(())
    }

    /// A round with traffic brings the counters' publication and worker 0's chores
    /// forward, and may have brought the relay's next deadline before the one worker 0
    /// sleeps until: wake it. Worker 0 follows the host's addresses, answers status
    /// requests and runs the shell's chores (watchdog, status, metrics, SIGUSR1,
    /// SIGHUP).
    fn after_round(
        &mut self,
        w: &mut Worker<'_>,
        inputs: &Inputs<RecvBatch, TunInput<'_>>,
        round: Turned,
    ) -> Result<(), Failure> {
        let shared = w.shared;
        if round.handled > 0 || round.timers {
            self.changed_since.get_or_insert(self.round_start);
        }
        if round.handled > 0 {
            // Worker 0 runs the chores: woken when they were brought forward, so that
            // metrics and status follow this worker's traffic within their period.
            let brought_forward = shared.shell.busy();
            if w.id != 0 {
                if brought_forward {
                    shared.wake(0);
                }
                wake_the_timer(shared);
            }
        }
        if w.id == 0 {
            if round.timers {
                shared.shell.busy();
            }
            if let Some((watch, prefix)) = self.addresses.as_mut().filter(|_| self.addresses_changed) {
                shared.follow_addresses(watch, *prefix);
            }
            self.addresses_changed = false;
            // Requests that came while the worker was busy polling, too.
            if shared.shell.tick(shared) {
                shared.shell.serve_status(shared);
            }
        }
        if self.changed_since.is_some_and(|t| Instant::now() >= t + PUBLISH_EVERY) {
            self.publish(w, inputs);
        }
        w.fetch = shared.relay.fetches_ahead();
        self.busy.round(round.handled, Instant::now(), self.round_start);
        Ok(())
    }
}

/// Another worker's round may have brought the relay's next deadline before the one
/// worker 0 sleeps until: wake it.
fn wake_the_timer(shared: &WorkerShared<'_>) {
    let asleep = shared.asleep_until.load(Ordering::SeqCst);
    if asleep == 0 {
        return;
    }
    let due = shared.relay.poll_timeout().map(|t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX));
    if due.is_some_and(|d| d < asleep) {
        shared.wake(0);
    }
}

impl Rounds {
    /// This worker's counters, where the reports read them.
    fn publish(&mut self, w: &mut Worker<'_>, inputs: &Inputs<RecvBatch, TunInput<'_>>) {
        self.changed_since = None;
        let read = inputs.packets.as_ref().map(TunInput::counts).unwrap_or_default();
        *w.shared.published[w.id].lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            (w.state.stats().clone(), w.out.io_errors(read), w.out.offloads(read));
    }
}
