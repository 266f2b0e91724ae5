//! What a role may still do once it serves: no new privileges (no set-uid program or file
//! capability can hand any back), an empty capability bounding set, and a seccomp
//! allow-list of the system calls its event loop makes. A daemon that parses every
//! datagram from the Internet should, if ever subverted, find nothing to open, execute
//! or reconfigure.

use super::file_access;
use super::syscalls::{self, Role};
use caps::{CapSet, Capability, CapsHashSet};
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The files a daemon made and removes when it stops: its pid file, if it wrote one.
pub fn removable(pidfile: Option<&Path>) -> Vec<PathBuf> {
    pidfile.map(Path::to_path_buf).into_iter().collect()
}

/// What to do with a system call off the role's list (`SystemCallFilter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterMode {
    /// Stop the daemon, naming the call (the default).
    Enforce,
    /// Let it through and have the kernel log it: for finding what a new path needs.
    Log,
    /// No filter (no_new_privs and the bounding set still apply).
    Off,
}

impl FilterMode {
    /// `yes`, `log` or `no` as in the configuration file.
    pub fn parse(value: &str) -> Option<FilterMode> {
        match value.to_ascii_lowercase().as_str() {
            "yes" | "on" | "true" | "enforce" => Some(FilterMode::Enforce),
            "log" => Some(FilterMode::Log),
            "no" | "off" | "false" => Some(FilterMode::Off),
            _ => None,
        }
    }
}

/// Empty the bounding set but for `keep`. Must run while CAP_SETPCAP is still held,
/// that is before the switch to the unprivileged user. Started without it (as a user
/// with file capabilities), the set stays, and no_new_privs keeps it from being used.
pub fn shrink_bounding_set(keep: &[Capability]) -> Result<(), String> {
    let keep: CapsHashSet = keep.iter().copied().collect();
    let held = caps::read(None, CapSet::Effective).map_err(|e| format!("reading capabilities: {e}"))?;
    if !held.contains(&Capability::CAP_SETPCAP) {
        tracing::debug!("no CAP_SETPCAP: capability bounding set left as it is (no_new_privs covers it)");
        return Ok(());
    }
    for cap in caps::read(None, CapSet::Bounding).map_err(|e| format!("reading the bounding set: {e}"))? {
        if !keep.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap)
                .map_err(|e| format!("dropping {cap} from the bounding set: {e}"))?;
        }
    }
    Ok(())
}

/// Set no_new_privs, restrict what `role` may reach by path ([`file_access`]: it may
/// still remove the files at `removable`, its pid file and status socket), and install
/// its system-call filter on every thread of the process (those started later inherit
/// both). Call once set-up is over, before any thread starts: sockets bound, TUN open,
/// privileges dropped.
pub fn confine(
    role: Role,
    kernel_maps: bool,
    mode: FilterMode,
    removable: &[PathBuf],
    readable: &[PathBuf],
) -> Result<(), String> {
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;
    if mode == FilterMode::Off {
        tracing::warn!("SystemCallFilter no: the {} runs without a system-call filter or file rules", role.name());
        return Ok(());
    }
    let files = file_access::restrict(role, removable, readable)?;
    // The ENOSYS filter first: installing a filter makes a prctl that the allow-list,
    // once installed, would refuse. Filters stack whatever their order.
    let programs = [missing_calls()?, compile(role, kernel_maps, mode)?];
    refusal::install(role);
    for program in &programs {
        seccompiler::apply_filter_all_threads(program).map_err(|e| format!("installing the seccomp filter: {e}"))?;
    }
    tracing::info!(
        "confined: no new privileges, {files}, {} system calls allowed{}",
        syscalls::allowed(role, kernel_maps).len(),
        if mode == FilterMode::Log { " (others logged by the kernel, not refused)" } else { "" }
    );
    Ok(())
}

