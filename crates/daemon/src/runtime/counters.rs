//! One table of a role's counters, from which every view of them is made: the
//! Prometheus samples (`/metrics`), the `counters` object of the status JSON (`shipworm
//! status`, the lab, the e2e suite), and the log line of SIGUSR1 and of the stop. Each
//! role lists its counters once, in a function of its own (`cmd/*::counters`), so a
//! counter cannot be called one thing in one view and another in the next.
//!
//! One name per counter everywhere: the JSON key is the name, the log line says
//! `name=value` (`name{label=value,…}=value` with labels), the metric is
//! `shipworm_<role>_<name>` (a counter's with `_total`), or `shipworm_<name>` for the
//! few every role has (drops, I/O errors), whose role the `shipworm_info` sample says.

use crate::runtime::metrics::{Kind, Sample};
use crate::runtime::report::{IoErrors, TunOffloadCounts};
use shipworm_proto::DropCounters;

/// One counter or gauge, with its labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The name (snake case), the same in every view.
    pub name: &'static str,
    /// What it counts, for the metric's HELP.
    pub help: &'static str,
    /// A counter only goes up; a gauge goes up and down.
    pub kind: Kind,
    /// Every role has it: its metric is `shipworm_<name>`, without the role.
    pub shared: bool,
    /// Label names and values; samples of one name differ only by them.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: u64,
    /// Published as a metric from the start, at 0, but shown in the status and the log
    /// only once it counted (a drop reason: 34 of them, most never seen).
    pub sparse: bool,
}

/// A role's counters, in the order the role lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    role: &'static str,
    /// The role writes to a TUN interface (every role but a server that does not relay).
    tun: bool,
    rows: Vec<Row>,
}

impl Counters {
    /// An empty table for `role` (`client`, `relay`, `server`).
    pub fn new(role: &'static str) -> Counters {
        Counters { role, tun: role != "server", rows: Vec::new() }
    }

    /// The role has a TUN interface after all (a server that relays).
    pub fn with_tun(mut self) -> Counters {
        self.tun = true;
        self
    }

    /// A counter.
    pub fn counter(&mut self, name: &'static str, help: &'static str, value: u64) -> &mut Row {
        self.push(name, help, Kind::Counter, value)
    }

    /// A gauge.
    pub fn gauge(&mut self, name: &'static str, help: &'static str, value: u64) -> &mut Row {
        self.push(name, help, Kind::Gauge, value)
    }

    fn push(&mut self, name: &'static str, help: &'static str, kind: Kind, value: u64) -> &mut Row {
        self.rows.push(Row { name, help, kind, shared: false, labels: Vec::new(), value, sparse: false });
        self.rows.last_mut().expect("just pushed")
    }

    /// Drops by reason (`dropped{reason=…}`): every reason as a metric from the start
    /// (no series appears mid-life), the reasons that counted in the status and the log.
    pub fn drops(&mut self, d: &DropCounters) {
        for reason in shipworm_proto::DropReason::ALL {
            let row = self.counter("dropped", "Packets and datagrams dropped, by reason.", d.get(reason));
            row.sparse = true;
            row.shared().label("reason", reason.as_str());
        }
    }

    /// What the kernel refused or the TUN handed over unreadably (`io_errors{kind=…}`):
    /// the kinds this role's sockets can have (the server sends IPv6 through a raw
    /// socket, and has a TUN only when it relays; the others have a TUN and no raw
    /// socket).
    pub fn io_errors(&mut self, io: &IoErrors) {
        const HELP: &str = "UDP sends, raw IPv6 sends and TUN writes the kernel refused, raw IPv6 packets their \
                            holder refused, TUN reads not understood.";
        let kinds: &[(&str, u64)] = match (self.role == "server", self.tun) {
            (true, false) => &[("udp_send", io.udp_send), ("raw_send", io.raw_send), ("raw_refused", io.raw_refused)],
            (true, true) => &[("udp_send", io.udp_send), ("raw_send", io.raw_send), ("tun_write", io.tun_write)],
            (false, _) => &[("udp_send", io.udp_send), ("tun_write", io.tun_write), ("tun_read", io.tun_read)],
        };
        for &(kind, n) in kinds {
            self.counter("io_errors", HELP, n).shared().label("kind", kind);
        }
    }

