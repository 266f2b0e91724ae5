//! The benchmark's traffic: emulated Teredo clients (one UDP port each on the generator
//! host, like the seed papers' "UDP daemon simulating the Teredo client"), a native
//! sender and sinks that count, paced loads (batched sends from sockets, or live
//! frames), floods, and one-at-a-time latency probes. The rate search over a load is
//! `rate_search`.

use shipworm::io::udp_batch::{RecvBatch, SendBatch};
use shipworm_lab::frame_sender::FrameSender;
use shipworm_lab::netns;
use shipworm_wire::teredo_addr::{Flags, TeredoAddr, PREFIX};
use shipworm_wire::teredo_packet::emit_bubble;
use socket2::{Domain, Protocol, Socket, Type};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Make a socket inside namespace `ns` (a thread enters it; the socket stays there).
pub fn socket_in(ns: &str, bind: SocketAddr) -> Result<Socket, String> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<Socket, String> {
        netns::enter(&ns).map_err(|e| e.to_string())?;
        let domain = if bind.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
        let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).map_err(|e| e.to_string())?;
        // Large buffers past rmem_max, so the generator and sinks do not drop bursts themselves.
        shipworm::io::socket_buffers::enlarge(s.as_fd(), 16 << 20);
        s.bind(&bind.into()).map_err(|e| format!("bind {bind} in {ns}: {e}"))?;
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(s)
    })
    .join()
    .map_err(|_| "socket thread panicked".to_string())?
}

/// Emulated Teredo clients: a socket each on the generator, and their addresses.
pub struct Emulated {
    /// One socket per client.
    pub socks: Vec<Socket>,
    /// Their Teredo addresses (server `server`, mapping = the socket's address).
    pub addrs: Vec<Ipv6Addr>,
}

impl Emulated {
    /// `n` clients of server `server` on `ip` in namespace `ns`.
    pub fn new(ns: &str, ip: Ipv4Addr, server: Ipv4Addr, n: usize) -> Result<Emulated, String> {
        let mut socks = Vec::new();
        let mut addrs = Vec::new();
        for i in 0..n {
            let s = socket_in(ns, SocketAddr::V4(SocketAddrV4::new(ip, 0)))?;
            let port = s.local_addr().ok().and_then(|a| a.as_socket_ipv4()).map(|a| a.port()).ok_or("no port")?;
            let t = TeredoAddr {
                prefix: PREFIX,
                server,
                flags: Flags::new(false, 0x100 + i as u16),
                mapped: SocketAddrV4::new(ip, port),
            };
            socks.push(s);
            addrs.push(t.to_ipv6());
        }
        Ok(Emulated { socks, addrs })
    }

    /// Each client's mapping: its socket's address.
    pub fn mappings(&self) -> Vec<SocketAddrV4> {
        self.socks.iter().filter_map(|s| s.local_addr().ok().and_then(|a| a.as_socket_ipv4())).collect()
    }

    /// Every client sends a bubble to `relay` (which makes the relay trust it once it
    /// has bubbled the client, and keeps the trust alive).
    pub fn bubble(&self, relay: SocketAddrV4, to: Ipv6Addr) {
        let mut b = [0u8; 40];
        for (s, a) in self.socks.iter().zip(&self.addrs) {
            emit_bubble(a, &to, 0, &mut b).expect("fits");
            let _ = s.send_to(&b, &relay.into());
        }
    }
}

/// How long the sink waits after reading, for more to queue (its sockets hold 16 MiB,
/// and a packet still counts within a share of the trial after it, `rate_search::IN_TIME_SHARE`): about
/// a hundred packets at the rates measured, a few calls' worth: a shorter nap reads a
/// few packets a call, and the sink's calls then cost the traffic core more than the
/// sending.
const SINK_NAP: Duration = Duration::from_millis(1);

