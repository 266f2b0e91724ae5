//! Debian's miniupnpd on a lab NAT box: a real UPnP IGD, and a PCP server when asked.
//!
//! miniupnpd refuses to map ports on an external address it takes for private or
//! reserved, and every public address of the lab is a documentation range. It accepts
//! one when a STUN server (the lab's, on the server host) shows that the box's own
//! traffic leaves unchanged, which is why the box masquerades only what comes from its
//! LAN.

use crate::error::Result;
use crate::stun::{StunResponder, PORT as STUN_PORT};
use crate::{netns, Lab, SERVER_V4};
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

/// The port miniupnpd serves UPnP's HTTP on.
pub const HTTP_PORT: u16 = 5000;

impl Lab {
    /// Start miniupnpd on NAT box `i` (1-based), with PCP if `pcp`, and the STUN server
    /// it checks its address with if none runs yet.
    pub(crate) fn start_igd(&mut self, i: usize, pcp: bool) -> Result<()> {
        if self.stun.is_none() {
            self.stun = Some(StunResponder::start(&self.ns("srv"), SocketAddrV4::new(SERVER_V4, STUN_PORT))?);
        }
        let name = format!("miniupnpd{i}");
        let dir = self.dir().display().to_string();
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let conf = self.write_conf(
            &format!("{name}.conf"),
            &format!(
                "ext_ifname=wan\nlistening_ip=lan\nport={HTTP_PORT}\nenable_upnp=yes\nenable_natpmp={}\n\
                 secure_mode=yes\nsystem_uptime=yes\nnotify_interval=60\nclean_ruleset_interval=600\n\
                 uuid=3d3cec3a-8cf0-11e0-98ee-00000000000{i}\nlease_file={dir}/{name}.leases\n\
                 ext_perform_stun=yes\next_stun_host={SERVER_V4}\next_stun_port={STUN_PORT}\n\
                 allow 1024-65535 10.0.0.0/8 1024-65535\ndeny 0-65535 0.0.0.0/0 0-65535\n",
                yes_no(pcp)
            ),
        )?;
        let pid = format!("{dir}/{name}.pid");
        let ns = self.ns(&format!("nat{i}"));
        self.spawn(&name, &ns, &["/usr/sbin/miniupnpd", "-f", &conf, "-d", "-P", &pid]).map_err(|e| {
            crate::LabError::new(format!("{e} (Debian package `miniupnpd-nftables`; scripts/test.sh installs it)"))
        })?;
        // Ready once its STUN check passed and it listens: UPnP's HTTP port and SSDP's
        // UDP port (opened after it), and PCP's UDP port when PCP is on.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.check_alive(&name)?;
            let sockets = netns::exec(&ns, &["ss", "-Hlntu"])?;
            // Columns: kind, state, queues, local address:port, peer.
            let open = |kind: &str, port: u16| {
                sockets.lines().any(|l| {
                    let mut col = l.split_whitespace();
                    col.next() == Some(kind) && col.nth(3).is_some_and(|a| a.ends_with(&format!(":{port}")))
                })
            };
            let listening = open("tcp", HTTP_PORT) && open("udp", 1900) && (!pcp || open("udp", 5351));
            let log = self.log_tail(&name, 200);
            if listening && log.contains("unrestricted full-cone NAT") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return crate::error::err(format!(
                    "{name} did not start serving within 10 s:\n{}",
                    self.log_tail(&name, 15)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
