//! Traffic through the lab: ping6 (iputils) and a bounded TCP transfer whose SHA-256
//! is compared at both ends. Both stop by themselves.

use crate::error::{err, LabError, Result};
use crate::netns;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a ping run saw.
#[derive(Debug, Clone, PartialEq)]
pub struct PingResult {
    /// Echo requests sent.
    pub sent: u32,
    /// Replies received.
    pub received: u32,
    /// Round-trip times of the replies, in milliseconds.
    pub rtts_ms: Vec<f64>,
}

impl PingResult {
    /// Median round-trip time of the replies after the first: the first may wait for
    /// the connectivity test or a bubble exchange, the rest show the path itself.
    pub fn steady_median_ms(&self) -> Option<f64> {
        let mut v = self.rtts_ms.get(1..)?.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    }
}

impl std::fmt::Display for PingResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} replies", self.received, self.sent)?;
        if let Some(first) = self.rtts_ms.first() {
            write!(f, ", first {first:.2} ms")?;
        }
        if let Some(m) = self.steady_median_ms() {
            write!(f, ", then median {m:.2} ms")?;
        }
        Ok(())
    }
}

std::thread_local! {
    /// The gap between pings (ping's `-i`) on this thread: 0.2 s, or what
    /// [`with_ping_interval`] set.
    static PING_INTERVAL: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::from_millis(200)) };
}

/// Run `f` with this thread's pings `gap` apart instead of 0.2 s. The end-to-end suite's
/// pings check that every echo comes back (20 a second is no flood); the benchmark keeps
/// 0.2 s, since a latency depends on how often packets go.
pub fn with_ping_interval<T>(gap: Duration, f: impl FnOnce() -> T) -> T {
    let before = PING_INTERVAL.with(|g| g.replace(gap));
    let out = f();
    PING_INTERVAL.with(|g| g.set(before));
    out
}

/// `count` pings from namespace `ns` to `dst`, 0.2 s apart (see [`with_ping_interval`]),
/// waiting `wait_secs` for each reply.
pub fn ping(ns: &str, dst: Ipv6Addr, count: u32, wait_secs: u32) -> Result<PingResult> {
    ping_args(ns, &[], IpAddr::V6(dst), count, wait_secs)
}

/// [`ping`] over IPv4.
pub fn ping4(ns: &str, dst: Ipv4Addr, count: u32, wait_secs: u32) -> Result<PingResult> {
    ping_args(ns, &[], IpAddr::V4(dst), count, wait_secs)
}

/// [`ping`] from source address `src` of namespace `ns`.
pub fn ping_from(ns: &str, src: Ipv6Addr, dst: Ipv6Addr, count: u32, wait_secs: u32) -> Result<PingResult> {
    ping_args(ns, &["-I".to_string(), src.to_string()], IpAddr::V6(dst), count, wait_secs)
}

fn ping_args(ns: &str, extra: &[String], dst: IpAddr, count: u32, wait_secs: u32) -> Result<PingResult> {
    let c = count.to_string();
    let w = wait_secs.to_string();
    let d = dst.to_string();
    let family = if dst.is_ipv4() { "-4" } else { "-6" };
    let mut cmd = Command::new("ping");
    let gap = format!("{:.3}", PING_INTERVAL.with(|g| g.get()).as_secs_f64());
    cmd.args([family, "-n", "-c", &c, "-i", &gap, "-W", &w]).args(extra).arg(&d).stdin(Stdio::null());
    let entered = netns::enter_on_spawn(ns, &mut cmd)?;
    let out = cmd.output().map_err(|e| LabError::new(format!("ping: {e}")))?;
    drop(entered);
    let text = String::from_utf8_lossy(&out.stdout);
    let rtts_ms: Vec<f64> = text
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next())
        .filter_map(|t| t.parse().ok())
        .collect();
    Ok(PingResult { sent: count, received: rtts_ms.len() as u32, rtts_ms })
}

/// What a TCP transfer achieved.
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    /// Bytes received.
    pub bytes: u64,
    /// Seconds from connect to the last byte.
    pub secs: f64,
    /// Whether the SHA-256 of what was sent equals that of what arrived.
    pub intact: bool,
}