/// Counts what arrives on some sockets, in a thread, until stopped. Paused, it leaves
/// the sockets alone (the latency probes read them themselves).
pub struct Sink {
    count: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    pause: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    /// Returns how many reads the sink made (printed in a debug run).
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Sink {
    /// Receive on `socks`.
    pub fn start(socks: Vec<Socket>) -> Sink {
        let count = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let pause = Arc::new(AtomicBool::new(false));
        let paused = Arc::new(AtomicBool::new(false));
        let (c, st, pa, pd) = (Arc::clone(&count), Arc::clone(&stop), Arc::clone(&pause), Arc::clone(&paused));
        let thread = std::thread::spawn(move || {
            const BATCH: usize = 64;
            let mut rxs: Vec<RecvBatch> = socks.into_iter().map(|s| RecvBatch::new(s, BATCH, 2048)).collect();
            let polled: Vec<std::os::fd::OwnedFd> =
                rxs.iter().filter_map(|r| r.as_fd().try_clone_to_owned().ok()).collect();
            let mut fds: Vec<nix::poll::PollFd> =
                polled.iter().map(|s| nix::poll::PollFd::new(s.as_fd(), nix::poll::PollFlags::POLLIN)).collect();
            let mut reads = 0u64;
            while !st.load(Ordering::Relaxed) {
                if pa.load(Ordering::Acquire) {
                    pd.store(true, Ordering::Release);
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                pd.store(false, Ordering::Release);
                let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(20u16));
                // Only the sockets poll found readable, each until a batch comes back
                // short: the emulated clients' 32 sockets, each read every time, cost
                // the traffic core so many empty calls that the sender fell short.
                let mut got = 0;
                for (rx, fd) in rxs.iter_mut().zip(&fds) {
                    if !fd.revents().is_some_and(|r| r.contains(nix::poll::PollFlags::POLLIN)) {
                        continue;
                    }
                    while let Ok(n) = rx.recv() {
                        reads += 1;
                        got += n;
                        if n < BATCH {
                            break;
                        }
                    }
                }
                c.fetch_add(got as u64, Ordering::Relaxed);
                if got > 0 {
                    // Let a few more arrive before looking again: read as they came, a
                    // packet or two per poll, the sink's polls and wake-ups took a tenth
                    // of the traffic core, and the sender fell short before a relay did.
                    std::thread::sleep(SINK_NAP);
                }
            }
            reads
        });
        Sink { count, stop, pause, paused, thread: Some(thread) }
    }

    /// Stop reading (returns once the thread has let go of the sockets).
    pub fn pause(&self) {
        self.pause.store(true, Ordering::Release);
        while !self.paused.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Read again.
    pub fn resume(&self) {
        // Clear the acknowledgement first: the next pause() must wait for a fresh one,
        // not return on this stale one while the thread is about to read again.
        self.paused.store(false, Ordering::Release);
        self.pause.store(false, Ordering::Release);
    }

    /// Datagrams so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(reads) = self.thread.take().and_then(|t| t.join().ok()) {
            if std::env::var_os("SHIPWORM_BENCH_DEBUG").is_some() {
                eprintln!("    sink: {} datagrams in {reads} reads", self.count());
            }
        }
    }
}

/// A sender: builds datagram `seq` into a buffer and says where it goes.
pub type Build<'a> = dyn FnMut(u64, &mut [u8]) -> (usize, SocketAddr, usize) + 'a;

/// A trial's load: sends at a rate for a time.
pub trait Load {
    /// Send at `rate` packets per second for `dur`; how many were sent.
    fn paced(&mut self, rate: u64, dur: Duration) -> u64;

    /// Why a send failed, if one did: its trial sent nothing and so lost nothing, which
    /// the figures must not take for the path's.
    fn failure(&self) -> Option<String> {
        None
    }
}

/// Datagrams from sockets, as [`paced`] sends them.
pub struct Sockets<'a> {
    pub socks: &'a [Socket],
    pub build: Box<Build<'a>>,
}

impl Load for Sockets<'_> {
    fn paced(&mut self, rate: u64, dur: Duration) -> u64 {
        paced(self.socks, rate, dur, &mut *self.build)
    }
}

