//! The one shell every role's daemon runs in: what it takes from the system while it is
//! still root, the order it gives root up in, and the chores of every turn of its loop.
//!
//! Set-up is a typestate, so that only the safe order compiles:
//! 1. [`Shell::open`] (`Shell<Opened>`): the status socket is bound, the metrics
//!    listener bound, the service manager's socket connected and the signal handlers
//!    installed — the last things a role may make before it is confined (a confined
//!    daemon makes no socket and binds no port). The role makes its own sockets, TUN
//!    and helper beside it.
//! 2. [`Shell::confine`] drops root and installs the seccomp and Landlock rules, and only
//!    then starts the metrics thread, which must not hold root either:
//!    `Shell<Confined>`.
//! 3. Only a confined shell says `READY=1` ([`Shell::ready`]), runs the per-tick chore
//!    ([`Shell::tick`]: the watchdog, the status line, the metrics snapshot, SIGUSR1's
//!    counters in the log, SIGHUP's reload), answers `shipworm status`
//!    ([`Shell::serve_status`]) and says goodbye ([`Shell::stopping`], then
//!    [`Shell::outcome`]: a stop to be started again with a changed file exits with
//!    [`reload::RESTART_STATUS`]).
//!
//! Every role reports the same way, through [`Reports`]: its table of counters, the few
//! samples of state beside them, its status document and its status line.

use crate::runtime::config_reader::ConfigReader;
use crate::runtime::confinement::{self, FilterMode};
use crate::runtime::counters::Counters;
use crate::runtime::metrics::{self, Sample, Snapshot};
use crate::runtime::privileges;
use crate::runtime::reload::{self, Verdict};
use crate::runtime::service_manager::ServiceManager;
use crate::runtime::signals::Signals;
use crate::runtime::status_socket::StatusListener;
use crate::runtime::syscalls::Role;
use crate::runtime::Failure;
use std::marker::PhantomData;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long after a reload that found new settings the daemon stops to be started
/// again with them.
pub const RESTART_AFTER: Duration = Duration::from_secs(1);

/// How often the loop publishes its counters for Prometheus (`MetricsAddress`) while
/// it has traffic.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(250);
/// How long after SIGUSR1 the counters are logged: every worker has published what it
/// counted before the signal by then.
const REPORT_AFTER: Duration = Duration::from_millis(PUBLISH_EVERY.as_millis() as u64 + 50);
/// How often the chores run when nothing happened since the last (nothing to publish
/// anew): an idle daemon sleeps, and wakes for them this often at most, or as often as
/// the service manager's watchdog needs.
pub const IDLE_CHORES: Duration = Duration::from_secs(10);

/// Set-up done, still privileged: [`Shell::confine`] comes next.
#[derive(Debug)]
pub struct Opened;

/// Confined and unprivileged: the loop may run.
#[derive(Debug)]
pub struct Confined;

/// What a role tells the world about itself.
pub trait Reports {
    /// Its table of counters.
    fn counters(&self) -> Counters;
    /// Its status document (`shipworm status --json`).
    fn status_json(&self) -> String;
    /// The line `systemctl status` shows.
    fn service_status(&self) -> String;
    /// Samples of its state beside the counters (the client's NAT kind…).
    fn state_samples(&self) -> Vec<Sample> {
        Vec::new()
    }
}

/// The shell of a daemon of role `role`. Shared by reference between a role's threads:
/// what changes sits behind locks, taken once a tick.
pub struct Shell<S> {
    role: Role,
    /// The kernel data path's programs run: the confined process keeps their map
    /// operations ([`Shell::keeping_kernel_maps`]).
    kernel_maps: bool,
    status: StatusListener,
    control_path: PathBuf,
    /// Bound while opened, handed to the metrics thread on confinement.
    metrics_listener: Option<TcpListener>,
    snapshot: Option<Snapshot>,
    manager: Mutex<ServiceManager>,
    signals: Signals,
    /// When the next chores are due (watchdog, status line, metrics snapshot): on a
    /// schedule, so that a loop ticking at the period does them on every tick, and one
    /// that turns per batch does not do them per batch.
    next_chores: Mutex<Instant>,
    /// The loop did something since the last chores ([`Shell::busy`]).
    busy: AtomicBool,
    /// When SIGUSR1's counters are logged.
    report_at: Mutex<Option<Instant>>,
    /// A SIGUSR1 report waits for its time.
    report_waits: AtomicBool,
    /// The status document as last rendered: what callers of the status socket get.
    rendered: RenderedStatus,
    /// SIGHUP's reload of the daemon's file (none: the role reloads nothing).
    reload: Option<Mutex<ConfigReader>>,
    /// A reload found new settings and a service manager will start the daemon again:
    /// the loop stops as for SIGTERM, and the daemon exits with
    /// [`reload::RESTART_STATUS`], the changed directives said.
    restart: AtomicBool,
    /// What the restart says, and when the loop stops for it.
    restart_why: Mutex<(String, Option<Instant>)>,
    /// When the daemon started, in seconds since the Unix epoch (`/metrics`).
    started_unix: u64,
    _state: PhantomData<S>,
}