impl Transfer {
    /// Throughput in Mbit/s.
    pub fn mbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.secs.max(1e-9) / 1e6
    }
}

/// Deterministic, incompressible test data.
fn fill(buf: &mut [u8], state: &mut u64) {
    for chunk in buf.chunks_mut(8) {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let b = state.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// Send `bytes` over TCP from namespace `from` to `to_addr`, received in namespace
/// `to`; gives up after `timeout` in all (a transfer that trickles ends too).
pub fn tcp_transfer(from: &str, to: &str, to_addr: Ipv6Addr, bytes: usize, timeout: Duration) -> Result<Transfer> {
    let (ready_tx, ready_rx) = mpsc::channel::<Result<u16>>();
    let to_ns = to.to_string();
    let receiver = std::thread::spawn(move || -> Result<(u64, [u8; 32])> {
        let listen: Result<(TcpListener, u16)> = (|| {
            netns::enter(&to_ns)?;
            let l = TcpListener::bind("[::]:0").map_err(|e| LabError::new(format!("listen in {to_ns}: {e}")))?;
            let port = l.local_addr().map_err(|e| LabError::new(e.to_string()))?.port();
            l.set_nonblocking(true).map_err(|e| LabError::new(e.to_string()))?;
            Ok((l, port))
        })();
        let l = match listen {
            Ok((l, port)) => {
                let _ = ready_tx.send(Ok(port));
                l
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e.clone()));
                return Err(e);
            }
        };
        receive_all(&l, timeout)
    });
    let port = ready_rx.recv().map_err(|_| LabError::new("receiver thread died".into()))??;
    let from_ns = from.to_string();
    let sender = std::thread::spawn(move || -> Result<(f64, [u8; 32])> {
        netns::enter(&from_ns)?;
        send_all(SocketAddr::from((to_addr, port)), bytes, timeout)
    });
    let sent = sender.join().map_err(|_| LabError::new("sender thread panicked".into()))?;
    let received = receiver.join().map_err(|_| LabError::new("receiver thread panicked".into()))?;
    let (secs, sent_hash) = sent?;
    let (total, recv_hash) = received?;
    Ok(Transfer { bytes: total, secs, intact: total == bytes as u64 && sent_hash == recv_hash })
}

/// A transfer's receiving end: the first connection `l` takes, read to its end within
/// `timeout`; the bytes and their SHA-256.
fn receive_all(l: &TcpListener, timeout: Duration) -> Result<(u64, [u8; 32])> {
    let deadline = Instant::now() + timeout;
    let mut s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => return err(format!("accept: {e}")),
        }
    };
    s.set_nonblocking(false).map_err(|e| LabError::new(e.to_string()))?;
    s.set_read_timeout(Some(timeout)).map_err(|e| LabError::new(e.to_string()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 65536];
    let mut total = 0u64;
    loop {
        if Instant::now() >= deadline {
            return err(format!("received only {total} bytes within {timeout:?}"));
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                h.update(&buf[..n]);
                total += n as u64;
            }
            // A signal to the test process (a daemon stopped, a child reaped) is no
            // end of the transfer.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return err(format!("receive after {total} bytes: {e}")),
        }
    }
    Ok((total, h.finalize().into()))
}

/// A transfer's sending end: `bytes` of a fixed pseudo-random stream to `addr` within
/// `timeout`, then the receiver's close awaited; the seconds it took and the SHA-256.
fn send_all(addr: SocketAddr, bytes: usize, timeout: Duration) -> Result<(f64, [u8; 32])> {
    let start = Instant::now();
    let mut s =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| LabError::new(format!("connect to {addr}: {e}")))?;
    s.set_write_timeout(Some(timeout)).map_err(|e| LabError::new(e.to_string()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 65536];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut left = bytes;
    while left > 0 {
        if start.elapsed() >= timeout {
            return err(format!("sent only {} bytes within {timeout:?}", bytes - left));
        }
        let n = left.min(buf.len());
        fill(&mut buf[..n], &mut state);
        s.write_all(&buf[..n]).map_err(|e| LabError::new(format!("send after {} bytes: {e}", bytes - left)))?;
        h.update(&buf[..n]);
        left -= n;
    }
    s.shutdown(std::net::Shutdown::Write).map_err(|e| LabError::new(e.to_string()))?;
    // Wait for the receiver to close, so the time covers delivery.
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.read(&mut [0u8; 1]);
    Ok((start.elapsed().as_secs_f64(), h.finalize().into()))
}