    /// What the TUN offloads did.
    pub fn tun_offloads(&mut self, t: &TunOffloadCounts) {
        self.counter(
            "tun_super_packets_read",
            "TUN reads that carried a super-packet (cut into its segments).",
            t.super_packets_read,
        );
        self.counter("tun_joined_writes", "TUN writes that carried a joined row of packets.", t.joined_writes);
    }

    /// The rows.
    #[cfg(test)]
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// The metric name of `row`.
    pub fn metric_name(&self, row: &Row) -> String {
        if row.shared {
            format!("shipworm_{}", row.name)
        } else {
            format!("shipworm_{}_{}", self.role, row.name)
        }
    }

    /// The samples for Prometheus; the samples of one metric follow each other.
    pub fn samples(&self) -> Vec<Sample> {
        let mut v: Vec<Sample> = self
            .rows
            .iter()
            .map(|r| Sample {
                name: self.metric_name(r),
                help: r.help,
                kind: r.kind,
                labels: r.labels.clone(),
                value: r.value,
            })
            .collect();
        // Stable: a metric's samples keep the order the role listed them in.
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The `counters` object of the status JSON: `name: value`, or with labels objects
    /// keyed by each label's value in turn (`packets: {to_teredo: {"0": n}}`).
    pub fn json(&self) -> serde_json::Value {
        let mut top = serde_json::Map::new();
        for r in self.rows.iter().filter(|r| !(r.sparse && r.value == 0)) {
            let mut at = top.entry(r.name.to_string()).or_insert(serde_json::Value::Null);
            for (_, value) in &r.labels {
                if !at.is_object() {
                    *at = serde_json::Value::Object(serde_json::Map::new());
                }
                at = at.as_object_mut().expect("an object").entry(value.clone()).or_insert(serde_json::Value::Null);
            }
            *at = r.value.into();
        }
        // A name whose labelled rows all went (no drop counted yet) reads as nothing.
        if !top.contains_key("dropped") {
            top.insert("dropped".into(), serde_json::Value::Object(serde_json::Map::new()));
        }
        serde_json::Value::Object(top)
    }

    /// The log line: `name=value` or `name{label=value,…}=value` for every row.
    pub fn log_line(&self) -> String {
        let mut words = Vec::with_capacity(self.rows.len());
        for r in self.rows.iter().filter(|r| !(r.sparse && r.value == 0)) {
            if r.labels.is_empty() {
                words.push(format!("{}={}", r.name, r.value));
            } else {
                let labels: Vec<String> = r.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                words.push(format!("{}{{{}}}={}", r.name, labels.join(","), r.value));
            }
        }
        words.join(" ")
    }
}

impl Row {
    /// One more label.
    pub fn label(&mut self, key: &'static str, value: impl Into<String>) -> &mut Row {
        self.labels.push((key, value.into()));
        self
    }