/// The hook runner's confinement: no_new_privs and a deny-list ([`syscalls::HOOK_DENIED`])
/// that the hooks it starts inherit.
pub fn confine_hook_runner() -> Result<(), String> {
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;
    let arch = std::env::consts::ARCH.try_into().map_err(|e| format!("seccomp: {e}"))?;
    let rules = syscalls::HOOK_DENIED.iter().map(|&(nr, _)| (nr, Vec::new())).collect();
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)
        .map_err(|e| format!("seccomp filter: {e}"))?;
    let program: BpfProgram =
        filter.try_into().map_err(|e: seccompiler::BackendError| format!("seccomp filter: {e}"))?;
    seccompiler::apply_filter_all_threads(&program).map_err(|e| format!("installing the seccomp filter: {e}"))
}

/// The role's allow-list as a BPF program for this machine's architecture (with the
/// kernel data path's map operations if `kernel_maps`).
pub fn compile(role: Role, kernel_maps: bool, mode: FilterMode) -> Result<BpfProgram, String> {
    let arch = std::env::consts::ARCH.try_into().map_err(|e| format!("seccomp: {e}"))?;
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> =
        syscalls::allowed(role, kernel_maps).iter().map(|&(nr, _)| (nr, syscalls::conditions(role, nr))).collect();
    let mismatch = match mode {
        FilterMode::Log => SeccompAction::Log,
        _ => SeccompAction::Trap,
    };
    let filter =
        SeccompFilter::new(rules, mismatch, SeccompAction::Allow, arch).map_err(|e| format!("seccomp filter: {e}"))?;
    filter.try_into().map_err(|e: seccompiler::BackendError| format!("seccomp filter: {e}"))
}

/// The second filter: [`syscalls::ENOSYS_CALLS`] answer ENOSYS, everything else is
/// left to the first.
pub fn missing_calls() -> Result<BpfProgram, String> {
    let arch = std::env::consts::ARCH.try_into().map_err(|e| format!("seccomp: {e}"))?;
    let rules = syscalls::ENOSYS_CALLS.iter().map(|&(nr, _)| (nr, Vec::new())).collect();
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::ENOSYS as u32), arch)
        .map_err(|e| format!("seccomp filter: {e}"))?;
    filter.try_into().map_err(|e: seccompiler::BackendError| format!("seccomp filter: {e}"))
}

/// A refused call arrives as SIGSYS: say which one and stop, so the operator reads a
/// cause instead of a bare "killed by signal 31".
mod refusal {
    use super::Role;
    use std::sync::atomic::{AtomicU8, Ordering};

    static ROLE: AtomicU8 = AtomicU8::new(0);

