//! The few bpf(2) calls the lab makes itself: loading an XDP program of a handful of
//! instructions, with no compiler or loader behind it.

use std::os::fd::{FromRawFd, OwnedFd};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TYPE_XDP: u32 = 6;

/// `struct bpf_insn`.
#[repr(C)]
pub(crate) struct Insn {
    pub(crate) code: u8,
    /// Destination register in the low four bits, source in the high four.
    pub(crate) regs: u8,
    pub(crate) off: i16,
    pub(crate) imm: i32,
}

/// The head of `union bpf_attr` for BPF_PROG_LOAD (the rest stays zero).
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
}

/// bpf(2) command `cmd` on `attr`; a descriptor when the command returns one.
pub(crate) fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> std::io::Result<OwnedFd> {
    let r = bpf_call(cmd, attr)?;
    // SAFETY: a new descriptor, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// bpf(2) command `cmd` on `attr`, its return value.
pub(crate) fn bpf_call<T>(cmd: libc::c_long, attr: &mut T) -> std::io::Result<i32> {
    // SAFETY: `attr` is a zero-padded prefix of `union bpf_attr` for `cmd`, whose size
    // is passed with it; the kernel reads (and for some commands writes) only that many
    // bytes, and any buffer it points to is the caller's, of the size it says.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, std::mem::size_of::<T>() as libc::c_uint) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r as i32)
}

/// Loads `insns` as an XDP program named `name` (at most 15 bytes).
pub(crate) fn load_xdp(insns: &[Insn], name: &[u8]) -> std::io::Result<OwnedFd> {
    let license = c"GPL";
    let mut load = ProgLoad {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..ProgLoad::default()
    };
    load.prog_name[..name.len()].copy_from_slice(name);
    bpf(BPF_PROG_LOAD, &mut load)
}

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;

/// The head of `union bpf_attr` for the map element commands.
#[repr(C)]
struct MapElem {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Writes `value` at `key` of the array map `map`.
pub(crate) fn array_set<V: Copy>(map: &OwnedFd, key: u32, value: &V) -> std::io::Result<()> {
    map_elem(BPF_MAP_UPDATE_ELEM, map, key, (value as *const V).cast_mut().cast())
}

/// Reads the value at `key` of the array map `map` (whose values are `V`s).
pub(crate) fn array_get<V: Copy>(map: &OwnedFd, key: u32, value: &mut V) -> std::io::Result<()> {
    map_elem(BPF_MAP_LOOKUP_ELEM, map, key, (value as *mut V).cast())
}

/// Map element command `cmd` on `key` of `map`, its value at `value` (read by an update,
/// written by a look-up; as big as the map's values).
fn map_elem(cmd: libc::c_long, map: &OwnedFd, key: u32, value: *mut u8) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut attr = MapElem {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: value as u64,
        flags: 0,
    };
    bpf_call(cmd, &mut attr).map(drop)
}
