//! Frames sent from a namespace's interface with no socket and no stack behind them, as
//! a traffic generator's NIC sends: the kernel's test run of an XDP program in
//! live-frame mode (`BPF_F_TEST_XDP_LIVE_FRAMES`, Linux 5.18, as xdp-trafficgen uses it)
//! puts the frame given into buffers of its own and hands each to the interface's
//! driver (the program says XDP_TX). The sending host pays neither a socket, a route
//! look-up, a checksum nor a segmentation per packet: a generator built so stays ahead
//! of the relay it loads, where one of sockets on the same machine stopped first.
//!
//! The program (`bpf/generator.bpf.c`) keeps the pace, in bursts, and writes each
//! frame's headers as its stream's (an emulated client's): one test run lasts a whole
//! trial, ended by a signal, since each run's teardown waits out an RCU grace period.
//! While ahead of its pace it spins, dropping frames unsent: the sending core stays
//! busy for the trial (the scheduler still gives its other threads their turns).
//!
//! A veth sends such frames to its peer only while the peer receives in NAPI (an XDP
//! program on it, or GRO, which every lab interface has). A frame the driver refuses
//! (its peer's ring full) is dropped after the program counted it: it shows as the
//! path's loss. Each frame arrives in a page of its own, which a socket's buffer is
//! charged for.

use crate::error::{LabError, Result};
use crate::netns;
use crate::xdp::{array_get, array_set};
use shipworm_kernel_path::run_live;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/generator.bpf.o"));

/// The signal that ends a run (its handler does nothing: the kernel's test run stops on
/// any signal pending).
const STOP: libc::c_int = libc::SIGUSR2;

/// Header bytes a Teredo datagram's streams may differ in (Ethernet, IPv4, UDP, IPv6,
/// UDP), and a native packet's (Ethernet, IPv6, UDP); as the program's.
const TEREDO_HEADERS: usize = 90;
const NATIVE_HEADERS: usize = 62;
/// Streams a load may have, as the program's map holds.
pub const STREAMS: usize = 64;

/// `struct pace`, as the program's.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Pace {
    next_ns: u64,
    gap_ns: u64,
    end_ns: u64,
    dur_ns: u64,
    sent: u64,
    seq: u64,
    restarts: u64,
    late_ns: u64,
    burst: u32,
    left: u32,
    streams: u32,
    run: u32,
    headers: u32,
    spare: u32,
}

const _: () = assert!(std::mem::size_of::<Pace>() == 88);

/// `struct headers`, as the program's.
#[repr(C)]
#[derive(Clone, Copy)]
struct Headers {
    bytes: [u8; TEREDO_HEADERS],
    spare: [u8; 6],
}

/// Frames the kernel builds per round of a run before it hands those sent to the
/// driver (its default, NAPI's weight): fewer than a veth's ring holds (256).
const BATCH: u32 = 64;

const _: () = assert!(std::mem::size_of::<Headers>() == 96);

/// A run still tearing down (or, its stop signal missed, still spinning).
type Runner = std::thread::JoinHandle<()>;

/// A paced sender of whole frames on one interface of one namespace.
pub struct LiveFrames {
    ns: String,
    ifindex: u32,
    mac: [u8; 6],
    prog: Arc<OwnedFd>,
    pace: OwnedFd,
    streams: OwnedFd,
    running: Mutex<Option<Runner>>,
    /// Set when the run is asked to stop: an interruption then is its end, any other a
    /// failure.
    stopping: Arc<AtomicBool>,
    /// The first failure of a paced run, for [`LiveFrames::failure`].
    failed: Mutex<Option<String>>,
}

impl LiveFrames {
    /// A sender on interface `dev` of namespace `ns`. Sends one frame no host takes (an
    /// experimental EtherType, to its own address) to learn whether this kernel can.
    pub fn on(ns: &str, dev: &str) -> Result<LiveFrames> {
        LiveFrames::unless_refused(ns, dev)?.map_err(LabError::new)
    }