    pub fn install(role: Role) {
        ROLE.store(role as u8, Ordering::Relaxed);
        // SAFETY: a plain sigaction with a handler that only formats into a stack
        // buffer, writes it and exits (async-signal-safe).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigsys as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut());
        }
    }

    /// The refused call's first argument (prctl's option, ioctl's descriptor, socket's
    /// family…): what tells one use of a call from another in the report.
    #[cfg(target_arch = "x86_64")]
    fn first_argument(ctx: *mut libc::c_void) -> Option<u64> {
        // SAFETY: a SA_SIGINFO handler's third argument is the interrupted ucontext.
        let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
        Some(uc.uc_mcontext.gregs[libc::REG_RDI as usize] as u64)
    }

    #[cfg(target_arch = "aarch64")]
    fn first_argument(ctx: *mut libc::c_void) -> Option<u64> {
        // SAFETY: a SA_SIGINFO handler's third argument is the interrupted ucontext.
        let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
        Some(uc.uc_mcontext.regs[0])
    }

    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn first_argument(_ctx: *mut libc::c_void) -> Option<u64> {
        None
    }

    /// Decimal digits of `v` at the end of `digits`.
    fn decimal(mut v: u64, digits: &mut [u8; 20]) -> &[u8] {
        let mut d = digits.len();
        loop {
            d -= 1;
            digits[d] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        &digits[d..]
    }

    extern "C" fn on_sigsys(_sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // In the kernel's siginfo, the union follows three ints (padded to a pointer's
        // alignment); for SIGSYS it starts with the call's address, then its number.
        // SAFETY: the kernel hands a valid siginfo for SIGSYS.
        let nr = unsafe {
            let union_at = if std::mem::size_of::<usize>() == 8 { 16 } else { 12 };
            let at = (info as *const u8).add(union_at + std::mem::size_of::<usize>());
            std::ptr::read_unaligned(at as *const libc::c_int)
        };
        let mut buf = [0u8; 256];
        let mut n = 0;
        let mut put = |s: &[u8]| {
            let take = s.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&s[..take]);
            n += take;
        };
        put(b"shipworm: stopping: the ");
        put(Role::from_u8(ROLE.load(Ordering::Relaxed)).name().as_bytes());
        put(b" made system call ");
        let mut digits = [0u8; 20];
        put(decimal(nr.unsigned_abs() as u64, &mut digits));
        put(b" (");
        put(super::syscalls::name_of(nr as i64).as_bytes());
        if let Some(arg) = first_argument(ctx) {
            put(b", first argument ");
            put(decimal(arg, &mut digits));
        }
        put(b"), which is not on its seccomp allow-list: a bug to report; `SystemCallFilter log` lets it run\n");
        // SAFETY: write(2) and _exit(2) are async-signal-safe.
        unsafe {
            libc::write(2, buf.as_ptr().cast(), n);
            libc::_exit(70);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calls a confined child makes, by name: each returns ≥ 0 when it was let
    /// through, and a call the filter refuses never returns (the SIGSYS handler exits
    /// with 70).
    mod calls {
        /// 50 named threads one after another, each doing `work`: 0 when all ran.
        fn named_threads(work: fn()) -> i64 {
            for i in 0..50 {
                let t = std::thread::Builder::new().name(format!("worker-{i}")).spawn(work);
                if !t.is_ok_and(|t| t.join().is_ok()) {
                    return -1;
                }
            }
            0
        }

        /// Every role's metrics thread and the relay's workers are named (Rust names a
        /// thread with prctl).
        pub fn threads() -> i64 {
            named_threads(|| ())
        }

        /// The client looks server names up on a named thread.
        pub fn resolve() -> i64 {
            named_threads(|| drop(std::net::ToSocketAddrs::to_socket_addrs(&("localhost", 3544))))
        }

        /// A prctl off every list (only PR_SET_NAME and PR_GET_NAME are on them).
        pub fn dumpable() -> i64 {
            // SAFETY: a prctl that only changes this (child) process.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) as i64 }
        }

        pub fn time() -> i64 {
            // SAFETY: reading the clock into a local.
            unsafe {
                let mut ts = std::mem::zeroed::<libc::timespec>();
                libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) as i64
            }
        }

        pub fn open() -> i64 {
            // SAFETY: opening a path; the child exits soon after.
            unsafe { libc::open(c"/etc/hostname".as_ptr(), libc::O_RDONLY) as i64 }
        }

        pub fn udp() -> i64 {
            // SAFETY: a new socket the child owns.
            unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) as i64 }
        }

        pub fn exec() -> i64 {
            // SAFETY: execve with valid, NUL-terminated arguments.
            unsafe {
                let argv = [c"/bin/true".as_ptr(), std::ptr::null()];
                libc::execve(c"/bin/true".as_ptr(), argv.as_ptr(), std::ptr::null()) as i64
            }
        }

        /// A process started by clone3 (flags 0): 0 when clone3 answered ENOSYS.
        pub fn fork_by_clone3() -> i64 {
            #[repr(C)]
            struct CloneArgs {
                flags: u64,
                pidfd: u64,
                child_tid: u64,
                parent_tid: u64,
                exit_signal: u64,
                stack: u64,
                stack_size: u64,
                tls: u64,
            }
            let args = CloneArgs {
                flags: 0,
                pidfd: 0,
                child_tid: 0,
                parent_tid: 0,
                exit_signal: libc::SIGCHLD as u64,
                stack: 0,
                stack_size: 0,
                tls: 0,
            };
            // SAFETY: clone3 with a valid argument block; a new process (if the call
            // were let through) exits at once.
            let r =
                unsafe { libc::syscall(libc::SYS_clone3, &args as *const CloneArgs, std::mem::size_of::<CloneArgs>()) };
            if r == 0 {
                // SAFETY: the (unexpected) new process ends here.
                unsafe { libc::_exit(3) };
            }
            let enosys = r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS);
            if enosys {
                0
            } else {
                -1
            }
        }

        /// Executable memory (anonymous, unmapped if granted).
        pub fn exec_map() -> i64 {
            // SAFETY: an anonymous mapping, unmapped if it is granted.
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ | libc::PROT_EXEC,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if p != libc::MAP_FAILED {
                    libc::munmap(p, 4096);
                }
                0
            }
        }

        /// A call a child makes: ≥ 0 when let through.
        pub type Call = fn() -> i64;

        /// A map look-up (on no map: EBADF), as the relay's kernel data path makes.
        pub fn bpf_map_lookup() -> i64 {
            // SAFETY: bpf(2) with no attribute block: it reads nothing of ours.
            unsafe { libc::syscall(libc::SYS_bpf, 1, std::ptr::null::<u8>(), 0) }
        }

        /// A program load (BPF_PROG_LOAD), which no confined role may make.
        pub fn bpf_prog_load() -> i64 {
            // SAFETY: as above.
            unsafe { libc::syscall(libc::SYS_bpf, 5, std::ptr::null::<u8>(), 0) }
        }

        pub const ALL: &[(&str, Call)] = &[
            ("threads", threads),
            ("resolve", resolve),
            ("dumpable", dumpable),
            ("time", time),
            ("open", open),
            ("udp", udp),
            ("exec", exec),
            ("fork_by_clone3", fork_by_clone3),
            ("exec_map", exec_map),
            ("bpf_map_lookup", bpf_map_lookup),
            ("bpf_prog_load", bpf_prog_load),
        ];
    }

    /// The environment variable that makes [`confined_child`] the child.
    const CHILD: &str = "SHIPWORM_CONFINED_CHILD";

    /// In a new process (this test binary again, running [`confined_child`] alone):
    /// confine as `role`, then make the call named `call`; the exit status says what
    /// happened (0: allowed; 70: stopped by the filter), with what it wrote on stderr. A
    /// process of its own, not a fork of this one: a fork of a multi-threaded test run
    /// can inherit a lock another thread held, and hang on it.
    fn in_confined_child_saying(role: Role, call: &str) -> (i32, String) {
        in_confined_child_keeping(role, true, call)
    }

    /// [`in_confined_child_saying`], the kernel data path's map operations kept or not.
    fn in_confined_child_keeping(role: Role, maps: bool, call: &str) -> (i32, String) {
        assert!(calls::ALL.iter().any(|(n, _)| *n == call), "no call {call}");
        let out = std::process::Command::new(std::env::current_exe().expect("this test binary"))
            .args(["--exact", "runtime::confinement::tests::confined_child", "--nocapture", "--test-threads=1"])
            .env(CHILD, format!("{}:{call}:{}", role as u8, u8::from(maps)))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .output()
            .expect("run the child");
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        match out.status.code() {
            Some(code) => (code, said),
            None => panic!("child ended as {:?}: {said}", out.status),
        }
    }

    fn in_confined_child(role: Role, call: &str) -> i32 {
        in_confined_child_saying(role, call).0
    }

    /// The child's part of [`in_confined_child_saying`]; as a test of its own (no
    /// [`CHILD`] in the environment) it does nothing.
    #[test]
    fn confined_child() {
        let Ok(spec) = std::env::var(CHILD) else { return };
        let mut parts = spec.split(':');
        let (Some(role), Some(name), Some(maps)) = (parts.next(), parts.next(), parts.next()) else {
            panic!("ROLE:CALL:MAPS, not {spec}")
        };
        let role = Role::from_u8(role.parse().expect("a role number"));
        let call = calls::ALL.iter().find(|(n, _)| *n == name).map(|(_, f)| *f).expect("a known call");
        let program = compile(role, maps == "1", FilterMode::Enforce).expect("compiles");
        let missing = missing_calls().expect("compiles");
        let _ = nix::sys::prctl::set_no_new_privs();
        refusal::install(role);
        if seccompiler::apply_filter(&missing).is_err() || seccompiler::apply_filter(&program).is_err() {
            // SAFETY: ending this child process.
            unsafe { libc::_exit(99) };
        }
        let r = call();
        // SAFETY: ending this child process without the harness's report.
        unsafe { libc::_exit(if r >= 0 { 0 } else { 1 }) }
    }

    /// clone3 reads its flags from memory, out of the filter's reach: it answers ENOSYS
    /// in every role, so no process can be started that way (#40, 8); threads still
    /// start (glibc falls back to clone, which the filter checks).
    #[test]
    fn clone3_is_missing_for_every_role_and_threads_still_start() {
        for role in [Role::Client, Role::Server, Role::Relay, Role::Helper] {
            let (code, said) = in_confined_child_saying(role, "fork_by_clone3");
            assert_eq!(code, 0, "{}: clone3 was not refused with ENOSYS: {said}", role.name());
        }
    }

    /// The confined relay and client keep their kernel data path's map operations while
    /// its programs run, and no other part of bpf(2); without the programs (`DataPath
    /// user`, or `auto` where they did not load) none of it; the other roles never.
    #[test]
    fn only_the_relay_and_the_client_keep_bpf_and_only_for_their_maps() {
        for role in [Role::Relay, Role::Client] {
            let name = role.name();
            assert_eq!(in_confined_child(role, "bpf_map_lookup"), 1, "{name}: allowed, refused by the kernel (no map)");
            assert_eq!(in_confined_child(role, "bpf_prog_load"), 70, "{name}");
            assert_eq!(in_confined_child_keeping(role, false, "bpf_map_lookup").0, 70, "{name}, no programs");
        }
        for role in [Role::Server, Role::Helper, Role::Reader] {
            assert_eq!(in_confined_child(role, "bpf_map_lookup"), 70, "{}", role.name());
        }
    }

    /// The helper, like server and relay, maps no executable memory (#40, 8).
    #[test]
    fn the_helper_maps_no_executable_memory() {
        for role in [Role::Helper, Role::Server, Role::Relay] {
            assert_eq!(in_confined_child(role, "exec_map"), 70, "{}", role.name());
        }
    }

    #[test]
    fn a_confined_role_starts_named_threads_and_the_client_resolves_names_on_them() {
        for role in [Role::Client, Role::Server, Role::Relay, Role::Helper] {
            let (code, said) = in_confined_child_saying(role, "threads");
            assert_eq!(code, 0, "{}: {said}", role.name());
        }
        let (code, said) = in_confined_child_saying(Role::Client, "resolve");
        assert_eq!(code, 0, "{said}");
    }

    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn a_refusal_names_the_role_the_call_and_its_first_argument() {
        // prctl is on every list for thread names (PR_SET_NAME); PR_SET_DUMPABLE is not.
        let (code, said) = in_confined_child_saying(Role::Relay, "dumpable");
        assert_eq!(code, 70, "{said}");
        let expected =
            format!("the relay made system call {} (prctl, first argument {})", libc::SYS_prctl, libc::PR_SET_DUMPABLE);
        assert!(said.contains(&expected), "{said}");
    }

    #[test]
    fn a_confined_daemon_is_stopped_at_its_first_call_off_the_list_and_not_before() {
        for role in [Role::Server, Role::Relay, Role::Helper] {
            assert_eq!(in_confined_child(role, "time"), 0, "{}: reading the clock", role.name());
            assert_eq!(in_confined_child(role, "open"), 70, "{}: opening a file", role.name());
            assert_eq!(in_confined_child(role, "udp"), 70, "{}: a new socket", role.name());
            assert_eq!(in_confined_child(role, "exec"), 70, "{}: running a program", role.name());
        }
        assert_eq!(in_confined_child(Role::Client, "udp"), 0, "the client opens UDP sockets (DNS, PCP, random ports)");
        assert_eq!(in_confined_child(Role::Client, "exec"), 70, "the client runs no program");
        // The configuration reader opens its file (Landlock keeps it to the file's
        // directory and the resolver's) and may resolve a name, as the client; it runs
        // nothing either.
        assert_ne!(in_confined_child(Role::Reader, "open"), 70, "the reader opens its file");
        assert_eq!(in_confined_child(Role::Reader, "exec"), 70, "the reader runs no program");
    }
}
