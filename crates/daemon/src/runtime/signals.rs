//! Signals a daemon obeys: SIGTERM/SIGINT stop it cleanly, SIGUSR1 logs its counters,
//! SIGHUP reads its file again ([`crate::runtime::reload`]). Handlers only set flags;
//! the event loop looks at them between batches.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Flags set by signal handlers.
#[derive(Clone)]
pub struct Signals {
    stop: Arc<AtomicBool>,
    report: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
}

impl Signals {
    /// Install the handlers.
    pub fn install() -> std::io::Result<Signals> {
        let flag = || Arc::new(AtomicBool::new(false));
        let s = Signals { stop: flag(), report: flag(), reload: flag() };
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_hook::flag::register(sig, Arc::clone(&s.stop))?;
        }
        signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&s.report))?;
        signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&s.reload))?;
        Ok(s)
    }

    /// A stop was asked for.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
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
