//! What a role may still reach by path, and by TCP, once it serves (Landlock, where the
//! kernel has it): the seccomp lists say which calls a role makes, this says on what.
//! The server, the relay and the interface helper open nothing: they may only remove
//! their own pid file and status socket when they stop. The client reads what looking up
//! its server's name reads (the files under /etc, the C library's name-service modules,
//! the resolver's file under /run) and /proc (the default gateway, for the port-mapping
//! protocols), and may remove its pid file and status socket. Roles that speak no TCP may
//! neither bind nor connect a TCP port; the client's UPnP connects to a port only learnt at
//! run time. No role may signal a process outside its own sandbox or reach an abstract
//! UNIX socket made outside it.
//!
//! Files and devices opened before (the TUN, the pid file, /dev/urandom) stay usable:
//! Landlock judges a file when it is opened.

use super::syscalls::Role;
use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, PathBeneath, PathFd, RestrictSelfAttr,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use std::path::PathBuf;

/// The newest Landlock file-system rights the roles are written against (ABI 5 added the
/// last: ioctl on devices); a kernel with fewer enforces what it has.
const FS_ABI: ABI = ABI::V5;

/// Where name resolution reads, for the client: configuration (resolv.conf, hosts,
/// nsswitch.conf, gai.conf), the name-service modules glibc loads, and the places a
/// resolv.conf link points into (systemd-resolved, resolvconf).
const CLIENT_READS: &[&str] = &["/etc", "/usr", "/lib", "/lib64", "/lib32", "/run", "/proc"];

/// How far the restriction went, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Enforced with this ABI, fully or only in part (an older kernel).
    Enforced { abi: i32, full: bool },
    /// The kernel has no Landlock (or it is off): nothing restricted by path.
    Unavailable,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Enforced { abi, full: true } => write!(f, "file access restricted (Landlock ABI {abi})"),
            Outcome::Enforced { abi, full: false } => {
                write!(f, "file access restricted as far as this kernel can (Landlock ABI {abi})")
            }
            Outcome::Unavailable => write!(f, "file access not restricted (no Landlock in this kernel)"),
        }
    }
}

