//! Each role's seccomp allow-list: the system calls its event loop, its threads and its
//! clean stop make once set-up is over (read off `strace -f` of every e2e case), and
//! for some the arguments they make them with. Whatever is missing here is what an
//! intruder would want: opening files (but the client's resolver files), executing
//! programs, new executable memory, other processes,
//! new sockets (but the client's), mounts, ptrace, BPF, keyrings …

use seccompiler::{SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompRule};

/// Which process a list is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    /// `shipworm server`.
    Server = 0,
    /// `shipworm relay` (and the host-specific relay).
    Relay = 1,
    /// `shipworm client`: the process that touches the network.
    Client = 2,
    /// The client's interface helper: netlink only.
    Helper = 3,
    /// The configuration reader (`shipworm-conf`): opens the daemon's own file, on
    /// SIGHUP, beneath its directory only.
    Reader = 4,
    /// The BIRD link (`shipworm-bird`): connects again to BIRD's control socket when
    /// BIRD restarts (a Unix socket, nothing else).
    BirdLink = 5,
}

impl Role {
    /// As logs name it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Relay => "relay",
            Role::Client => "client",
            Role::Helper => "client's interface helper",
            Role::Reader => "configuration reader",
            Role::BirdLink => "BIRD link",
        }
    }

    /// Back from its `repr` (the SIGSYS handler keeps it in an atomic).
    pub fn from_u8(v: u8) -> Role {
        match v {
            0 => Role::Server,
            1 => Role::Relay,
            2 => Role::Client,
            4 => Role::Reader,
            5 => Role::BirdLink,
            _ => Role::Helper,
        }
    }
}

macro_rules! calls {
    ($($name:ident),* $(,)?) => { &[$((libc::$name, stringify!($name)),)*] };
}

/// What any thread of any role needs: memory, threads, signals, time, its own
/// descriptors, and the clean stop (pid file emptied or removed, status socket removed).
const BASE: &[(i64, &str)] = calls![
    SYS_read,
    SYS_readv,
    SYS_write,
    SYS_writev,
    SYS_close,
    SYS_fcntl,
    SYS_ioctl,
    SYS_ppoll,
    SYS_futex,
    SYS_mmap,
    SYS_munmap,
    SYS_mremap,
    SYS_mprotect,
    SYS_madvise,
    SYS_brk,
    SYS_rt_sigaction,
    SYS_rt_sigprocmask,
    SYS_rt_sigreturn,
    SYS_sigaltstack,
    SYS_clock_gettime,
    SYS_clock_getres,
    SYS_clock_nanosleep,
    SYS_nanosleep,
    SYS_gettimeofday,
    SYS_getrandom,
    SYS_getpid,
    SYS_gettid,
    SYS_sched_yield,
    SYS_sched_getaffinity,
    SYS_exit,
    SYS_exit_group,
    SYS_restart_syscall,
    SYS_rseq,
    SYS_set_robust_list,
    SYS_clone,
    SYS_clone3,
    SYS_prctl,
    SYS_tgkill,
    SYS_prlimit64,
    SYS_fstat,
    SYS_newfstatat,
    SYS_statx,
    SYS_lseek,
    SYS_ftruncate,
    SYS_unlinkat,
    SYS_recvfrom,
    SYS_recvmsg,
    SYS_recvmmsg,
    SYS_sendto,
    SYS_sendmsg,
    SYS_sendmmsg,
    SYS_getsockname,
    SYS_getsockopt,
    SYS_setsockopt,
    SYS_accept4,
    SYS_capget,
];

/// Calls x86_64 has beside their newer forms (glibc still uses some of them).
#[cfg(target_arch = "x86_64")]
const LEGACY: &[(i64, &str)] = calls![SYS_poll, SYS_unlink, SYS_arch_prctl];
#[cfg(not(target_arch = "x86_64"))]
const LEGACY: &[(i64, &str)] = &[];

/// The client, beyond [`BASE`]: server names resolved (files under /etc, DNS, nscd),
/// random ports and the port-mapping protocols (UDP and TCP sockets), the network
/// watch, and the event loops of the libraries doing those.
const CLIENT: &[(i64, &str)] = calls![
    SYS_socket,
    SYS_bind,
    SYS_connect,
    SYS_shutdown,
    SYS_getpeername,
    SYS_openat,
    SYS_epoll_create1,
    SYS_epoll_ctl,
    SYS_epoll_pwait,
    SYS_eventfd2,
    SYS_uname,
    SYS_getuid,
    SYS_geteuid,
    SYS_getgid,
    SYS_getegid,
    SYS_pread64,
];
#[cfg(target_arch = "x86_64")]
const CLIENT_LEGACY: &[(i64, &str)] = calls![SYS_epoll_wait, SYS_open, SYS_access];
#[cfg(not(target_arch = "x86_64"))]
const CLIENT_LEGACY: &[(i64, &str)] = &[];

/// The relay and the client, beyond [`BASE`]: their kernel data path's map operations
/// (look-up, update, delete on the map descriptors they kept; see [`conditions`]).
const KERNEL_MAPS: &[(i64, &str)] = calls![SYS_bpf];

