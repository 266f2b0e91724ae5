//! `MetricsAddress IP:PORT`: a role's counters for Prometheus, at `/metrics` in the
//! Prometheus text format (encoded by the `prometheus-client` crate).
//!
//! The event loop publishes a snapshot of its counters on its tick to a [`Board`]; a
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
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub labels: Vec<(&'static str, String)>,
    pub value: u64,
}

impl Sample {
    /// A counter without labels.
    pub fn counter(name: &'static str, help: &'static str, value: u64) -> Sample {
        Sample { name, help, kind: Kind::Counter, labels: Vec::new(), value }
    }

    /// A gauge without labels.
    pub fn gauge(name: &'static str, help: &'static str, value: u64) -> Sample {
        Sample { name, help, kind: Kind::Gauge, labels: Vec::new(), value }
    }

    /// This sample with one more label.
    pub fn with(mut self, key: &'static str, value: impl Into<String>) -> Sample {
        self.labels.push((key, value.into()));
        self
    }
}

/// The last snapshot the event loop published.
#[derive(Debug, Default, Clone)]
pub struct Board(Arc<Mutex<Vec<Sample>>>);

impl Board {
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

impl Collector for Board {
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
            let mut metric = encoder.encode_descriptor(first.name, first.help, None, kind)?;
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
pub fn start(listener: Option<TcpListener>) -> Result<Option<Board>, Failure> {
    let Some(l) = listener else { return Ok(None) };
    let board = Board::default();
    serve(l, board.clone())?;
    Ok(Some(board))
}

/// Answer scrapes on `listener` from `board` in a thread of its own, for the daemon's
/// life.
pub fn serve(listener: TcpListener, board: Board) -> Result<(), Failure> {
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(SCRAPE_TIMEOUT));
                let _ = conn.set_write_timeout(Some(SCRAPE_TIMEOUT));
                let answer = answer(&read_request(&mut conn), &board);
                let _ = conn.write_all(answer.as_bytes());
            }
        })
        .map(drop)
        .map_err(|e| Failure::runtime(format!("cannot start the metrics thread: {e}")))
}

/// The request's head, up to its blank line, at most [`REQUEST_BYTES`].
fn read_request(conn: &mut impl Read) -> Vec<u8> {
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while req.len() < REQUEST_BYTES && !req.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => req.extend_from_slice(&buf[..n.min(REQUEST_BYTES - req.len())]),
        }
    }
    req
}

/// The HTTP answer to `request`: the metrics for `GET /metrics`, else an error.
fn answer(request: &[u8], board: &Board) -> String {
    let line = request.split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let (status, kind, body) = match (method, path) {
        (b"GET", b"/metrics") => ("200 OK", prometheus_client::encoding::prometheus_text::CONTENT_TYPE, board.render()),
        (b"GET", _) => ("404 Not Found", "text/plain", "only /metrics here\n".to_string()),
        _ => ("405 Method Not Allowed", "text/plain", "GET /metrics\n".to_string()),
    };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// What the kernel refused, as samples of `shipworm_io_errors` by kind.
pub fn io_errors(io: &crate::runtime::report::IoErrors) -> [Sample; 3] {
    const HELP: &str = "UDP sends and TUN writes the kernel refused, TUN reads not understood.";
    [
        Sample::counter("shipworm_io_errors", HELP, io.udp_send).with("kind", "udp_send"),
        Sample::counter("shipworm_io_errors", HELP, io.tun_write).with("kind", "tun_write"),
        Sample::counter("shipworm_io_errors", HELP, io.tun_read).with("kind", "tun_read"),
    ]
}

/// Drop counters as samples of `shipworm_dropped` by reason.
pub fn drops(d: &shipworm_proto::DropCounters) -> impl Iterator<Item = Sample> + '_ {
    d.nonzero().map(|(reason, n)| {
        Sample::counter("shipworm_dropped", "Packets and datagrams dropped, by reason.", n)
            .with("reason", reason.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board() -> Board {
        let b = Board::default();
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
        // A request that never ends is read no further than REQUEST_BYTES.
        let mut endless = std::io::repeat(b'a');
        assert_eq!(read_request(&mut endless).len(), REQUEST_BYTES);
    }

    /// The `shipworm_…` names in `text`, a counter's `_total` taken off.
    fn names(text: &str) -> std::collections::BTreeSet<String> {
        let mut found = std::collections::BTreeSet::new();
        for (i, _) in text.match_indices("shipworm_") {
            let name: String =
                text[i..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
            found.insert(name.strip_suffix("_total").unwrap_or(&name).to_string());
        }
        found
    }

    #[test]
    fn the_dashboard_and_the_readme_name_only_metrics_the_daemons_publish() {
        let sources = [
            include_str!("metrics.rs"),
            include_str!("../cmd/relay.rs"),
            include_str!("../cmd/server.rs"),
            include_str!("../cmd/client.rs"),
        ];
        // What the code publishes: the names in its samples' string literals.
        let published: std::collections::BTreeSet<String> = sources
            .iter()
            .flat_map(|s| names(&s.split('"').skip(1).step_by(2).collect::<Vec<_>>().join(" ")))
            .filter(|n| n != "shipworm_")
            .collect();
        let dashboard = include_str!("../../../../packaging/grafana/shipworm.json");
        let readme = include_str!("../../../../README.md");
        let section = &readme[readme.find("### Metrics").unwrap()..];
        let section = &section[..section[4..].find("\n### ").map_or(section.len(), |i| i + 4)];
        for (what, text) in [("packaging/grafana/shipworm.json", dashboard), ("the README's Metrics section", section)]
        {
            let unknown: Vec<String> = names(text).difference(&published).cloned().collect();
            assert!(unknown.is_empty(), "{what} names metrics nobody publishes: {unknown:?}");
        }
        let undocumented: Vec<String> = published.difference(&names(section)).cloned().collect();
        assert!(undocumented.is_empty(), "published but not in the README's Metrics section: {undocumented:?}");
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