/// Restrict this process as `role`, letting it remove the files at `removable` (its pid
/// file, its status socket) and read the files beneath the directories `readable` (the
/// configuration reader's). Must run before any thread starts: on kernels before
/// Landlock ABI 8 only the calling thread and its later threads are restricted.
pub fn restrict(role: Role, removable: &[PathBuf], readable: &[PathBuf]) -> Result<Outcome, String> {
    let fail = |e: landlock::RulesetError| format!("Landlock: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(FS_ABI))
        .map_err(fail)?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(fail)?;
    if role != Role::Client {
        // The reader resolves names too, but over UDP only: no TCP for it either.
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp).map_err(fail)?;
    }
    let mut created = ruleset.create().map_err(fail)?;
    let mut rules: Vec<(PathBuf, landlock::BitFlags<AccessFs>)> = Vec::new();
    if matches!(role, Role::Client | Role::Reader) {
        let read = AccessFs::ReadFile | AccessFs::ReadDir;
        rules.extend(CLIENT_READS.iter().map(|p| (PathBuf::from(p), read)));
    }
    rules.extend(readable.iter().map(|p| (p.clone(), AccessFs::ReadFile.into())));
    for file in removable {
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            rules.push((dir.to_path_buf(), AccessFs::RemoveFile.into()));
        }
    }
    for (path, access) in rules {
        // A directory this system does not have (/lib32) grants nothing.
        let Ok(fd) = PathFd::new(&path) else { continue };
        created = created.add_rule(PathBeneath::new(fd, access)).map_err(fail)?;
    }
    // Threads started earlier stay as they were, unless the kernel can reach them too.
    let status = created.all_threads(true).map_err(fail)?.restrict_self().map_err(fail)?;
    Ok(match (status.landlock, status.ruleset) {
        (_, RulesetStatus::NotEnforced) => Outcome::Unavailable,
        (LandlockStatus::Available { effective_abi, .. }, s) => {
            Outcome::Enforced { abi: effective_abi as i32, full: s == RulesetStatus::FullyEnforced }
        }
        (_, s) => Outcome::Enforced { abi: 0, full: s == RulesetStatus::FullyEnforced },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The environment variable that makes [`restricted_child`] the child.
    const CHILD: &str = "SHIPWORM_RESTRICTED_CHILD";

    /// In a new process (this test binary again, running [`restricted_child`] alone):
    /// restrict as `role` (removable: `dir`/x.pid), then try what [`attempts`] tries; the
    /// exit status is the bits it returned (255: Landlock is not here). A process of its
    /// own, not a fork of the multi-threaded test run, whose locks a fork could inherit.
    fn in_restricted_child(role: Role, dir: &Path) -> u8 {
        let status = std::process::Command::new(std::env::current_exe().expect("this test binary"))
            .args(["--exact", "runtime::file_access::tests::restricted_child", "--nocapture", "--test-threads=1"])
            .env(CHILD, format!("{}:{}", role as u8, dir.display()))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run the child");
        match status.code() {
            Some(code) => code as u8,
            None => panic!("child ended as {status:?}"),
        }
    }

    /// What a restricted role tries, as bits: read /etc/passwd (1), read a file beside
    /// its pid file (2), remove its pid file (4), create a file (8), write under /etc
    /// (16), bind a TCP port (32), and whether the kernel restricts TCP (64).
    fn attempts(abi: i32, dir: &Path) -> u8 {
        let mut bits = 0u8;
        bits |= u8::from(std::fs::File::open("/etc/passwd").is_ok());
        bits |= u8::from(std::fs::read_to_string(dir.join("other")).is_ok()) << 1;
        bits |= u8::from(std::fs::remove_file(dir.join("x.pid")).is_ok()) << 2;
        bits |= u8::from(std::fs::write(dir.join("new"), "x").is_ok()) << 3;
        bits |= u8::from(std::fs::write("/etc/shipworm-landlock-test", "x").is_ok()) << 4;
        bits |= u8::from(std::net::TcpListener::bind("127.0.0.1:0").is_ok()) << 5;
        // Landlock restricts TCP from ABI 4 on.
        bits |= u8::from(abi >= 4) << 6;
        bits
    }

    /// The child's part of [`in_restricted_child`]; as a test of its own (no [`CHILD`]
    /// in the environment) it does nothing.
    #[test]
    fn restricted_child() {
        let Ok(spec) = std::env::var(CHILD) else { return };
        let (role, dir) = spec.split_once(':').expect("ROLE:DIR");
        let role = Role::from_u8(role.parse().expect("a role number"));
        let dir = Path::new(dir);
        let _ = nix::sys::prctl::set_no_new_privs();
        let code = match restrict(role, &[dir.join("x.pid")], &[]) {
            Ok(Outcome::Enforced { abi, .. }) => attempts(abi, dir),
            _ => 255,
        };
        // SAFETY: ending this child process without the harness's report.
        unsafe { libc::_exit(i32::from(code)) }
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("shipworm-landlock-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("x.pid"), "1\n").unwrap();
        std::fs::write(d.join("other"), "keep me").unwrap();
        d
    }

    #[test]
    fn a_confined_role_reaches_only_the_files_its_work_needs() {
        for role in [Role::Server, Role::Relay, Role::Helper, Role::Client] {
            let d = scratch(&role.name().replace(' ', "-"));
            let got = in_restricted_child(role, &d);
            if got == 255 {
                eprintln!("Landlock not enforced here: nothing to check");
                return;
            }
            let reads = role == Role::Client;
            assert_eq!(got & 1 != 0, reads, "{}: reading /etc/passwd", role.name());
            assert_eq!(got & 2, 0, "{}: reading a file beside its pid file", role.name());
            assert_ne!(got & 4, 0, "{}: removing its own pid file when it stops", role.name());
            assert!(d.join("other").exists(), "{}: the other file is still there", role.name());
            assert_eq!(got & 8, 0, "{}: creating a file", role.name());
            assert_eq!(got & 16, 0, "{}: writing under /etc", role.name());
            // TCP: only the client (UPnP) may bind or connect, where the kernel restricts TCP.
            if got & 64 != 0 {
                assert_eq!(got & 32 != 0, role == Role::Client, "{}: binding a TCP port", role.name());
            }
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}
