//! `MetricsAddress IP:PORT`: a role's counters for Prometheus, at `/metrics` in the
//! Prometheus text format (encoded by the `prometheus-client` crate).
//!
//! The event loop publishes its counters on its tick to a [`Snapshot`]; a
//! thread of its own answers the scrapes from the last snapshot, one connection at a
//! time with short timeouts, so a scraper — slow, stuck or hostile — costs the packet
//! path nothing but the snapshot. The listening socket is bound during set-up (a
//! confined daemon makes no new socket and binds no TCP port).

use crate::runtime::Failure;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use shipworm_side_wire::metrics_request::MetricsRequest;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a scraper may take to send its request, or to take the answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest request read (a scrape's GET fits many times).
const REQUEST_BYTES: usize = 4096;

/// What a sample counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (the encoder names it `…_total`).
    Counter,
    /// Goes up and down.
    Gauge,
}

/// One value of one metric, with its labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The metric's name, `shipworm_…` (a counter's without `_total`).
    pub name: String,
    /// What it counts.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// Label names and values.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: u64,
}

impl Sample {
    /// A counter without labels.
    #[cfg(test)]
    pub fn counter(name: &'static str, help: &'static str, value: u64) -> Sample {
        Sample { name: name.to_string(), help, kind: Kind::Counter, labels: Vec::new(), value }
    }

    /// A gauge without labels.
    pub fn gauge(name: &'static str, help: &'static str, value: u64) -> Sample {
        Sample { name: name.to_string(), help, kind: Kind::Gauge, labels: Vec::new(), value }
    }

    /// This sample with one more label.
    pub fn with(mut self, key: &'static str, value: impl Into<String>) -> Sample {
        self.labels.push((key, value.into()));
        self
    }
}

/// The last snapshot the event loop published.
#[derive(Debug, Default, Clone)]
pub struct Snapshot(Arc<Mutex<Vec<Sample>>>);

impl Snapshot {
    /// Replace the snapshot.
    pub fn publish(&self, samples: Vec<Sample>) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = samples;
    }

    /// The snapshot in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self.clone()));
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry);
        text
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let samples = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        // Samples of a metric follow each other: one descriptor for each run.
        let mut i = 0;
        while i < samples.len() {
            let first = &samples[i];
            let run = samples[i..].iter().take_while(|s| s.name == first.name).count();
            let kind = match first.kind {
                Kind::Counter => ConstCounter::new(0u64).metric_type(),
                Kind::Gauge => ConstGauge::new(0i64).metric_type(),
            };
            let mut metric = encoder.encode_descriptor(&first.name, first.help, None, kind)?;
            for s in &samples[i..i + run] {
                let labels: Vec<(&str, &str)> = s.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let family = metric.encode_family(&labels)?;
                match s.kind {
                    Kind::Counter => ConstCounter::new(s.value).encode(family)?,
                    Kind::Gauge => ConstGauge::new(i64::try_from(s.value).unwrap_or(i64::MAX)).encode(family)?,
                }
            }
            i += run;
        }
        Ok(())
    }
}

/// The metrics listener, bound during set-up.
pub fn bind(addr: SocketAddr) -> Result<TcpListener, Failure> {
    TcpListener::bind(addr).map_err(|e| {
        Failure::runtime(format!(
            "cannot listen for metrics on {addr}: {e} (MetricsAddress: an address of this host and a free port)"
        ))
    })
}

/// With a listener (`MetricsAddress` given): the board the event loop publishes to,
/// its scrapes answered from now on.
pub fn start(listener: Option<TcpListener>) -> Result<Option<Snapshot>, Failure> {
    let Some(l) = listener else { return Ok(None) };
    let board = Snapshot::default();
    serve(l, board.clone())?;
    Ok(Some(board))
}

/// Answer scrapes on `listener` from `board` in a thread of its own, for the daemon's
/// life.
pub fn serve(listener: TcpListener, board: Snapshot) -> Result<(), Failure> {
    listener.set_nonblocking(true).map_err(|e| Failure::runtime(format!("metrics listener: {e}")))?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            let mut conns: Vec<Scrape> = Vec::new();
            loop {
                poll_round(&listener, &mut conns, &board);
            }
        })
        .map(drop)
        .map_err(|e| Failure::runtime(format!("cannot start the metrics thread: {e}")))
}

/// Most scrapes open at once: a scraper sends one request at a time; more than this
/// is someone holding connections open, and the source holding the most gives one up.
const CONNECTIONS: usize = 16;

/// One scraper's connection: what it sent so far, what is left of the answer, and
/// when it must be done — one deadline for the whole exchange, so that a connection
/// dribbling a byte now and then holds nothing past it (a timeout per read would let
/// it go on for hours).
struct Scrape {
    conn: std::net::TcpStream,
    /// Who opened it: its IPv4 address, or its IPv6 address's /64 (one host holds a
    /// whole /64 as easily as one address).
    from: std::net::IpAddr,
    request: Vec<u8>,
    answer: Option<(Vec<u8>, usize)>,
    deadline: std::time::Instant,
}

