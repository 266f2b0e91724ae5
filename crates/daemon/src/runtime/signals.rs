//! Signals a daemon obeys: SIGTERM/SIGINT stop it cleanly (a second one cuts a relay's or
//! server's drain short), SIGUSR1 logs its counters,
//! SIGHUP reads its file again ([`crate::runtime::reload`]). Handlers only set flags,
//! and then write a byte to a socket the loop polls ([`Signals::wake_fd`]): a loop that
//! sleeps until its next deadline wakes for a signal at once, even one that came just
//! before it began to sleep.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Flags set by signal handlers.
#[derive(Clone)]
pub struct Signals {
    /// SIGTERMs and SIGINTs received.
    stops: Arc<AtomicUsize>,
    report: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
    /// Readable once a signal came (the handlers write to its other end).
    wake: Arc<UnixStream>,
    /// Signals whose byte was written, and those whose bytes were read: the loop reads
    /// the socket only when they differ (no system call a round).
    written: Arc<AtomicUsize>,
    read: Arc<AtomicUsize>,
}

impl Signals {
    /// Install the handlers.
    pub fn install() -> std::io::Result<Signals> {
        let flag = || Arc::new(AtomicBool::new(false));
        let (wake, woken) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        woken.set_nonblocking(true)?;
        let count = || Arc::new(AtomicUsize::new(0));
        let s = Signals {
            stops: count(),
            report: flag(),
            reload: flag(),
            wake: Arc::new(wake),
            written: count(),
            read: count(),
        };
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            let stops = Arc::clone(&s.stops);
            // SAFETY: the handler only adds to an atomic, which is async-signal-safe.
            unsafe {
                signal_hook::low_level::register(sig, move || {
                    stops.fetch_add(1, Ordering::Relaxed);
                })?
            };
        }
        signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&s.report))?;
        signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&s.reload))?;
        // After the flags (a signal's actions run in the order registered): the loop
        // that wakes finds its flag set; the count after the byte, so that a count
        // seen means its byte is there to read.
        for sig in [
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGUSR1,
            signal_hook::consts::SIGHUP,
        ] {
            signal_hook::low_level::pipe::register(sig, woken.try_clone()?)?;
            let written = Arc::clone(&s.written);
            // SAFETY: the handler only adds to an atomic, which is async-signal-safe.
            unsafe {
                signal_hook::low_level::register(sig, move || {
                    written.fetch_add(1, Ordering::SeqCst);
                })?
            };
        }
        Ok(s)
    }

    /// A stop was asked for.
    pub fn stop_requested(&self) -> bool {
        self.stops.load(Ordering::Relaxed) > 0
    }

    /// A stop was asked for again: whatever drain the first one began ends now.
    pub fn stop_insisted(&self) -> bool {
        self.stops.load(Ordering::Relaxed) > 1
    }

    /// A report was asked for since the last call.
    pub fn take_report_request(&self) -> bool {
        self.report.swap(false, Ordering::Relaxed)
    }

    /// Readable once a signal came, until [`Signals::drain_wake`]: for the loop's poll.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// The loop woke and looks at the flags: the wake-ups so far are taken (read only
    /// when a signal came since the last time).
    pub fn drain_wake(&self) {
        let written = self.written.load(Ordering::SeqCst);
        if written == self.read.load(Ordering::Relaxed) {
            return;
        }
        crate::runtime::wait::take_wake_ups(&self.wake);
        self.read.store(written, Ordering::Relaxed);
    }

    /// A reload was asked for since the last call (several SIGHUPs before it: one).
    pub fn take_reload_request(&self) -> bool {
        self.reload.swap(false, Ordering::Relaxed)
    }
}
