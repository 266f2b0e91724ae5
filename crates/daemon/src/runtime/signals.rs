//! Signals a daemon obeys: SIGTERM/SIGINT stop it cleanly (a second one cuts a relay's or
//! server's drain short), SIGUSR1 logs its counters,
//! SIGHUP reads its file again ([`crate::runtime::reload`]). Handlers only set flags;
//! the event loop looks at them between batches.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Flags set by signal handlers.
#[derive(Clone)]
pub struct Signals {
    /// SIGTERMs and SIGINTs received.
    stops: Arc<AtomicUsize>,
    report: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
}

impl Signals {
    /// Install the handlers.
    pub fn install() -> std::io::Result<Signals> {
        let flag = || Arc::new(AtomicBool::new(false));
        let s = Signals { stops: Arc::new(AtomicUsize::new(0)), report: flag(), reload: flag() };
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

    /// A reload was asked for since the last call (several SIGHUPs before it: one).
    pub fn take_reload_request(&self) -> bool {
        self.reload.swap(false, Ordering::Relaxed)
    }
}