/// The status document, rendered at most once per [`PUBLISH_EVERY`] whatever the number
/// of callers: the status socket is open to local users, and rendering a relay's locks
/// every shard and walks its waiting peers, which a caller looping connect() would
/// otherwise take from the workers.
#[derive(Default)]
pub struct RenderedStatus(Mutex<Option<(Instant, String)>>);

impl RenderedStatus {
    /// The document rendered within the last [`PUBLISH_EVERY`], or a new one.
    pub fn get(&self, now: Instant, render: impl FnOnce() -> String) -> String {
        let mut last = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*last {
            Some((at, doc)) if now.saturating_duration_since(*at) < PUBLISH_EVERY => doc.clone(),
            _ => {
                let doc = render();
                *last = Some((now, doc.clone()));
                doc
            }
        }
    }
}

impl Shell<Opened> {
    /// Take what the role needs from the system before it gives up root: its status
    /// socket at `control_path`, a metrics listener at `metrics` if asked, the service
    /// manager's socket and the signal handlers.
    pub fn open(role: Role, control_path: PathBuf, metrics: Option<SocketAddr>) -> Result<Shell<Opened>, Failure> {
        let status = StatusListener::bind(&control_path)?;
        let metrics_listener = metrics.map(metrics::bind).transpose()?;
        let manager = ServiceManager::from_env();
        let signals =
            Signals::install().map_err(|e| Failure::runtime(format!("cannot install signal handlers: {e}")))?;
        Ok(Shell {
            role,
            kernel_maps: false,
            status,
            control_path,
            metrics_listener,
            snapshot: None,
            manager: Mutex::new(manager),
            signals,
            next_chores: Mutex::new(Instant::now()),
            busy: AtomicBool::new(false),
            report_at: Mutex::new(None),
            report_waits: AtomicBool::new(false),
            rendered: RenderedStatus::default(),
            reload: None,
            restart: AtomicBool::new(false),
            restart_why: Mutex::new((String::new(), None)),
            started_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            _state: PhantomData,
        })
    }

    /// SIGHUP reads the daemon's file again through `reader`.
    pub fn reloading(mut self, reader: ConfigReader) -> Self {
        self.reload = Some(Mutex::new(reader));
        self
    }

    /// The kernel data path's programs run (`keep`): the confined process keeps the
    /// map operations they need, and no other part of bpf(2). Without them, none.
    pub fn keeping_kernel_maps(mut self, keep: bool) -> Self {
        self.kernel_maps = keep;
        self
    }

    /// Drop root (to `user`, or the default) and confine the process with `filter`; the
    /// pid file and the status socket stay removable. Then start the metrics thread.
    pub fn confine(
        self,
        user: Option<&str>,
        filter: FilterMode,
        pidfile: Option<&Path>,
    ) -> Result<Shell<Confined>, Failure> {
        privileges::drop_root(user).map_err(Failure::runtime)?;
        let removable = [confinement::removable(pidfile), vec![self.control_path.clone()]].concat();
        confinement::confine(self.role, self.kernel_maps, filter, &removable, &[]).map_err(Failure::runtime)?;
        let snapshot = metrics::start(self.metrics_listener)?;
        Ok(Shell {
            role: self.role,
            kernel_maps: self.kernel_maps,
            status: self.status,
            control_path: self.control_path,
            metrics_listener: None,
            snapshot,
            manager: self.manager,
            signals: self.signals,
            next_chores: self.next_chores,
            busy: self.busy,
            report_at: self.report_at,
            report_waits: self.report_waits,
            rendered: self.rendered,
            reload: self.reload,
            restart: self.restart,
            restart_why: self.restart_why,
            started_unix: self.started_unix,
            _state: PhantomData,
        })
    }
}

impl<S> Shell<S> {
    /// Where `shipworm status` asks.
    pub fn control_path(&self) -> &Path {
        &self.control_path
    }

    /// A stop (SIGTERM, SIGINT, or a reload that needs the daemon started again) was
    /// asked for.
    pub fn stop_requested(&self) -> bool {
        self.signals.stop_requested() || (self.restart.load(Ordering::Relaxed) && self.restart_due())
    }