/// Whole frames handed to a host's interface by the kernel ([`FrameSender`]), no socket
/// behind them: packet `seq` is `frames[(seq / run) % frames.len()]`, so each stream
/// (an emulated client) sends runs of `run` as a host's socket would. What the rate
/// searches send: a sender of sockets on the traffic core ran out before the relay host's
/// core did in most searches at 1,280 bytes (its system calls, route look-ups,
/// segmentation and the switch port's copy per packet), so the figures compared the
/// generator's ceilings; live frames cost that core a small part of it.
pub struct Frames<'a> {
    pub sender: &'a FrameSender,
    pub frames: Vec<Vec<u8>>,
    pub run: u64,
}

impl Load for Frames<'_> {
    fn paced(&mut self, rate: u64, dur: Duration) -> u64 {
        // A failure is kept by the sender, for `failure`.
        self.sender.paced(&self.frames, self.run, rate, batch_size(rate) as u32, dur).unwrap_or(0)
    }

    fn failure(&self) -> Option<String> {
        self.sender.failure().map(|e| format!("the frame generator failed: {e}"))
    }
}

/// Send at `rate` packets per second for `dur` through `socks` (picked by the builder),
/// batched; returns how many were sent. A run
/// to one destination leaves as one
/// segmented send, which the sending host's interface cuts into frames (the lab
/// turns UDP segmentation offload off), so the relay host receives a frame per packet
/// as from separate hosts, and the generator's cost per packet falls.
pub fn paced(socks: &[Socket], rate: u64, dur: Duration, build: &mut Build<'_>) -> u64 {
    let batch_n = batch_size(rate);
    // A batch per socket, each with its own descriptor of it (the caller keeps the
    // sockets for the next trial).
    let mut batches: Vec<SendBatch> = socks
        .iter()
        .map(|s| SendBatch::new(s.try_clone().expect("duplicate a generator socket"), batch_n, 2048))
        .collect();
    pace(rate, dur, &mut |first: u64, n: usize| {
        let mut sent = 0u64;
        for seq in first..first + n as u64 {
            let mut buf = [0u8; 2048];
            let (len, to, sock) = build(seq, &mut buf);
            let b = &mut batches[sock];
            b.slot_mut()[..len].copy_from_slice(&buf[..len]);
            b.commit_any(len, to);
            if b.is_full() {
                sent += b.flush().0 as u64;
            }
        }
        for b in &mut batches {
            if !b.is_empty() {
                sent += b.flush().0 as u64;
            }
        }
        sent
    })
}

/// Packets a batch holds at `rate`: about 250 µs of traffic, 8–64 packets (bursts a
/// relay's default socket buffer takes).
fn batch_size(rate: u64) -> usize {
    ((rate / 4_000) as usize).clamp(8, 64)
}

/// Paces `batch(first seq, count) → sent` at `rate` packets per second for `dur`; how
/// many were sent. The sender sleeps between batches rather than spinning, so it
/// leaves the cores it shares with the relay and the sink to them. A batch that is late
/// goes at once: the sender catches up (dropping a late backlog instead made the rounds
/// of a path spread wider).
fn pace(rate: u64, dur: Duration, batch: &mut dyn FnMut(u64, usize) -> u64) -> u64 {
    let _slack = FineTimerSlack::set();
    let batch_n = batch_size(rate);
    let interval = Duration::from_secs_f64(batch_n as f64 / rate as f64);
    let start = Instant::now();
    let mut next = start;
    let mut seq = 0u64;
    let mut sent = 0u64;
    while start.elapsed() < dur {
        let now = Instant::now();
        if now < next {
            std::thread::sleep(next - now);
            continue;
        }
        sent += batch(seq, batch_n);
        seq += batch_n as u64;
        next += interval;
    }
    sent
}

/// The calling thread's timer slack at 1 µs (wake-ups near the deadline, not the default
/// 50 µs late) until dropped, then back to what it was: children inherit the slack, and
/// the relays the bench starts must all run with the same, their own default.
struct FineTimerSlack(libc::c_int);

