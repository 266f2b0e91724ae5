//! Where the benchmark's work runs: the relay host — its processes and its network
//! stack's receive work (RPS on every interface of its namespace) — on one core, the
//! traffic (the bench itself: generator, sinks, probes) on another. Left to the
//! scheduler, a relay had a core of its own in one trial and shared the generator's in
//! the next, and the kernel reference forwarded on the generator's core: every path
//! was generator-bound and the rates said little about the work per packet. Pinned,
//! each relay has one core, and the kernel's own forwarding gets the same core through
//! RPS. (Pinning does not narrow the spread of the rounds, the kernel path's
//! included: that noise is the host's.)

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use shipworm_lab::netns;
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;

/// The traffic's core.
pub const TRAFFIC_CPU: usize = 0;
/// The relay host's core.
pub const RELAY_CPU: usize = 1;

/// Whether the bench may use both cores of the layout: asked of the CPUs this process
/// could use when first asked (before [`pin_traffic`] narrows them to one).
pub fn available() -> bool {
    static BOTH: OnceLock<bool> = OnceLock::new();
    *BOTH.get_or_init(|| {
        sched_getaffinity(Pid::from_raw(0))
            .is_ok_and(|s| s.is_set(TRAFFIC_CPU).unwrap_or(false) && s.is_set(RELAY_CPU).unwrap_or(false))
    })
}

fn only(cpu: usize) -> Result<CpuSet, String> {
    let mut set = CpuSet::new();
    set.set(cpu).map_err(|e| format!("CPU {cpu}: {e}"))?;
    Ok(set)
}

/// Hold the calling thread, and every thread and process it starts from now on, to the
/// traffic's core (the relays it starts are moved to theirs by [`pin_host`]).
pub fn pin_traffic() -> Result<(), String> {
    sched_setaffinity(Pid::from_raw(0), &only(TRAFFIC_CPU)?)
        .map_err(|e| format!("cannot hold the bench to CPU {TRAFFIC_CPU}: {e}"))
}

/// Move namespace `ns`'s host to the relay host's core: every thread of every process
/// living in it (but ours, whose threads visit namespaces only to make sockets or run
/// transfers), and the receive work of every interface in it ([`steer`]). Returns how many threads
/// were moved (none on a machine of one core, where everything shares it).
pub fn pin_host(ns: &str) -> Result<usize, String> {
    if !available() {
        return Ok(0);
    }
    let cpus = only(RELAY_CPU)?;
    let mut moved = 0;
    for (pid, task) in threads_in(ns)? {
        let Some(tid) = task.file_name().and_then(|s| s.to_str()).and_then(|s| s.parse::<i32>().ok()) else { continue };
        match sched_setaffinity(Pid::from_raw(tid), &cpus) {
            Ok(()) => moved += 1,
            Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => return Err(format!("cannot move thread {tid} of process {pid} to CPU {RELAY_CPU}: {e}")),
        }
    }
    steer(ns, true)?;
    Ok(moved)
}

/// Whether namespace `ns`'s interfaces hand their receive work to the relay host's core
/// (RPS), or leave it to the core that sent the packet. On for rate searches: without
/// it the kernel forwards on the generator's core, sharing it with the generator and
/// the sinks. Off for latency probes: handing a packet to another core takes an
/// interrupt between cores, which on a VM costs more than the relays differ by; a
/// woken relay thread costs far less (an idle core polls).
pub fn steer(ns: &str, on: bool) -> Result<(), String> {
    if !available() {
        return Ok(());
    }
    // `ip netns exec` mounts the namespace's own /sys, where its interfaces' queues are.
    let mask = if on { format!("{:x}", 1u64 << RELAY_CPU) } else { "0".into() };
    let script = format!("for q in /sys/class/net/*/queues/rx-*/rps_cpus; do echo {mask} > \"$q\" || exit 1; done");
    netns::exec_mounted(ns, &["sh", "-c", &script])
        .map_err(|e| format!("RPS in {ns} (a kernel without CONFIG_RPS?): {e}"))?;
    Ok(())
}

/// Time the relay host's core has been idle since boot (idle and iowait in
/// /proc/stat, which a tickless kernel counts from its idle entries and exits, not by
/// sampling ticks). Wall time less this is everything the host did on its core: the
/// relay's process and the kernel's receive, TUN and routing work on its behalf, which
/// tick-sampled user and system times miss when it runs between ticks.
pub fn relay_core_idle() -> Result<std::time::Duration, String> {
    let stat = std::fs::read_to_string("/proc/stat").map_err(|e| format!("/proc/stat: {e}"))?;
    let name = format!("cpu{RELAY_CPU} ");
    let line = stat.lines().find(|l| l.starts_with(&name)).ok_or_else(|| format!("/proc/stat has no {name}line"))?;
    let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait …
    let idle: u64 = [3, 4].iter().filter_map(|&i| f.get(i)).sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(std::time::Duration::from_nanos(idle * 1_000_000_000 / hz))
}