    /// A second SIGTERM or SIGINT came: a drain under way ends now.
    pub fn stop_insisted(&self) -> bool {
        self.signals.stop_insisted()
    }

    /// The restart a reload asked for is due: [`RESTART_AFTER`] after the reload, so
    /// that the service manager has seen its reload command end first (a main process
    /// that exits while `systemctl reload` runs fails the reload job).
    fn restart_due(&self) -> bool {
        let why = self.restart_why.lock().unwrap_or_else(PoisonError::into_inner);
        why.1.is_some_and(|at| Instant::now() >= at)
    }
}

impl Shell<Confined> {
    /// The role serves: `READY=1`, with its status line.
    pub fn ready(&self, role: &impl Reports) {
        self.manager().ready(&role.service_status());
    }

    /// The chores, called from the loop as often as it turns: the counters in the log if
    /// SIGUSR1 came, the file read again if SIGHUP did; and when due (every
    /// [`PUBLISH_EVERY`] while the loop is [`busy`](Shell::busy), every [`IDLE_CHORES`]
    /// or the watchdog's half period otherwise), the watchdog fed, the status line and
    /// the metrics snapshot brought up to date: true then. Status requests are the
    /// loop's to answer when the status socket is readable ([`Shell::serve_status`]).
    pub fn tick(&self, role: &impl Reports) -> bool {
        self.signals.drain_wake();
        let now = Instant::now();
        // SIGUSR1's counters a publication period on, so that a relay's every worker has
        // published what it counted before the signal (the lock only while one waits).
        let asked = self.signals.take_report_request();
        if asked || self.report_waits.load(Ordering::Relaxed) {
            let mut report = self.report_at.lock().unwrap_or_else(PoisonError::into_inner);
            if asked {
                report.get_or_insert(now + REPORT_AFTER);
            }
            if report.is_some_and(|at| now >= at) {
                *report = None;
                tracing::info!("counters: {}", role.counters().log_line());
            }
            self.report_waits.store(report.is_some(), Ordering::Relaxed);
        }
        if self.signals.take_reload_request() {
            self.reload_now();
        }
        let mut due = self.next_chores.lock().unwrap_or_else(PoisonError::into_inner);
        if now < *due {
            return false;
        }
        // With traffic, the next ones a period after these were due, or after now when
        // the loop fell behind (no burst to catch up); idle, the next in a while, which
        // the loop's next traffic brings forward ([`Shell::busy`]).
        let mut m = self.manager();
        *due = if self.busy.swap(false, Ordering::Relaxed) {
            (*due + PUBLISH_EVERY).max(now + PUBLISH_EVERY / 2)
        } else {
            now + m.feed_every().map_or(IDLE_CHORES, |f| (f / 2).min(IDLE_CHORES))
        };
        drop(due);
        {
            m.tick(now);
            m.status(&role.service_status());
            drop(m);
        }
        if let Some(snapshot) = &self.snapshot {
            snapshot.publish(self.samples(role));
        }
        true
    }

    /// The loop handled traffic or ran its timers: the counters it changed are published
    /// within [`PUBLISH_EVERY`], however long the idle chores' schedule slept.
    /// True when that brought them forward (the first traffic since the last chores):
    /// a loop other than the one that runs them wakes that one.
    pub fn busy(&self) -> bool {
        if self.busy.load(Ordering::Relaxed) {
            return false;
        }
        self.busy.store(true, Ordering::Relaxed);
        let mut due = self.next_chores.lock().unwrap_or_else(PoisonError::into_inner);
        let soon = Instant::now() + PUBLISH_EVERY;
        let sooner = soon < *due;
        *due = (*due).min(soon);
        sooner
    }

    /// When the loop must wake for the shell, at the latest: the next chores, or the
    /// restart a reload asked for. (A signal wakes it through [`Shell::signal_fd`].)
    pub fn next_wake(&self) -> Instant {
        let chores = *self.next_chores.lock().unwrap_or_else(PoisonError::into_inner);
        // A restart already due is the loop's to act on (a stop), not a time to wake
        // at: left in, it would make every wait a zero one through a drain.
        let now = Instant::now();
        let restart = self.restart_why.lock().unwrap_or_else(PoisonError::into_inner).1.filter(|&r| r > now);
        let report = *self.report_at.lock().unwrap_or_else(PoisonError::into_inner);
        [restart, report].into_iter().flatten().fold(chores, Instant::min)
    }