    /// As [`LiveFrames::on`], but a kernel that refuses live frames (EPERM to the probe's
    /// test run: seen on a locked-down 6.18) is an answer, not an error: `Ok(Err(why))`.
    pub fn unless_refused(ns: &str, dev: &str) -> Result<std::result::Result<LiveFrames, String>> {
        if OBJECT.is_empty() {
            return crate::error::err(
                "the lab's live-frame generator was built without clang (apt-get install clang libbpf-dev, then rebuild)",
            );
        }
        let mac = mac_of(ns, dev)?;
        let ifindex = ifindex_in(ns, dev)?;
        let load =
            |e: &dyn std::fmt::Display| LabError::new(format!("load the lab's generator: {e} (needs root and BPF)"));
        let mut bpf = aya::EbpfLoader::new().load(OBJECT).map_err(|e| load(&e))?;
        let prog: &mut aya::programs::Xdp =
            bpf.program_mut("generate").and_then(|p| p.try_into().ok()).ok_or_else(|| load(&"no program"))?;
        prog.load().map_err(|e| load(&e))?;
        let prog = prog.fd().map_err(|e| load(&e))?.as_fd().try_clone_to_owned().map_err(|e| load(&e))?;
        let map = |name: &str| -> Result<OwnedFd> {
            match bpf.map(name) {
                Some(aya::maps::Map::Array(d)) => d.fd().as_fd().try_clone_to_owned().map_err(|e| load(&e)),
                _ => Err(load(&format!("no map {name}"))),
            }
        };
        let (pace, streams) = (map("pace")?, map("streams")?);
        stop_signal_interrupts();
        let frames = LiveFrames {
            ns: ns.to_string(),
            ifindex,
            mac,
            prog: Arc::new(prog),
            pace,
            streams,
            running: Mutex::new(None),
            stopping: Arc::default(),
            failed: Mutex::new(None),
        };
        let mut probe = vec![0u8; 64];
        probe[..6].copy_from_slice(&mac);
        probe[6..12].copy_from_slice(&mac);
        probe[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        let fail = |e: &dyn std::fmt::Display| {
            LabError::new(format!(
                "send live frames on {dev} in {ns}: {e} (BPF_F_TEST_XDP_LIVE_FRAMES needs Linux 5.18)"
            ))
        };
        let sent = match frames.send_count(&probe) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                return Ok(Err(format!("this kernel refuses them ({e})")))
            }
            sent => sent.map_err(|e| fail(&e))?,
        };
        if sent != 1 {
            return Err(fail(&format!("{sent} frames of 1 left")));
        }
        Ok(Ok(frames))
    }

    /// The interface's own hardware address (a frame's source).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Sends `frames` (Ethernet headers on) in turn, `run` frames of one before the
    /// next, at `rate` frames per second in bursts of `burst`, for `dur`; returns how
    /// many left (all, unless the sending host fell behind). The frames must differ only
    /// in their headers (a Teredo datagram's, or a native packet's, up to its UDP
    /// header) and be at most [`STREAMS`].
    pub fn paced(&self, frames: &[Vec<u8>], run: u64, rate: u64, burst: u32, dur: Duration) -> std::io::Result<u64> {
        // After a failure every trial is void: none runs.
        if let Some(e) = self.failure() {
            return Err(std::io::Error::other(e));
        }
        let result = self.paced_run(frames, run, rate, burst, dur);
        if let Err(e) = &result {
            self.failed.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(|| e.to_string());
        }
        result
    }

    /// The first failure of [`LiveFrames::paced`] so far: a trial that sent nothing
    /// for it would count as one that lost everything.
    pub fn failure(&self) -> Option<String> {
        self.failed.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn paced_run(&self, frames: &[Vec<u8>], run: u64, rate: u64, burst: u32, dur: Duration) -> std::io::Result<u64> {
        let headers = self.load_streams(frames)?;
        let pace = Pace {
            gap_ns: (1e9 / rate.max(1) as f64) as u64,
            burst: burst.max(1),
            streams: frames.len() as u32,
            run: run.clamp(1, u64::from(u32::MAX)) as u32,
            headers: headers as u32,
            ..Pace::default()
        };
        self.run(&frames[0], pace, u32::MAX, Some(dur))
    }

    /// One probe frame, sent once; how many left.
    fn send_count(&self, frame: &[u8]) -> std::io::Result<u64> {
        self.load_streams(std::slice::from_ref(&frame.to_vec()))?;
        let pace =
            Pace { end_ns: u64::MAX, burst: 1, streams: 1, run: 1, headers: NATIVE_HEADERS as u32, ..Pace::default() };
        self.run(frame, pace, 1, None)
    }

    /// Writes each frame's headers as a stream's; the headers' length.
    fn load_streams(&self, frames: &[Vec<u8>]) -> std::io::Result<usize> {
        let invalid = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string());
        let first = frames.first().ok_or_else(|| invalid("no frame"))?;
        if frames.len() > STREAMS {
            return Err(invalid("more streams than the generator holds"));
        }
        let headers = if first.get(12..14) == Some(&[0x08, 0x00]) { TEREDO_HEADERS } else { NATIVE_HEADERS };
        if first.len() < headers {
            return Err(invalid("a frame shorter than its headers"));
        }
        self.finish_last();
        for (i, f) in frames.iter().enumerate() {
            if f.len() != first.len() || f[headers..] != first[headers..] {
                return Err(invalid("frames that differ past their headers"));
            }
            let mut h = Headers { bytes: [0; TEREDO_HEADERS], spare: [0; 6] };
            h.bytes[..headers].copy_from_slice(&f[..headers]);
            array_set(&self.streams, i as u32, &h)?;
        }
        Ok(headers)
    }

    /// Runs the program on `frame` `repeat` times at most, paced by `pace`. For `dur`
    /// (from the run's first frame, when the program starts the pace), then the run is
    /// stopped and tears down behind; without, until the run returns. How many frames
    /// left.
    fn run(&self, frame: &[u8], mut pace: Pace, repeat: u32, dur: Option<Duration>) -> std::io::Result<u64> {
        self.finish_last();
        let (ns, ifindex, prog, frame) = (self.ns.clone(), self.ifindex, Arc::clone(&self.prog), frame.to_vec());
        let pace_map = self.pace.try_clone()?;
        self.stopping.store(false, Ordering::SeqCst);
        let stopping = Arc::clone(&self.stopping);
        // What the run says: when it ends (its pace written), then how it ended.
        let (tx, rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
        let runner = std::thread::spawn(move || {
            let started = netns::enter(&ns).map_err(|e| std::io::Error::other(e.to_string())).and_then(|()| {
                if let Some(dur) = dur {
                    // The program starts the pace at its first frame.
                    pace.end_ns = 0;
                    pace.dur_ns = dur.as_nanos() as u64;
                }
                array_set(&pace_map, 0, &pace)
            });
            let ok = started.is_ok();
            let _ = tx.send(started);
            if !ok {
                return;
            }
            let ended = match run_live(prog.as_fd(), &frame, ifindex, repeat, BATCH) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted && stopping.load(Ordering::SeqCst) => Ok(()),
                r => r,
            };
            let _ = tx.send(ended);
        });
        let lost = || std::io::Error::other("the generator's thread ended unheard");
        let started = rx.recv().map_err(|_| lost());
        if dur.is_none() || !matches!(started, Ok(Ok(()))) {
            let ended = started.and_then(|r| r).and_then(|()| rx.recv().map_err(|_| lost())?);
            runner.join().map_err(|_| lost())?;
            ended?;
            return self.sent();
        }
        // Held where `finish_last` finds it whatever happens next.
        let waited = self.wait_for_end(&rx);
        if waited.is_err() {
            // Nothing more may leave, whether the run has started or not.
            let _ = array_set(&self.pace, 0, &Pace { end_ns: 1, ..pace });
        }
        self.stop(&runner);
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = Some(runner);
        waited?;
        self.sent()
    }

    /// Waits for the run's first frame, then for its end (and a moment for its last
    /// round to be counted), unless the run says first that it failed.
    fn wait_for_end(&self, rx: &std::sync::mpsc::Receiver<std::io::Result<()>>) -> std::io::Result<()> {
        const MARGIN_NS: u64 = 200_000;
        let given_up = monotonic_ns() + 2_000_000_000;
        let mut end = 0;
        loop {
            let now = monotonic_ns();
            if end == 0 {
                let mut seen = Pace::default();
                array_get(&self.pace, 0, &mut seen)?;
                end = seen.end_ns;
            }
            if end != 0 && now >= end + MARGIN_NS {
                return Ok(());
            }
            if end == 0 && now >= given_up {
                return Err(std::io::Error::other("the generator's run sent nothing in 2 s"));
            }
            let wait = if end == 0 { 200_000 } else { end + MARGIN_NS - now };
            match rx.recv_timeout(Duration::from_nanos(wait)) {
                Ok(ended) => return ended,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(std::io::Error::other("the generator's thread ended unheard"))
                }
            }
        }
    }

    fn sent(&self) -> std::io::Result<u64> {
        let mut pace = Pace::default();
        array_get(&self.pace, 0, &mut pace)?;
        if std::env::var_os("SHIPWORM_BENCH_DEBUG").is_some() {
            eprintln!(
                "    live frames: sent {}, pace restarted {} times, latest burst {} µs late",
                pace.sent,
                pace.restarts,
                pace.late_ns / 1000
            );
        }
        Ok(pace.sent)
    }

    /// Waits for the last run to be over, signalling it until it is (a signal that
    /// came before it entered the kernel is lost).
    fn finish_last(&self) {
        let Some(runner) = self.running.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        while !runner.is_finished() {
            self.stop(&runner);
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = runner.join();
    }
}

