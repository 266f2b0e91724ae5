//! Network namespaces and the commands run in them. Every namespace and process the
//! lab makes is registered, so that a normal return, a panic (through `Drop`) and
//! Ctrl-C/SIGTERM (through [`install_interrupt_cleanup`]) all remove them.

use crate::error::{err, LabError, Result};
use std::fs::File;
use std::process::{Command, Stdio};
use std::sync::{Mutex, Once};

static NAMESPACES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static PIDS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Name prefix of every namespace this process makes: `swl<pid>n<k>-`. Another run's
/// leftovers are recognised by it and removed when that pid is gone.
pub fn run_prefix(k: usize) -> String {
    format!("swl{}n{k}-", std::process::id())
}

/// Run a command; its stdout on success, or an error quoting its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    run_stdin(program, args, None)
}

/// Run a command with `input` on its standard input.
pub fn run_stdin(program: &str, args: &[&str], input: Option<&str>) -> Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    run_command(cmd, program, args, input)
}

/// Run `cmd` (`program` with `args`, for the messages), with `input` on its standard
/// input; its stdout on success, or an error quoting its stderr.
fn run_command(mut cmd: Command, program: &str, args: &[&str], input: Option<&str>) -> Result<String> {
    use std::io::Write;
    let mut child = cmd
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            LabError::new(format!(
                "cannot run {program}: {e} (is it installed? scripts/test.sh installs the lab's tools)"
            ))
        })?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(text.as_bytes()).map_err(|e| LabError::new(format!("{program}: {e}")))?;
    }
    let out = child.wait_with_output().map_err(|e| LabError::new(format!("{program}: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return err(format!("`{program} {}` failed: {}", args.join(" "), stderr.trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip` with these arguments.
pub fn ip(args: &[&str]) -> Result<String> {
    run("ip", args)
}

/// A command inside namespace `ns`'s network: the child enters it before the program
/// runs. Not `ip netns exec`, a process more with a private mount namespace each time
/// (most of a lab's set-up cost was those): what needs that namespace's own `/sys` or
/// `/etc/netns` files runs through [`exec_mounted`].
pub fn exec(ns: &str, args: &[&str]) -> Result<String> {
    exec_input(ns, args, None)
}

/// [`exec`] with `input` on the command's standard input.
pub fn exec_input(ns: &str, args: &[&str], input: Option<&str>) -> Result<String> {
    let Some((program, rest)) = args.split_first() else { return err("exec: no program".to_string()) };
    let mut cmd = Command::new(program);
    cmd.args(rest);
    let entered = enter_on_spawn(ns, &mut cmd)?;
    let out = run_command(cmd, program, rest, input).map_err(|e| LabError::new(format!("in {ns}: {e}")));
    drop(entered);
    out
}

/// Make `cmd` start inside namespace `ns`'s network (its child enters it before the
/// program runs). The file returned must stay open until the child is spawned.
pub fn enter_on_spawn(ns: &str, cmd: &mut Command) -> Result<File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let f = File::open(format!("/var/run/netns/{ns}")).map_err(|e| LabError::new(format!("namespace {ns}: {e}")))?;
    let fd = f.as_raw_fd();
    // SAFETY: between fork and exec the child only makes the setns system call, which
    // allocates nothing and takes no lock; the caller keeps `f` open until the spawn.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    Ok(f)
}

/// `sysctl -w` inside namespace `ns`, each setting `key=value` (dotted, as sysctl names
/// it), written by a thread of ours that enters the namespace: no process at all.
pub fn sysctl(ns: &str, settings: &[&str]) -> Result<()> {
    let ns = ns.to_string();
    let settings: Vec<String> = settings.iter().map(|s| s.to_string()).collect();
    std::thread::spawn(move || -> Result<()> {
        enter(&ns)?;
        for setting in &settings {
            let (key, value) =
                setting.split_once('=').ok_or_else(|| LabError::new(format!("sysctl {setting}: not key=value")))?;
            let path = format!("/proc/sys/{}", key.replace('.', "/"));
            std::fs::write(&path, value).map_err(|e| LabError::new(format!("sysctl {setting} in {ns}: {e}")))?;
        }
        Ok(())
    })
    .join()
    .map_err(|_| LabError::new("the sysctl thread panicked".into()))?
}

/// A command inside namespace `ns` as `ip netns exec` runs it: also with the
/// namespace's own `/sys` (its interfaces' files) and `/etc/netns/NS` files.
pub fn exec_mounted(ns: &str, args: &[&str]) -> Result<String> {
    let mut full = vec!["netns", "exec", ns];
    full.extend_from_slice(args);
    ip(&full)
}

/// Create namespace `name` with its loopback up, and register it for removal.
pub fn add(name: &str) -> Result<()> {
    ip(&["netns", "add", name])?;
    NAMESPACES.lock().unwrap().push(name.to_string());
    ip(&["-n", name, "link", "set", "lo", "up"])?;
    // No duplicate address detection in the lab: fresh links would otherwise hold
    // their link-local addresses tentative for a second or two, and the first packets
    // measured would wait for it.
    sysctl(name, &["net.ipv6.conf.default.accept_dad=0", "net.ipv6.conf.all.accept_dad=0"])?;
    Ok(())
}

/// The directory whose files `ip netns exec NAME` bind-mounts over those of /etc
/// (`hosts`, `resolv.conf`, …) for what it starts.
pub fn etc_dir(name: &str) -> std::path::PathBuf {
    std::path::Path::new("/etc/netns").join(name)
}

/// Remove namespace `name` (quietly if already gone), killing what still runs in it,
/// and its files in /etc/netns if it has any.
pub fn del(name: &str) {
    if let Ok(pids) = ip(&["netns", "pids", name]) {
        for pid in pids.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
    let _ = Command::new("ip").args(["netns", "del", name]).stderr(Stdio::null()).status();
    // `ip netns del` leaves them; every way out of a run (return, panic, signal, the
    // next run's sweep of stale namespaces) comes through here.
    let _ = std::fs::remove_dir_all(etc_dir(name));
    NAMESPACES.lock().unwrap().retain(|n| n != name);
}

/// Register a child process to kill if the run is interrupted.
pub fn register_pid(pid: u32) {
    PIDS.lock().unwrap().push(pid as i32);
}

/// Forget a child that has been reaped.
pub fn unregister_pid(pid: u32) {
    PIDS.lock().unwrap().retain(|&p| p != pid as i32);
}

/// Remove the namespaces (and the processes in them) of earlier runs whose process is
/// gone: crashed runs, and labs left running with `--keep`.
pub fn remove_stale() -> Result<usize> {
    let list = ip(&["netns", "list"])?;
    let mut removed = 0;
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(rest) = name.strip_prefix("swl") else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('n') else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        del(name);
        removed += 1;
    }
    Ok(removed)
}

/// On SIGINT, SIGTERM or SIGHUP: kill the registered processes, remove the registered
/// namespaces, and exit with 128 + the signal. On a panic too (release builds abort, so
/// no destructor would run; a bench piped into `head` panics on its next line).
/// Installed once per process.
pub fn install_interrupt_cleanup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Only where a panic aborts: where it unwinds, the labs' destructors clean up,
        // and a panicking test must not take down the labs of the tests beside it.
        #[cfg(panic = "abort")]
        {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                previous(info);
                // try_lock: the panicking thread may hold a list's lock itself.
                let pids = PIDS.try_lock().map(|mut p| std::mem::take(&mut *p)).unwrap_or_default();
                let names = NAMESPACES.try_lock().map(|n| n.clone()).unwrap_or_default();
                remove(pids, names);
            }));
        }
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            return;
        };
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                eprintln!("\ninterrupted: removing the lab");
                cleanup_all();
                std::process::exit(128 + sig);
            }
        });
    });
}

