//! How a daemon's counters read in its log (on SIGUSR1 and when it stops).

use shipworm_proto::DropCounters;

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