impl FineTimerSlack {
    fn set() -> FineTimerSlack {
        // SAFETY: PR_GET/SET_TIMERSLACK take plain integers and act on this thread only.
        unsafe {
            let old = libc::prctl(libc::PR_GET_TIMERSLACK);
            libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
            FineTimerSlack(old)
        }
    }
}

impl Drop for FineTimerSlack {
    fn drop(&mut self) {
        if self.0 > 0 {
            // SAFETY: as above.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, self.0 as libc::c_ulong) };
        }
    }
}

/// What arrived at `sink` once the path has drained: the count, read after it has
/// stood still for 30 ms (at most 1 s after the last send). Late arrivals would
/// otherwise be counted in the next trial.
pub fn settled(sink: &Sink) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut last = sink.count();
    let mut still_since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
        let now = sink.count();
        if now != last {
            last = now;
            still_since = Instant::now();
        } else if still_since.elapsed() >= Duration::from_millis(30) {
            break;
        }
    }
    last
}

/// Bubbles the flood sends from one socket before the next: the pacer's smallest batch.
const FLOOD_RUN: u64 = 8;

/// Where flood bubble `seq` leaves from among `sockets`, and its number among that
/// socket's, which with the socket makes its address new. Runs of [`FLOOD_RUN`] from a
/// socket, so the pacer's batch is one sendmmsg: a bubble per socket in turn took a
/// system call per bubble from the traffic core.
fn flood_source(seq: u64, sockets: usize) -> (usize, u64) {
    let sockets = sockets as u64;
    let i = (seq / FLOOD_RUN) % sockets;
    (i as usize, seq / (FLOOD_RUN * sockets) * FLOOD_RUN + seq % FLOOD_RUN)
}

/// A flood of spoofed new-peer bubbles: each from a Teredo address the relay has never
/// seen (random bits and server vary), whose embedded mapping is the socket it leaves
/// by — what a relay must refuse to let crowd out the peers it serves. Paced, in a
/// thread, until stopped or `limit` has passed (it stops by itself): to `relay`, from
/// `socks`, at `rate` bubbles per second.
pub fn new_peer_flood(socks: Vec<Socket>, relay: SocketAddrV4, to: Ipv6Addr, rate: u64, limit: Duration) -> Paced {
    let mapped: Vec<SocketAddrV4> =
        socks.iter().filter_map(|s| s.local_addr().ok().and_then(|a| a.as_socket_ipv4())).collect();
    // Its own count: `paced` numbers each 100 ms chunk from zero again, and every
    // bubble must come from a new address.
    let mut next = 0u64;
    let build = move |_: u64, buf: &mut [u8]| {
        let seq = next;
        next += 1;
        let (i, n) = flood_source(seq, mapped.len());
        let t = TeredoAddr {
            prefix: PREFIX,
            server: Ipv4Addr::new(203, 0, 113, (n >> 12) as u8),
            flags: Flags::new(false, (n & 0xfff) as u16),
            mapped: mapped[i],
        };
        (emit_bubble(&t.to_ipv6(), &to, 0, buf).expect("fits"), SocketAddr::V4(relay), i)
    };
    Paced::start(socks, rate, limit, build)
}

/// Traffic sent from `socks` at a paced rate by a thread of its own, until stopped or
/// its time limit has passed (it stops by itself).
pub struct Paced {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<f64>>,
}

impl Paced {
    /// Send what `build` makes (as for [`paced`]) at `rate` packets per second.
    pub fn start(
        socks: Vec<Socket>,
        rate: u64,
        limit: Duration,
        mut build: impl FnMut(u64, &mut [u8]) -> (usize, SocketAddr, usize) + Send + 'static,
    ) -> Paced {
        let stop = Arc::new(AtomicBool::new(false));
        let st = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            let mut sent = 0;
            while !st.load(Ordering::Relaxed) && start.elapsed() < limit {
                sent += paced(&socks, rate, Duration::from_millis(100), &mut build);
            }
            sent as f64 / start.elapsed().as_secs_f64()
        });
        Paced { stop, thread: Some(thread) }
    }

    /// Stop; the rate achieved (packets per second).
    pub fn stop(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0.0)
    }
}

