//! BIRD 2, the routing daemon operators run beside relays: started in a lab namespace
//! with a configuration the case writes, asked through its control socket as `birdc`.

use crate::error::{err, LabError, Result};
use crate::{netns, Lab};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

impl Lab {
    /// Start BIRD in namespace `short` (`rly`, …) with `config`, in the foreground so
    /// that the lab stops it; its control socket's path once it answers.
    pub fn start_bird(&mut self, short: &str, config: &str) -> Result<PathBuf> {
        let ns = self.ns(short);
        let name = format!("bird-{short}");
        let conf = self.write_conf(&format!("{name}.conf"), config)?;
        let ctl = self.dir().join(format!("{name}.ctl"));
        let ctl_arg = ctl.display().to_string();
        self.spawn(&name, &ns, &["bird", "-f", "-c", &conf, "-s", &ctl_arg])?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            self.check_alive(&name)?;
            if birdc(&ctl, &["show", "status"]).is_ok_and(|s| s.contains("Daemon is up")) {
                // As Debian's BIRD makes it (group `bird`, 0660), for a group a relay's
                // BIRD link can be a member of: the lab's user's, shipworm.
                let group = nix::unistd::Group::from_name("shipworm").ok().flatten().map(|g| g.gid.as_raw());
                let _ = std::os::unix::fs::chown(&ctl, None, group);
                let _ = std::fs::set_permissions(&ctl, std::os::unix::fs::PermissionsExt::from_mode(0o660));
                return Ok(ctl);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        err(format!("{name} did not answer on {ctl_arg} within 5 s:\n{}", self.log_tail(&name, 15)))
    }
}

/// `birdc -s ctl args…`: BIRD's answer.
pub fn birdc(ctl: &Path, args: &[&str]) -> Result<String> {
    let ctl = ctl.display().to_string();
    let mut all = vec!["-s", ctl.as_str()];
    all.extend_from_slice(args);
    netns::run("birdc", &all).map_err(|e| LabError::new(format!("birdc {}: {e}", args.join(" "))))
}

/// The process ids that hold a connection to BIRD's control socket `ctl`, as `ss -xpn`
/// in namespace `ns` shows them: BIRD's side of each connection names the socket's
/// path and the peer's socket inode, and the peer's line names its process.
pub fn connected_to(ns: &str, ctl: &Path) -> Result<Vec<u32>> {
    let out = netns::exec(ns, &["ss", "-xpn"])?;
    let ctl = ctl.display().to_string();
    // Columns: Netid State Recv-Q Send-Q Local Port Peer Port [users].
    let rows: Vec<Vec<&str>> = out.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    let peers: Vec<&str> =
        rows.iter().filter(|r| r.get(4) == Some(&ctl.as_str())).filter_map(|r| r.get(7).copied()).collect();
    let mut pids = Vec::new();
    for r in rows.iter().filter(|r| r.get(5).is_some_and(|ino| peers.contains(ino))) {
        let users = r.get(8..).map(|u| u.join(" ")).unwrap_or_default();
        for part in users.split("pid=").skip(1) {
            if let Ok(pid) = part.split(',').next().unwrap_or_default().parse() {
                pids.push(pid);
            }
        }
    }
    Ok(pids)
}
