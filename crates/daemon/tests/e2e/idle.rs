//! An idle daemon sleeps: each role's loop waits for its next deadline (the state
//! machine's `poll_timeout`, the shell's chores) or for I/O, not for a fixed tick. A
//! client on a phone or laptop that wakes ten times a second spends its battery on
//! nothing.

use super::*;
use std::time::Duration;

/// Wake-ups of process `pid` so far, thread by thread (name and id): every thread's
/// context switches.
fn wake_ups(pid: u32) -> Vec<(String, u64)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let mut n = 0;
        for l in status.lines() {
            if let Some(v) =
                l.strip_prefix("voluntary_ctxt_switches:").or(l.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                n += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
        let name = status.lines().find_map(|l| l.strip_prefix("Name:")).unwrap_or("?").trim().to_string();
        out.push((format!("{name}/{}", t.file_name().to_string_lossy()), n));
    }
    out
}

/// The wake-ups between two readings, thread by thread, and in all.
fn woke_since(before: &[(String, u64)], after: &[(String, u64)]) -> (u64, String) {
    let mut total = 0;
    let mut each = Vec::new();
    for (t, n) in after {
        let was = before.iter().find(|(b, _)| b == t).map_or(0, |(_, b)| *b);
        total += n - was.min(*n);
        each.push(format!("{t} {}", n - was.min(*n)));
    }
    (total, each.join(", "))
}

/// The lab's daemon of `role` (its command line's first argument), by its command line
/// naming the lab's directory.
fn daemon_pid(dir: &str, role: &str) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        let ours = std::fs::read_link(entry.path().join("exe")).is_ok_and(|e| e.ends_with("shipworm"));
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if ours
            && comm.trim() == "shipworm"
            && args.get(1).map(String::as_str) == Some(role)
            && args.iter().any(|a| a.contains(dir))
        {
            return Some(pid);
        }
    }
    None
}

/// The cases of this topic.
pub fn cases(me: &std::path::Path) -> Vec<Case> {
    let me = Impl::Shipworm(me.to_path_buf());
    vec![Case {
        waits: true,
        name: "an idle server, relay and client sleep until something is due (no fixed tick)".into(),
        expect: Expect::Pass,
        // With the loops ticking as before (client 100 ms, relay 250 ms a worker and
        // its route watch 100 ms, server 500 ms) the client wakes ~50 times in the 5 s,
        // the relay ~90, the server ~10: every role fails its bound below (seen before
        // the change: relay 55 with the route watch's 100 ms look at its stop flag
        // alone).
        run: Box::new(move || {
            let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
                .map_err(|e| Failed::at(1, format!("step 1 (build the lab) failed: {e}")))?;
            lab.start_server(&me).map_err(|e| Failed::at(2, format!("step 2 (start the server) failed: {e}")))?;
            lab.start_relay(&me).map_err(|e| Failed::at(2, format!("step 2 (start the relay) failed: {e}")))?;
            lab.start_client(0, &me).map_err(|e| Failed::at(2, format!("step 2 (start the client) failed: {e}")))?;
            lab.wait_qualified(0, Duration::from_secs(20))
                .map_err(|e| Failed::at(3, format!("step 3 (qualify) failed: {e}")))?;
            // Past coming up's announcements (repeated 2 and 4 s after) and the
            // shell's busy chores; the refresh is ~30 s away.
            std::thread::sleep(Duration::from_secs(6));
            let dir = lab.dir().display().to_string();
            let roles = ["server", "relay", "client"];
            let pids: Vec<u32> = roles
                .iter()
                .map(|r| daemon_pid(&dir, r).ok_or(Failed::at(4, format!("step 4: no {r} process found"))))
                .collect::<Result<_, _>>()?;
            // Two windows, each role judged by its quieter one: a tick shows in both,
            // where a loaded machine's late start of something due (seen once in the
            // whole suite: the client woke 5 times in one window, 0 alone) shows in one.
            const WINDOW: Duration = Duration::from_secs(5);
            let window = || -> Vec<(u64, String)> {
                let before: Vec<Vec<(String, u64)>> = pids.iter().map(|&p| wake_ups(p)).collect();
                std::thread::sleep(WINDOW);
                pids.iter().zip(&before).map(|(&p, b)| woke_since(b, &wake_ups(p))).collect()
            };
            let (first, second) = (window(), window());
            let woke: Vec<(u64, String)> =
                first.into_iter().zip(second).map(|(a, b)| if a.0 <= b.0 { a } else { b }).collect();
            let said = roles.iter().zip(&woke).map(|(r, (w, _))| format!("{r} {w}")).collect::<Vec<_>>().join(", ");
            // The idle chores (every 10 s), a stray; a relay's kernel data path also
            // renews its route verdicts every second (ROUTE_REFRESH, on a thread of its
            // own), for the changes the kernel tells nobody of.
            let bounds = [3, 8, 3];
            for ((role, (w, each)), bound) in roles.iter().zip(&woke).zip(bounds) {
                if *w > bound {
                    return Err(Failed::at(
                        5,
                        format!(
                            "step 5: idle, the {role} woke {w} times in {WINDOW:?} ({said}; {role}'s threads: {each})"
                        ),
                    ));
                }
            }
            lab.check_alive("client0").map_err(|e| Failed::at(6, format!("step 6: {e}")))?;
            Ok(format!("wake-ups in {} s idle: {said}", WINDOW.as_secs()))
        }),
    }]
}