impl Drop for Paced {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The lock-out pattern: one IPv4 endpoint making the relay trust ever more Teredo
/// addresses that embed it (they differ in the server field and random bits), then
/// keeping them all fresh. For each address a native packet from `native` (so the relay
/// creates an entry and bubbles) and a bubble from `mapped` (so the entry is trusted);
/// once all `addresses` are made, bubbles only, round and round — at `rate` packets a
/// second that is every 30 s or sooner, so a relay that protects valid entries must
/// cap them some other way. Paced, in a thread, until stopped or `limit` has passed;
/// `relay`'s IPv6 side is reached through `native`'s routes.
pub fn lock_out(
    mapped: Socket,
    native: Socket,
    relay: SocketAddrV4,
    addresses: u64,
    rate: u64,
    limit: Duration,
) -> Paced {
    let from = mapped.local_addr().ok().and_then(|a| a.as_socket_ipv4()).expect("an IPv4 socket");
    let addr = move |i: u64| {
        TeredoAddr {
            prefix: PREFIX,
            server: Ipv4Addr::new(203, 0, 113, (i >> 12) as u8),
            flags: Flags::new(false, (i & 0xfff) as u16),
            mapped: from,
        }
        .to_ipv6()
    };
    let mut next = 0u64;
    let build = move |_: u64, buf: &mut [u8]| {
        let k = next;
        next += 1;
        if k < 2 * addresses && k % 2 == 0 {
            buf[..16].fill(0);
            (16, SocketAddr::V6(SocketAddrV6::new(addr(k / 2), 9, 0, 0)), 1)
        } else {
            let i = if k < 2 * addresses { k / 2 } else { (k - 2 * addresses) % addresses };
            (emit_bubble(&addr(i), &Ipv6Addr::LOCALHOST, 0, buf).expect("fits"), SocketAddr::V4(relay), 0)
        }
    };
    Paced::start(vec![mapped, native], rate, limit, build)
}

/// Probe numbers, apart from rate traffic's and never reused within a run, so a late
/// probe from an earlier block cannot be taken for the one awaited now.
static NEXT_PROBE: AtomicU64 = AtomicU64::new(1 << 40);

/// A path latency probes take: the sockets they leave by (picked by `build`), the socket
/// they arrive on and where their number sits in what arrives there, and the sink that
/// shares that socket (paused while probing).
pub struct Probe<'a> {
    pub tx: &'a [Socket],
    pub rx: &'a Socket,
    pub seq_at: usize,
    pub sink: &'a Sink,
    pub build: Box<Build<'a>>,
}

/// Probes a path takes in a row before the next path's turn: taking turns packet by
/// packet slowed Miredo by half (every probe of its found it idle) and the kernel path
/// by a fifth.
const TURN: usize = 200;

