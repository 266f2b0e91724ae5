//! One relay worker's loop: its UDP socket and TUN queue, batched, asleep until a
//! socket is readable or something is due; worker 0 also runs the relay's timers, the
//! shell's chores and answers `shipworm status`.

use super::*;

/// One worker's loop: its socket and TUN queue, batched; worker 0 also runs the timers
/// and answers SIGUSR1.
pub(super) fn worker(shared: &WorkerShared<'_>, id: usize, io: &WorkerIo) -> Result<(), Failure> {
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
    let r = worker_loop(shared, id, io);
    guard.1 = r.is_ok();
    r
}

/// One worker's loop state: its share of the relay, its batches, its clocks.
struct Worker<'a> {
    shared: &'a WorkerShared<'a>,
    id: usize,
    tun: &'a Tun,
    state: RelayWorker,
    rx: RecvBatch,
    out: Output<'a>,
    tun_in: TunReader,
    /// When this worker's counters changed since it last published them: they are
    /// published within a `PUBLISH_EVERY` of that.
    changed_since: Option<Instant>,
    /// Worker 0 saw the host's addresses change (a host-specific relay).
    addresses_changed: bool,
    busy: BusyPoll,
}

fn worker_loop(shared: &WorkerShared<'_>, id: usize, io: &WorkerIo) -> Result<(), Failure> {
    let WorkerIo { sock, tun } = io;
    let dup = || sock.try_clone().map_err(|e| Failure::runtime(format!("cannot duplicate the UDP socket: {e}")));
    let mut w = Worker {
        shared,
        id,
        tun,
        state: shared.relay.worker(),
        rx: RecvBatch::for_service(
            dup()?,
            BATCH,
            SLOT,
            shared.kernel.is_some_and(|k| k.decap == kernel_path::DecapHook::Tc),
        ),
        out: Output {
            tun,
            batch: SendBatch::new(dup()?, BATCH, SLOT),
            tun_out: TunWriter::default(),
            kernel: shared.kernel.map(|k| k.peers(shared.started.elapsed())),
            intents: Vec::new(),
        },
        tun_in: TunReader::default(),
        changed_since: None,
        addresses_changed: true,
        // Busy polling where it pays (`runtime::busy_poll`): right after traffic, when
        // the next packet is due within the window, look again at once, yielding the
        // core between looks, rather than sleep.
        busy: BusyPoll::new(shared.busy_poll, Instant::now()),
    };
    // The rounds, so that a failure (a socket error) still publishes this worker's last
    // counters for the exit report.
    let rounds = (|| -> Result<(), Failure> {
        while shared.running() {
            w.wait_for_work()?;
            w.round()?;
        }
        Ok(())
    })();
    w.publish();
    rounds
}