    /// Every role has this counter: no role in its metric's name.
    pub fn shared(&mut self) -> &mut Row {
        self.shared = true;
        self
    }
}

/// The `counters` object of a status document as text lines, `name label… value`, for
/// `shipworm status`: the same names as everywhere else.
pub fn text_lines(counters: &serde_json::Value) -> Vec<String> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    let p = if prefix.is_empty() { k.clone() } else { format!("{prefix} {k}") };
                    walk(&p, v, out);
                }
            }
            other => out.push(format!("  {prefix:<40} {other}")),
        }
    }
    let mut out = Vec::new();
    walk("", counters, &mut out);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// (name, label values…) → value, as each view lists them.
    pub(crate) type Flat = BTreeMap<String, u64>;

    fn key(name: &str, labels: &[String]) -> String {
        std::iter::once(name.to_string()).chain(labels.iter().cloned()).collect::<Vec<_>>().join(" ")
    }

    /// What `/metrics` says, read back from the Prometheus text the board renders.
    pub(crate) fn from_metrics(t: &Counters) -> Flat {
        let board = crate::runtime::metrics::Snapshot::default();
        board.publish(t.samples());
        let text = board.render();
        let prefix = format!("shipworm_{}_", t.role);
        let mut flat = Flat::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty() && *l != "# EOF") {
            let (series, value) = line.rsplit_once(' ').expect("name value");
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (series, ""),
            };
            let name = name.strip_suffix("_total").unwrap_or(name);
            let name = name.strip_prefix(&prefix).or_else(|| name.strip_prefix("shipworm_")).expect("shipworm_");
            let values: Vec<String> = labels
                .split(',')
                .filter(|l| !l.is_empty())
                .map(|l| l.split_once('=').expect("k=v").1.trim_matches('"').to_string())
                .collect();
            flat.insert(key(name, &values), value.parse().expect("a number"));
        }
        flat
    }

    /// What the status JSON says.
    pub(crate) fn from_json(v: &serde_json::Value) -> Flat {
        fn walk(path: &mut Vec<String>, v: &serde_json::Value, flat: &mut Flat) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, v) in m {
                        path.push(k.clone());
                        walk(path, v, flat);
                        path.pop();
                    }
                }
                other => {
                    flat.insert(path.join(" "), other.as_u64().expect("a count"));
                }
            }
        }
        let mut flat = Flat::new();
        walk(&mut Vec::new(), v, &mut flat);
        flat
    }

    /// What the log line says.
    pub(crate) fn from_log(line: &str) -> Flat {
        line.split_whitespace()
            .map(|w| {
                let (series, value) = w.rsplit_once('=').expect("name=value");
                let (name, labels) = match series.split_once('{') {
                    Some((n, l)) => (n, l.trim_end_matches('}')),
                    None => (series, ""),
                };
                let values: Vec<String> = labels
                    .split(',')
                    .filter(|l| !l.is_empty())
                    .map(|l| l.split_once('=').expect("k=v").1.to_string())
                    .collect();
                (key(name, &values), value.parse().expect("a number"))
            })
            .collect()
    }

    /// The three views of `t` list the same counters under the same names, with the
    /// same values; every row is in them — the metrics also every drop reason at 0,
    /// which the status and the log leave out.
    pub(crate) fn assert_views_agree(t: &Counters) {
        let (metrics, json, log) = (from_metrics(t), from_json(&t.json()), from_log(&t.log_line()));
        let zero_drops = t.rows().iter().filter(|r| r.sparse && r.value == 0).count();
        assert_eq!(metrics.len(), log.len() + zero_drops, "/metrics lacks a row, or a drop reason at 0");
        let counted: Flat = metrics.into_iter().filter(|(k, v)| *v > 0 || !k.starts_with("dropped")).collect();
        assert_eq!(counted, log, "/metrics and the log line differ");
        assert_eq!(json, log, "the status JSON and the log line differ");
        assert_eq!(
            log.len() + zero_drops,
            t.rows().len(),
            "a row is missing from a view (two rows with one name and labels?)"
        );
        let counted_drops = t.rows().iter().filter(|r| r.sparse && r.value > 0).count();
        if zero_drops + counted_drops > 0 {
            assert_eq!(zero_drops + counted_drops, shipworm_proto::DropReason::ALL.len(), "every drop reason, once");
        }
    }

    #[test]
    fn metrics_status_and_log_line_are_one_table() {
        let mut t = Counters::new("relay");
        t.counter("bubbles", "Bubbles.", 3);
        t.gauge("peers", "Peers.", 2);
        for (dir, w, n) in [("to_teredo", "0", 5), ("to_teredo", "1", 6), ("to_ipv6", "0", 7)] {
            t.counter("packets", "Packets.", n).label("direction", dir).label("worker", w);
        }
        let mut d = DropCounters::default();
        d.count_n(shipworm_proto::DropReason::QueueFull, 4);
        t.drops(&d);
        t.io_errors(&IoErrors { udp_send: 1, tun_write: 0, tun_read: 2, ..IoErrors::default() });
        assert_views_agree(&t);
        assert_eq!(t.json()["packets"]["to_teredo"]["1"], 6);
        assert_eq!(t.json()["dropped"]["queue_full"], 4);
        assert!(t.log_line().contains("packets{direction=to_ipv6,worker=0}=7"), "{}", t.log_line());
        let text = t.samples().iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        assert!(text.contains(&"shipworm_dropped".to_string()) && text.contains(&"shipworm_relay_packets".to_string()));
    }

    #[test]
    fn no_drop_yet_reads_as_an_empty_object() {
        let t = Counters::new("server");
        assert_eq!(t.json()["dropped"], serde_json::json!({}));
    }
}