    /// Readable once a signal came: for the loop's poll (the chores take it).
    pub fn signal_fd(&self) -> BorrowedFd<'_> {
        self.signals.wake_fd()
    }

    /// Answer the status requests that wait (when the loop saw [`Shell::status_fd`]
    /// readable).
    pub fn serve_status(&self, role: &impl Reports) {
        self.status.serve(|| self.rendered.get(Instant::now(), || role.status_json()));
    }

    /// The status socket, for the loop's poll.
    pub fn status_fd(&self) -> BorrowedFd<'_> {
        self.status.as_fd()
    }

    /// A clean stop has begun: `STOPPING=1`, and the counters in the log.
    pub fn stopping(&self, role: &impl Reports) {
        self.manager().stopping();
        tracing::info!("stopping: counters: {}", role.counters().log_line());
    }

    /// A clean stop that forwards for `drain` first (the relay's BIRD withdrawal).
    pub fn stopping_after(&self, drain: Duration) {
        self.manager().stopping_after(drain);
    }

    /// SIGHUP: read the file again, and keep the settings, refuse the file, or stop to
    /// be started again with it (see [`reload`]).
    fn reload_now(&self) {
        let Some(reload) = &self.reload else {
            tracing::info!("SIGHUP: this daemon has no file to read again");
            return;
        };
        let mut reload = reload.lock().unwrap_or_else(PoisonError::into_inner);
        let verdict = reload.judge();
        let file = reload.path().display().to_string();
        match verdict {
            Verdict::Unchanged => tracing::info!("reload: {file}: settings unchanged; nothing to do"),
            Verdict::Refused(why) => {
                tracing::error!("reload refused, running on with the previous settings: {why}")
            }
            Verdict::Changed(names) => {
                let names = if names.is_empty() { "settings".to_string() } else { names.join(", ") };
                if self.manager().present() {
                    let why = format!(
                        "reload: {file}: {names} changed: stopping with status {} for the service manager to start it again with them",
                        reload::RESTART_STATUS
                    );
                    tracing::warn!("{why}");
                    *self.restart_why.lock().unwrap_or_else(PoisonError::into_inner) =
                        (why, Some(Instant::now() + RESTART_AFTER));
                    self.restart.store(true, Ordering::Relaxed);
                } else {
                    tracing::warn!(
                        "reload: {file}: {names} changed; they take effect when the daemon is started again (running on with the previous settings)"
                    );
                }
            }
        }
    }

    /// How the daemon ends once its loop stopped: cleanly, or with
    /// [`reload::RESTART_STATUS`] when a reload asked to be started again.
    pub fn outcome(&self) -> Result<(), Failure> {
        if !self.restart.load(Ordering::Relaxed) {
            return Ok(());
        }
        let why = self.restart_why.lock().unwrap_or_else(PoisonError::into_inner).0.clone();
        Err(Failure { message: why, status: reload::RESTART_STATUS })
    }

    /// Everything `/metrics` shows of the role.
    fn samples(&self, role: &impl Reports) -> Vec<Sample> {
        let mut v = vec![
            Sample::gauge("shipworm_info", "The daemon's role and version (always 1).", 1)
                .with("role", self.role.name())
                .with("version", env!("CARGO_PKG_VERSION")),
            Sample::gauge(
                "shipworm_build_info",
                "What this build has (always 1): its version, its kernel data path.",
                1,
            )
            .with("version", env!("CARGO_PKG_VERSION"))
            .with("kernel_path", if shipworm_kernel_path::built() { "built_in" } else { "not_built" }),
            Sample::gauge(
                "process_start_time_seconds",
                "When the daemon started, in seconds since the Unix epoch.",
                self.started_unix,
            ),
        ];
        v.extend(role.state_samples());
        v.extend(role.counters().samples());
        v
    }

    fn manager(&self) -> std::sync::MutexGuard<'_, ServiceManager> {
        self.manager.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A flood of status requests renders the document at most once per period (#40,
    /// 10: each render of a relay's locks every shard).
    #[test]
    fn a_flood_of_status_requests_renders_once_a_period() {
        let cache = RenderedStatus::default();
        let renders = Cell::new(0);
        let render = || {
            renders.set(renders.get() + 1);
            format!("doc {}", renders.get())
        };
        let t0 = Instant::now();
        for i in 0..10_000u32 {
            let at = t0 + Duration::from_micros(u64::from(i) * 10);
            assert_eq!(cache.get(at, render), "doc 1");
        }
        assert_eq!(renders.get(), 1);
        assert_eq!(cache.get(t0 + PUBLISH_EVERY, render), "doc 2", "fresh again after a period");
        assert_eq!(renders.get(), 2);
    }
}