/// Wait for the listener or a scrape to be ready (or the next deadline: none while no
/// scrape is open), and move each ready one on: accept, read the request, answer,
/// close; drop those past their deadline.
fn poll_round(listener: &TcpListener, conns: &mut Vec<Scrape>, board: &Snapshot) {
    use nix::poll::{PollFd, PollFlags};
    use std::os::fd::AsFd;
    let now = std::time::Instant::now();
    conns.retain(|c| c.deadline > now);
    let wait = conns.iter().map(|c| c.deadline - now).min().unwrap_or(Duration::MAX);
    let ready: Vec<bool> = {
        let mut fds = vec![PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        for c in conns.iter() {
            let want = if c.answer.is_some() { PollFlags::POLLOUT } else { PollFlags::POLLIN };
            fds.push(PollFd::new(c.conn.as_fd(), want));
        }
        if !crate::runtime::wait::readable(&mut fds, wait).unwrap_or(false) {
            return;
        }
        fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect()
    };
    let mut done = vec![false; conns.len()];
    for (i, c) in conns.iter_mut().enumerate() {
        if ready[i + 1] {
            done[i] = step(c, board);
        }
    }
    let mut i = 0;
    conns.retain(|_| {
        i += 1;
        !done[i - 1]
    });
    if ready[0] {
        while let Ok((conn, peer)) = listener.accept() {
            if conn.set_nonblocking(true).is_err() {
                continue;
            }
            if conns.len() >= CONNECTIONS {
                make_room(conns);
            }
            let deadline = std::time::Instant::now() + SCRAPE_TIMEOUT;
            conns.push(Scrape { conn, from: source(peer.ip()), request: Vec::new(), answer: None, deadline });
        }
    }
}

/// Whose a connection counts as: its IPv4 address, or its IPv6 address's /64.
fn source(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(a) if a.to_ipv4_mapped().is_none() => {
            std::net::IpAddr::V6((u128::from(a) & !((1u128 << 64) - 1)).into())
        }
        std::net::IpAddr::V6(a) => std::net::IpAddr::V4(a.to_ipv4_mapped().expect("checked")),
        v4 => v4,
    }
}

/// The scrapes are at their cap: the source holding the most gives one up (its oldest
/// that has not sent a whole request, else its oldest), so that a flood of connections
/// from one place never pushes out another's scrape, and a burst of idle connections
/// never one being answered.
fn make_room(conns: &mut Vec<Scrape>) {
    let held = |ip: std::net::IpAddr| conns.iter().filter(|c| c.from == ip).count();
    let Some(most) = conns.iter().map(|c| c.from).max_by_key(|&ip| held(ip)) else { return };
    let theirs = || conns.iter().enumerate().filter(|(_, c)| c.from == most);
    let victim = theirs().find(|(_, c)| c.answer.is_none()).or_else(|| theirs().next()).map(|(i, _)| i);
    if let Some(i) = victim {
        conns.remove(i);
    }
}

