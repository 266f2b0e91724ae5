//! Host names in the lab. A client namespace can get its own `/etc/hosts` and an
//! `/etc/resolv.conf` naming 127.0.0.1, where nothing listens: every lookup made there
//! is answered from that hosts file or fails at once, and no DNS query leaves the
//! namespace — the lab never sends traffic to the real network. `ip netns exec`
//! bind-mounts the namespace's files from /etc/netns/NAME over /etc for each process it
//! starts, so they must exist before the daemon starts; [`netns::del`] removes them.
//!
//! A name is added later by appending to the same file: the bind mount of a running
//! daemon holds the file's inode, so replacing the file (a rename) would go unseen.

use crate::error::{LabError, Result};
use crate::{netns, Lab};
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The Teredo server's name in the lab (`.test`: reserved for testing, RFC 6761).
pub const SERVER_NAME: &str = "server.teredo.test";

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| LabError::new(format!("{}: {e}", path.display())))?;
    // Readable by the daemons once they dropped root, whatever the umask.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| LabError::new(format!("{}: {e}", path.display())))
}

impl Lab {
    /// Give the namespace of `client` its own hosts file (localhost only) and a
    /// resolv.conf pointing at 127.0.0.1, for the processes started in it from now on.
    /// Returns the hosts file.
    pub fn private_names(&mut self, client: usize) -> Result<PathBuf> {
        let dir = netns::etc_dir(&self.clients[client].ns);
        std::fs::create_dir_all(&dir).map_err(|e| LabError::new(format!("{}: {e}", dir.display())))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| LabError::new(format!("{}: {e}", dir.display())))?;
        let hosts = dir.join("hosts");
        write(&hosts, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")?;
        // One try, one second: a lookup that reaches DNS fails fast (nothing listens).
        write(
            &dir.join("resolv.conf"),
            "# shipworm-lab: no DNS leaves the namespace\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        )?;
        Ok(hosts)
    }

    /// Append `addr name` to the hosts file of `client` (made by [`Lab::private_names`]),
    /// in place.
    pub fn add_host(&self, client: usize, addr: Ipv4Addr, name: &str) -> Result<()> {
        let hosts = netns::etc_dir(&self.clients[client].ns).join("hosts");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&hosts)
            .map_err(|e| LabError::new(format!("{}: {e} (call private_names first)", hosts.display())))?;
        f.write_all(format!("{addr}\t{name}\n").as_bytes())
            .map_err(|e| LabError::new(format!("{}: {e}", hosts.display())))
    }

    /// Start a client of `client` whose `ServerAddress` is `name`, in a namespace with
    /// private name files (where `name` does not resolve until [`Lab::add_host`]).
    /// Returns the hosts file.
    pub fn start_client_named(&mut self, client: usize, imp: &crate::Impl, name: &str) -> Result<PathBuf> {
        let hosts = self.private_names(client)?;
        self.start_client_to(client, imp, name, "")?;
        Ok(hosts)
    }
}
