//! How a daemon's counters read in its log (on SIGUSR1 and when it stops).

use shipworm_proto::DropCounters;

/// What the kernel refused to send: datagrams (no route, a full buffer…) and packets
/// written to the TUN (a full queue); and what the TUN handed over framed in a way we
/// could not take (never expected: a kernel bug or an offload we did not ask for).
/// Counted, never logged one by one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoErrors {
    /// UDP datagrams the kernel refused.
    pub udp_send: u64,
    /// IPv6 packets the TUN refused.
    pub tun_write: u64,
    /// TUN reads not understood (a super-packet or header we could not take).
    pub tun_read: u64,
}

impl IoErrors {
    /// Add another worker's.
    pub fn add(&mut self, o: &IoErrors) {
        self.udp_send += o.udp_send;
        self.tun_write += o.tun_write;
        self.tun_read += o.tun_read;
    }
}

impl std::fmt::Display for IoErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} UDP sends and {} TUN writes refused by the kernel, {} TUN reads not understood",
            self.udp_send, self.tun_write, self.tun_read
        )
    }
}

/// "N dropped", and ": reason=n …" for each reason that counted.
pub fn dropped(d: &DropCounters) -> String {
    let reasons: Vec<String> = d.nonzero().map(|(r, n)| format!("{}={n}", r.as_str())).collect();
    if reasons.is_empty() {
        format!("{} dropped", d.total())
    } else {
        format!("{} dropped: {}", d.total(), reasons.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shipworm_proto::DropReason;

    #[test]
    fn names_each_reason_that_counted() {
        let mut d = DropCounters::default();
        assert_eq!(dropped(&d), "0 dropped");
        d.count(DropReason::LoopGuard);
        d.count_n(DropReason::QueueFull, 2);
        assert_eq!(dropped(&d), "3 dropped: loop_guard=1 queue_full=2");
    }
}