/// The helper, beyond [`BASE`]: the event loop of its netlink library (socket opened
/// before it confines itself).
const HELPER: &[(i64, &str)] = calls![SYS_epoll_ctl, SYS_epoll_pwait];
#[cfg(target_arch = "x86_64")]
const HELPER_LEGACY: &[(i64, &str)] = calls![SYS_epoll_wait];
#[cfg(not(target_arch = "x86_64"))]
const HELPER_LEGACY: &[(i64, &str)] = &[];

/// The configuration reader, beyond [`BASE`] and the client's name resolution (loading
/// a file may resolve a name): reading its file (Landlock keeps it beneath the file's
/// directory and where resolution reads).
const READER: &[(i64, &str)] = calls![SYS_openat, SYS_statx, SYS_fstat, SYS_newfstatat, SYS_lseek];

/// The BIRD link, beyond the helper's: a Unix socket, connected to BIRD's control
/// socket again after BIRD restarted ([`conditions`]: `AF_UNIX` only).
const BIRD_LINK: &[(i64, &str)] = calls![SYS_socket, SYS_connect];

/// What no hook script needs and an intruder would: the hook runner refuses these
/// (EPERM) and lets the rest through, since it starts programs the operator wrote.
pub const HOOK_DENIED: &[(i64, &str)] = calls![
    SYS_ptrace,
    SYS_process_vm_readv,
    SYS_process_vm_writev,
    SYS_mount,
    SYS_umount2,
    SYS_pivot_root,
    SYS_chroot,
    SYS_setns,
    SYS_unshare,
    SYS_bpf,
    SYS_perf_event_open,
    SYS_userfaultfd,
    SYS_kexec_load,
    SYS_kexec_file_load,
    SYS_init_module,
    SYS_finit_module,
    SYS_delete_module,
    SYS_keyctl,
    SYS_add_key,
    SYS_request_key,
    SYS_swapon,
    SYS_swapoff,
    SYS_reboot,
    SYS_acct,
    SYS_open_by_handle_at,
    SYS_name_to_handle_at,
    SYS_settimeofday,
    SYS_clock_settime,
    SYS_clock_adjtime,
    SYS_adjtimex,
    SYS_syslog,
];

/// Calls every role is told do not exist (ENOSYS), whatever its list says: a second
/// filter, whose answer wins over the first one's "allow". clone3 takes its flags from
/// memory, where a filter cannot look; told it is missing, glibc (2.34 and later)
/// starts threads with clone, whose flags the allow-list checks (threads only).
pub const ENOSYS_CALLS: &[(i64, &str)] = calls![SYS_clone3];