/// Kill every registered process and remove every registered namespace.
pub fn cleanup_all() {
    let pids = std::mem::take(&mut *PIDS.lock().unwrap());
    // Its own statement: the guard must be gone before `del` takes the lock again.
    let names = NAMESPACES.lock().unwrap().clone();
    remove(pids, names);
}

fn remove(pids: Vec<i32>, names: Vec<String>) {
    for pid in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    for n in names {
        del(&n);
    }
}

/// Move the calling thread into namespace `ns`; sockets it opens afterwards live there.
pub fn enter(ns: &str) -> Result<()> {
    let f = File::open(format!("/var/run/netns/{ns}")).map_err(|e| LabError::new(format!("namespace {ns}: {e}")))?;
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| LabError::new(format!("setns {ns}: {e}")))
}

/// Refuse clearly when the lab cannot work here (checked once a process: every lab of a
/// run would find the same).
pub fn preflight() -> Result<()> {
    static CHECKED: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    CHECKED.get_or_init(|| preflight_once().map_err(|e| e.to_string())).clone().map_err(LabError::new)
}

fn preflight_once() -> Result<()> {
    if !nix::unistd::Uid::effective().is_root() {
        return err("the lab needs root (network namespaces, veth, nftables): run it with sudo");
    }
    for (tool, pkg) in [("ip", "iproute2"), ("nft", "nftables"), ("ping", "iputils-ping")] {
        if Command::new(tool).arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
            return err(format!("{tool} not found: apt-get install {pkg} (scripts/test.sh does it)"));
        }
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return err("/dev/net/tun is missing: load the tun module (modprobe tun) or give the container the device");
    }
    Ok(())
}