impl Worker<'_> {
    /// When this worker must wake at the latest: its counters' publication; for worker
    /// 0 also the relay's next deadline, the shell's and a drain's end; for the others
    /// a look at the stop flags.
    fn wake_at(&self, now: Instant) -> Instant {
        let shared = self.shared;
        let publish = self.changed_since.map(|t| t + PUBLISH_EVERY);
        let drain = shared.drain_until.get().copied();
        if self.id != 0 {
            // Stops and failures wake them ([`WorkerShared::wake_all`]).
            return [publish, drain].into_iter().flatten().fold(now + Duration::from_secs(86_400), Instant::min);
        }
        let timer = shared.relay.poll_timeout().map(|t| shared.started + t);
        [publish, timer, drain].into_iter().flatten().fold(shared.shell.next_wake(), Instant::min)
    }

    /// Sleep until a socket is readable or something is due, unless busy polling says
    /// look again at once (yielding the core to whoever needs it). Worker 0 also wakes
    /// for a status request, a signal, a deadline another worker brought forward, and a
    /// change of the host's addresses (a host-specific relay).
    fn wait_for_work(&mut self) -> Result<(), Failure> {
        if self.busy.spin(Instant::now()) {
            std::thread::yield_now();
            return Ok(());
        }
        let shared = self.shared;
        let (wake, _) = &shared.wakes[self.id];
        let take_wake = || wait::take_wake_ups(wake);
        if self.id != 0 {
            let wait = self.wake_at(Instant::now()).saturating_duration_since(Instant::now());
            let mut fds = [
                PollFd::new(self.rx.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.tun.as_fd(), PollFlags::POLLIN),
                PollFd::new(wake.as_fd(), PollFlags::POLLIN),
            ];
            wait::readable(&mut fds, wait)?;
            if fds[2].revents().is_some_and(|r| r.contains(PollFlags::POLLIN)) {
                take_wake();
            }
            return Ok(());
        }
        // Said before the last look at the deadline: a worker that brings it forward
        // after that look sees this and wakes us (both sides sequentially consistent).
        let asleep =
            |t: Instant| u64::try_from(t.saturating_duration_since(shared.started).as_nanos()).unwrap_or(u64::MAX);
        let until = self.wake_at(Instant::now());
        shared.asleep_until.store(asleep(until), Ordering::SeqCst);
        let until = shared.relay.poll_timeout().map_or(until, |t| until.min(shared.started + t));
        let wait = until.saturating_duration_since(Instant::now());
        let addresses =
            shared.addresses.as_ref().map(|(w, _)| w.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        // Without an address watch, the wake-up socket stands in its place.
        let watched = addresses.as_ref().map_or(wake.as_fd(), |w| w.as_fd());
        let mut fds = [
            PollFd::new(self.rx.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.tun.as_fd(), PollFlags::POLLIN),
            PollFd::new(shared.shell.status_fd(), PollFlags::POLLIN),
            PollFd::new(shared.shell.signal_fd(), PollFlags::POLLIN),
            PollFd::new(wake.as_fd(), PollFlags::POLLIN),
            PollFd::new(watched, PollFlags::POLLIN),
        ];
        wait::readable(&mut fds, wait)?;
        shared.asleep_until.store(0, Ordering::SeqCst);
        let readable = |f: Option<&PollFd>| f.and_then(|f| f.revents()).is_some_and(|r| r.contains(PollFlags::POLLIN));
        let status = readable(fds.get(2));
        let woken = readable(fds.get(4));
        self.addresses_changed |= addresses.is_some() && readable(fds.get(5));
        drop(addresses);
        if woken {
            take_wake();
        }
        if status {
            shared.shell.serve_status(shared);
        }
        Ok(())
    }

    /// Another worker's round may have brought the relay's next deadline before the one
    /// worker 0 sleeps until: wake it.
    fn wake_the_timer(&self) {
        let shared = self.shared;
        let asleep = shared.asleep_until.load(Ordering::SeqCst);
        if asleep == 0 {
            return;
        }
        let due = shared.relay.poll_timeout().map(|t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX));
        if due.is_some_and(|d| d < asleep) {
            shared.wake(0);
        }
    }

    /// UDP side a bounded number of batches, then the TUN side up to a batch of
    /// packets, so neither side starves; the tick when due; then what they queued.
    fn round(&mut self) -> Result<(), Failure> {
        let shared = self.shared;
        let round_start = Instant::now();
        let now = shared.started.elapsed();
        // Past the caches, a batch's peer entries are fetched before any is used.
        let fetch = shared.relay.fetches_ahead();
        let ahead = |data: &[u8]| {
            if fetch {
                shared.relay.prefetch_udp(data);
            }
        };
        let (state, out) = (&mut self.state, &mut self.out);
        let mut handled = drain::udp_ahead(&mut self.rx, UDP_BATCHES_PER_ROUND, ahead, |from, data| {
            let outcome = out.decide(shared, state, now, |w, out| shared.relay.on_udp(w, now, from, data, out));
            logging::outcome(outcome, "datagram", from);
        })?;
        self.out.tun_out.flush(self.tun);
        let now = shared.started.elapsed();
        let (state, out) = (&mut self.state, &mut self.out);
        handled += drain::tun(self.tun, &mut self.tun_in, BATCH, |packet| {
            let outcome = out.decide(shared, state, now, |w, out| shared.relay.on_tun(w, now, packet, out));
            logging::outcome(outcome, "packet", "the IPv6 side");
        })?;
        if handled > 0 {
            self.changed_since.get_or_insert(round_start);
            // Worker 0 runs the chores: woken when they were brought forward, so that
            // metrics and status follow this worker's traffic within their period.
            if shared.shell.busy() && self.id != 0 {
                shared.wake(0);
            }
            if self.id != 0 {
                self.wake_the_timer();
            }
        }
        self.chores();
        // Timers and a bubble's answer may have queued for either side.
        self.out.tun_out.flush(self.tun);
        if !self.out.batch.is_empty() {
            self.out.batch.flush();
        }
        self.busy.round(handled, Instant::now(), round_start);
        Ok(())
    }

    /// What is due after a round: worker 0 runs the relay's timers when due, follows
    /// the host's addresses, and the shell's chores (watchdog, status, metrics,
    /// SIGUSR1, SIGHUP, requests that came while it was busy polling); every worker
    /// publishes its counters a while after they changed.
    fn chores(&mut self) {
        let shared = self.shared;
        if self.id == 0 {
            let now = shared.started.elapsed();
            if shared.relay.poll_timeout().is_some_and(|t| now >= t) {
                shared.relay.on_timer(&mut self.state, now, &mut self.out);
                self.out.carry_out(shared, &mut self.state, now);
                self.changed_since.get_or_insert_with(Instant::now);
                shared.shell.busy();
            }
            if std::mem::take(&mut self.addresses_changed) {
                shared.follow_addresses();
            }
            if shared.shell.tick(shared) {
                // Requests that came while the worker was busy polling.
                shared.shell.serve_status(shared);
            }
        }
        if self.changed_since.is_some_and(|t| Instant::now() >= t + PUBLISH_EVERY) {
            self.publish();
        }
    }

    /// This worker's counters, where the reports read them.
    fn publish(&mut self) {
        self.changed_since = None;
        *self.shared.published[self.id].lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            (self.state.stats().clone(), self.out.io_errors(&self.tun_in), self.out.offloads(&self.tun_in));
    }
}