/// Every call `role` may make; the kernel data path's map operations only where its
/// programs run (`kernel_maps`: a relay or client with `DataPath kernel`, or `auto` where
/// they loaded), so that a process on the daemon's path has no bpf(2) at all.
pub fn allowed(role: Role, kernel_maps: bool) -> Vec<(i64, &'static str)> {
    let extra: &[&[(i64, &str)]] = match role {
        Role::Server => &[],
        Role::Relay => &[KERNEL_MAPS],
        Role::Client => &[CLIENT, CLIENT_LEGACY, KERNEL_MAPS],
        Role::Helper => &[HELPER, HELPER_LEGACY],
        Role::Reader => &[CLIENT, CLIENT_LEGACY, READER],
        Role::BirdLink => &[HELPER, HELPER_LEGACY, BIRD_LINK],
    };
    let mut v: Vec<(i64, &'static str)> = [BASE, LEGACY].iter().chain(extra).flat_map(|l| l.iter().copied()).collect();
    if !kernel_maps {
        v.retain(|call| !KERNEL_MAPS.contains(call));
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// The name of a call on any list (for the refusal message), or "not on any list".
pub fn name_of(nr: i64) -> &'static str {
    [BASE, LEGACY, CLIENT, CLIENT_LEGACY, KERNEL_MAPS, HELPER, HELPER_LEGACY, READER, BIRD_LINK]
        .iter()
        .flat_map(|l| l.iter())
        .find(|(n, _)| *n == nr)
        .map_or("on none of shipworm's lists: `ausyscall` names it", |(_, name)| &name["SYS_".len()..])
}

fn cond(arg: u8, len: Len, op: Op, value: u64) -> Cond {
    Cond::new(arg, len, op, value).expect("argument index below 6")
}

fn rule(conds: Vec<Cond>) -> SeccompRule {
    SeccompRule::new(conds).expect("a rule with conditions")
}

/// The conditions on `nr`'s arguments for `role` (any rule matching allows; none means
/// allowed as is).
pub fn conditions(role: Role, nr: i64) -> Vec<SeccompRule> {
    let eq = |arg, v: i64| cond(arg, Len::Dword, Op::Eq, v as u64);
    let me = std::process::id() as u64;
    let no_exec = |arg| rule(vec![cond(arg, Len::Dword, Op::MaskedEq(libc::PROT_EXEC as u64), 0)]);
    match nr {
        // No new executable memory in server, relay and helper; the client's resolver
        // may load the NSS modules nsswitch.conf names. (Hooks run in a process of their
        // own, the hook runner, forked before the helper confines itself.)
        libc::SYS_mmap | libc::SYS_mprotect
            if matches!(role, Role::Server | Role::Relay | Role::Helper | Role::BirdLink) =>
        {
            vec![no_exec(2)]
        }
        // Threads, not processes. clone3's flags are in memory, out of the filter's
        // reach: it answers ENOSYS instead ([`ENOSYS_CALLS`]), and the C library falls
        // back to clone, whose flags the filter reads.
        libc::SYS_clone => {
            vec![rule(vec![cond(0, Len::Qword, Op::MaskedEq(libc::CLONE_THREAD as u64), libc::CLONE_THREAD as u64)])]
        }
        // Map operations only: no program loads, no attachments, no new maps.
        libc::SYS_bpf => shipworm_kernel_path::MAP_COMMANDS.iter().map(|&c| rule(vec![eq(0, c as i64)])).collect(),
        // Signals to this process only (abort, thread wake-ups).
        libc::SYS_tgkill => vec![rule(vec![cond(0, Len::Dword, Op::Eq, me)])],
        // Thread names only.
        libc::SYS_prctl => {
            vec![rule(vec![eq(0, libc::PR_SET_NAME as i64)]), rule(vec![eq(0, libc::PR_GET_NAME as i64)])]
        }
        // Reading limits, never setting them.
        libc::SYS_prlimit64 => vec![rule(vec![cond(2, Len::Qword, Op::Eq, 0)])],
        // Non-blocking mode and queue sizes; nothing that configures a device.
        libc::SYS_ioctl => vec![
            rule(vec![cond(1, Len::Dword, Op::Eq, libc::FIONBIO)]),
            rule(vec![cond(1, Len::Dword, Op::Eq, libc::FIONREAD)]),
            rule(vec![cond(1, Len::Dword, Op::Eq, libc::TCGETS)]),
        ],
        // The BIRD link: its Unix socket to BIRD's control socket, no other family.
        libc::SYS_socket if role == Role::BirdLink => vec![rule(vec![eq(0, libc::AF_UNIX as i64)])],
        // The families the client's libraries open: IPv4 (DNS, PCP, UPnP, random ports),
        // IPv6 (a resolver on IPv6), Unix (nscd), netlink (address configuration look-ups).
        libc::SYS_socket => [libc::AF_INET, libc::AF_INET6, libc::AF_UNIX, libc::AF_NETLINK]
            .iter()
            .map(|&f| rule(vec![eq(0, f as i64)]))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_role_may_execute_trace_mount_or_load_bpf_and_only_the_client_and_reader_may_open_sockets() {
        for (role, maps) in [Role::Server, Role::Relay, Role::Client, Role::Helper, Role::Reader, Role::BirdLink]
            .into_iter()
            .flat_map(|r| [(r, true), (r, false)])
        {
            let names: Vec<&str> = allowed(role, maps).iter().map(|&(_, n)| n).collect();
            for forbidden in ["SYS_ptrace", "SYS_mount", "SYS_setuid", "SYS_capset", "SYS_init_module"] {
                assert!(!names.contains(&forbidden), "{} may call {forbidden}", role.name());
            }
            // The relay and the client keep their kernel data path's map operations
            // while its programs run, and nothing else of bpf(2): no program load (5),
            // no map creation (0), no attachment (8, 28).
            let kernel_path = maps && matches!(role, Role::Relay | Role::Client);
            assert_eq!(names.contains(&"SYS_bpf"), kernel_path, "{} (maps: {maps})", role.name());
            let commands: Vec<u32> = shipworm_kernel_path::MAP_COMMANDS.to_vec();
            assert_eq!(commands, [1, 2, 3]);
            assert_eq!(conditions(role, libc::SYS_bpf).len(), 3);
            assert!(!names.contains(&"SYS_execve"), "{} may run a program", role.name());
            let sockets = matches!(role, Role::Client | Role::Reader | Role::BirdLink);
            assert_eq!(names.contains(&"SYS_socket"), sockets, "{}", role.name());
            if role == Role::BirdLink {
                assert_eq!(conditions(role, libc::SYS_socket).len(), 1, "the BIRD link: Unix sockets only");
            }
            // Files: the client's resolver, and the reader's one file on SIGHUP.
            assert_eq!(names.contains(&"SYS_openat"), matches!(role, Role::Client | Role::Reader), "{}", role.name());
        }
    }

    #[test]
    fn every_list_compiles_for_this_machine() {
        for role in [Role::Server, Role::Relay, Role::Client, Role::Helper, Role::Reader, Role::BirdLink] {
            for mode in [super::super::confinement::FilterMode::Enforce, super::super::confinement::FilterMode::Log] {
                let prog = super::super::confinement::compile(role, true, mode).expect("compiles");
                assert!(prog.len() > allowed(role, true).len(), "{}: {} instructions", role.name(), prog.len());
            }
        }
    }
}