/// One echo of a [`ping_stream`]: when it was sent, and its round trip if answered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Echo {
    /// Time since the stream started.
    pub sent: Duration,
    /// Round-trip time, if a reply came.
    pub rtt: Option<Duration>,
}

/// Echo requests from namespace `ns` to `dst` every `interval` for `total`, from an
/// unbound ICMPv6 socket — so each request takes whatever source address the host has
/// at that moment, as an application's traffic would across a handoff.
pub fn ping_stream(ns: &str, dst: Ipv6Addr, interval: Duration, total: Duration) -> Result<Vec<Echo>> {
    ping_stream_from(ns, dst, interval, total, Instant::now(), stream_ident())
}

/// The identifier of a [`ping_stream`]'s echo requests (its sequence numbers count
/// from 0).
pub fn stream_ident() -> u16 {
    (std::process::id() as u16) ^ 0x5a5a
}

/// A [`ping_stream`] whose echoes' times count from `start` (an instant shared with
/// other threads' records), which is when it begins, with identifier `ident` (for an
/// [`echo_requests_heard`] at the other end, and to tell streams apart).
pub fn ping_stream_from(
    ns: &str,
    dst: Ipv6Addr,
    interval: Duration,
    total: Duration,
    start: Instant,
    ident: u16,
) -> Result<Vec<Echo>> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    netns::enter(ns)?;
    let s = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6))
        .map_err(|e| LabError::new(format!("ICMPv6 socket: {e}")))?;
    s.set_nonblocking(true).map_err(|e| LabError::new(e.to_string()))?;
    let to = SockAddr::from(std::net::SocketAddrV6::new(dst, 0, 0, 0));
    std::thread::sleep(start.saturating_duration_since(Instant::now()));
    let mut echoes: Vec<Echo> = Vec::new();
    let mut next = start;
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
    while start.elapsed() < total + Duration::from_millis(500) {
        if Instant::now() >= next && start.elapsed() < total {
            let seq = echoes.len() as u16;
            // The kernel fills the checksum of ICMPv6 raw sockets.
            let mut req = [128u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            req[4..6].copy_from_slice(&ident.to_be_bytes());
            req[6..8].copy_from_slice(&seq.to_be_bytes());
            let _ = s.send_to(&req, &to); // fails while the host has no address: counted as lost
            echoes.push(Echo { sent: start.elapsed(), rtt: None });
            next += interval;
        }
        while let Ok(n) = s.recv(&mut buf) {
            // SAFETY: recv initialised the first n bytes.
            let b: Vec<u8> = buf[..n].iter().map(|x| unsafe { x.assume_init() }).collect();
            if b.len() >= 8 && b[0] == 129 && u16::from_be_bytes([b[4], b[5]]) == ident {
                let seq = usize::from(u16::from_be_bytes([b[6], b[7]]));
                if let Some(e) = echoes.get_mut(seq) {
                    if e.rtt.is_none() {
                        e.rtt = Some(start.elapsed() - e.sent);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(echoes)
}

/// The echo requests with identifier `ident` (a [`ping_stream_from`]'s, from whichever
/// source address) that arrive in namespace `ns` within `total` of `start`: each one's
/// sequence number and when it arrived, counted from `start`. The other half of a
/// one-way measurement: which requests crossed, and when.
pub fn echo_requests_heard(ns: &str, ident: u16, total: Duration, start: Instant) -> Result<Vec<(u16, Duration)>> {
    use socket2::{Domain, Protocol, Socket, Type};
    netns::enter(ns)?;
    // A raw ICMPv6 socket gets a copy of every ICMPv6 message the host receives,
    // echo requests included (the kernel still answers them itself).
    let s = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6))
        .map_err(|e| LabError::new(format!("ICMPv6 socket: {e}")))?;
    s.set_read_timeout(Some(Duration::from_millis(50))).map_err(|e| LabError::new(e.to_string()))?;
    let mut heard = Vec::new();
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
    while start.elapsed() < total {
        let Ok(n) = s.recv(&mut buf) else { continue };
        if n < 8 {
            continue;
        }
        // SAFETY: recv initialised the first n ≥ 8 bytes.
        let b: [u8; 8] = std::array::from_fn(|i| unsafe { buf[i].assume_init() });
        if b[0] == 128 && u16::from_be_bytes([b[4], b[5]]) == ident {
            heard.push((u16::from_be_bytes([b[6], b[7]]), start.elapsed()));
        }
    }
    Ok(heard)
}

/// What a SIP call achieved.
#[derive(Debug, Clone, PartialEq)]
pub struct SipCall {
    /// From the INVITE to the end of the call (BYE answered), in seconds.
    pub secs: f64,
}

/// One SIP call over UDP with Debian's SIPp: a user agent server on `uas_addr`:5060 in
/// namespace `uas_ns`, called by a user agent client in `uac_ns` from `uac_addr`
/// (INVITE, 180/200, ACK, BYE). The caller may not retransmit its INVITE: the first
/// one must be answered (within SIP's T1, 500 ms), or the call fails. Bounded by
/// `timeout`; both agents are stopped on return.
pub fn sip_call(
    uac_ns: &str,
    uac_addr: Ipv6Addr,
    uas_ns: &str,
    uas_addr: Ipv6Addr,
    timeout: Duration,
) -> Result<SipCall> {
    // A folder per call: SIPp writes its files into its working directory, and calls
    // run in parallel (every lab's client shares the NAT's address, so not its name).
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("shipworm-sip-{}-{k}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| LabError::new(format!("{}: {e}", dir.display())))?;
    let log = |name: &str| -> Result<std::fs::File> {
        std::fs::File::create(dir.join(name)).map_err(|e| LabError::new(format!("{name}: {e}")))
    };
    let secs = format!("{}s", timeout.as_secs().max(1));
    let (uas_ip, uac_ip) = (uas_addr.to_string(), uac_addr.to_string());
    let mut uas = Command::new("ip")
        .args(["netns", "exec", uas_ns, "sipp", "-sn", "uas", "-i", &uas_ip, "-p", "5060", "-m", "1", "-nostdin"])
        .args(["-timeout", &secs])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(log("uas.out")?)
        .stderr(log("uas.err")?)
        .spawn()
        .map_err(|e| LabError::new(format!("cannot start sipp (Debian package sip-tester): {e}")))?;
    netns::register_pid(uas.id());
    let result = (|| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while netns::exec(uas_ns, &["ss", "-Hlun", "sport = :5060"])?.trim().is_empty() {
            if Instant::now() > deadline {
                return err(format!("the SIP agent did not listen on 5060: {}", read(&dir, "uas.err")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let target = format!("[{uas_ip}]:5060");
        let start = Instant::now();
        let out = Command::new("ip")
            .args(["netns", "exec", uac_ns, "sipp", "-sn", "uac", "-i", &uac_ip, "-p", "5070", "-m", "1", "-nostdin"])
            .args(["-timeout", &secs, "-timeout_error", "-max_invite_retrans", "0", "-d", "200", &target])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| LabError::new(format!("sipp: {e}")))?;
        let took = start.elapsed().as_secs_f64();
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stdout);
            let tail: Vec<&str> = text.lines().rev().take(12).collect();
            return err(format!(
                "the call failed ({}): {}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ));
        }
        Ok(SipCall { secs: took })
    })();
    let _ = uas.kill();
    let _ = uas.wait();
    netns::unregister_pid(uas.id());
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn read(dir: &std::path::Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default().lines().take(5).collect::<Vec<_>>().join(" | ")
}

/// SYNs (and SYN-ACKs) retransmitted by namespace `ns` so far (`TCPSynRetrans` of
/// its /proc/net/netstat).
pub fn syn_retransmissions(ns: &str) -> Result<u64> {
    let table = netns::exec(ns, &["cat", "/proc/net/netstat"])?;
    let mut ext = table.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (ext.next(), ext.next()) else {
        return err("no TcpExt lines in /proc/net/netstat");
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "TCPSynRetrans")
        .and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| LabError::new("no TCPSynRetrans in /proc/net/netstat".into()))
}