/// Read what a scrape sent, or write what is left of its answer; true when it is done
/// with (answered, closed, or broken).
fn step(c: &mut Scrape, board: &Snapshot) -> bool {
    if let Some((bytes, sent)) = &mut c.answer {
        return match c.conn.write(&bytes[*sent..]) {
            Ok(n) if n > 0 => {
                *sent += n;
                *sent == bytes.len()
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
            _ => true,
        };
    }
    let mut buf = [0u8; 1024];
    match c.conn.read(&mut buf) {
        Ok(0) => return true,
        Ok(n) => c.request.extend_from_slice(&buf[..n.min(REQUEST_BYTES - c.request.len())]),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
        Err(_) => return true,
    }
    if c.request.len() >= REQUEST_BYTES || c.request.windows(4).any(|w| w == b"\r\n\r\n") {
        c.answer = Some((answer(&c.request, board).into_bytes(), 0));
    }
    false
}

/// The HTTP answer to `request`: the metrics for `GET /metrics`, else an error.
fn answer(request: &[u8], board: &Snapshot) -> String {
    let (status, kind, body) = match MetricsRequest::parse(request) {
        MetricsRequest::Metrics => {
            ("200 OK", prometheus_client::encoding::prometheus_text::CONTENT_TYPE, board.render())
        }
        MetricsRequest::NotFound => ("404 Not Found", "text/plain", "only /metrics here\n".to_string()),
        MetricsRequest::MethodNotAllowed => ("405 Method Not Allowed", "text/plain", "GET /metrics\n".to_string()),
    };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board() -> Snapshot {
        let b = Snapshot::default();
        b.publish(vec![
            Sample::counter("shipworm_relay_packets", "Packets relayed.", 12).with("direction", "to_teredo"),
            Sample::counter("shipworm_relay_packets", "Packets relayed.", 10).with("direction", "to_ipv6"),
            Sample::gauge("shipworm_relay_peers", "Peers in the table.", 3),
        ]);
        b
    }

    #[test]
    fn a_scrape_reads_the_last_snapshot_in_prometheus_text_format() {
        let text = answer(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &board());
        assert!(text.starts_with("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4"), "{text}");
        let body = text.split("\r\n\r\n").nth(1).unwrap();
        assert!(body.contains("# TYPE shipworm_relay_packets_total counter\n"), "{body}");
        assert!(body.contains("shipworm_relay_packets_total{direction=\"to_teredo\"} 12\n"), "{body}");
        assert!(body.contains("shipworm_relay_packets_total{direction=\"to_ipv6\"} 10\n"), "{body}");
        assert!(body.contains("# TYPE shipworm_relay_peers gauge\nshipworm_relay_peers 3\n"), "{body}");
        // One HELP and TYPE per metric, whatever its number of label sets.
        assert_eq!(body.matches("# TYPE shipworm_relay_packets_total").count(), 1, "{body}");
        let length: usize =
            text.split("Content-Length: ").nth(1).unwrap().split("\r\n").next().unwrap().parse().unwrap();
        assert_eq!(length, body.len());
    }

    #[test]
    fn anything_but_a_get_of_metrics_gets_an_error_and_a_long_request_is_cut() {
        assert!(answer(b"GET / HTTP/1.1\r\n\r\n", &board()).starts_with("HTTP/1.1 404"));
        assert!(answer(b"POST /metrics HTTP/1.1\r\n\r\n", &board()).starts_with("HTTP/1.1 405"));
        assert!(answer(b"", &board()).starts_with("HTTP/1.1 405"));
    }

    /// A connection dribbling a byte every 1.5 s (each read within any per-read
    /// timeout) holds nobody else's scrape: answered at once, each time (#40, 5). Nor
    /// do more such connections than the cap, nor one whose request never ends.
    #[test]
    fn dribbling_and_endless_connections_hold_no_scrape() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        serve(listener, board()).unwrap();
        let scrape = || {
            let t = std::time::Instant::now();
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
            let mut got = String::new();
            s.read_to_string(&mut got).unwrap();
            assert!(got.contains("shipworm_relay_peers 3\n"), "{got}");
            t.elapsed()
        };
        // The dribblers connect first (the server takes connections in that order), so
        // that the endless request, the newest, is never the oldest to give way.
        let (connected, all_connected) = std::sync::mpsc::channel();
        let dribblers: Vec<_> = (0..CONNECTIONS + 4)
            .map(|_| {
                let connected = connected.clone();
                std::thread::spawn(move || {
                    let mut d = std::net::TcpStream::connect(addr).unwrap();
                    connected.send(()).unwrap();
                    for _ in 0..3 {
                        if d.write_all(b"G").is_err() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(1500));
                    }
                })
            })
            .collect();
        for _ in 0..CONNECTIONS + 4 {
            all_connected.recv().unwrap();
        }
        let mut endless = std::net::TcpStream::connect(addr).unwrap();
        endless.write_all(&[b'a'; REQUEST_BYTES]).unwrap();
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(700));
            let took = scrape();
            assert!(took < Duration::from_secs(3), "a scrape took {took:?}");
        }
        // The endless request was cut at REQUEST_BYTES and answered.
        let mut got = String::new();
        let _ = endless.read_to_string(&mut got);
        assert!(got.starts_with("HTTP/1.1 405"), "{got}");
        for d in dribblers {
            d.join().unwrap();
        }
    }

    /// A flood of connections from one address (more than the cap, and again a moment
    /// later) leaves another address's scrape, connected and half sent before it,
    /// answered: the flooder gives up its own (#60, 5). With the oldest silent
    /// connection giving way whoever holds it, as before, the scraper's went first and
    /// this fails (seen: no answer).
    #[test]
    fn a_connection_flood_from_one_address_evicts_only_its_own() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        serve(listener, board()).unwrap();
        let from = |ip: [u8; 4]| {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            s.bind(&std::net::SocketAddr::from((ip, 0)).into()).unwrap();
            s.connect(&addr.into()).unwrap();
            std::net::TcpStream::from(s)
        };
        let mut scraper = from([127, 0, 0, 2]);
        scraper.write_all(b"GET /metrics HTTP/1.0\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let mut flood = Vec::new();
        for _ in 0..2 {
            for _ in 0..CONNECTIONS * 2 {
                flood.push(from([127, 0, 0, 3]));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        scraper.write_all(b"\r\n").unwrap();
        scraper.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut got = String::new();
        let _ = scraper.read_to_string(&mut got);
        assert!(got.contains("shipworm_relay_peers 3\n"), "the scrape went unanswered: {got:?}");
    }

    /// The `shipworm_…` names in `text`, a counter's `_total` taken off.
    fn names(text: &str) -> std::collections::BTreeSet<String> {
        let mut found = std::collections::BTreeSet::new();
        // Ours, and the one process metric Prometheus names for every exporter.
        let starts = text.match_indices("shipworm_").chain(text.match_indices("process_start_time_seconds"));
        for (i, _) in starts {
            let name: String =
                text[i..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
            // `shipworm_<role>_<name>` names a pattern, not a metric.
            if !name.ends_with('_') {
                found.insert(name.strip_suffix("_total").unwrap_or(&name).to_string());
            }
        }
        found
    }

    /// The metric names every role publishes: its info and state gauges, and its table
    /// of counters (with a drop counted, so that the drops' metric shows).
    fn published() -> std::collections::BTreeSet<String> {
        use crate::runtime::report::{IoErrors, TunOffloadCounts};
        let mut drops = shipworm_proto::DropCounters::default();
        drops.count(shipworm_proto::DropReason::QueueFull);
        let (io, tun) = (IoErrors::default(), TunOffloadCounts::default());
        let client = shipworm_proto::client::ClientStats { drops: drops.clone(), ..Default::default() };
        let relay = shipworm_proto::relay::RelayStats { drops: drops.clone(), ..Default::default() };
        let server = shipworm_proto::server::ServerStats { drops, ..Default::default() };
        let tables = [
            crate::cmd::client::counters(&client, 0, 0, &io, &tun, None),
            // And a client with its kernel data path.
            crate::cmd::client::counters(&client, 0, 0, &io, &tun, Some(&([0; shipworm_kernel_path::COUNTERS], 0))),
            crate::cmd::relay::relay_counters(std::slice::from_ref(&relay), &relay, &io, &tun, 0, 0, None),
            // A relay with its kernel data path publishes its rows too.
            crate::cmd::relay::relay_counters(
                std::slice::from_ref(&relay),
                &relay,
                &io,
                &tun,
                0,
                0,
                Some(&([0; shipworm_kernel_path::COUNTERS], 0)),
            ),
            crate::cmd::server::counters(&server, None, &io),
            crate::cmd::server::counters(&server, Some((&relay, 0, 0)), &io),
        ];
        let state = [
            "shipworm_info",
            "shipworm_build_info",
            "process_start_time_seconds",
            "shipworm_client_qualified",
            "shipworm_client_nat",
        ]
        .map(String::from);
        tables.iter().flat_map(|t| t.samples().into_iter().map(|s| s.name)).chain(state).collect()
    }

    /// The section of `doc` under the heading that names `title`, to the next heading of
    /// its level or above.
    fn section<'a>(doc: &'a str, title: &str) -> &'a str {
        let start = doc.find(&format!(" {title}\n")).expect("the heading");
        let head = doc[..start].rfind('\n').map_or(0, |i| i + 1);
        let level = doc[head..start].chars().take_while(|&c| c == '#').count();
        let body = &doc[start..];
        let end = body
            .match_indices("\n#")
            .find(|(i, _)| body[i + 1..].chars().take_while(|&c| c == '#').count() <= level)
            .map_or(body.len(), |(i, _)| i);
        &body[..end]
    }

    #[test]
    fn the_dashboard_and_the_operations_guide_name_only_metrics_the_daemons_publish() {
        let published = published();
        let dashboard = include_str!("../../../../packaging/grafana/shipworm.json");
        let guide = section(include_str!("../../../../docs/operations.md"), "Metrics");
        for (what, text) in
            [("packaging/grafana/shipworm.json", dashboard), ("docs/operations.md's Metrics section", guide)]
        {
            let unknown: Vec<String> = names(text).difference(&published).cloned().collect();
            assert!(unknown.is_empty(), "{what} names metrics nobody publishes: {unknown:?}");
        }
        let undocumented: Vec<String> = published.difference(&names(guide)).cloned().collect();
        assert!(undocumented.is_empty(), "published but not in docs/operations.md's Metrics section: {undocumented:?}");
    }

    #[test]
    fn a_daemon_serves_scrapes_over_tcp_while_its_loop_publishes() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let b = board();
        serve(listener, b.clone()).unwrap();
        // A scraper that connects and says nothing holds the thread at most the timeout.
        let _silent = std::net::TcpStream::connect(addr).unwrap();
        b.publish(vec![Sample::gauge("shipworm_relay_peers", "Peers in the table.", 7)]);
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut got = String::new();
        s.read_to_string(&mut got).unwrap();
        assert!(got.contains("shipworm_relay_peers 7\n"), "{got}");
    }
}