/// CPU time the processes living in namespace `ns` (ours excepted) have run, every
/// thread's, from /proc/PID/task/TID/schedstat (nanoseconds): the relay's own share of
/// its host's work.
pub fn host_process_time(ns: &str) -> Result<std::time::Duration, String> {
    let on_cpu = |task: &std::path::Path| {
        std::fs::read_to_string(task.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()))
            .unwrap_or(0)
    };
    Ok(std::time::Duration::from_nanos(threads_in(ns)?.iter().map(|(_, t)| on_cpu(t)).sum()))
}

/// Resident memory of the processes living in namespace `ns` (MiB).
pub fn host_rss_mib(ns: &str) -> Result<f64, String> {
    let mut pids: Vec<String> = threads_in(ns)?.into_iter().map(|(pid, _)| pid).collect();
    pids.dedup();
    let kib = |pid: &String| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            })
            .unwrap_or(0.0)
    };
    Ok(pids.iter().map(kib).sum::<f64>() / 1024.0)
}

/// Every thread of every process living in namespace `ns` but ours (whose threads visit
/// namespaces only to make sockets or run transfers): (process id, /proc/PID/task/TID).
/// A process that exits meanwhile is simply not there any more.
fn threads_in(ns: &str) -> Result<Vec<(String, std::path::PathBuf)>, String> {
    let net = std::fs::metadata(format!("/run/netns/{ns}")).map_err(|e| format!("namespace {ns}: {e}"))?.ino();
    let me = std::process::id().to_string();
    let mut threads = Vec::new();
    for p in std::fs::read_dir("/proc").map_err(|e| format!("/proc: {e}"))?.flatten() {
        let name = p.file_name();
        let Some(pid) = name.to_str().filter(|s| *s != me && s.bytes().all(|b| b.is_ascii_digit())) else { continue };
        if std::fs::metadata(p.path().join("ns/net")).map(|m| m.ino()).ok() != Some(net) {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else { continue };
        threads.extend(tasks.flatten().map(|t| (pid.to_string(), t.path())));
    }
    Ok(threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A namespace with a process in it, both gone when this is dropped, whether the
    /// test gets to its end or panics on the way.
    struct Occupied {
        ns: String,
        child: std::process::Child,
    }

    impl Drop for Occupied {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            netns::del(&self.ns);
        }
    }

    #[test]
    fn a_process_in_a_namespace_is_moved_to_the_relay_core_and_ours_is_not() {
        let root = unsafe { libc::geteuid() } == 0;
        if !root || !available() {
            // Namespaces need root; the layout needs two cores (the test command has both).
            return;
        }
        let ns = format!("{}cpu", netns::run_prefix(0));
        netns::add(&ns).unwrap();
        let child = std::process::Command::new("ip").args(["netns", "exec", &ns, "sleep", "30"]).spawn();
        let lab = Occupied { ns: ns.clone(), child: child.unwrap() };
        let pid = Pid::from_raw(lab.child.id() as i32);
        // `ip netns exec` enters the namespace, then becomes sleep.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let net = std::fs::metadata(format!("/run/netns/{ns}")).unwrap().ino();
        while std::fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| m.ino()).ok() != Some(net) {
            assert!(std::time::Instant::now() < deadline, "the child never entered {ns}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let ours_before = sched_getaffinity(Pid::from_raw(0)).unwrap();
        // As in the bench: from a thread already held to the traffic's core (affinity is
        // per thread, so the test's other threads keep theirs).
        let moved = std::thread::scope(|s| {
            s.spawn(|| {
                pin_traffic().unwrap();
                let pinned = sched_getaffinity(Pid::from_raw(0)).unwrap();
                assert!(pinned.is_set(TRAFFIC_CPU).unwrap() && !pinned.is_set(RELAY_CPU).unwrap());
                pin_host(&ns)
            })
            .join()
            .unwrap()
        });
        let theirs = sched_getaffinity(pid).unwrap();
        let rps = netns::exec_mounted(&ns, &["cat", "/sys/class/net/lo/queues/rx-0/rps_cpus"]);
        let off = steer(&ns, false).and_then(|()| {
            netns::exec_mounted(&ns, &["cat", "/sys/class/net/lo/queues/rx-0/rps_cpus"]).map_err(|e| e.to_string())
        });
        drop(lab);
        assert_eq!(moved.unwrap(), 1);
        assert!(theirs.is_set(RELAY_CPU).unwrap() && !theirs.is_set(TRAFFIC_CPU).unwrap());
        let ours = sched_getaffinity(Pid::from_raw(0)).unwrap();
        for cpu in 0..CpuSet::count() {
            assert_eq!(ours.is_set(cpu).unwrap(), ours_before.is_set(cpu).unwrap(), "our CPU {cpu}");
        }
        assert_eq!(rps.unwrap().trim().trim_start_matches(['0', ',']), "2");
        assert_eq!(off.unwrap().trim().trim_start_matches(['0', ',']), "");
    }
}
