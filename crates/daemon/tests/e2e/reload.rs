//! SIGHUP, as Miredo's users reload: every role reads its file again. Started by no
//! service manager (the lab's daemons), a changed file waits for a restart; the restart
//! under systemd is `scripts/systemd-check.sh`'s.

use super::*;
use nix::sys::signal::Signal;
use shipworm_lab::{traffic, Lab, HOST6_V6};
use std::time::Duration;

/// The cases of this topic.
pub fn cases(me: &std::path::Path) -> Vec<Case> {
    let s = shipworm_chain(me, Side::Client, "");
    vec![Case {
        waits: false,
        name: "SIGHUP, every role: unchanged file keeps address and peers, broken file refused, changed file waits"
            .into(),
        expect: Expect::Pass,
        // Without the reload a SIGHUP ends the daemon (its default action): step 9 fails
        // at the first one (seen with the handler taken out).
        run: Box::new(move || {
            let (mut lab, o) = scenario::run(&s, &mut |_| {}).map_err(Failed::from)?;
            let peers = |lab: &Lab| lab.relay_status().and_then(|st| st["peers"].as_u64());
            let peers_before = peers(&lab).ok_or(Failed::at(9, "step 9: the relay's status did not answer"))?;
            for (name, changed, what) in [
                ("server", "DrainTime 3\n", "DrainTime"),
                ("relay", "DrainTime 3\n", "DrainTime"),
                ("client0", "RefreshInterval 20\n", "RefreshInterval"),
            ] {
                let conf = lab.dir().join(format!("{name}.conf"));
                let good = std::fs::read_to_string(&conf).map_err(|e| e.to_string())?;
                let lines = good.lines().count();
                let tries: [(String, String); 4] = [
                    // Comments and a directive's case: the same settings.
                    (format!("# reloaded\n{}", good.replace("Interface", "interface")), "settings unchanged".into()),
                    (
                        format!("{good}Bogus yes\n"),
                        format!(
                            "reload refused, running on with the previous settings: {}:{}: unknown directive Bogus",
                            conf.display(),
                            lines + 1
                        ),
                    ),
                    (
                        format!("{good}{changed}"),
                        format!("{what} changed; they take effect when the daemon is started again"),
                    ),
                    (good.clone(), "settings unchanged".into()),
                ];
                for (text, said) in tries {
                    std::fs::write(&conf, text).map_err(|e| e.to_string())?;
                    hang_up(&mut lab, name, &said)?;
                }
            }
            // The client kept its address, the relay its peers, and packets pass both ways.
            let address = lab.client_status(0).and_then(|st| st["address"].as_str().map(str::to_string));
            if address.as_deref() != Some(o.address.to_string().as_str()) {
                return Err(Failed::at(9, format!("step 9: the client's address is {address:?}, was {}", o.address)));
            }
            let peers_after = peers(&lab).unwrap_or(0);
            if peers_after != peers_before {
                return Err(Failed::at(9, format!("step 9: the relay holds {peers_after} peers, held {peers_before}")));
            }
            let out = traffic::ping(&lab.clients[0].ns, HOST6_V6, 3, 2).map_err(|e| e.to_string())?;
            let back = traffic::ping(&lab.ns("h6"), o.address, 3, 2).map_err(|e| e.to_string())?;
            if out.received == 0 || back.received == 0 {
                return Err(Failed::at(10, format!("step 10: after the reloads, ping out {out}, in {back}")));
            }
            Ok(format!(
                "3 roles × 4 reloads; address {} and {peers_after} relay peer(s) kept; ping out {out}, in {back}",
                o.address
            ))
        }),
    }]
}

/// SIGHUP to the daemon `name`, which must then say `said` (once more than before) and
/// still run.
fn hang_up(lab: &mut Lab, name: &str, said: &str) -> Result<(), Failed> {
    let count = |lab: &Lab| lab.log_tail(name, 400).matches(said).count();
    let before = count(lab);
    lab.signal_peer(name, Signal::SIGHUP).map_err(|e| Failed::at(9, format!("step 9: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while count(lab) <= before {
        lab.check_alive(name).map_err(|e| Failed::at(9, format!("step 9: SIGHUP: {e}")))?;
        if Instant::now() > deadline {
            let log = lab.log_tail(name, 8);
            return Err(Failed::at(9, format!("step 9: {name} never said \"{said}\" after SIGHUP:\n{log}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    lab.check_alive(name).map_err(|e| Failed::at(9, format!("step 9: {e}")))
}