impl Drop for LiveFrames {
    fn drop(&mut self) {
        self.finish_last();
    }
}

impl LiveFrames {
    fn stop(&self, runner: &Runner) {
        self.stopping.store(true, Ordering::SeqCst);
        stop(runner);
    }
}

fn stop(runner: &Runner) {
    if !runner.is_finished() {
        // SAFETY: the thread is alive (joined only after it finished), and STOP's handler
        // does nothing.
        unsafe { libc::pthread_kill(runner.as_pthread_t(), STOP) };
    }
}

extern "C" fn ignore(_: libc::c_int) {}

/// STOP interrupts what its thread does (a test run) and nothing else.
fn stop_signal_interrupts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a handler that does nothing, installed once; no SA_RESTART, so that a
        // system call it interrupts returns.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = ignore as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(STOP, &action, std::ptr::null_mut());
        }
    });
}

fn monotonic_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes the struct given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The index of interface `dev` in namespace `ns`.
fn ifindex_in(ns: &str, dev: &str) -> Result<u32> {
    let (ns, dev) = (ns.to_string(), dev.to_string());
    std::thread::spawn(move || -> Result<u32> {
        netns::enter(&ns)?;
        let name = std::ffi::CString::new(dev.clone()).map_err(|e| LabError::new(e.to_string()))?;
        // SAFETY: a NUL-terminated name, read only.
        match unsafe { libc::if_nametoindex(name.as_ptr()) } {
            0 => crate::error::err(format!("{dev} in {ns}: {}", std::io::Error::last_os_error())),
            i => Ok(i),
        }
    })
    .join()
    .map_err(|_| LabError::new("interface look-up thread panicked".into()))?
}

/// The hardware address of interface `dev` in namespace `ns`.
pub fn mac_of(ns: &str, dev: &str) -> Result<[u8; 6]> {
    let shown = netns::ip(&["-n", ns, "-o", "link", "show", "dev", dev])?;
    let text = shown
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .ok_or_else(|| LabError::new(format!("{dev} in {ns} has no Ethernet address: {shown}")))?;
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for b in &mut mac {
        *b = parts
            .next()
            .and_then(|p| u8::from_str_radix(p, 16).ok())
            .ok_or_else(|| LabError::new(format!("{dev} in {ns}: bad Ethernet address {text}")))?;
    }
    Ok(mac)
}