/// One packet at a time, `n` times on each of `probes`, the paths taking turns of
/// [`TURN`] packets: for each path, microseconds from send to arrival. This thread reads
/// the arrival socket itself, spinning, so the figure holds the path and the relay, not
/// the wake-up of a receiving thread. The caller lets earlier traffic drain first.
pub fn latencies(probes: &mut [&mut Probe<'_>], n: usize) -> Vec<Vec<f64>> {
    probe_in_turns(probes, n, TURN, Duration::ZERO)
}

/// One packet at a time, `n` times on each of `probes` in turn, each sent `gap` after
/// the last arrived: as a call or a ping sends, so that nothing the previous probe woke
/// is still spinning when the next comes.
pub fn sparse_latencies(probes: &mut [&mut Probe<'_>], n: usize, gap: Duration) -> Vec<Vec<f64>> {
    probe_in_turns(probes, n, 1, gap)
}

/// `n` probes on each path, the paths taking turns of `turn` probes, each probe sent
/// `gap` after the last arrived (none for zero); the paths' sinks paused meanwhile.
fn probe_in_turns(probes: &mut [&mut Probe<'_>], n: usize, turn: usize, gap: Duration) -> Vec<Vec<f64>> {
    let mut out: Vec<Vec<f64>> = probes.iter().map(|_| Vec::with_capacity(n)).collect();
    let mut buf = [0u8; 2048];
    let mut got = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
    for p in probes.iter() {
        p.sink.pause();
        while p.rx.recv(&mut got).is_ok() {}
    }
    for start in (0..n).step_by(turn.max(1)) {
        for (p, out) in probes.iter_mut().zip(&mut out) {
            for _ in start..n.min(start + turn.max(1)) {
                if !gap.is_zero() {
                    std::thread::sleep(gap);
                }
                if let Some(us) = one_probe(p, &mut buf, &mut got) {
                    out.push(us);
                }
            }
        }
    }
    for p in probes.iter() {
        p.sink.resume();
    }
    out
}

/// One probe on `p`, built in `buf`, what arrives read into `got`: microseconds until it
/// arrived, or None if it was not sent or did not arrive within 50 ms.
fn one_probe(p: &mut Probe<'_>, buf: &mut [u8], got: &mut [std::mem::MaybeUninit<u8>]) -> Option<f64> {
    let seq = NEXT_PROBE.fetch_add(1, Ordering::Relaxed);
    let (len, to, which) = (p.build)(seq, buf);
    let t0 = Instant::now();
    p.tx[which].send_to(&buf[..len], &to.into()).ok()?;
    let deadline = t0 + Duration::from_millis(50);
    loop {
        match p.rx.recv(got) {
            Ok(k) if k >= p.seq_at + 8 => {
                // SAFETY: recv initialised the first k bytes.
                let b: [u8; 8] = std::array::from_fn(|j| unsafe { got[p.seq_at + j].assume_init() });
                if u64::from_be_bytes(b) == seq {
                    return Some(t0.elapsed().as_secs_f64() * 1e6);
                }
            }
            Ok(_) => {}
            Err(_) if Instant::now() > deadline => return None,
            Err(_) => std::hint::spin_loop(),
        }
    }
}

/// An IPv6 destination.
pub fn v6(addr: Ipv6Addr, port: u16) -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(addr, port, 0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flood_sends_runs_from_one_socket_and_never_repeats_an_address() {
        let mut seen = std::collections::HashSet::new();
        for seq in 0..100_000u64 {
            let (i, n) = flood_source(seq, 8);
            // Every bubble's (socket, number) is new: its address was never seen.
            assert!(seen.insert((i, n)), "bubble {seq} repeats socket {i} number {n}");
            // A run shares its first bubble's socket.
            assert_eq!(i, flood_source(seq - seq % FLOOD_RUN, 8).0);
        }
        // Every socket takes its turn.
        let used: std::collections::HashSet<usize> = seen.iter().map(|&(i, _)| i).collect();
        assert_eq!(used.len(), 8);
        // The 20 bits the address gives the number (server's last byte and the flags'
        // random bits) last 8 M bubbles, 400 s of flood, before repeating.
        assert!(flood_source((8 << 20) - 1, 8).1 < 1 << 20);
    }

    /// A UDP socket on loopback, in this process's own namespace.
    fn loopback() -> Socket {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).expect("socket");
        s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).expect("bind");
        s.set_nonblocking(true).expect("nonblocking");
        s
    }

    #[test]
    fn the_sink_counts_every_datagram_on_whichever_of_its_sockets_it_arrives() {
        let socks: Vec<Socket> = (0..4).map(|_| loopback()).collect();
        let addrs: Vec<SocketAddr> = socks.iter().map(|s| s.local_addr().unwrap().as_socket().unwrap()).collect();
        let sink = Sink::start(socks.iter().map(|s| s.try_clone().unwrap()).collect());
        let tx = loopback();
        // More than a batch on one socket, a few on another, none on the rest.
        for i in 0..150u32 {
            tx.send_to(&i.to_be_bytes(), &addrs[2].into()).unwrap();
        }
        for i in 0..10u32 {
            tx.send_to(&i.to_be_bytes(), &addrs[0].into()).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while sink.count() < 160 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(sink.count(), 160);
        // Later arrivals are counted too, on a socket read before.
        tx.send_to(b"late", &addrs[0].into()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while sink.count() < 161 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(sink.count(), 161);
    }

    #[test]
    fn paths_probed_together_take_turns_of_two_hundred_and_each_gets_all_its_probes() {
        let tx = [loopback()];
        let (rx_a, rx_b) = (loopback(), loopback());
        let at = |s: &Socket| s.local_addr().expect("addr").as_socket().expect("inet");
        let (to_a, to_b) = (at(&rx_a), at(&rx_b));
        let sink_a = Sink::start(vec![rx_a.try_clone().expect("dup")]);
        let sink_b = Sink::start(vec![rx_b.try_clone().expect("dup")]);
        // Which path each probe took, in the order they were sent.
        let order = std::cell::RefCell::new(Vec::new());
        let log = &order;
        let probe = |rx, sink, to, name| Probe {
            tx: &tx,
            rx,
            seq_at: 0,
            sink,
            build: Box::new(move |seq: u64, buf: &mut [u8]| {
                log.borrow_mut().push(name);
                buf[..8].copy_from_slice(&seq.to_be_bytes());
                (8, to, 0)
            }),
        };
        let (mut a, mut b) = (probe(&rx_a, &sink_a, to_a, 'a'), probe(&rx_b, &sink_b, to_b, 'b'));
        let got = latencies(&mut [&mut a, &mut b], 450);
        assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [450, 450]);
        assert!(got.iter().flatten().all(|&us| us > 0.0));
        drop((a, b));
        let turns: Vec<(char, usize)> = order.into_inner().chunk_by(|x, y| x == y).map(|c| (c[0], c.len())).collect();
        assert_eq!(turns, [('a', 200), ('b', 200), ('a', 200), ('b', 200), ('a', 50), ('b', 50)]);
    }

    #[test]
    fn a_segmented_send_reaches_the_relay_host_as_one_frame_per_datagram() {
        // Needs root for namespaces (the test command has it).
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        use shipworm_lab::{Lab, LabSpec, GEN_V4, RELAY_V4};
        let lab = Lab::build(&LabSpec { generator: true, ..LabSpec::nats(vec![]) }).unwrap();
        let (gen, rly) = (lab.ns("gen"), lab.ns("rly"));
        let rx = socket_in(&rly, SocketAddr::V4(SocketAddrV4::new(RELAY_V4, 9100))).unwrap();
        let tx = socket_in(&gen, SocketAddr::V4(SocketAddrV4::new(GEN_V4, 0))).unwrap();
        let frames = || -> u64 {
            let n = netns::exec_mounted(&rly, &["cat", "/sys/class/net/eth0/statistics/rx_packets"]).unwrap();
            n.trim().parse().unwrap()
        };
        let to = SocketAddr::V4(SocketAddrV4::new(RELAY_V4, 9100));
        // Resolve the neighbour first, so the row is all that crosses.
        let _ = tx.send_to(&[0u8; 8], &to.into());
        let sink = Sink::start(vec![rx]);
        std::thread::sleep(Duration::from_millis(200));
        let (before, arrived) = (frames(), sink.count());
        let mut out = SendBatch::new(tx.try_clone().unwrap(), 32, 2048);
        for i in 0..20u8 {
            out.slot_mut()[..200].fill(i);
            out.commit_any(200, to);
        }
        assert_eq!(out.flush(), (20, 0));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(sink.count() - arrived, 20);
        // Whole, the row would cross the wire as one frame, and the relay host would
        // cut what the generator's host should have.
        assert!(frames() - before >= 20, "{} frames for 20 datagrams", frames() - before);
    }
}
